package commands

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Tier is what the command layer needs of a tier node (internal/tier):
// while this node does not lead, lock-family commands are relayed to the
// leader; the leader accepts relay links from its peers.
type Tier interface {
	// Leads reports whether this node serves lock commands itself.
	Leads() bool
	// Relay sends a lock-family command to the leader on behalf of a
	// client of user ("" with ACLs off) in its protocol, and returns the
	// leader's reply; an error is a coded -TRYAGAIN. received is when the
	// client's request was read: the leader counts a lease from it.
	Relay(ctx context.Context, user string, resp3 bool, wait time.Duration, received time.Time, args [][]byte) ([]byte, error)
	// PeerSecret reports whether secret opens a relay link.
	PeerSecret(secret string) bool
	// ReportApplied records a follower's applied index; for a node that
	// lost its Raft state (rejoining) it returns the commit index the node
	// must reach before it votes (internal/tier's rejoin.go).
	ReportApplied(node string, index uint64, rejoining bool) (uint64, error)
	// Info is INFO's "# Tier" section body (TIER.INFO).
	Info() string
	// AddNode and RemoveNode change the tier's membership (on the
	// leader; elsewhere a coded -TRYAGAIN naming it).
	AddNode(id, raftAddr string) error
	RemoveNode(id string) error
}

// tierInfo is TIER.INFO: the node's tier section as a bulk string.
func (h *Handler) tierInfo(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if h.opts.Tier == nil {
		replyError(p, "ERR fenceproxy: this fenceproxy is a single node, not part of a tier (start it with --peers)")
		return
	}
	p.Buf = append(p.Buf, '$')
	info := h.opts.Tier.Info()
	p.Buf = strconv.AppendInt(p.Buf, int64(len(info)), 10)
	p.Buf = append(p.Buf, "\r\n"...)
	p.Buf = append(p.Buf, info...)
	p.Buf = append(p.Buf, "\r\n"...)
	p.Done()
}

// tierAdd is TIER.ADD id raft-addr: the node joins as a voter; it catches
// up from the leader (a snapshot if it is far behind).
func (h *Handler) tierAdd(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if h.opts.Tier == nil {
		replyError(p, "ERR fenceproxy: this fenceproxy is a single node, not part of a tier (start it with --peers)")
		return
	}
	id, addr := string(args[1]), string(args[2])
	h.runner.Go(func() { h.replyMembership(p, h.opts.Tier.AddNode(id, addr)) })
}

// tierRemove is TIER.REMOVE id.
func (h *Handler) tierRemove(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if h.opts.Tier == nil {
		replyError(p, "ERR fenceproxy: this fenceproxy is a single node, not part of a tier (start it with --peers)")
		return
	}
	id := string(args[1])
	h.runner.Go(func() { h.replyMembership(p, h.opts.Tier.RemoveNode(id)) })
}

func (h *Handler) replyMembership(p *resp.Reply, err error) {
	var coded resp.CodedError
	switch {
	case err == nil:
		replyOK(p)
	case errors.As(err, &coded):
		replyErr(p, coded)
	default:
		h.opts.Logger.Warn("tier membership change failed", "err", err)
		replyError(p, "ERR fenceproxy: the membership change failed (see the node's log)")
	}
}

// tierPeer marks a session that is a peer's relay link (TIER.PEER).
type tierPeer struct {
	node string
	// elapsed is the time the request being served (TIER.RELAY's) had
	// already spent on the follower when it was relayed (receivedAt).
	elapsed time.Duration
}

// maxRelayElapsed bounds TIER.RELAY's elapsed time: a lease is never
// longer (MaxTTL), so any more is as late as can be.
const maxRelayElapsed = MaxTTL

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
		// client commands in TIER.RELAY (a follower of an earlier version
		// sends them as they came, and leaves version out).
		if (len(args) != 5 && (len(args) != 6 || string(args[5]) != "2")) || !h.opts.Tier.PeerSecret(string(args[1])) {
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
		s.tier = &tierPeer{node: string(args[2])}
		replyOK(p)
		return true
	case "tier.relay":
		// TIER.RELAY elapsed-us command [args...], on a relay link only:
		// the client's command, served as if it had come on its own, its
		// lease counted from elapsed-us before this request was read.
		if s.tier == nil {
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
		s.tier.elapsed = min(time.Duration(us)*time.Microsecond, maxRelayElapsed)
		h.serve(c, args[2:], p)
		s.tier.elapsed = 0
		return true
	case "tier.applied":
		// TIER.APPLIED node-id index [REJOINING], on a relay link only:
		// +OK, or to a rejoining node the commit index it must reach.
		if s.tier == nil || len(args) < 3 || len(args) > 4 {
			return false
		}
		rejoining := len(args) == 4 && strings.EqualFold(string(args[3]), "rejoining")
		n, err := strconv.ParseUint(string(args[2]), 10, 64)
		if err != nil {
			replyOK(p)
			return true
		}
		if !rejoining {
			h.opts.Tier.ReportApplied(string(args[1]), n, false)
			replyOK(p)
			return true
		}
		node := string(args[1])
		h.runner.Go(func() { // a leadership round: not on the connection's goroutine
			target, err := h.opts.Tier.ReportApplied(node, n, true)
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

// relaying reports whether cmd is to be relayed to the tier's leader: a
// lock-family command on a node that does not lead, from a client (a relay
// link's commands are served here, so two nodes that each take the other
// for leader cannot pass one back and forth).
func (h *Handler) relaying(c *protocol.Conn, cmd *command) bool {
	return cmd.flags&flagLock != 0 && h.opts.Tier != nil && sessionOf(c).tier == nil && !h.opts.Tier.Leads() &&
		!strings.HasPrefix(cmd.name, "tier.") // the tier's own: each node answers them
}

// relayLock relays a lock-family command to the leader and answers the
// leader's reply, in the order of the connection's other lock requests for
// the same resource.
func (h *Handler) relayLock(c *protocol.Conn, cmd *command, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	user := ""
	if h.opts.ACL != nil && s.auth.user != nil {
		user = s.auth.user.Name()
	}
	resp3 := s.backend.RESP3
	own := make([][]byte, len(args))
	for i, a := range args {
		own[i] = append([]byte(nil), a...)
	}
	var wait time.Duration
	if cmd.name == "lock.acquire" && len(args) == 6 {
		wait = MaxWait
		c.MayBlock()
	}
	received := receivedAt(c)
	// A grant or renewal that does not wait in line is judged here too,
	// from when this node read it: the leader counts the time spent here
	// (TIER.RELAY's elapsed time) but cannot see the link's. A grant after
	// waiting in line counts from the leader's attempt that made it, which
	// only the leader can judge.
	var ttl time.Duration
	if (cmd.name == "lock.acquire" && len(args) == 4) || cmd.name == "lock.renew" {
		ttl, _ = parseMillis(args[3], "ttl-ms", 1, MaxTTL)
	}
	relay := func(ctx context.Context) ([]byte, error) {
		reply, err := h.opts.Tier.Relay(ctx, user, resp3, wait, received, own)
		if err == nil && ttl > 0 && len(reply) > 0 && reply[0] == ':' && h.opts.Locks != nil &&
			time.Now().After(h.opts.Locks.ReplyBy(received, ttl)) {
			if cmd.name == "lock.renew" {
				h.opts.Metrics.Renewals.WithLabelValues("late").Inc()
				return []byte(replyLateRenewal), nil
			}
			h.opts.Metrics.Acquires.WithLabelValues("late").Inc()
			return []byte(replyLateRelayedGrant), nil
		}
		return reply, err
	}
	if cmd.resource > 0 && cmd.resource < len(own) {
		h.runLock(c, string(own[cmd.resource]), p, wait, relay)
		return
	}
	h.runner.Go(func() {
		reply, err := relay(context.Background())
		p.Buf, p.Err = append(p.Buf, reply...), err
		p.Done()
	})
}
