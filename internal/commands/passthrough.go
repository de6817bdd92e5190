package commands

import (
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
// client's connection of the shared pool (RESP2 or RESP3, its database's,
// its Redis user's; where a failover left them not open on the new master,
// dialled off the loop first: ServeCommand, withOpen) or on its connection of its own while the
// loop serves that one too (a transaction's, WATCH's, a tracking client's
// in front of a standalone master, a client's as another Redis user: not
// with TLS to Redis), while nothing else holds the client elsewhere (no
// tunnel, no trackers in front of a Redis Cluster; CLIENT REPLY OFF or
// SKIP only marks replies silent), PING and SELECT (which go on once the
// client's earlier replies are in: protocol's AfterReplies), AUTH and
// HELLO (a round trip to Redis, a connection as another user, a protocol's
// connections: each dialled off the loop, protocol's OffLoop), CLIENT
// TRACKING (its connection dialled so too), the lock family and the
// clients' recognised lock recipes (started as callbacks or handed to a
// lock worker: lockcmd's LeaseOnLoop, RecipesOnLoop; not on a tier node),
// INFO (put together on a lock worker), and the proxy's own that it
// answers from the connection's state or the proxy's (the table's onLoop:
// what client libraries send when they connect, CLIENT LIST, COMMAND...).
// MULTI, WATCH, EXEC, DISCARD, UNWATCH, blocking commands and WAIT are the
// loop's wherever they come: what pins a connection goes on once the
// earlier replies are in, with the master's spare connection or one
// dialled on a goroutine (OffLoop), and inside MULTI every command Redis
// queues is the loop's. A client of fenceproxy's own users (--aclfile,
// --requirepass) is checked on the loop too (authorize only reads the
// user's rules), and a tier node's clients are served there as any other
// node's: what a tier does differently (relaying the lock family, the
// TIER.* commands of peers' links) is never forwarded. In front of a Redis
// Cluster, requests that span slots are split on the loop too, and one
// behind others after the view of the slots changed goes on once they are
// answered. (P|S)SUBSCRIBE and their UNSUBSCRIBEs (in front of a
// standalone master), MONITOR and SYNC are the loop's too: their tunnel's
// connection is dialled off the loop, the loop writes Redis's stream
// (protocol's outbox), and every later request of the client goes through
// the tunnel on the loop. (A client whose connections are not open on the
// master, after a failover, has them dialled off the loop before its
// request is served: ServeCommand, withOpen.) Everything else (a
// tier node's lock requests and its peers' TIER.*,
// tracking and pub/sub in front of a Redis Cluster) is served on a
// goroutine while the client stays on the loop (protocol's goroutine
// detour): ServesOnLoop decides only which thread serves a request, the
// loop's or a goroutine's.
func (h *Handler) ServesOnLoop(c *protocol.Conn, args [][]byte) bool {
	s := sessionOf(c)
	if s.tunnel != nil {
		// Subscribed (or MONITOR, SYNC) on the loop: every request goes
		// through the tunnel (sendTunnel: one write to its connection),
		// and Redis's answers come with the stream the loop writes. A
		// tier peer's command (serveTierLink, before the tunnel) is not.
		return !h.locks.InTier() || !hasPrefixFold(args[0], "tier.")
	}
	if s.tx.pinned != nil && !s.tx.pinned.OnLoop() {
		return false
	}
	var lower [32]byte
	name := args[0]
	if len(name) > len(lower) {
		// No command of the table's is this long: forwarded (queued in a
		// transaction), as any unknown command, for Redis to refuse.
		return true
	}
	lname := lowerInto(lower[:0], name)
	cmd := lookup(lname)
	if cmd == nil && h.locks.InTier() && len(lname) >= 5 && string(lname[:5]) == "tier." {
		return false // a peer's link (serveTierLink): TIER.RELAY runs a lock command (lockcmd's LeaseOnLoop)
	}
	if s.tx.inMulti && (cmd == nil || cmd.flags&flagImmediate == 0) {
		// Queued on the transaction's connection (sendQueued), or
		// refused at once (the lock family).
		return true
	}
	if cmd != nil && (cmd.onLoop == nil || !cmd.onLoop(h, c, args)) {
		return false
	}
	// Forwarded: the Forwarder never waits on the loop (a Redis Cluster's
	// request after a change of the slots' view goes on in a continuation).
	return true
}

// pingOnLoop: PING goes on once its earlier replies are in (inOrder, a
// continuation on the loop); Redis's answer comes on the control
// connection, the proxy's own from a timer.
func pingOnLoop(*Handler, *protocol.Conn, [][]byte) bool { return true }

// selectOnLoop: SELECT switches connections once its earlier replies are
// in (a continuation on the loop, never a wait), and a database whose
// connections are not open yet has them dialled off the loop first
// (switchDB's OffLoop): the suite's clients (SELECT 9 first) and any
// application that moves between databases stay on the loop.
func selectOnLoop(_ *Handler, _ *protocol.Conn, args [][]byte) bool { return len(args) == 2 }

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
