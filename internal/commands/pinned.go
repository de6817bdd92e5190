package commands

import (
	"bytes"
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// Commands that need a backend connection of the client's own: MULTI/EXEC
// and WATCH keep state on the connection, and a blocking command would stall
// every client sharing it. Such a client is pinned to a connection the
// backend gives it (Forwarder.Pin: the master of the request's key) until
// its state is gone (EXEC, DISCARD, UNWATCH) and its batch is answered,
// then the connection goes back for reuse. While pinned, every forwarded
// request of the client takes that connection, so its requests keep their
// order. A pinned connection never reconnects by itself: after it breaks,
// the transaction is reported lost, never carried on half-applied over a
// fresh connection. WAIT is the backend's too (Forwarder.WaitReplicas).

const (
	replyTxLost    = "ERR fenceproxy: lost the connection to Redis; the transaction was discarded"
	replyExecAbort = "EXECABORT Transaction discarded because of previous errors."
	// Redis's own answers to MULTI and WATCH inside MULTI, for a
	// transaction whose MULTI has not reached Redis yet (txState.deferred).
	replyNestedMulti  = "ERR MULTI calls can not be nested"
	replyWatchInMulti = "ERR WATCH inside MULTI is not allowed"
)

// pin gives the client a connection of its own to the master for args,
// unless it has one, and then calls then; it replies with an error instead
// if none can be had. What the client sent before runs first, on the
// connections it had: then runs once those requests have their replies
// (protocol's AfterReplies; on the serve loop, later, from the loop).
func (h *Handler) pin(c *protocol.Conn, s *session, args [][]byte, p *resp.Reply, then func()) {
	h.pinOr(c, s, args, p, then, nil)
}

// pinOr is pin, calling failed (if not nil) when it replied with an error.
func (h *Handler) pinOr(c *protocol.Conn, s *session, args [][]byte, p *resp.Reply, then, failed func()) {
	if s.tx.pinned != nil {
		then()
		return
	}
	h.after(c, s, p, func() {
		if !c.OnLoop() {
			pinned, err := h.opts.Backend.Pin(&s.backend, args)
			h.pinned(s, pinned, err, p, then, failed)
			return
		}
		// The serve loop takes a spare open already (the master keeps one
		// idle), else dials on a goroutine and goes on once it is done
		// (OffLoop): the client's later requests wait, the loop's other
		// clients do not.
		if pinned := h.opts.Backend.PinSpare(&s.backend, args); pinned != nil {
			h.pinned(s, pinned, nil, p, then, failed)
			return
		}
		c.OffLoop(p, func() func() {
			pinned, err := h.opts.Backend.Pin(&s.backend, args)
			return func() {
				defer h.publish(c, s)
				h.pinned(s, pinned, err, p, then, failed)
			}
		})
	})
}

// pinned goes on with a connection Pin gave (then), or answers its error.
func (h *Handler) pinned(s *session, pinned *upstream.Pinned, err error, p *resp.Reply, then, failed func()) {
	if err != nil {
		if failed != nil {
			failed()
		}
		replyErr(p, err)
		return
	}
	s.tx.pinned = pinned
	then()
}

// sendPinned forwards a request on the client's own connection.
func (h *Handler) sendPinned(s *session, args [][]byte, p *resp.Reply) {
	if !s.tx.pinned.Up() {
		if s.tx.inMulti || s.tx.watching {
			replyError(p, replyTxLost)
			return
		}
	}
	h.opts.Metrics.PassthroughCommands.Inc()
	if s.pipelined || s.onLoop && !s.tx.pinned.OnLoop() && requestSize(args) > maxBlockingOnLoop {
		// The writer sends it with what follows; or, from the serve loop,
		// a request its socket may not take at once, on a connection the
		// loop does not serve (TLS), which the loop must not wait for.
		s.tx.pinned.Do(args, p)
		return
	}
	// The last the client sent: written now, not a goroutine hop later,
	// so that a blocking command or an EXEC reaches Redis ahead of what
	// another client sends just after it, as without the proxy (unit/type/
	// stream-cgroups "Blocking XREADGROUP: key deleted", unit/type/list
	// "BRPOPLPUSH does not affect WATCH while still blocked"). Requests
	// from two clients at the same moment can still reach Redis in either
	// order: each client has its goroutine. (On a connection the serve
	// loop serves, DoNow is Do: it leaves at the end of the loop's pass,
	// with the requests of the loop's other clients of that pass.)
	s.tx.pinned.DoNow(args, p)
}

func (h *Handler) multi(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if !s.tx.inMulti {
		if s.tx.pinned == nil && h.opts.Backend.RoutesByKey() {
			// The transaction's master is its first command's: MULTI
			// goes there with that command (beginMulti).
			s.tx.inMulti, s.tx.deferred = true, true
			replyOK(p)
			return
		}
		h.pin(c, s, args, p, func() {
			s.tx.inMulti = true
			h.sendPinned(s, args, p)
		})
		return
	}
	if s.tx.deferred {
		replyError(p, replyNestedMulti) // no connection yet to ask Redis on
		return
	}
	h.sendPinned(s, args, p) // nested: Redis's own error
}

// beginMulti sends a deferred MULTI to the master of the first command
// queued in the transaction. It reports false (having replied) if that
// master cannot be reached.
func (h *Handler) beginMulti(c *protocol.Conn, s *session, args [][]byte, p *resp.Reply, then func()) {
	h.pinOr(c, s, args, p, func() {
		s.tx.deferred = false
		s.tx.pinned.Do([][]byte{[]byte("MULTI")}, resp.NewReplyFunc(func() {}))
		then()
	}, func() { s.tx.inMulti, s.tx.deferred = false, false })
}

// refuseOwnInMulti refuses one of the proxy's own commands (the lock
// family) inside MULTI: Redis cannot queue a command it does not know,
// and the proxy runs none inside a transaction. Queued as before, it was
// answered Redis's "unknown command", as if the proxy were not there. As
// Redis does for a command refused while queuing, EXEC then aborts the
// transaction (EXECABORT).
func refuseOwnInMulti(s *session, cmd *command, p *resp.Reply) {
	s.tx.denied = true
	replyError(p, "ERR fenceproxy: "+strings.ToUpper(cmd.name)+" cannot run inside MULTI: the lock family is the proxy's own and Redis cannot queue it, so EXEC will discard this transaction (EXECABORT); send it before MULTI or after EXEC")
}

// execOrDiscard ends a transaction (or, outside one, gets Redis's error).
func (h *Handler) execOrDiscard(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if !s.tx.inMulti {
		h.forward(c, args, p)
		return
	}
	if s.tx.denied {
		// A command of the transaction was refused by the user's ACL:
		// Redis aborts such a transaction at EXEC, and so does the proxy.
		s.tx.denied = false
		if len(args[0]) == 4 { // EXEC
			if !s.tx.deferred && s.tx.pinned.Up() {
				s.tx.pinned.Do([][]byte{[]byte("DISCARD")}, resp.NewReplyFunc(func() {}))
			}
			s.tx.inMulti, s.tx.deferred, s.tx.watching = false, false, false
			s.tx.selects, s.tx.queued = nil, 0
			replyError(p, replyExecAbort)
			return
		}
	}
	if s.tx.deferred { // nothing was queued: nothing reached Redis
		s.tx.inMulti, s.tx.deferred, s.tx.watching = false, false, false
		s.tx.selects, s.tx.queued = nil, 0
		if len(args[0]) == 4 { // EXEC
			p.Buf = append(p.Buf, "*0\r\n"...)
			p.Done()
		} else {
			replyOK(p)
		}
		return
	}
	s.tx.inMulti, s.tx.watching = false, false
	if len(args[0]) == 4 { // EXEC
		p = h.execReply(s, p)
	}
	s.tx.selects, s.tx.queued = nil, 0
	if !s.tx.pinned.Up() {
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
	if !s.tx.inMulti {
		h.pin(c, s, args, p, func() {
			s.tx.watching = true
			h.sendPinned(s, args, p)
		})
		return
	} else if s.tx.deferred {
		replyError(p, replyWatchInMulti)
		return
	}
	h.sendPinned(s, args, p) // inside MULTI: Redis's own error
}

func (h *Handler) unwatch(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if !s.tx.inMulti {
		s.tx.watching = false
	}
	h.forward(c, args, p)
}

// blocking serves a command that may wait in Redis: on the client's own
// connection, with the client watched so a disconnect ends the wait.
func (h *Handler) blocking(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if s.tx.inMulti {
		h.sendPinned(s, args, p) // queued, so it will not block
		return
	}
	if len(args[0]) == 4 || len(args[0]) == 7 { // WAIT, WAITAOF: every master's
		c.MayBlock()
		h.opts.Metrics.PassthroughCommands.Inc()
		h.opts.Backend.WaitReplicas(&s.backend, args, h.opts.KeyPrefix+"wait-offset", p)
		return
	}
	h.pin(c, s, args, p, func() {
		c.MayBlock()
		h.blocked.add(c.ID, s.tx.pinned)
		s.tx.blocked = true
		if c.OnLoop() {
			// The loop ends the batch with it (what the client pipelined
			// after it waits for its reply): written now, ahead of what
			// the loop's other clients send after it, rather than by the
			// connection's writer a goroutine hop later.
			s.pipelined = false
		}
		h.sendPinned(s, args, p)
	})
}

// blockingOnLoop is a blocking command's onLoop (WAIT's too): the serve
// loop serves it wherever it comes, since nothing of it waits there: pin
// (or WaitReplicas) goes on once the earlier replies are in
// (AfterReplies), with the master's spare connection or one dialled on a
// goroutine (OffLoop), and the request leaves at the end of the loop's
// pass. The loop then watches the client while the command blocks
// (protocol's MayBlock): a client that hangs up, is killed or outlasts
// Shutdown gets ClientGone. It changes nothing, so a goroutine's client
// that sends one may go back to the loop.
func blockingOnLoop(*Handler, *protocol.Conn, [][]byte) bool { return true }

// xreadOnLoop: XREAD and XREADGROUP without BLOCK are only forwarded;
// with it, they block (blockingOnLoop).
func xreadOnLoop(h *Handler, c *protocol.Conn, args [][]byte) bool {
	for _, a := range args[1:] {
		if bytes.EqualFold(a, []byte("streams")) {
			break
		}
		if bytes.EqualFold(a, []byte("block")) {
			return blockingOnLoop(h, c, args)
		}
	}
	return true
}

// maxBlockingOnLoop bounds the request a loop writes to a pinned
// connection (sendPinned's DoNow writes on the caller's goroutine): far
// under any socket buffer, so the write never waits.
const maxBlockingOnLoop = 4 << 10

// requestSize is the bytes of args' arguments.
func requestSize(args [][]byte) int {
	n := 0
	for _, a := range args {
		n += len(a)
	}
	return n
}

// BatchDone gives back a connection the client no longer needs once every
// reply of its batch is in.
func (h *Handler) BatchDone(c *protocol.Conn) {
	s := sessionOf(c)
	unblocked := h.unblocked(c, s)
	s.adoptExecDB(c)
	defer h.publish(c, s)
	if s.tx.pinned == nil || s.tx.inMulti || s.tx.watching || s.track.conn {
		return
	}
	s.tx.pinned.Release(!unblocked)
	s.tx.pinned = nil
}

// ClientGone ends what waits for a client that went away: its blocked
// command (by closing its connection, which Redis sees) and its lock waits.
func (h *Handler) ClientGone(c *protocol.Conn) {
	s := sessionOf(c)
	if s.tx.pinned != nil {
		s.tx.pinned.Close()
	}
	s.backend.Gone()
	s.lock.Requests.CancelAll()
}

// Closed releases what a connection held.
func (h *Handler) Closed(c *protocol.Conn) {
	s := sessionOf(c)
	h.receivers.m.Delete(c.ID)
	h.clients.m.Delete(c.ID)
	s.lock.Requests.CancelAll()
	if s.tunnel != nil {
		s.tunnel.Close()
	}
	unblocked := h.unblocked(c, s)
	if s.tx.pinned != nil {
		s.tx.pinned.Release(!s.tx.inMulti && !s.tx.watching && !unblocked)
		s.tx.pinned = nil
	}
	s.backend.Untrack()
}
