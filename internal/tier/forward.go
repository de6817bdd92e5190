package tier

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// The internal link: a follower relays lock-family commands to the leader
// over RESP, on connections to the leader's client port. Each connection
// first says
//
//	TIER.PEER secret node-id user proto version
//
// which the leader accepts only with the tier secret (FENCEPROXY_TIER_SECRET,
// or the requirepass): from then on the connection's commands run as
// that ACL user ("" with ACLs off) in that RESP protocol (2 or 3), so the
// owner binding <user>\0<owner> and the null replies are the client's own.
//
// With version 2 each client command goes as
//
//	TIER.RELAY elapsed-us command args...
//
// elapsed-us being the microseconds since the follower read the client's
// request: the leader counts a lease from then, not from when it read the
// relayed command. With version 3 (RelayVersion) the commands go the same
// way, and the leader answers a LOCK.ACQUIRE that it granted (or re-armed)
// with the array
//
//	[token, lease-from-us, armed-ms]
//
// instead of the token: lease-from-us is how long after the request's
// receipt (elapsed-us before the leader read it) the lease is counted
// from (0 for a grant made at once; the attempt or the release that armed
// it for a grant after waiting in line), and armed-ms the new grant's
// record's arming time (0 for a re-arm). The follower judges the lease
// left when it replies from its own receipt plus lease-from-us, which is
// never later than the true start by its clock (the link's forward time
// is not counted, the safe side), and undoes a grant too late to hand on
// with TIER.UNDO resource owner token armed-ms (lockcmd.RelayLock). A
// leader of an earlier version refuses the sixth argument's value; the
// follower then tries version 2, then the link without it (version 1),
// which sends each command as it came (the time spent on the follower is
// then not counted by the leader, only by the follower's own check).
//
// Connections are pooled per (leader, user, protocol), each carrying one
// command at a time. Pipelining many clients' commands on a few links,
// replies matched in order, was tried twice and measured slower (see
// docs/performance.md): served as any client's pipeline, batch after
// batch, a quick command waited behind a whole batch of grants; with the
// leader writing each reply as soon as it and those before it were in
// (the connection's write side taken), the hand-offs to the links' writer
// and reader goroutines, and to the leader's, cost more CPU per command
// than the writes they shared saved.
const (
	// PeerCommand opens a relay link; AppliedCommand reports a follower's
	// applied index (TIER.APPLIED node-id index) for the leader's lag
	// figures; RelayCommand carries a client's command with the time it
	// has spent on the follower.
	PeerCommand    = "tier.peer"
	AppliedCommand = "tier.applied"
	RelayCommand   = "tier.relay"
	// UndoCommand undoes a grant the follower got too late to hand on
	// (TIER.UNDO resource owner token armed-ms).
	UndoCommand = "tier.undo"
	// RejoiningFlag ends a TIER.APPLIED of a node that lost its Raft state
	// and has not caught up: the leader answers the commit index it must
	// reach before it votes (rejoin.go).
	RejoiningFlag = "REJOINING"
	// RelayVersion is the newest relay framing this node speaks and
	// accepts (TIER.PEER's sixth argument): 2 is TIER.RELAY, 3 adds the
	// lease's start to a grant's reply.
	RelayVersion = 3
)

// relayDialTimeout bounds connecting to the leader; relayGrace is added to
// a command's own longest wait (LOCK.ACQUIRE ... WAIT) for its reply.
// relayIdleMax is the longest a pooled link may sit idle and still be
// used: an older one is redialed, since a leader whose host vanished
// without closing it (power loss, a partition) leaves it looking alive,
// and a request written on it would have an unknown outcome where a fresh
// dial fails cleanly (nothing sent).
const (
	relayDialTimeout = 2 * time.Second
	relayGrace       = 30 * time.Second
	relayIdlePerKey  = 128
	relayIdleMax     = 10 * time.Second
)

// reportEvery is how often a follower reports its applied index to the
// leader; a follower that sees a new leader reports at once (within
// leaderCheckEvery).
const (
	reportEvery      = time.Second
	leaderCheckEvery = 100 * time.Millisecond
)

// ErrRelayLost: the link to the leader broke after the command was sent;
// its outcome is unknown. Never -TRYAGAIN, which clients retry by
// themselves: a FENCE.EXEC retried that way would run twice. The command
// layer words it per command (OutcomeUnknown); this reply is the generic
// one.
var ErrRelayLost = &relayLostError{}

type relayLostError struct{}

func (*relayLostError) Error() string { return "tier: lost the link to the leader mid-command" }
func (*relayLostError) RESPError() (string, string) {
	return "ERR", "fenceproxy: lost contact with the tier's leader while relaying the command; it may or may not have taken effect"
}

// OutcomeUnknown marks the error as a command whose outcome is unknown.
func (*relayLostError) OutcomeUnknown() bool { return true }

// CheckSecret reports whether got is the tier secret (constant time).
func CheckSecret(want, got string) bool {
	return subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// Relay sends lock-family commands to the tier's leader.
type Relay struct {
	node   *Node
	secret string

	mu   sync.Mutex
	idle map[relayKey][]*relayConn
}

type relayKey struct {
	addr, user string
	resp3      bool
}

// NewRelay returns n's relay, authenticating with secret.
func (n *Node) NewRelay(secret string) *Relay {
	r := &Relay{node: n, secret: secret, idle: map[relayKey][]*relayConn{}}
	n.wg.Add(1)
	go r.reportApplied()
	return r
}

// Leads reports whether this node serves lock commands itself.
func (r *Relay) Leads() bool { return r.node.Ready() }

// Do relays args to the leader as user and returns the leader's reply. With
// no leader known it fails at once (UnavailableError); wait is the longest
// the command itself may wait. received is when the client's request was
// read: the leader counts its lease from then (zero for the relay's own
// commands, which carry no time).
func (r *Relay) Do(ctx context.Context, user string, resp3 bool, wait time.Duration, received time.Time, args [][]byte) ([]byte, error) {
	addr := r.node.LeaderClientAddr()
	if addr == "" || r.node.Ready() {
		// No leader known, or this node just became it: the caller
		// serves (or refuses) it itself on its next try.
		return nil, r.node.notLeader()
	}
	return r.doAlone(ctx, relayKey{addr: addr, user: user, resp3: resp3}, wait, received, args)
}

var errNotSent = errors.New("tier: relay write failed")

// appendRelayed appends args as the leader is to read them: wrapped in
// TIER.RELAY with the time since received (version 2, and a client's
// command), or as they are.
func appendRelayed(b []byte, version int, received time.Time, args [][]byte) []byte {
	if version < 2 || received.IsZero() {
		return resp.AppendCommand(b, args)
	}
	b = redcon.AppendArray(b, len(args)+2)
	b = redcon.AppendBulkString(b, "TIER.RELAY")
	b = redcon.AppendBulkString(b, strconv.FormatInt(max(time.Since(received).Microseconds(), 0), 10))
	for _, a := range args {
		b = redcon.AppendBulk(b, a)
	}
	return b
}

// dial opens a relay link to key's leader: TIER.PEER with this node's
// relay version, or, while the leader refuses it (an earlier version), an
// earlier one, and last without.
func (r *Relay) dial(ctx context.Context, key relayKey) (net.Conn, *bufio.Reader, int, error) {
	d := net.Dialer{Timeout: relayDialTimeout}
	c, err := d.DialContext(ctx, "tcp", key.addr)
	if err != nil {
		return nil, nil, 0, err
	}
	rd := bufio.NewReader(c)
	proto := "2"
	if key.resp3 {
		proto = "3"
	}
	hello := [][]byte{[]byte(PeerCommand), []byte(r.secret), []byte(r.node.opts.NodeID), []byte(key.user), []byte(proto), nil}
	var reply []byte
	version := RelayVersion
	for ; version >= 1; version-- {
		args := hello[:5] // version 1: no sixth argument
		if version > 1 {
			hello[5] = []byte(strconv.Itoa(version))
			args = hello
		}
		reply, err = roundTrip(c, rd, args, relayDialTimeout)
		if err != nil || version == 1 || !strings.HasPrefix(string(reply), "-ERR fenceproxy: not a tier peer") {
			break
		}
	}
	if err == nil && string(reply) != "+OK\r\n" {
		err = errors.New("tier: the leader refused the relay link: " + strings.TrimSpace(string(reply)))
	}
	if err != nil {
		c.Close()
		r.node.logger.Warn("tier: cannot open a relay link to the leader", "leader", key.addr, "err", err)
		return nil, nil, 0, err
	}
	c.SetDeadline(time.Time{})
	return c, rd, version, nil
}

// roundTrip writes one command and reads its reply within timeout.
func roundTrip(c net.Conn, rd *bufio.Reader, args [][]byte, timeout time.Duration) ([]byte, error) {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(resp.AppendCommand(nil, args)); err != nil {
		return nil, err
	}
	return resp.AppendReply(nil, rd)
}

// relayConn is one connection to the leader, carrying one command at a time.
type relayConn struct {
	c       net.Conn
	rd      *bufio.Reader
	version int
	idle    time.Time // when it was put back in the pool
}

// usable reports whether a pooled link may carry the next request: idle
// for no longer than relayIdleMax, nothing unread, and its socket neither
// closed nor reset by the leader meanwhile (a leader restarted, a link
// dropped while idle). A request is written only on a link that passes,
// so a dead one costs a dial, not a command of unknown outcome.
func (rc *relayConn) usable(now time.Time) bool {
	return now.Sub(rc.idle) <= relayIdleMax && rc.rd.Buffered() == 0 && connAlive(rc.c)
}

// doAlone relays a command on a connection of its own.
func (r *Relay) doAlone(ctx context.Context, key relayKey, wait time.Duration, received time.Time, args [][]byte) ([]byte, error) {
	rc, err := r.get(ctx, key)
	if err != nil {
		return nil, &UnavailableError{LeaderAddr: key.addr}
	}
	reply, err := rc.do(ctx, received, args, wait+relayGrace)
	if err != nil {
		rc.c.Close()
		if errors.Is(err, errNotSent) {
			return nil, &UnavailableError{LeaderAddr: key.addr}
		}
		return nil, ErrRelayLost
	}
	r.put(key, rc)
	return reply, nil
}

func (rc *relayConn) do(ctx context.Context, received time.Time, args [][]byte, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	rc.c.SetDeadline(deadline)
	req := appendRelayed(nil, rc.version, received, args)
	if n, err := rc.c.Write(req); err != nil && n < len(req) {
		// The leader never read a whole command: nothing was done.
		return nil, errNotSent
	}
	// A client that goes away ends the wait (its connection's context).
	stop := context.AfterFunc(ctx, func() { rc.c.SetDeadline(time.Now()) })
	defer stop()
	return resp.AppendReply(nil, rc.rd)
}

// get takes a usable pooled link to key's leader (closing the dead ones it
// finds on the way), or dials one.
func (r *Relay) get(ctx context.Context, key relayKey) (*relayConn, error) {
	for {
		rc := r.takeIdle(key)
		if rc == nil {
			break
		}
		if rc.usable(time.Now()) {
			return rc, nil
		}
		rc.c.Close()
	}
	c, rd, version, err := r.dial(ctx, key)
	if err != nil {
		return nil, err
	}
	return &relayConn{c: c, rd: rd, version: version}, nil
}

// takeIdle takes key's most recently pooled link, nil if none.
func (r *Relay) takeIdle(key relayKey) *relayConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.idle[key]
	if len(l) == 0 {
		return nil
	}
	rc := l[len(l)-1]
	r.idle[key] = l[:len(l)-1]
	return rc
}

func (r *Relay) put(key relayKey, rc *relayConn) {
	rc.c.SetDeadline(time.Time{})
	rc.idle = time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.idle[key]) >= relayIdlePerKey || r.node.LeaderClientAddr() != key.addr {
		rc.c.Close()
		return
	}
	r.idle[key] = append(r.idle[key], rc)
}

// report sends TIER.APPLIED; a rejoining node adds REJOINING, and a
// leader answers it with the commit index it must reach (rejoin.go).
func (r *Relay) report(ctx context.Context) {
	args := [][]byte{[]byte(AppliedCommand), []byte(r.node.opts.NodeID), []byte(strconv.FormatUint(r.node.raft.AppliedIndex(), 10))}
	rejoining := r.node.Rejoining()
	if rejoining {
		args = append(args, []byte(RejoiningFlag))
	}
	reply, err := r.Do(ctx, "", false, 0, time.Time{}, args)
	if err != nil || !rejoining || len(reply) < 4 || reply[0] != ':' {
		return
	}
	if t, err := strconv.ParseUint(strings.TrimSpace(string(reply[1:])), 10, 64); err == nil && t > 0 {
		r.node.RejoinTarget(t)
	}
}

// reportApplied tells the leader this node's applied index every
// reportEvery, and at once when it learns of a new leader (TIER.INFO's and
// INFO's lag). It also closes the idle connections to a former leader.
func (r *Relay) reportApplied() {
	defer r.node.wg.Done()
	t := time.NewTicker(leaderCheckEvery)
	defer t.Stop()
	var reportedTo string
	var reportedAt time.Time
	reportedRejoining := r.node.Rejoining()
	for {
		select {
		case <-r.node.closing:
			r.closeAll("")
			return
		case <-t.C:
		}
		addr := r.node.LeaderClientAddr()
		if addr != "" {
			r.closeAll(addr)
		}
		// A node that stops rejoining reports at once: the leader then
		// promotes it to a voter.
		rejoining := r.node.Rejoining()
		if r.node.Ready() || addr == "" || (addr == reportedTo && time.Since(reportedAt) < reportEvery && rejoining == reportedRejoining) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), relayDialTimeout)
		// A failed report is tried again a second later (or at once for
		// another leader), not at every check.
		r.report(ctx)
		cancel()
		reportedTo, reportedAt, reportedRejoining = addr, time.Now(), rejoining
	}
}

// closeAll closes the idle connections to every leader but keep (all of
// them if keep is "").
func (r *Relay) closeAll(keep string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, l := range r.idle {
		if k.addr == keep {
			continue
		}
		for _, rc := range l {
			rc.c.Close()
		}
		delete(r.idle, k)
	}
}
