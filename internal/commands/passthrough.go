package commands

import (
	"math"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// forward sends a request that the proxy does not answer itself to Redis:
// on the client's pub/sub tunnel or its own connection if it has one, else
// by the backend's Forwarder, which knows the topology.
func (h *Handler) forward(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	switch {
	case s.tunnel != nil:
		h.sendTunnel(s, args, p)
	case s.tx.pinned != nil:
		h.sendPinned(s, args, p)
	default:
		h.opts.Metrics.PassthroughCommands.Inc()
		h.opts.Backend.Forward(&s.backend, args, p)
	}
}

// ServesOnLoop tells the server's event loop (protocol.LoopHandler) which
// requests it may serve itself: those ServeCommand only forwards, on the
// client's connection of the shared pool (RESP2 or RESP3, in a database
// whose connections are open), while nothing holds the client elsewhere
// (replies on, nothing pinned, no MULTI or WATCH, no tunnel, no tracking),
// PING and SELECT (which go on once the client's earlier replies are in:
// protocol's AfterReplies), AUTH checked by fenceproxy's own users, and
// the few of the proxy's own
// that it answers at once from the connection's own state (the table's
// onLoop: what client libraries send when they connect, so that their
// clients stay on the loop). A client of fenceproxy's own users (--aclfile,
// --requirepass) is checked on the loop too (authorize only reads the
// user's rules), and a tier node's clients are served there as any other
// node's: what a tier does differently (relaying the lock family, the
// TIER.* commands of peers' links) is never forwarded. In front of a Redis
// Cluster, requests that span slots are split on the loop too, and one
// behind others after the view of the slots changed goes on once they are
// answered. (P|S)SUBSCRIBE and their UNSUBSCRIBEs (in front of a standalone
// master), MONITOR and SYNC are the loop's too: their tunnel's connection
// is dialled off the loop (protocol's AfterWork), the loop writes Redis's
// stream (protocol's outbox), and every later request of the client goes
// through the tunnel on the loop. Everything else (the other commands of
// the proxy's own, AUTH checked by Redis and HELLO, a blocking command
// behind others or with no spare pinned connection ready (blockingOnLoop),
// MULTI and WATCH (they pin a connection, which may dial), WAIT (it takes
// a connection of the client's own on each master, which may dial), CLIENT
// TRACKING (its connection of its own is pinned), pub/sub in front of a
// Redis Cluster (an SSUBSCRIBE dials in the tunnel's Send), and in front of
// a Redis Cluster broadcasts and SCAN) moves the client to a goroutine of
// its own, which
// gives it back to the loop after a batch of requests the loop would have
// served (protocol's returnToLoop).
func (h *Handler) ServesOnLoop(c *protocol.Conn, args [][]byte) bool {
	s := sessionOf(c)
	if s.tunnel != nil {
		// Subscribed (or MONITOR, SYNC) on the loop: every request goes
		// through the tunnel (sendTunnel: one write to its connection),
		// and Redis's answers come with the stream the loop writes. A
		// tier peer's command (serveTierLink, before the tunnel) is not.
		return !h.locks.InTier() || !hasPrefixFold(args[0], "tier.")
	}
	if s.tx.pinned != nil || s.tx.inMulti || s.tx.watching ||
		s.replies.off || s.replies.skipNext || s.track.on || !h.opts.Backend.DBOpen(s.backend.RESP3, s.backend.DB) {
		return false
	}
	var lower [32]byte
	name := args[0]
	if len(name) > len(lower) {
		return false
	}
	lname := lowerInto(lower[:0], name)
	if h.locks.InTier() && len(lname) >= 5 && string(lname[:5]) == "tier." {
		return false // a peer's link (serveTierLink): TIER.RELAY runs a lock command
	}
	cmd := lookup(lname)
	if cmd != nil && (cmd.onLoop == nil || !cmd.onLoop(h, c, args)) {
		return false
	}
	// In front of a Redis Cluster, whose routing the Forwarder knows: a
	// request of one slot, by the client's view of the slots.
	return h.opts.Backend.ServesOnLoop(&s.backend, args, c.BatchLen() == 0)
}

// pingOnLoop: PING goes on once its earlier replies are in (inOrder, a
// continuation on the loop); Redis's answer comes on the control
// connection, the proxy's own from a timer.
func pingOnLoop(*Handler, *protocol.Conn, [][]byte) bool { return true }

// selectOnLoop: SELECT switches connections once its earlier replies are
// in (a continuation on the loop, never a wait), and to a database already
// open it dials nothing: the suite's clients (SELECT 9 first) and any
// application that moves between databases stay on the loop.
func selectOnLoop(h *Handler, c *protocol.Conn, args [][]byte) bool {
	if len(args) != 2 {
		return false
	}
	db, ok := parseInt(args[1])
	return !ok || db >= 0 && db <= math.MaxInt32 && h.opts.Backend.DBOpen(sessionOf(c).backend.RESP3, int(db))
}

// authOnLoop: AUTH checked by fenceproxy's own users (--aclfile,
// --requirepass) is answered from the ACL at once; checked by Redis
// (checkAuth) it waits for Redis's answer, on a goroutine.
func authOnLoop(h *Handler, _ *protocol.Conn, _ [][]byte) bool { return h.opts.ACL != nil }

// hasPrefixFold reports whether b begins with the lower-case prefix, in
// any case.
func hasPrefixFold(b []byte, prefix string) bool {
	if len(b) < len(prefix) {
		return false
	}
	for i := range len(prefix) {
		if b[i]|0x20 != prefix[i] && b[i] != prefix[i] {
			return false
		}
	}
	return true
}
