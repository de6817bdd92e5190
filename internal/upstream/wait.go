package upstream

import (
	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream/fanout"
)

// waitOn is WAIT or WAITAOF (args) for cl on each of masters, offsetKey(i)
// naming the key of the proxy's own write on masters[i] (see
// writePrelude); the reply is the smallest count (for WAITAOF, each of its
// two): every write of the client reached at least that many replicas of
// its master (or, WAITAOF, that many AOFs). The connections are the client's own while
// it waits (cl.waiting, which Gone closes).
func waitOn(cl *Client, masters []*Node, offsetKey func(i int) string, args [][]byte, p *resp.Reply) {
	if cl.Conn != nil {
		// The writes WAIT is about are in first.
		cl.Conn.AfterReplies(p, func() { waitNow(cl, masters, offsetKey, args, p) })
		return
	}
	waitNow(cl, masters, offsetKey, args, p)
}

// waitNow is waitOn once the client's earlier requests have their replies.
// The connections are the masters' spares where they have one; the others
// are dialled, off the serve loop (OffLoop).
func waitNow(cl *Client, masters []*Node, offsetKey func(i int) string, args [][]byte, p *resp.Reply) {
	if len(masters) == 0 {
		p.Err = backend.ErrUnavailable
		p.Done()
		return
	}
	// The connections go back (on a backend reader) as what they were
	// taken as, whatever a HELLO pipelined behind the WAIT does to cl.
	resp3 := cl.RESP3
	conns := make([]*backend.Conn, len(masters))
	spares := true
	for i, n := range masters {
		if conns[i] = n.idlePinned(resp3); conns[i] == nil {
			spares = false
		}
	}
	if spares {
		waitAll(cl, masters, conns, resp3, offsetKey, args, p)
		return
	}
	dial := func() func() {
		for i, n := range masters {
			if conns[i] != nil {
				continue
			}
			conn, err := n.Pinned(resp3)
			if err != nil {
				for j, c := range conns {
					if c != nil {
						masters[j].Unpin(c, resp3, true)
					}
				}
				return func() {
					p.Err = n.Unreachable()
					p.Done()
				}
			}
			conns[i] = conn
		}
		return func() { waitAll(cl, masters, conns, resp3, offsetKey, args, p) }
	}
	if cl.Conn == nil {
		dial()()
		return
	}
	cl.Conn.OffLoop(p, dial)
}

// waitAll sends the WAIT on conns, one to each of masters, and answers
// the smallest count once every master answered.
func waitAll(cl *Client, masters []*Node, conns []*backend.Conn, resp3 bool, offsetKey func(i int) string, args [][]byte, p *resp.Reply) {
	cl.mu.Lock()
	cl.waiting = conns
	cl.mu.Unlock()
	parts := fanout.FanIn(len(conns), func(replies []*resp.Reply) {
		cl.mu.Lock()
		cl.waiting = nil // before they go back: Gone must not close another client's
		cl.mu.Unlock()
		var least []int64 // WAIT's count, or WAITAOF's numlocal and numreplicas
		var bad *resp.Reply
		for i, r := range replies {
			var counts []int64
			err := r.Err
			if err == nil {
				counts, err = waitCounts(r.Buf)
			}
			if err != nil && bad == nil {
				bad = r // an error (Redis's, or a lost connection)
			}
			if err == nil && least == nil {
				least = counts
			} else if err == nil && len(counts) == len(least) {
				for j := range least {
					least[j] = min(least[j], counts[j])
				}
			}
			masters[i].Unpin(conns[i], resp3, r.Err == nil)
		}
		switch {
		case bad != nil && bad.Err != nil:
			p.Err = bad.Err
		case bad != nil:
			p.Buf = append(p.Buf, bad.Buf...)
		case len(least) == 1:
			p.Buf = redcon.AppendInt(p.Buf, least[0])
		default:
			p.Buf = redcon.AppendArray(p.Buf, len(least))
			for _, n := range least {
				p.Buf = redcon.AppendInt(p.Buf, n)
			}
		}
		p.Done()
	})
	for i, conn := range conns {
		writePrelude(conn, offsetKey(i))
		conn.Do(args, parts[i])
	}
}

// waitCounts reads WAIT's reply (an integer) or WAITAOF's (an array of two:
// numlocal, numreplicas).
func waitCounts(reply []byte) ([]int64, error) {
	v, err := resp.Parse(reply)
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case int64:
		return []int64{v}, nil
	case []any:
		counts := make([]int64, len(v))
		for i, e := range v {
			n, ok := e.(int64)
			if !ok {
				return nil, resp.ErrBadReply
			}
			counts[i] = n
		}
		return counts, nil
	}
	return nil, resp.ErrBadReply
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
