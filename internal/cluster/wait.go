package cluster

import (
	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// waitOn is WAIT (args) for cl on each of masters, offsetKey(i) naming the
// key of the proxy's own write on masters[i] (see writePrelude); the reply
// is the smallest count: every write of the client reached at least that
// many replicas of its master. The connections are the client's own while
// it waits (cl.waiting, which Gone closes).
func waitOn(cl *Client, masters []*Node, offsetKey func(i int) string, args [][]byte, p *resp.Reply) {
	if cl.Conn != nil {
		cl.Conn.WaitReplies(p) // the writes WAIT is about are in
	}
	if len(masters) == 0 {
		p.Err = backend.ErrUnavailable
		p.Done()
		return
	}
	conns := make([]*backend.Conn, 0, len(masters))
	// The connections go back (on a backend reader) as what they were
	// taken as, whatever a HELLO pipelined behind the WAIT does to cl.
	resp3 := cl.RESP3
	for _, n := range masters {
		conn, err := n.Pinned(resp3)
		if err != nil {
			for i, c := range conns {
				masters[i].Unpin(c, resp3, true)
			}
			p.Err = unreachable(n)
			p.Done()
			return
		}
		conns = append(conns, conn)
	}
	cl.mu.Lock()
	cl.waiting = conns
	cl.mu.Unlock()
	parts := fanIn(len(conns), func(replies []*resp.Reply) {
		cl.mu.Lock()
		cl.waiting = nil // before they go back: Gone must not close another client's
		cl.mu.Unlock()
		least := int64(-1)
		var bad *resp.Reply
		for i, r := range replies {
			var v any
			err := r.Err
			if err == nil {
				v, err = resp.Parse(r.Buf)
			}
			n, ok := v.(int64)
			if !ok && bad == nil {
				bad = r // an error (Redis's, or a lost connection)
			}
			if ok && (least < 0 || n < least) {
				least = n
			}
			masters[i].Unpin(conns[i], resp3, err == nil)
		}
		switch {
		case bad != nil && bad.Err != nil:
			p.Err = bad.Err
		case bad != nil:
			p.Buf = append(p.Buf, bad.Buf...)
		default:
			p.Buf = redcon.AppendInt(p.Buf, least)
		}
		p.Done()
	})
	for i, conn := range conns {
		writePrelude(conn, offsetKey(i))
		conn.Do(args, parts[i])
	}
}

// writePrelude makes WAIT mean what it means on Redis. WAIT counts the
// replicas that acknowledged this connection's last write, but the client's
// writes went over shared connections. One write of our own on the
// connection just before WAIT has a replication offset past all of them, so
// WAIT then covers them.
func writePrelude(conn *backend.Conn, key string) {
	conn.Do([][]byte{
		[]byte("SET"), []byte(key), []byte("1"), []byte("PX"), []byte("1"),
	}, resp.NewReplyFunc(func() {})) // its reply is not the client's
}
