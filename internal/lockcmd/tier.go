package lockcmd

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Tier is what the lock family needs of a tier node (internal/tier):
// while this node does not lead, lock-family commands are relayed to the
// leader; the leader accepts relay links from its peers.
type Tier interface {
	// Leads reports whether this node serves lock commands itself.
	Leads() bool
	// Relay sends a lock-family command to the leader on behalf of a
	// client of user ("" with ACLs off) in its protocol, and returns the
	// leader's reply; an error is coded: -TRYAGAIN when the command was
	// not done, or one with OutcomeUnknown() true when the link broke
	// after it was sent (relayFailure words it per command). received is
	// when the client's request was read: the leader counts a lease from
	// it.
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

// TierInfo is TIER.INFO: the node's tier section as a bulk string.
func (fam *Family) TierInfo(c Conn, args [][]byte, p *resp.Reply) {
	if fam.opts.Tier == nil {
		p.DoneError("ERR fenceproxy: this fenceproxy is a single node, not part of a tier (start it with --peers)")
		return
	}
	// Put together on a lock worker: the Raft configuration it reads
	// waits on Raft's own goroutine.
	fam.runner.Go(func() {
		p.Buf = append(p.Buf, '$')
		info := fam.opts.Tier.Info()
		p.Buf = strconv.AppendInt(p.Buf, int64(len(info)), 10)
		p.Buf = append(p.Buf, "\r\n"...)
		p.Buf = append(p.Buf, info...)
		p.Buf = append(p.Buf, "\r\n"...)
		p.Done()
	})
}

// TierAdd is TIER.ADD id raft-addr: the node joins as a voter; it catches
// up from the leader (a snapshot if it is far behind).
func (fam *Family) TierAdd(c Conn, args [][]byte, p *resp.Reply) {
	if fam.opts.Tier == nil {
		p.DoneError("ERR fenceproxy: this fenceproxy is a single node, not part of a tier (start it with --peers)")
		return
	}
	id, addr := string(args[1]), string(args[2])
	fam.runner.Go(func() { fam.replyMembership(p, fam.opts.Tier.AddNode(id, addr)) })
}

// TierRemove is TIER.REMOVE id.
func (fam *Family) TierRemove(c Conn, args [][]byte, p *resp.Reply) {
	if fam.opts.Tier == nil {
		p.DoneError("ERR fenceproxy: this fenceproxy is a single node, not part of a tier (start it with --peers)")
		return
	}
	id := string(args[1])
	fam.runner.Go(func() { fam.replyMembership(p, fam.opts.Tier.RemoveNode(id)) })
}

func (fam *Family) replyMembership(p *resp.Reply, err error) {
	var coded resp.CodedError
	switch {
	case err == nil:
		p.DoneOK()
	case errors.As(err, &coded):
		p.DoneErr(coded)
	default:
		fam.opts.Logger.Warn("tier membership change failed", "err", err)
		p.DoneError("ERR fenceproxy: the membership change failed (see the node's log)")
	}
}

// Peer is the state of a tier peer's relay link (TIER.PEER), kept in its
// session (ConnState.Peer).
type Peer struct {
	Node string
	// Version is the link's relay version (TIER.PEER's sixth argument; 1
	// without it): from 3, a grant is answered with its lease's start
	// (appendRelayedGrant).
	Version int
	// Elapsed is the time the request being served (TIER.RELAY's) had
	// already spent on the follower when it was relayed (receivedAt).
	Elapsed time.Duration
}

// MaxRelayElapsed bounds TIER.RELAY's elapsed time: a lease is never
// longer (MaxTTL), so any more is as late as can be.
const MaxRelayElapsed = MaxTTL

// relaysGrantTimes reports whether the request being served came over a
// relay link that wants a grant's lease start with its token (version 3).
func relaysGrantTimes(c Conn) bool {
	tp := c.State().Peer
	return tp != nil && tp.Version >= 3
}

// appendRelayedGrant appends a grant's reply to a follower of relay
// version 3: [token, lease-from-us, armed-ms], lease-from-us being how long
// after received (the request's receipt, as the follower counts it) the
// lease is counted from, armed-ms the new grant's record's arming time (0
// for a re-arm).
func appendRelayedGrant(b []byte, g locks.Grant, received time.Time) []byte {
	b = redcon.AppendArray(b, 3)
	b = redcon.AppendInt(b, int64(g.Token))
	b = redcon.AppendInt(b, max(g.LeaseFrom.Sub(received).Microseconds(), 0))
	return redcon.AppendInt(b, g.Armed)
}

// parseRelayedGrant reads appendRelayedGrant's reply; ok is false for any
// other reply (a null, an error, or a leader of an earlier version's
// plain token).
func parseRelayedGrant(reply []byte) (g locks.Grant, leaseFrom time.Duration, ok bool) {
	elems, isArray := resp.Elements(reply)
	if !isArray || len(elems) != 3 {
		return g, 0, false
	}
	var n [3]int64
	for i, e := range elems {
		if n[i], ok = parseIntReply(e); !ok {
			return g, 0, false
		}
	}
	if n[0] <= 0 || n[1] < 0 || n[2] < 0 {
		return g, 0, false
	}
	return locks.Grant{Token: uint64(n[0]), Armed: n[2]}, time.Duration(n[1]) * time.Microsecond, true
}

// parseIntReply reads a RESP integer reply (":n\r\n").
func parseIntReply(r []byte) (int64, bool) {
	if len(r) < 4 || r[0] != ':' || !bytes.HasSuffix(r, []byte("\r\n")) {
		return 0, false
	}
	return resp.ParseInt(r[1 : len(r)-2])
}

// TierUndo is TIER.UNDO resource owner token armed-ms, from a follower
// that got a grant too late to hand on (RelayLock): the grant is undone
// if it is still exactly that grant (locks.Manager.UndoGrant). :1 if it
// was undone, :0 if it was not there as granted (gone, replaced, or
// re-armed since).
func (fam *Family) TierUndo(c Conn, args [][]byte, p *resp.Reply) {
	resource, msg := parseResource(args[1])
	owner := ""
	if msg == "" {
		owner, msg = parseOwner(args[2])
	}
	token, okT := resp.ParseInt(args[3])
	armed, okA := resp.ParseInt(args[4])
	if msg == "" && (!okT || token <= 0 || !okA || armed <= 0) {
		msg = "ERR fenceproxy: TIER.UNDO needs resource, owner, a token and armed-ms (positive integers)"
	}
	if msg != "" || fam.opts.Manager == nil {
		p.DoneError(cmp.Or(msg, "ERR fenceproxy: this node serves no locks"))
		return
	}
	owner = fam.lockOwner(c, owner)
	fam.runLock(c, resource, p, 0, func(ctx context.Context) ([]byte, error) {
		undone, err := fam.opts.Manager.UndoGrant(ctx, resource, owner, uint64(token), armed)
		switch {
		case err != nil:
			return nil, fam.lockError(err, "the grant may or may not be undone")
		case undone:
			return []byte(":1\r\n"), nil
		}
		return []byte(":0\r\n"), nil
	})
}

// Relayed is what relaying needs to know of a lock-family command, from
// the command layer's table.
type Relayed struct {
	Name string
	// Resource is the argument naming the lock resource (0: none).
	Resource int
	// Readonly: it changes nothing, so a relay whose outcome is unknown
	// may be retried.
	Readonly bool
}

// Relaying reports whether a lock-family command on c is to be relayed to
// the tier's leader: on a node that does not lead, from a client (a relay
// link's commands are served here, so two nodes that each take the other
// for leader cannot pass one back and forth), and not one of the tier's
// own (TIER.*: each node answers them).
func (fam *Family) Relaying(c Conn, name string) bool {
	return fam.opts.Tier != nil && c.State().Peer == nil && !fam.opts.Tier.Leads() &&
		!strings.HasPrefix(name, "tier.")
}

// RelayLock relays a lock-family command to the leader and answers the
// leader's reply, in the order of the connection's other lock requests for
// the same resource.
func (fam *Family) RelayLock(c Conn, cmd Relayed, args [][]byte, p *resp.Reply) {
	user, resp3 := fam.relayUser(c), c.RESP3()
	own := make([][]byte, len(args))
	for i, a := range args {
		own[i] = append([]byte(nil), a...)
	}
	var wait time.Duration
	if cmd.Name == "lock.acquire" && len(args) == 6 {
		wait = MaxWait
		c.MayBlock()
	}
	received := receivedAt(c)
	// Every grant and renewal is judged here too, by the lease left when
	// this node replies: the leader counts the time spent here (TIER.RELAY's
	// elapsed time) but cannot see the link's. A renewal's lease, and a
	// grant made at once, count from when this node read the request; a
	// grant after waiting in line from when the leader armed it, which the
	// leader's reply carries (relay version 3: judgeRelayedGrant).
	var ttl time.Duration
	if cmd.Name == "lock.acquire" || cmd.Name == "lock.renew" {
		ttl, _ = parseMillis(args[3], "ttl-ms", 1, MaxTTL)
	}
	relay := func(ctx context.Context) ([]byte, error) {
		reply, err := fam.opts.Tier.Relay(ctx, user, resp3, wait, received, own)
		switch {
		case err != nil:
			return nil, relayFailure(cmd, err)
		case cmd.Name == "lock.acquire":
			return fam.judgeRelayedGrant(user, resp3, own, received, ttl, wait > 0, reply), nil
		case ttl <= 0 || fam.opts.Manager == nil:
			return reply, nil
		case len(reply) > 0 && reply[0] == ':' && time.Now().After(fam.opts.Manager.ReplyBy(received, ttl)):
			fam.opts.Metrics.Renewals.WithLabelValues("late").Inc()
			return []byte(replyLateRenewal), nil
		}
		return reply, nil
	}
	if cmd.Resource > 0 && cmd.Resource < len(own) {
		fam.runLock(c, string(own[cmd.Resource]), p, wait, relay)
		return
	}
	fam.runner.Go(func() {
		reply, err := relay(context.Background())
		p.Buf, p.Err = append(p.Buf, reply...), err
		p.Done()
	})
}

// judgeRelayedGrant answers the leader's reply to a relayed LOCK.ACQUIRE
// (args) by the lease left now: a grant that can no longer be replied with
// the safety margin (locks.Manager.ReplyBy) is not handed on; a new grant
// is undone on the leader (TIER.UNDO), as a single node undoes a late
// grant, and the client gets -TRYAGAIN either way. A leader of an earlier
// relay version answers a plain token, whose lease this node can count
// only from the request (a grant made at once); after a wait in line it is
// passed on as it came.
func (fam *Family) judgeRelayedGrant(user string, resp3 bool, args [][]byte, received time.Time, ttl time.Duration, waited bool, reply []byte) []byte {
	g, from, ok := parseRelayedGrant(reply)
	judged := ttl > 0 && fam.opts.Manager != nil
	if !ok {
		if _, plain := parseIntReply(reply); plain && judged && !waited && time.Now().After(fam.opts.Manager.ReplyBy(received, ttl)) {
			fam.opts.Metrics.Acquires.WithLabelValues("late").Inc()
			return []byte(replyLateRelayedGrant)
		}
		return reply
	}
	if !judged || !time.Now().After(fam.opts.Manager.ReplyBy(received.Add(from), ttl)) {
		return redcon.AppendInt(nil, int64(g.Token))
	}
	fam.opts.Metrics.Acquires.WithLabelValues("late").Inc()
	if g.Armed > 0 && fam.undoRelayedGrant(user, resp3, args[1], args[2], g) {
		return []byte(replyLateRelayedGrantUndone)
	}
	return []byte(replyLateRelayedGrant)
}

// relayUndoTimeout bounds a TIER.UNDO: past it the grant runs out by itself.
const relayUndoTimeout = 5 * time.Second

// undoRelayedGrant asks the leader to undo g, a grant of resource to owner
// that this node will not hand on, and reports whether it was undone.
func (fam *Family) undoRelayedGrant(user string, resp3 bool, resource, owner []byte, g locks.Grant) bool {
	ctx, cancel := context.WithTimeout(context.Background(), relayUndoTimeout)
	defer cancel()
	reply, err := fam.opts.Tier.Relay(ctx, user, resp3, 0, time.Time{}, [][]byte{
		[]byte("TIER.UNDO"), resource, owner,
		strconv.AppendUint(nil, g.Token, 10), strconv.AppendInt(nil, g.Armed, 10)})
	if err != nil || string(reply) != ":1\r\n" {
		fam.opts.Logger.Warn("tier: could not undo a grant relayed too late to hand on; it runs out with its lease",
			"token", g.Token, "reply", strings.TrimSpace(string(reply)), "err", err)
		return false
	}
	return true
}

// relayFailure is the error a client gets when cmd could not be relayed.
// A command whose outcome is unknown (the link broke after it was sent)
// gets -ERR saying what may have happened, never -TRYAGAIN, which
// clients retry by themselves (a FENCE.EXEC would run twice): a command
// that changes nothing (FENCE.CHECK, LOCK.INFO, LOCK.TOP) is the exception,
// safe to retry. Anything else the relay knows was not done (-TRYAGAIN).
func relayFailure(cmd Relayed, err error) error {
	var unknown interface{ OutcomeUnknown() bool }
	if !errors.As(err, &unknown) || !unknown.OutcomeUnknown() {
		return err
	}
	const lost = "fenceproxy: lost contact with the tier's leader while relaying the command; "
	switch {
	case cmd.Readonly:
		return resp.Error{Code: "TRYAGAIN", Msg: lost + "it changes nothing, retry"}
	case cmd.Name == "lock.acquire":
		return resp.Error{Code: "ERR", Msg: lost + "the lock may or may not be granted: retry with the same owner (it gets the same token)"}
	case cmd.Name == "lock.renew":
		return resp.Error{Code: "ERR", Msg: lost + "the lease may or may not be extended: retry"}
	case cmd.Name == "lock.release":
		return resp.Error{Code: "ERR", Msg: lost + "the lock may or may not be released: retry"}
	case cmd.Name == "fence.exec":
		return resp.Error{Code: "ERR", Msg: lost + "the command may or may not have run"}
	}
	return err
}

// relayUser is the user a relayed request runs as on the leader: the
// client's, "" with authentication off.
func (fam *Family) relayUser(c Conn) string {
	if !fam.opts.Auth {
		return ""
	}
	return c.User()
}
