package commands

import (
	"sync"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
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

// blockingCommands wait in Redis for data (or, WAIT, for replicas).
var blockingCommands = []string{
	"blpop", "brpop", "brpoplpush", "blmove", "blmpop",
	"bzpopmin", "bzpopmax", "bzmpop", "wait", "waitaof",
}

const (
	replyTxLost    = "ERR fenceproxy: lost the connection to Redis; the transaction was discarded"
	replyExecAbort = "EXECABORT Transaction discarded because of previous errors."
)

// pin gives the client a connection of its own, unless it has one. It
// replies with an error and reports false if none can be had.
func (h *Handler) pin(c *protocol.Conn, s *session, p *protocol.Pending) bool {
	if s.pinned != nil {
		return true
	}
	c.WaitReplies(p) // what the client sent before runs before the switch
	node := h.opts.Backend.Masters()[0]
	conn, err := node.Pinned(s.resp3)
	if err != nil {
		replyError(p, "TRYAGAIN fenceproxy: Redis is unreachable, retry shortly")
		return false
	}
	s.pinned, s.pinnedNode, s.pinnedRESP3 = conn, node, s.resp3
	return true
}

// sendPinned forwards a request on the client's own connection.
func (h *Handler) sendPinned(s *session, args [][]byte, p *protocol.Pending) {
	if !s.pinned.Up() {
		if s.inMulti || s.watching {
			replyError(p, replyTxLost)
			return
		}
	}
	h.opts.Metrics.PassthroughCommands.Inc()
	s.pinned.Do(args, p)
}

func (h *Handler) multi(c *protocol.Conn, args [][]byte, p *protocol.Pending) {
	s := sessionOf(c)
	if !s.inMulti {
		if !h.pin(c, s, p) {
			return
		}
		s.inMulti = true
	}
	h.sendPinned(s, args, p) // nested: Redis's own error
}

// execOrDiscard ends a transaction (or, outside one, gets Redis's error).
func (h *Handler) execOrDiscard(c *protocol.Conn, args [][]byte, p *protocol.Pending) {
	s := sessionOf(c)
	if !s.inMulti {
		h.forward(c, args, p)
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

func (h *Handler) watch(c *protocol.Conn, args [][]byte, p *protocol.Pending) {
	s := sessionOf(c)
	if !s.inMulti {
		if !h.pin(c, s, p) {
			return
		}
		s.watching = true
	}
	h.sendPinned(s, args, p) // inside MULTI: Redis's own error
}

func (h *Handler) unwatch(c *protocol.Conn, args [][]byte, p *protocol.Pending) {
	s := sessionOf(c)
	if !s.inMulti {
		s.watching = false
	}
	h.forward(c, args, p)
}

// blocking serves a command that may wait in Redis: on the client's own
// connection, with the client watched so a disconnect ends the wait.
func (h *Handler) blocking(c *protocol.Conn, args [][]byte, p *protocol.Pending) {
	s := sessionOf(c)
	if s.inMulti {
		h.sendPinned(s, args, p) // queued, so it will not block
		return
	}
	if !h.pin(c, s, p) {
		return
	}
	c.MayBlock()
	if len(args[0]) == 4 { // WAIT
		h.waitPrelude(s)
	}
	h.sendPinned(s, args, p)
}

// waitPrelude makes WAIT mean what it means on Redis. WAIT counts the
// replicas that acknowledged this connection's last write, but the client's
// writes went over shared connections. One write of our own on the pinned
// connection just before WAIT has a replication offset past all of them, so
// WAIT then covers them.
func (h *Handler) waitPrelude(s *session) {
	var done sync.WaitGroup
	done.Add(1)
	s.pinned.Do([][]byte{
		[]byte("SET"), []byte(h.opts.KeyPrefix + "wait-offset"), []byte("1"), []byte("PX"), []byte("1"),
	}, protocol.NewPending(&done)) // its reply is not the client's
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
	s.cancelLocks()
}

// Closed releases what a connection held.
func (h *Handler) Closed(c *protocol.Conn) {
	s, _ := c.Session.(*session)
	if s == nil {
		return
	}
	s.cancelLocks()
	closeTunnel(s.tunnel)
	if s.pinned != nil {
		s.pinnedNode.Unpin(s.pinned, s.pinnedRESP3, !s.inMulti && !s.watching)
		s.pinned, s.pinnedNode = nil, nil
	}
}
