package tier

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// The internal link: a follower relays lock-family commands to the leader
// over RESP, on connections to the leader's client port. Each connection
// first says
//
//	TIER.PEER secret node-id user proto
//
// which the leader accepts only with the tier secret (FENCEPROXY_TIER_SECRET,
// or the requirepass): from then on the connection's commands run as
// that ACL user ("" with ACLs off) in that RESP protocol (2 or 3), so the
// owner binding <user>\0<owner> and the null replies are the client's own.
// The client's ordinary commands are sent as they came. Connections are
// pooled per (leader, user, protocol).
const (
	// PeerCommand opens a relay connection; AppliedCommand reports a
	// follower's applied index (TIER.APPLIED node-id index) for the
	// leader's lag figures.
	PeerCommand    = "tier.peer"
	AppliedCommand = "tier.applied"
)

// relayDialTimeout bounds connecting to the leader; relayGrace is added to
// a command's own longest wait (LOCK.ACQUIRE ... WAIT) for its reply.
const (
	relayDialTimeout = 2 * time.Second
	relayGrace       = 30 * time.Second
	relayIdlePerKey  = 128
)

// ErrRelayLost: the link to the leader broke after the command was sent;
// its outcome is unknown.
var ErrRelayLost = &relayLostError{}

type relayLostError struct{}

func (*relayLostError) Error() string { return "tier: lost the link to the leader mid-command" }
func (*relayLostError) RESPError() (string, string) {
	return "TRYAGAIN", "fenceproxy: lost contact with the tier's leader while relaying the command; it may or may not have taken effect, retry (an acquire retried by the same owner gets the same token)"
}

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

type relayConn struct {
	c  net.Conn
	rd *bufio.Reader
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
// the command itself may wait.
func (r *Relay) Do(ctx context.Context, user string, resp3 bool, wait time.Duration, args [][]byte) ([]byte, error) {
	addr := r.node.LeaderClientAddr()
	if addr == "" || r.node.Ready() {
		// No leader known, or this node just became it: the caller
		// serves (or refuses) it itself on its next try.
		return nil, r.node.notLeader()
	}
	key := relayKey{addr: addr, user: user, resp3: resp3}
	rc, err := r.get(ctx, key)
	if err != nil {
		return nil, &UnavailableError{LeaderAddr: addr}
	}
	reply, err := rc.do(ctx, args, wait+relayGrace)
	if err != nil {
		rc.c.Close()
		if errors.Is(err, errNotSent) {
			return nil, &UnavailableError{LeaderAddr: addr}
		}
		return nil, ErrRelayLost
	}
	r.put(key, rc)
	return reply, nil
}

var errNotSent = errors.New("tier: relay write failed")

func (rc *relayConn) do(ctx context.Context, args [][]byte, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	rc.c.SetDeadline(deadline)
	if _, err := rc.c.Write(resp.AppendCommand(nil, args)); err != nil {
		return nil, errNotSent
	}
	// A client that goes away ends the wait (its connection's context).
	stop := context.AfterFunc(ctx, func() { rc.c.SetDeadline(time.Now()) })
	defer stop()
	return resp.AppendReply(nil, rc.rd)
}

func (r *Relay) get(ctx context.Context, key relayKey) (*relayConn, error) {
	r.mu.Lock()
	if l := r.idle[key]; len(l) > 0 {
		rc := l[len(l)-1]
		r.idle[key] = l[:len(l)-1]
		r.mu.Unlock()
		return rc, nil
	}
	r.mu.Unlock()
	d := net.Dialer{Timeout: relayDialTimeout}
	c, err := d.DialContext(ctx, "tcp", key.addr)
	if err != nil {
		return nil, err
	}
	rc := &relayConn{c: c, rd: bufio.NewReader(c)}
	proto := "2"
	if key.resp3 {
		proto = "3"
	}
	reply, err := rc.do(ctx, [][]byte{[]byte(PeerCommand), []byte(r.secret), []byte(r.node.opts.NodeID), []byte(key.user), []byte(proto)}, relayDialTimeout)
	if err == nil && string(reply) != "+OK\r\n" {
		err = errors.New("tier: the leader refused the relay link: " + string(reply))
	}
	if err != nil {
		c.Close()
		r.node.logger.Warn("tier: cannot open a relay link to the leader", "leader", key.addr, "err", err)
		return nil, err
	}
	return rc, nil
}

func (r *Relay) put(key relayKey, rc *relayConn) {
	rc.c.SetDeadline(time.Time{})
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.idle[key]) >= relayIdlePerKey || r.node.LeaderClientAddr() != key.addr {
		rc.c.Close()
		return
	}
	r.idle[key] = append(r.idle[key], rc)
}

// reportApplied tells the leader this node's applied index every second
// (TIER.INFO's and INFO's lag).
func (r *Relay) reportApplied() {
	defer r.node.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-r.node.closing:
			r.closeIdle()
			return
		case <-t.C:
		}
		if r.node.Ready() || r.node.LeaderClientAddr() == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), relayDialTimeout)
		r.Do(ctx, "", false, 0, [][]byte{[]byte(AppliedCommand), []byte(r.node.opts.NodeID),
			[]byte(strconv.FormatUint(r.node.raft.AppliedIndex(), 10))})
		cancel()
	}
}

func (r *Relay) closeIdle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, l := range r.idle {
		for _, rc := range l {
			rc.c.Close()
		}
		delete(r.idle, k)
	}
}
