package commands

import (
	"bytes"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/cluster"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Commands that need a backend connection of the client's own: MULTI/EXEC
// and WATCH keep state on the connection, and a blocking command would stall
// every client sharing it. Such a client is pinned to a connection from
// cluster.Node.Pinned until its state is gone (EXEC, DISCARD, UNWATCH) and
// its batch is answered, then the connection goes back for reuse. While
// pinned, every forwarded request of the client takes that connection, so
// its requests keep their order. A pinned connection never reconnects by
// itself: after it breaks, the transaction is reported lost, never carried
// on half-applied over a fresh connection.

const (
	replyTxLost    = "ERR fenceproxy: lost the connection to Redis; the transaction was discarded"
	replyExecAbort = "EXECABORT Transaction discarded because of previous errors."
)

// pin gives the client a connection of its own to the master for args,
// unless it has one. It replies with an error and reports false if none can
// be had.
func (h *Handler) pin(c *protocol.Conn, s *session, args [][]byte, p *resp.Reply) bool {
	if s.pinned != nil {
		return true
	}
	c.WaitReplies(p) // what the client sent before runs before the switch
	node := h.nodeFor(args)
	if node == nil {
		replyErr(p, backend.ErrUnavailable)
		return false
	}
	conn, err := node.Pinned(s.resp3)
	if err != nil {
		replyErr(p, unreachable(node))
		return false
	}
	s.pinned, s.pinnedNode, s.pinnedRESP3 = conn, node, s.resp3
	return true
}

// unreachable is the error for a request that could not get a connection
// to node: why the proxy refuses to send anything to it (it is not the
// master), or else that it cannot be reached.
func unreachable(node *cluster.Node) error {
	if err := node.Refusal(); err != nil {
		return err
	}
	return backend.ErrUnavailable
}

// nodeFor returns the master for a request that needs a connection of the
// client's own: in front of a Redis Cluster the master of its first key's
// slot (or the first master for a keyless one), else the master.
func (h *Handler) nodeFor(args [][]byte) *cluster.Node {
	if h.opts.Cluster != nil {
		if cmd := h.opts.Keys.LookupBytes(args[0]); cmd != nil {
			var buf [4]int
			if at := cmd.Keys(buf[:0], args); len(at) > 0 {
				return h.opts.Cluster.MasterForSlot(keys.SlotOf(args[at[0]]))
			}
		}
	}
	if m := h.opts.Backend.Masters(); len(m) > 0 {
		return m[0]
	}
	return nil
}

// sendPinned forwards a request on the client's own connection.
func (h *Handler) sendPinned(s *session, args [][]byte, p *resp.Reply) {
	if !s.pinned.Up() {
		if s.inMulti || s.watching {
			replyError(p, replyTxLost)
			return
		}
	}
	h.opts.Metrics.PassthroughCommands.Inc()
	if h.opts.Cluster != nil {
		s.pinned.Do(args, noRedirects(p))
		return
	}
	s.pinned.Do(args, p)
}

// replyOtherMaster replaces a MOVED or ASK on a pinned connection: the
// request's key lives on another master than the one the client's
// transaction or blocking command is bound to.
const replyOtherMaster = "-CROSSSLOT fenceproxy: this key is on another Redis Cluster master than the transaction's; keep a transaction's keys in one slot with a {hash tag}\r\n"

// noRedirects wraps p so that MOVED and ASK never reach the client.
func noRedirects(p *resp.Reply) *resp.Reply {
	start := len(p.Buf)
	var sub *resp.Reply
	sub = resp.NewReplyFunc(func() {
		reply := sub.Buf[start:]
		if bytes.HasPrefix(reply, []byte("-MOVED ")) || bytes.HasPrefix(reply, []byte("-ASK ")) {
			sub.Buf = append(sub.Buf[:start], replyOtherMaster...)
		}
		p.Buf, p.Err = sub.Buf, sub.Err
		p.Done()
	})
	sub.Buf = p.Buf
	return sub
}

func (h *Handler) multi(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if !s.inMulti {
		if h.opts.Cluster != nil && s.pinned == nil {
			s.inMulti, s.multiDeferred = true, true
			replyOK(p)
			return
		}
		if !h.pin(c, s, args, p) {
			return
		}
		s.inMulti = true
	}
	h.sendPinned(s, args, p) // nested: Redis's own error
}

// beginMulti sends a deferred MULTI to the master of the first command
// queued in the transaction. It reports false (having replied) if that
// master cannot be reached.
func (h *Handler) beginMulti(c *protocol.Conn, s *session, args [][]byte, p *resp.Reply) bool {
	if !h.pin(c, s, args, p) {
		s.inMulti, s.multiDeferred = false, false
		return false
	}
	s.multiDeferred = false
	s.pinned.Do([][]byte{[]byte("MULTI")}, resp.NewReplyFunc(func() {}))
	return true
}

// execOrDiscard ends a transaction (or, outside one, gets Redis's error).
func (h *Handler) execOrDiscard(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if !s.inMulti {
		h.forward(c, args, p)
		return
	}
	if s.txDenied {
		// A command of the transaction was refused by the user's ACL:
		// Redis aborts such a transaction at EXEC, and so does the proxy.
		s.txDenied = false
		if len(args[0]) == 4 { // EXEC
			if !s.multiDeferred && s.pinned.Up() {
				s.pinned.Do([][]byte{[]byte("DISCARD")}, resp.NewReplyFunc(func() {}))
			}
			s.inMulti, s.multiDeferred, s.watching = false, false, false
			replyError(p, replyExecAbort)
			return
		}
	}
	if s.multiDeferred { // nothing was queued: nothing reached Redis
		s.inMulti, s.multiDeferred, s.watching = false, false, false
		if len(args[0]) == 4 { // EXEC
			p.Buf = append(p.Buf, "*0\r\n"...)
			p.Done()
		} else {
			replyOK(p)
		}
		return
	}
	s.inMulti, s.watching = false, false
	if !s.pinned.Up() {
		if len(args[0]) == 4 { // EXEC
			replyError(p, replyExecAbort)
		} else {
			replyOK(p)
		}
		return
	}
	h.sendPinned(s, args, p)
}

func (h *Handler) watch(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if !s.inMulti {
		if !h.pin(c, s, args, p) {
			return
		}
		s.watching = true
	}
	h.sendPinned(s, args, p) // inside MULTI: Redis's own error
}

func (h *Handler) unwatch(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if !s.inMulti {
		s.watching = false
	}
	h.forward(c, args, p)
}

// blocking serves a command that may wait in Redis: on the client's own
// connection, with the client watched so a disconnect ends the wait.
func (h *Handler) blocking(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if s.inMulti {
		h.sendPinned(s, args, p) // queued, so it will not block
		return
	}
	isWait := len(args[0]) == 4
	if isWait && h.opts.Cluster != nil {
		h.waitEveryMaster(c, s, args, p)
		return
	}
	if !h.pin(c, s, args, p) {
		return
	}
	c.MayBlock()
	if isWait {
		writePrelude(s.pinned, h.opts.KeyPrefix+"wait-offset")
	}
	h.sendPinned(s, args, p)
}

// writePrelude makes WAIT mean what it means on Redis. WAIT counts the
// replicas that acknowledged this connection's last write, but the client's
// writes went over shared connections. One write of our own on the pinned
// connection just before WAIT has a replication offset past all of them, so
// WAIT then covers them.
func writePrelude(conn *backend.Conn, key string) {
	conn.Do([][]byte{
		[]byte("SET"), []byte(key), []byte("1"), []byte("PX"), []byte("1"),
	}, resp.NewReplyFunc(func() {})) // its reply is not the client's
}

// waitEveryMaster is WAIT in front of a Redis Cluster: the client's writes
// went to every master, so WAIT runs on each (after a write of our own in a
// slot of that master, as in writePrelude) and the answer is the smallest
// count: every write of the client reached at least that many replicas of
// its master. The connections are the client's own while it waits.
func (h *Handler) waitEveryMaster(c *protocol.Conn, s *session, args [][]byte, p *resp.Reply) {
	c.WaitReplies(p)
	masters := h.opts.Cluster.Masters()
	conns := make([]*backend.Conn, 0, len(masters))
	for _, n := range masters {
		conn, err := n.Pinned(s.resp3)
		if err != nil {
			for i, c := range conns {
				masters[i].Unpin(c, s.resp3, true)
			}
			replyErr(p, backend.ErrUnavailable)
			return
		}
		conns = append(conns, conn)
	}
	s.mu.Lock()
	s.waiting = conns
	s.mu.Unlock()
	c.MayBlock()
	parts := fanIn(len(conns), func(replies []*resp.Reply) {
		s.mu.Lock()
		s.waiting = nil
		s.mu.Unlock()
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
			masters[i].Unpin(conns[i], s.resp3, err == nil)
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
	h.opts.Metrics.PassthroughCommands.Inc()
	for i, conn := range conns {
		slot := h.opts.Cluster.SlotOn(masters[i])
		writePrelude(conn, h.opts.KeyPrefix+"wait-offset"+keys.TagForSlot(slot))
		conn.Do(args, parts[i])
	}
}

// BatchDone gives back a connection the client no longer needs once every
// reply of its batch is in.
func (h *Handler) BatchDone(c *protocol.Conn) {
	s, _ := c.Session.(*session)
	if s == nil || s.pinned == nil || s.inMulti || s.watching {
		return
	}
	s.pinnedNode.Unpin(s.pinned, s.pinnedRESP3, true)
	s.pinned, s.pinnedNode = nil, nil
}

// ClientGone ends what waits for a client that went away: its blocked
// command (by closing its connection, which Redis sees) and its lock waits.
func (h *Handler) ClientGone(c *protocol.Conn) {
	s, _ := c.Session.(*session)
	if s == nil {
		return
	}
	if s.pinned != nil {
		s.pinned.Close()
	}
	s.mu.Lock()
	for _, c := range s.waiting {
		c.Close()
	}
	s.mu.Unlock()
	s.lockRequests.CancelAll()
}

// Closed releases what a connection held.
func (h *Handler) Closed(c *protocol.Conn) {
	s, _ := c.Session.(*session)
	if s == nil {
		return
	}
	s.lockRequests.CancelAll()
	closeTunnel(s.tunnel)
	if s.pinned != nil {
		s.pinnedNode.Unpin(s.pinned, s.pinnedRESP3, !s.inMulti && !s.watching)
		s.pinned, s.pinnedNode = nil, nil
	}
}
