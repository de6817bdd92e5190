package commands

import (
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockcmd"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// A tier peer's relay link (TIER.PEER): the leader accepts it with the tier
// secret, before any ACL check, and serves the client commands it carries
// (TIER.RELAY) as if their clients had sent them here. The lock family
// (package lockcmd) relays and judges them; this is the link's session.

// serveTierLink serves the internal link's own commands, before any ACL
// check (a relay link authenticates with the tier secret, not as a user).
// It reports whether it answered.
func (h *Handler) serveTierLink(c *protocol.Conn, args [][]byte, p *resp.Reply) bool {
	if len(args[0]) < 5 || !strings.EqualFold(string(args[0][:5]), "tier.") {
		return false
	}
	name := strings.ToLower(string(args[0]))
	s := sessionOf(c)
	switch name {
	case "tier.peer":
		// TIER.PEER secret node-id user proto [version]: version 2 sends
		// client commands in TIER.RELAY, 3 also wants a grant's lease
		// start back (a follower of an earlier version sends them as they
		// came, and leaves version out). An unknown version is refused as
		// an earlier leader refuses it, so its follower tries the next.
		version := 1
		if len(args) == 6 {
			version = relayVersionOf(args[5])
		}
		if version == 0 || len(args) < 5 || len(args) > 6 || !h.opts.Locks.Tier.PeerSecret(string(args[1])) {
			h.refuse(s, p, "ERR fenceproxy: not a tier peer")
			return true
		}
		if user := string(args[3]); h.opts.ACL != nil {
			u := h.opts.ACL.User(user)
			if u == nil {
				replyError(p, "ERR fenceproxy: the relayed client's user is unknown on the leader (the nodes' ACL files differ)")
				return true
			}
			s.auth.user, s.auth.userSet = u, true
		}
		s.backend.RESP3 = string(args[4]) == "3"
		s.lock.Peer = &lockcmd.Peer{Node: string(args[2]), Version: version}
		replyOK(p)
		return true
	case "tier.undo":
		// TIER.UNDO resource owner token armed-ms, on a relay link only.
		if s.lock.Peer == nil || len(args) != 5 {
			return false
		}
		h.locks.TierUndo(lockConn(c), args, p)
		return true
	case "tier.relay":
		// TIER.RELAY elapsed-us command [args...], on a relay link only:
		// the client's command, served as if it had come on its own, its
		// lease counted from elapsed-us before this request was read.
		if s.lock.Peer == nil {
			return false
		}
		if len(args) < 3 {
			replyError(p, "ERR fenceproxy: TIER.RELAY needs elapsed-us (an integer from 0) and a command")
			return true
		}
		us, ok := parseInt(args[1])
		if !ok || us < 0 || strings.EqualFold(string(args[2]), "tier.relay") {
			replyError(p, "ERR fenceproxy: TIER.RELAY needs elapsed-us (an integer from 0) and a command")
			return true
		}
		s.lock.Peer.Elapsed = min(time.Duration(us)*time.Microsecond, lockcmd.MaxRelayElapsed)
		h.serve(c, args[2:], p)
		s.lock.Peer.Elapsed = 0
		return true
	case "tier.applied":
		// TIER.APPLIED node-id index [REJOINING], on a relay link only:
		// +OK, or to a rejoining node the commit index it must reach.
		if s.lock.Peer == nil || len(args) < 3 || len(args) > 4 {
			return false
		}
		rejoining := len(args) == 4 && strings.EqualFold(string(args[3]), "rejoining")
		n, err := strconv.ParseUint(string(args[2]), 10, 64)
		if err != nil {
			replyOK(p)
			return true
		}
		if !rejoining {
			h.opts.Locks.Tier.ReportApplied(string(args[1]), n, false)
			replyOK(p)
			return true
		}
		node := string(args[1])
		h.locks.Go(func() { // a leadership round: not on the connection's goroutine
			target, err := h.opts.Locks.Tier.ReportApplied(node, n, true)
			if err != nil {
				replyErr(p, err)
				return
			}
			replyInt(p, int64(target))
		})
		return true
	}
	return false
}

// relayVersionOf is TIER.PEER's version argument if this node speaks it
// (2 or 3), else 0.
func relayVersionOf(b []byte) int {
	switch string(b) {
	case "2":
		return 2
	case "3":
		return 3
	}
	return 0
}
