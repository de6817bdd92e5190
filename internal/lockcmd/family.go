package lockcmd

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/recipes"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// Locks is what the caller gives the lock family: the lock manager (nil:
// this node serves no locks; clients' recipes are then forwarded), the
// tier this node is one of (nil: a single node), and --lock-keys.
type Locks struct {
	Manager *locks.Manager
	// Tier, when not nil, makes this node one of a tier (tier.go).
	Tier Tier
	// LockKeys are --lock-keys: a SET NX on a key matching them is a
	// client recipe's lock grant (setnx.go); nil or empty for none.
	LockKeys *recipes.KeyPatterns
}

// Options configure a Family: Locks, and what the command layer shares
// with it.
type Options struct {
	Locks
	// Backend is the Redis fronted: the lock family asks it how it routes
	// (a twin's keys must share a slot in front of a Redis Cluster), why
	// it refuses writes, and runs a client's own script on it.
	Backend upstream.Backend
	// Keys finds FENCE.EXEC's command's keys.
	Keys    *keys.Table
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// ReplicaTimeout bounds one lock write's wait for acknowledgements;
	// a refused recipe grant is answered "retry in" that long.
	ReplicaTimeout time.Duration
	// KeyPrefix is the lock manager's key prefix (owner records' slots).
	KeyPrefix string
	// Auth: fenceproxy's own client authentication is on, so owners are
	// bound to the client's user (Conn.HolderPrefix) and LOCK.TOP and
	// LOCK.SLOWLOG show a user only what it may read (Conn.CanRead).
	Auth bool
	// Forward sends a request to Redis as it came and answers Redis's
	// reply: a script or SET that is no lock recipe the family runs.
	Forward func(c *protocol.Conn, args [][]byte, p *resp.Reply)
}

// Family serves the lock family's commands and clients' lock recipes.
type Family struct {
	opts   Options
	runner *locks.Runner // where lock requests run
	// The requests run as callbacks (locks.Manager.AcquireNow) and on
	// workers, counted (LockRequestCourses, resolved once).
	byCallbacks, onWorkers prometheus.Counter
	// The results every lock cycle counts, resolved once: a
	// WithLabelValues per request hashed its label and looked it up
	// under a lock (1% of the proxy's CPU under Redisson's lock cycle).
	granted, busy, renewed, released, notHeld, current prometheus.Counter
}

// New returns a Family.
func New(opts Options) *Family {
	m := opts.Metrics
	return &Family{opts: opts, runner: locks.NewRunner(opts.ReplicaTimeout),
		byCallbacks: m.LockRequestCourses.WithLabelValues("callbacks"),
		onWorkers:   m.LockRequestCourses.WithLabelValues("worker"),
		granted:     m.Acquires.WithLabelValues("granted"),
		busy:        m.Acquires.WithLabelValues("busy"),
		renewed:     m.Renewals.WithLabelValues("renewed"),
		released:    m.Releases.WithLabelValues("released"),
		notHeld:     m.Releases.WithLabelValues("notheld"),
		current:     m.FenceChecks.WithLabelValues("current")}
}

// Client is what the lock family needs of a client's connection beyond
// protocol's: the command layer's session implements it.
type Client interface {
	// State is the connection's lock requests in flight and, on a tier
	// peer's relay link, the link's state.
	State() *ConnState
	// HolderPrefix starts every owner stored for the connection's user
	// ("" with authentication off).
	HolderPrefix() string
	// RESP3: the client switched to RESP3 (HELLO 3); its null is "_".
	RESP3() bool
	// User is the name of the client's ACL user, "" with authentication
	// off or before it authenticated.
	User() string
	// CanRead reports whether the client's user may read key (its key
	// patterns): asked only with authentication on.
	CanRead(key []byte) bool
}

// Conn is the client's connection, as protocol reads it and as the
// command layer keeps it: what every serve function of the family gets.
// It is two words, passed by value.
type Conn struct {
	*protocol.Conn
	Client
}

// ConnState is the lock family's part of a connection's session.
type ConnState struct {
	// Requests are the connection's lock requests in flight
	// (locks.Runner), ended when the client goes away; lock workers use
	// them too.
	Requests locks.ConnRequests
	// Peer is set on a tier peer's relay link (TIER.PEER, tier.go).
	Peer *Peer
}

// On reports whether this node serves locks (it has a lock manager):
// otherwise recipes are forwarded as they came.
func (fam *Family) On() bool { return fam.opts.Manager != nil }

// InTier reports whether this node is one of a tier.
func (fam *Family) InTier() bool { return fam.opts.Tier != nil }

// Go runs fn on one of the lock path's workers, off the connection's
// goroutine (INFO's sections and tier membership use it too).
func (fam *Family) Go(fn func()) { fam.runner.Go(fn) }

// GoOnLoop reports whether Go would hand fn over without waiting, as the
// serve loop must: while the workers' backlog is not filling.
func (fam *Family) GoOnLoop() bool { return !fam.runner.Crowded() }

// lockOwner is the owner string stored for a lock: with authentication on,
// the user's name, a NUL byte, then the client's owner. User names have no
// NUL (auth refuses them), so no owner string one user chooses can equal
// another user's stored owner, and only the user renews or releases it.
func (fam *Family) lockOwner(c Conn, owner string) string {
	if !fam.opts.Auth {
		return owner
	}
	return c.HolderPrefix() + owner
}

// holderPrefix is Client.HolderPrefix, "" with authentication off.
func (fam *Family) holderPrefix(c Conn) string {
	if !fam.opts.Auth {
		return ""
	}
	return c.HolderPrefix()
}

// nullReply is the null of the client's protocol.
func nullReply(c Conn) []byte { return resp.Null(c.RESP3()) }

// noReplicas is err as a NoReplicasError, or nil. (A function of its own: a
// variable whose address errors.As takes lives on the heap from where it is
// declared, and declared before a reply's switch it cost every reply an
// allocation, the granted ones too.)
func noReplicas(err error) *locks.NoReplicasError {
	var nr *locks.NoReplicasError
	if errors.As(err, &nr) {
		return nr
	}
	return nil
}
