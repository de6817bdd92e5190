package locks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// Errors the command layer turns into replies.
var (
	// ErrBusy: another owner holds the resource.
	ErrBusy = errors.New("locks: held by another owner")
	// ErrNotHeld: the owner does not hold the resource (expired, released or taken).
	ErrNotHeld = errors.New("locks: not held by this owner")
	// ErrNeverIssued: FENCE.CHECK was given a token never issued for the resource.
	ErrNeverIssued = errors.New("locks: token was never issued for this resource")
	// ErrStale: a newer token than the caller's has been issued.
	ErrStale = errors.New("locks: a newer token has been issued for this resource")
	// ErrOtherHolder: FencedExecAs found the resource held by an owner
	// outside the caller's prefix (another user's lock).
	ErrOtherHolder = errors.New("locks: the resource is held by another user")
	// ErrLeaseOver: FencedExecAs found no current lease for the token.
	ErrLeaseOver = errors.New("locks: the token's lease is over")
	// ErrLate: a grant or renewal was done, but its reply could no longer
	// leave the client Options.LeaseSafetyMargin of the lease (see
	// replyBy). A new grant has been undone; a re-armed lease stands as
	// Redis has it, and its holder counts it as before the request.
	ErrLate = errors.New("locks: the lease could not be replied with enough of it left")
)

// QueueFullError: a LOCK.ACQUIRE ... WAIT found Max acquires already waiting
// for the resource (--max-waiters); it was refused at once.
type QueueFullError struct{ Max int }

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("locks: %d acquires already wait for this resource", e.Max)
}

// NoReplicasError: fewer replicas than required acknowledged a lock write.
type NoReplicasError struct{ Acked, Wanted int }

func (e *NoReplicasError) Error() string {
	return fmt.Sprintf("locks: %d of %d required replicas acknowledged", e.Acked, e.Wanted)
}

// Options configure a Manager.
type Options struct {
	// Scripts runs the lock scripts on Redis (a lockwriter.Writer).
	Scripts ScriptRunner
	// Store issues the tokens and records each resource's newest
	// (PersistStore for the fence store under --data-dir).
	Store       TokenStore
	MinReplicas int
	// KeyPrefix starts every owner record's key; the resource follows in a
	// hash tag, so all of one resource's keys share a Redis Cluster slot.
	KeyPrefix string
	// LockDelay keeps a resource whose lease ran out (no release: the
	// holder crashed or paused) from being granted again for this long, so
	// a holder that cannot be fenced has time to notice. 0 disables it.
	LockDelay time.Duration
	// MaxWaiters bounds the acquires waiting in line for one resource; one
	// more that would wait gets a QueueFullError at once. 0 allows no
	// waiting at all.
	MaxWaiters int
	// SlowWait: an acquire that waited in line longer goes into the
	// slow-lock log (negative: never). SlowHeld: a lease released after
	// being held longer does (negative: never). A lease that runs out
	// without a release always does.
	SlowWait, SlowHeld time.Duration
	// SlowLogLen bounds the slow-lock log's entries kept (0 keeps none;
	// entries are still logged and counted).
	SlowLogLen int
	Metrics    *metrics.Metrics
	Logger     *slog.Logger

	// AllowEvictable grants even on a master whose maxmemory-policy can
	// evict owner records (counted and logged; see evict.go).
	AllowEvictable bool
	// Admit, if set, is asked before every command that issues or judges
	// tokens (acquire, renew, FENCE.CHECK, FENCE.EXEC); its error refuses
	// the command (see authority.go). It must not block: the serve loop
	// asks it.
	Admit func() error
	// AdmitWithin, if set, is Admit for a command that may wait (off the
	// serve loop, within ctx): it may wait a moment for a late heartbeat
	// round rather than refuse. Nil: Admit.
	AdmitWithin func(ctx context.Context) error
	// Term, if set, is this node's term as the leader of its tier, asked
	// for every lock script (under the resource's turn: it must not
	// block). Nil means 0, a single node. It is the term in which this
	// node became leader, not the newest term it has heard of: a deposed
	// leader that has heard of the newer term must not write under it
	// (see terms.go).
	Term func() uint64
	// FenceMarkTTL is how long a resource's fence mark lives after it was
	// last raised (by a grant or a FENCE.EXEC), and twice the longest a
	// FENCE.EXEC's write may take to reach Redis after its check
	// (fencemark.go). 0 means 24h.
	FenceMarkTTL time.Duration
	// LeaseSafetyMargin is the part of a lease (0 to 1) that a reply must
	// still leave, after the time since the request was received and a
	// clock-drift allowance (see replyBy); a grant or renewal that would
	// leave less is answered ErrLate instead. 0 only requires some lease.
	LeaseSafetyMargin float64
}

// Manager grants leases and issues fencing tokens. Safe for concurrent use.
type Manager struct {
	opts       Options
	serial     serializer
	waiting    waitQueue
	hot        *topK
	leases     leases
	slow       *slowLog
	waitersNow atomic.Int64 // acquires waiting in line, all resources
}

// topKSize bounds LOCK.TOP's memory: counters kept, whatever the number of
// resources.
const topKSize = 1024

// New returns a Manager.
func New(opts Options) *Manager {
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "fenceproxy:lock:"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FenceMarkTTL <= 0 {
		opts.FenceMarkTTL = defaultFenceMarkTTL
	}
	m := &Manager{opts: opts, hot: newTopK(topKSize), slow: newSlowLog(opts.SlowLogLen, opts.Logger)}
	m.leases.byRes = make(map[string]*lease)
	m.leases.kick = make(chan struct{}, 1)
	m.leases.onChange = func(n int) { opts.Metrics.LocksHeld.Set(float64(n)) }
	go m.sweep() // for the life of the process, like the Manager itself
	return m
}

// recordKey is the owner record's key: prefix{resource}.
func (m *Manager) recordKey(resource string) string {
	return m.opts.KeyPrefix + "{" + resource + "}"
}

// keys are a resource's record (recordKey), lock-delay guard and fence
// mark (markKey), in one hash slot: opsScript's keys for each operation.
// The record's key starts the other two, and all three are slices of one
// string: one allocation for them, not three.
func (m *Manager) keys(resource string) []string {
	n := len(m.opts.KeyPrefix) + len(resource) + 2 // recordKey's length
	all := m.opts.KeyPrefix + "{" + resource + "}:delay" + m.opts.KeyPrefix + "{" + resource + "}:fence"
	return []string{all[:n], all[:n+len(":delay")], all[n+len(":delay"):]}
}

// markLife is the fence mark's life in ms, as the scripts take it.
func (m *Manager) markLife() int64 { return m.opts.FenceMarkTTL.Milliseconds() }

// Acquire grants resource to owner for ttl and returns the fencing token. If
// owner already holds it, the lease is re-armed and the same token returned.
// If another owner holds it, Acquire waits in line, first come first served,
// up to wait for it to be freed, and then returns ErrBusy; if MaxWaiters
// already wait, it returns a QueueFullError at once. clientAddr (the
// client's ip:port) is kept in the owner record for LOCK.INFO and the
// slow-lock log.
//
// received is when the request was read from the client: the lease is
// counted from it, and a grant that can no longer be replied with
// LeaseSafetyMargin of it left is undone and answered ErrLate. A grant
// after waiting in line is counted from the attempt that made it instead
// (Redis armed the lease then, long after the request arrived).
func (m *Manager) Acquire(ctx context.Context, resource, owner, clientAddr string, ttl, wait time.Duration, received time.Time) (uint64, error) {
	g, err := m.AcquireGrant(ctx, resource, owner, clientAddr, ttl, wait, received)
	return g.Token, err
}

// Grant is what a granted (or re-armed) acquire gives its caller beyond
// the token: when its lease is counted from, so that a tier follower that
// relays the reply can judge the lease left when it replies (ReplyBy), and
// what identifies a new grant's record, so that such a follower can undo a
// grant it cannot reply in time (UndoGrant).
type Grant struct {
	Token uint64
	// LeaseFrom is when the lease is counted from: received for a grant
	// made at once, the attempt (or the handing-off release) that armed
	// it for a grant after waiting in line. At or before Redis armed it.
	LeaseFrom time.Time
	// Armed is the new grant's record's arming time (unix ms, as the
	// record keeps it); 0 for a re-arm of the owner's own grant, which
	// cannot be undone.
	Armed int64
}

// AcquireGrant is Acquire, returning the Grant.
func (m *Manager) AcquireGrant(ctx context.Context, resource, owner, clientAddr string, ttl, wait time.Duration, received time.Time) (Grant, error) {
	g, leaseLeft, err := m.tryAcquire(ctx, resource, owner, clientAddr, ttl, m.waiting.count(resource) > 0, received, nil)
	if err == ErrBusy {
		m.hot.add(resource)
	}
	if err != ErrBusy || wait <= 0 {
		return g, err
	}
	return m.waitInLine(ctx, resource, owner, clientAddr, ttl, wait, leaseLeft)
}

// EndWaiters ends every acquire waiting in line with err: a tier node
// that lost leadership must not grant after a wait (its waiters retry on
// the new leader, in their own new order).
func (m *Manager) EndWaiters(err error) { m.waiting.endAll(err) }

// tryAcquire makes one attempt. On ErrBusy it also returns the holder's
// remaining lease (0 if unknown).
// With othersWaiting, a free resource is not taken (the head of the line has
// it); only the owner's own re-arm succeeds. The lease is counted from
// leaseFrom (zero: from this attempt). ahead, if not nil, is a waiter's
// token reserved ahead of its grant (0: none): a new grant takes it as its
// token if it is still above the resource's newest (no fsync then), and
// sets it to 0 once it is used up (granted, refused or its outcome
// unknown) or too old to use (cancelled).
func (m *Manager) tryAcquire(ctx context.Context, resource, owner, clientAddr string, ttl time.Duration, othersWaiting bool, leaseFrom time.Time, ahead *uint64) (g Grant, leaseLeft time.Duration, err error) {
	if err := m.AdmitWithin(ctx); err != nil {
		return Grant{}, 0, err
	}
	if leaseFrom.IsZero() {
		leaseFrom = time.Now()
	}
	keys := m.keys(resource)
	key := keys[0]
	evictable, err := m.evictionGuard(key)
	if err != nil {
		return Grant{}, 0, err
	}
	if othersWaiting {
		// Someone is in line, so only the owner's own re-arm can succeed,
		// and nearly always this is a newcomer about to be told busy. Ask
		// without a WAIT, and outside the resource's serial section: a
		// busy answer wrote nothing to acknowledge, and neither its WAIT
		// nor its round trip should hold up the grant to the head of the
		// line (on a hot lock, that was in every handoff). A re-arm runs
		// again below, serialized and with its WAIT.
		a, err := m.acquireCall(resource, keys, owner, clientAddr, ttl, true, false, nil, false)
		if err != nil {
			return Grant{}, 0, err
		}
		if err := m.sendAcquire(ctx, &a, false); err != nil {
			return Grant{}, 0, err
		}
		if a.kind == kindBusy {
			return Grant{}, busyLease(a.value), ErrBusy
		}
	}

	turn := m.serial.lock(resource)
	defer m.serial.unlock(resource, turn)
	a, err := m.acquireCall(resource, keys, owner, clientAddr, ttl, othersWaiting, false, ahead, false)
	if err != nil {
		return Grant{}, 0, err
	}
	err = m.sendAcquire(ctx, &a, true)
	return m.attempted(ctx, &a, err, resource, keys, owner, clientAddr, ttl, othersWaiting, leaseFrom, ahead, evictable)
}

// attempted finishes tryAcquire's attempt a, whose script has answered
// (err: sendAcquire's), in the resource's turn: it asks again where the
// reply says to (a token ahead of the store's, a newest token to read),
// and settles a grant or re-arm. tryAcquire's arguments are passed on.
func (m *Manager) attempted(ctx context.Context, a *attempt, err error, resource string, keys []string, owner, clientAddr string, ttl time.Duration, othersWaiting bool, leaseFrom time.Time, ahead *uint64, evictable bool) (g Grant, leaseLeft time.Duration, _ error) {
	key := keys[0]
	if err == nil && a.kind == kindTokenAhead {
		// A record carries a token this store never issued (see
		// authority.go): adopt it, then ask again above it; or, if no
		// fence store can have issued it, refuse.
		if err = m.judgeRecordToken(resource, key, a.value); err == nil {
			*a, err = m.acquireCall(resource, keys, owner, clientAddr, ttl, othersWaiting, true, ahead, false)
		}
		if err == nil {
			err = m.sendAcquire(ctx, a, true)
		}
	}
	if err == nil && a.kind == kindNeedNewest {
		// The owner's own record, and its newest token was not cached:
		// read it and ask again (nothing was written).
		if *a, err = m.acquireCall(resource, keys, owner, clientAddr, ttl, othersWaiting, true, ahead, false); err != nil {
			return Grant{}, 0, err
		}
		err = m.sendAcquire(ctx, a, true)
	}
	if err != nil {
		if errors.Is(err, upstream.ErrOutcomeUnknown) {
			// The script's reply was lost: it may have granted candidate.
			m.countIssued(resource, a.candidate)
			a.usedUp(ahead)
		}
		return Grant{}, 0, err
	}
	var token uint64
	switch a.kind {
	case kindBusy:
		return Grant{}, busyLease(a.value), ErrBusy
	case kindRearmed:
		token = uint64(a.value) // the owner's existing grant, re-armed
	case kindGranted:
		token = a.candidate
		a.usedUp(ahead) // settled below, one way or the other
	default:
		return Grant{}, 0, fmt.Errorf("locks: unexpected acquire reply kind %d", a.kind)
	}
	g, err = m.settle(ctx, a, resource, owner, clientAddr, ttl, leaseFrom, token, evictable)
	return g, 0, err
}

// grantVerdict waits for a grant's replica acknowledgements (w, sent at
// start) and judges it, in this order: the write's own error (its outcome
// is unknown: the grant may stand), too few acknowledgements (counted),
// the token's reservation failing (reserveErr), and, unless replyBy is
// zero, a reply that could no longer leave the lease's safety margin: as
// late as that can be checked, after the replicas and the fsync, just
// before the reply. nil: the grant may be confirmed and replied. Every
// grant (the lock family's and the recipes') is judged here.
func (m *Manager) grantVerdict(w *lockwriter.Write, start time.Time, reserveErr error, replyBy time.Time) error {
	acked, err := w.Acks()
	m.opts.Metrics.ReplicaAckSeconds.Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		return err
	case acked < m.opts.MinReplicas:
		m.opts.Metrics.ReplicaShortfalls.Inc()
		return &NoReplicasError{Acked: acked, Wanted: m.opts.MinReplicas}
	case reserveErr != nil:
		return reserveErr
	case !replyBy.IsZero() && time.Now().After(replyBy):
		return ErrLate
	}
	return nil
}

// settle finishes a grant or re-arm whose script has answered (a): it
// makes a new token durable, waits for the replicas, checks the lease
// left, and confirms the token as the resource's newest, or abandons the
// grant. It runs in the resource's turn.
func (m *Manager) settle(ctx context.Context, a *attempt, resource, owner, clientAddr string, ttl time.Duration, leaseFrom time.Time, token uint64, evictable bool) (Grant, error) {
	// While Redis waits for the replicas, make the token durable as
	// "reserved" (unless it was reserved ahead): it becomes the
	// resource's newest only once they have acknowledged (persist's
	// invariant 7), so a refused grant never shows.
	var reserveErr error
	if token > a.newest && !a.reserved {
		reserveErr = m.opts.Store.Reserve(resource, token)
	}
	// An error whose outcome is unknown counts the token as issued
	// (abandon); a retry by the same owner re-arms the grant and waits for
	// the replicas again.
	verdict := m.grantVerdict(a.write, a.start, reserveErr, m.replyBy(leaseFrom, ttl))
	return m.settleVerdict(ctx, a, verdict, reserveErr == nil, resource, owner, clientAddr, ttl, leaseFrom, token, evictable)
}

// settleVerdict is settle's end, once the grant or re-arm a is judged
// (verdict: grantVerdict's; reserved: a new token's reservation did not
// fail): it confirms the token and records the lease, or abandons the
// grant. Only abandoning waits (on Redis, for the undo).
func (m *Manager) settleVerdict(ctx context.Context, a *attempt, verdict error, reserved bool, resource, owner, clientAddr string, ttl time.Duration, leaseFrom time.Time, token uint64, evictable bool) (Grant, error) {
	record := token > a.newest
	err := verdict
	if err == nil && record {
		// Serialized per resource and above the newest just read: exact.
		err = m.opts.Store.Confirm(resource, token)
	}
	if err != nil {
		return Grant{}, m.abandon(ctx, a, resource, owner, token, record && reserved, err)
	}
	g := Grant{Token: token, LeaseFrom: leaseFrom}
	if a.kind == kindGranted {
		g.Armed = a.start.UnixMilli() // recordValue's at
		if old := m.leases.granted(resource, token, a.start, a.start.Add(ttl), clientAddr); old != nil {
			m.logExpired(old)
		}
	} else {
		m.leases.rearmed(resource, token, a.start.Add(ttl))
	}
	if evictable {
		m.evictableGranted(a.call.Keys[0], resource, token)
	}
	return g, nil
}

// replyBy is the latest moment a reply may promise a lease of ttl counted
// from from: by Redlock's validity rule the client may count on ttl, less
// the time elapsed and a clock-drift allowance of 1% of ttl plus 2 ms (Redis
// arms leases to the millisecond, by its own clock), and that must leave at
// least LeaseSafetyMargin of ttl. A ttl too short for any of it to remain
// (a few ms) can never be replied.
func (m *Manager) replyBy(from time.Time, ttl time.Duration) time.Time {
	drift := ttl/100 + 2*time.Millisecond
	return from.Add(ttl - drift - time.Duration(m.opts.LeaseSafetyMargin*float64(ttl)))
}

// Grantable reports whether a lease of ttl could ever be replied: whether
// replyBy leaves any time at all after the request. One that cannot (a ttl
// of a few ms, below MinTTL) would be granted, undone and answered ErrLate
// every time, so the commands refuse it as too short instead.
func (m *Manager) Grantable(ttl time.Duration) bool {
	var from time.Time
	return m.replyBy(from, ttl).After(from)
}

// MinTTL is the shortest ttl, in whole milliseconds, that Grantable admits.
func (m *Manager) MinTTL() time.Duration {
	ttl := time.Millisecond
	for !m.Grantable(ttl) { // at most ~25 steps: the margin is at most 0.9
		ttl += time.Millisecond
	}
	return ttl
}

// ReplyBy is the latest moment a reply may promise a lease of ttl counted
// from from (replyBy): a tier follower judges the leader's reply to a
// relayed grant or renewal by it, from when the follower read the request.
func (m *Manager) ReplyBy(from time.Time, ttl time.Duration) time.Time { return m.replyBy(from, ttl) }

// abandon settles an acquire attempt that will not be replied with its
// token, err saying why, and returns the error to reply. A new grant is
// undone (compare-and-delete) unless its outcome is already unknown. Its
// reserved token is cancelled only when the master certainly holds no
// record of it; otherwise the token counts as issued (the safe side:
// nothing answered later may contradict a record that may exist), and a
// refusal becomes an unknown outcome, since "nothing was granted" would not
// be known to be true. A re-arm of the owner's own grant cannot be undone:
// the lease stands as Redis has it, with the token issued long before.
func (m *Manager) abandon(ctx context.Context, a *attempt, resource, owner string, token uint64, reserved bool, err error) error {
	if a.kind != kindGranted {
		return err
	}
	unknown := errors.Is(err, upstream.ErrOutcomeUnknown)
	gone := !unknown && m.undo(ctx, a, resource, owner, token)
	if reserved {
		if gone {
			m.opts.Store.Cancel(resource, token)
		} else if cerr := m.opts.Store.Confirm(resource, token); cerr != nil {
			// Fail-stop: the reservation is on disk, so the token
			// still counts as issued after the restart.
			m.opts.Logger.Warn("could not record a token whose grant may stand", "err", cerr)
		}
	}
	var nr *NoReplicasError
	if !gone && (err == ErrLate || errors.As(err, &nr)) {
		return fmt.Errorf("%w: a refused grant could not be undone (%v)", upstream.ErrOutcomeUnknown, err)
	}
	return err
}

// countIssued records token as resource's newest although no reply carried
// it: a write whose reply was lost may have put it in an owner record, and
// such an outcome counts as issued. One fsync, only on a lost connection;
// reserving before every attempt would cost one on busy attempts too. Were
// the process to die before this sync, the record's token would still
// never be honoured (the scripts honour only the newest token issued, and
// a restart issues tokens above it).
func (m *Manager) countIssued(resource string, token uint64) {
	err := m.opts.Store.Reserve(resource, token)
	if err == nil {
		err = m.opts.Store.Confirm(resource, token)
	}
	if err != nil {
		m.opts.Logger.Warn("could not record the token of a grant whose outcome is unknown", "err", err)
	}
}

// attempt is one run of acquireScript: what it offered and what came back.
type attempt struct {
	call lockwriter.ScriptCall
	// newest is the resource's newest token the call carried (0 when it
	// carried "unknown"); candidate the fresh token it offers a new grant.
	newest, candidate uint64
	start             time.Time // when the call was built: a new lease runs from it
	write             *lockwriter.Write
	kind              replyKind
	value             int64
	// reserved: candidate is a waiter's token reserved ahead (its
	// Reserve is done).
	reserved bool
}

// usedUp clears a waiter's token reserved ahead once a's grant took it.
func (a *attempt) usedUp(ahead *uint64) {
	if a.reserved && ahead != nil {
		*ahead = 0
	}
}

// acquireCall builds one acquire attempt's script call with a fresh
// candidate token. It passes the resource's newest token if the fence
// store has it cached, or if readNewest (then from disk); else it passes
// "unknown" (newest is then 0), and the script answers kindNeedNewest
// should the owner's own record need judging by it. With a token reserved
// ahead (*ahead not 0; called in the resource's turn) the newest is read
// and the token offered if it is above it; if not, it is cancelled (and
// *ahead set to 0) and a fresh one drawn.
//
// With now (AcquireNow), nothing in it may wait: a fresh token the store
// cannot hand out without I/O fails it with errWouldWait.
func (m *Manager) acquireCall(resource string, keys []string, owner, clientAddr string, ttl time.Duration, othersWaiting, readNewest bool, ahead *uint64, now bool) (a attempt, err error) {
	known := false
	if err = m.admit(); err != nil {
		return a, err
	}
	if ahead != nil && *ahead != 0 {
		readNewest = true
	}
	if readNewest {
		a.newest, err = m.opts.Store.Newest(resource)
		known = true
	} else {
		a.newest, known, err = m.opts.Store.NewestCached(resource)
	}
	if err != nil {
		return a, err
	}
	if ahead != nil && *ahead != 0 {
		if *ahead > a.newest {
			a.candidate, a.reserved = *ahead, true
		} else {
			// Drawn before a grant of a newer token: never to be issued.
			m.opts.Store.Cancel(resource, *ahead)
			*ahead = 0
		}
	}
	if !a.reserved {
		if a.candidate, err = m.nextToken(now); err != nil {
			return a, err
		}
	}
	a.start = time.Now()
	term := m.term() // one read: the record's term is the one checked
	a.call = lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opAcquire, Keys: keys}
	args := &a.call.Args
	args.Str(owner).Int(ttl.Milliseconds()).Uint(a.candidate)
	addNewest(args, a.newest, known).Bool(othersWaiting).Int(m.opts.LockDelay.Milliseconds()).Int(a.start.UnixMilli())
	addRecord(args, recordValue{token: a.candidate, term: term, at: a.start.UnixMilli(), addr: clientAddr, owner: owner}).
		Uint(term).Int(m.markLife())
	return a, nil
}

// sendAcquire runs a's call and reads its reply into a.kind and a.value.
// With wantAcks, a.write.Acks then gives the replicas' count.
func (m *Manager) sendAcquire(ctx context.Context, a *attempt, wantAcks bool) error {
	a.write = m.opts.Scripts.Start(ctx, a.call.Keys[0], a.call, wantAcks)
	if kind, value, ok := rawPair(a.write); ok {
		a.kind, a.value = replyKind(kind), value
		return nil
	}
	reply, err := a.write.Reply()
	if err != nil {
		return deposed(err)
	}
	kind, value, err := pair(reply)
	a.kind, a.value = replyKind(kind), value
	return err
}

// busyLease is the holder's remaining lease from a busy acquire's reply
// (ms); if unknown (no expiry, or free but promised to the head of the
// line), the caller looks again soon.
func busyLease(ms int64) time.Duration {
	if left := time.Duration(ms) * time.Millisecond; left > 0 {
		return left
	}
	return 50 * time.Millisecond
}

// undo deletes a grant that will not be replied, if it is still in place,
// and reports whether the master certainly holds no record of it now
// (deleted, or already gone: it expired).
func (m *Manager) undo(ctx context.Context, a *attempt, resource, owner string, token uint64) bool {
	// The newest token issued besides this one, for the fence mark (the
	// reservation of token is not counted: it is not confirmed). Unknown
	// if it cannot be read: the mark then stays up, the safe side.
	var newest any = ""
	if n, err := m.opts.Store.Newest(resource); err == nil && n < token {
		newest = n
	}
	reply, err := m.opts.Scripts.RunAfter(ctx, a.write, lockwriter.ScriptCall{
		Source: opsScript,
		SHA:    opsSHA,
		Op:     opUndo,
		Keys:   a.call.Keys,
		Args:   lockwriter.ArgsOf(owner, strconv.FormatUint(token, 10), m.opts.LockDelay.Milliseconds(), m.term(), "", newest, m.markLife()),
	})
	if err != nil {
		// The record stays until its lease runs out; it was never replied,
		// and its token counts as issued. So too if a newer term's record
		// refused the undo: that may be this very grant, re-armed by the
		// newer leader for its owner.
		m.opts.Logger.Warn("could not undo an unacknowledged grant; it expires with its lease", "err", err)
		return false
	}
	if n, _ := reply.(int64); n == 1 {
		m.waiting.wakeHead(resource)
	}
	return true
}

// UndoGrant undoes a grant that was replied to a tier follower too late for
// the follower to hand it on (its lease left, when the reply reached the
// follower, was under the safety margin: ReplyBy): owner's record of token
// is deleted only if it is still that grant, armed at armed (Grant.Armed)
// and not re-armed since (a same-owner retry through another node re-arms
// it, and that retry's reply stands). It reports whether it deleted the
// record; the head of the line, if any, then tries at once. The token
// stays issued: it was confirmed before it was replied to the follower.
func (m *Manager) UndoGrant(ctx context.Context, resource, owner string, token uint64, armed int64) (bool, error) {
	keys := m.keys(resource)
	turn := m.serial.lock(resource)
	defer m.serial.unlock(resource, turn)
	write := m.opts.Scripts.Start(ctx, keys[0], lockwriter.ScriptCall{
		Source: opsScript,
		SHA:    opsSHA,
		Op:     opUndo,
		Keys:   keys,
		Args: lockwriter.ArgsOf(owner, strconv.FormatUint(token, 10), m.opts.LockDelay.Milliseconds(), m.term(),
			strconv.FormatInt(armed, 10), "", m.markLife()),
	}, false)
	reply, err := write.Reply()
	if err != nil {
		return false, deposed(err)
	}
	if n, _ := reply.(int64); n != 1 {
		return false, nil
	}
	m.leases.released(resource, token)
	m.waiting.wakeHead(resource)
	return true, nil
}

// Renew re-arms owner's lease on resource to ttl and returns its token.
// The lease is counted from received (when the request was read), with the
// same safety margin as a grant: a renewal that cannot be replied in time
// gets ErrLate. A re-arm cannot be undone, so after ErrLate (and after any
// error) the holder counts its lease as ending at the earlier of its
// previous end and ttl from when it sent the renewal.
func (m *Manager) Renew(ctx context.Context, resource, owner string, ttl time.Duration, received time.Time) (uint64, error) {
	if err := m.AdmitWithin(ctx); err != nil {
		return 0, err
	}
	keys := m.keys(resource)
	key := keys[0]
	evictable, err := m.evictionGuard(key)
	if err != nil {
		return 0, err
	}
	turn := m.serial.lock(resource)
	defer m.serial.unlock(resource, turn)
	newest, err := m.opts.Store.Newest(resource)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	write := m.opts.Scripts.Start(ctx, key, m.renewCall(keys, owner, ttl, newest, now), true)
	return m.renewed(write, resource, key, ttl, now, received, evictable)
}

// renewCall is the script call of a renewal of owner's lease of the
// resource at keys, counted from now; newest is the resource's newest
// token, which a renewal of an older grant finds stale.
func (m *Manager) renewCall(keys []string, owner string, ttl time.Duration, newest uint64, now time.Time) lockwriter.ScriptCall {
	return lockwriter.ScriptCall{
		Source: opsScript,
		SHA:    opsSHA,
		Op:     opRenew,
		Keys:   keys,
		Args:   lockwriter.ArgsOf(owner, ttl.Milliseconds(), newest, m.opts.LockDelay.Milliseconds(), now.UnixMilli(), m.term()),
	}
}

// renewed is Renew's outcome from its script's write (sent at now): its
// reply, then its WAIT's count (it waits for them, unless they are in).
func (m *Manager) renewed(write *lockwriter.Write, resource, key string, ttl time.Duration, now, received time.Time, evictable bool) (uint64, error) {
	reply, err := write.Reply()
	if err != nil {
		return 0, deposed(err)
	}
	if reply == nil {
		return 0, ErrNotHeld
	}
	token, err := toInt(reply)
	if err != nil {
		return 0, err
	}
	acked, err := write.Acks()
	if err != nil {
		return 0, err
	}
	if acked < m.opts.MinReplicas {
		m.opts.Metrics.ReplicaShortfalls.Inc()
		return 0, &NoReplicasError{Acked: acked, Wanted: m.opts.MinReplicas}
	}
	m.leases.rearmed(resource, uint64(token), now.Add(ttl))
	if evictable {
		m.evictableGranted(key, resource, uint64(token))
	}
	if time.Now().After(m.replyBy(received, ttl)) {
		return 0, ErrLate
	}
	return uint64(token), nil
}

// FenceCheck reports whether token is the newest issued for resource.
func (m *Manager) FenceCheck(resource string, token uint64) (bool, error) {
	if err := m.admit(); err != nil {
		return false, err
	}
	newest, err := m.opts.Store.Newest(resource)
	if err != nil {
		return false, err
	}
	return m.judgeToken(token, newest)
}

// FenceCheckNow is FenceCheck for a caller that must not wait (the serve
// loop): answered (known) only when this node is admitted now and the
// resource's newest token is in the store's cache; else known is false,
// nothing was judged, and the caller asks FenceCheck where it may wait
// (for a late heartbeat round: AdmitWithin; for a read of the store).
func (m *Manager) FenceCheckNow(resource string, token uint64) (current, known bool, err error) {
	if m.admit() != nil {
		return false, false, nil
	}
	newest, known, err := m.opts.Store.NewestCached(resource)
	if err != nil || !known {
		return false, false, nil // judged where a read may wait, as a miss is
	}
	current, err = m.judgeToken(token, newest)
	return current, true, err
}

// judgeToken is FenceCheck's verdict on token against the resource's
// newest.
func (m *Manager) judgeToken(token, newest uint64) (bool, error) {
	if m.neverIssued(token, newest) {
		return false, ErrNeverIssued
	}
	return token == newest, nil
}

// FencedExec runs one command in Redis only if token is the newest token
// issued for resource, and returns the command's reply as Redis wrote it.
// The check is made twice: here, against the fence store, while grants of
// the resource wait (its serializer is held), and again inside the script
// that runs the command, against the resource's fence mark in Redis
// (fencemark.go), so that a write delayed on its way to Redis (across a
// restart of this proxy, or a tier's change of leader) never lands after a
// newer token was granted. It protects only writes made through it.
func (m *Manager) FencedExec(ctx context.Context, resource string, token uint64, command [][]byte) ([]byte, error) {
	return m.FencedExecAs(ctx, resource, token, command, nil, "")
}

// FENCE.EXEC's refusals by its script that are their own replies (each a
// resp.CodedError); the command did not run.
var (
	// ErrExecLate: the write reached Redis more than half the fence
	// mark's life after its token was checked (fencemark.go).
	ErrExecLate error = resp.Error{Code: "ERR", Msg: "fenceproxy: the command reached Redis more than half of --fence-mark-ttl " +
		"after its token was checked (a newer token's fence mark may have expired meanwhile), so it was not run; check the token and retry"}
	// ErrMarkAhead: the fence mark shows a token above the newest this
	// node knows as issued: a newer leader of its tier granted it, or a
	// grant is being undone.
	ErrMarkAhead error = resp.Error{Code: "TRYAGAIN", Msg: "fenceproxy: Redis holds a grant of this resource newer than this node knows of " +
		"(a newer leader of its tier granted it, or a refused grant is being undone); the command was not run, retry shortly"}
)

// FencedExecAs is FencedExec that, when holderPrefix is not empty, also
// requires the resource's current lease to carry token and an owner that
// starts with holderPrefix: with client authentication on, owners are
// stored as "<user>\x00<owner>", and a lock is its user's alone, so another
// user holding a copy of the token cannot write with it (ErrOtherHolder),
// nor can anyone once the lease is over (ErrLeaseOver: nobody holds the
// token then, so no user can be said to own it). The record is read while
// the resource's grants wait, so no grant slips in between.
//
// keyAt are the indexes into command of its keys (keys.Command.Keys), which
// the script declares to Redis and routes by; nil takes command[1], if any,
// for the key (right for most commands, not for OBJECT ENCODING k).
//
// The script refuses a write that a newer token's mark or a newer term
// overtook on its way (ErrStale, ErrDeposed) or that arrived too late to be
// judged (ErrExecLate); the command then did not run.
func (m *Manager) FencedExecAs(ctx context.Context, resource string, token uint64, command [][]byte, keyAt []int, holderPrefix string) ([]byte, error) {
	// Before the token is judged (and, in a tier, before the leadership
	// round that Newest waits for begins): every grant of a newer token
	// comes after it (fencemark.go).
	checkedAt := time.Now().UnixMilli()
	if err := m.AdmitWithin(ctx); err != nil {
		return nil, err
	}
	turn := m.serial.lock(resource)
	defer m.serial.unlock(resource, turn)
	newest, err := m.opts.Store.Newest(resource)
	switch {
	case err != nil:
		return nil, err
	case m.neverIssued(token, newest):
		return nil, ErrNeverIssued
	case token < newest:
		return nil, ErrStale
	}
	if holderPrefix != "" {
		rec, held, err := m.readRecord(ctx, resource)
		switch {
		case err != nil:
			return nil, err
		case !held || rec.Token != strconv.FormatUint(token, 10):
			return nil, ErrLeaseOver
		case !strings.HasPrefix(rec.Owner, holderPrefix):
			return nil, ErrOtherHolder
		}
	}
	call := m.execCall(resource, token, checkedAt, command, keyAt)
	write := m.opts.Scripts.Start(ctx, call.Keys[0], call, false)
	raw, err := write.Raw()
	if err != nil {
		return nil, err
	}
	if err := execRefusal(raw); err != nil {
		if err == ErrStale && markToken(raw) > newest {
			// Not stale by what this node knows: it must not say so.
			return nil, ErrMarkAhead
		}
		return nil, err
	}
	return raw, nil
}

// execCall is FENCE.EXEC's script call (execScript). The command's keys
// are declared to Redis as well (KEYS, after the fence mark): a script
// with no keys runs on whatever node it reaches, so in front of a Redis
// Cluster one sent on a stale slot map answered "non local key" (the slot
// moved) or -READONLY (its master became a replica) instead of the -MOVED
// or -ASK that Start follows; keys in several slots get Redis Cluster's
// own -CROSSSLOT. It goes to the master of its first key, which the mark
// shares a slot with (execMarkKey), or of the record's mark if it has
// none.
func (m *Manager) execCall(resource string, token uint64, checkedAt int64, command [][]byte, keyAt []int) lockwriter.ScriptCall {
	if keyAt == nil && len(command) > 1 {
		keyAt = []int{1}
	}
	keys := make([]string, 1, 1+len(keyAt))
	for _, at := range keyAt {
		if at > 0 && at < len(command) {
			keys = append(keys, string(command[at]))
		}
	}
	first := ""
	if len(keys) > 1 {
		first = keys[1]
	}
	keys[0] = m.execMarkKey(resource, m.recordKey(resource), first)
	var args lockwriter.ScriptArgs
	args.Uint(token).Uint(m.term()).Int(checkedAt).Int(m.markLife())
	for _, a := range command {
		args.Add(a)
	}
	return lockwriter.ScriptCall{Source: execScript, SHA: execSHA, Keys: keys, Args: args}
}

// markToken is the mark's token in execScript's FENCESTALE refusal (0 if
// it cannot be read).
func markToken(raw []byte) uint64 {
	s := strings.TrimPrefix(string(raw), "-"+fenceStaleCode+" ")
	n, _ := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	return n
}

// execRefusal is the error for execScript's own refusals (raw is the
// script's reply), nil for any other reply, the command's own.
func execRefusal(raw []byte) error {
	if len(raw) == 0 || raw[0] != '-' {
		return nil
	}
	code, _, _ := strings.Cut(string(raw[1:min(len(raw), 24)]), " ")
	switch code {
	case fenceStaleCode:
		return ErrStale
	case newerTermCode:
		return ErrDeposed
	case fenceLateCode:
		return ErrExecLate
	}
	return nil
}

// record is an owner record as infoScript reads it.
type record struct {
	Owner     string // "" when there is no record (the resource is free)
	Token     string // the holder's token, as stored
	LeaseLeft time.Duration
	// Kept since LOCK.INFO's times; zero in older records.
	Acquired, Renewed time.Time
	ClientAddr        string
}

// readRecord reads resource's owner record from its master: the one place
// that knows infoScript's reply (owner, token, pttl, then acquired-at,
// renewed-at and client-addr, absent from records older than those).
func (m *Manager) readRecord(ctx context.Context, resource string) (rec record, held bool, err error) {
	key := m.recordKey(resource)
	v, err := m.opts.Scripts.Read(ctx, key, lockwriter.ScriptCall{Source: infoScript, SHA: infoSHA, Keys: []string{key}})
	if err != nil {
		return rec, false, err
	}
	reply, ok := v.([]any)
	if !ok {
		return rec, false, fmt.Errorf("locks: unexpected record reply %v", v)
	}
	if len(reply) < 3 {
		return rec, false, nil
	}
	if rec.Owner, held = reply[0].(string); !held {
		return rec, false, nil
	}
	rec.Token, _ = reply[1].(string)
	if pttl, ok := reply[2].(int64); ok && pttl > 0 {
		rec.LeaseLeft = time.Duration(pttl) * time.Millisecond
	}
	if len(reply) == 6 {
		rec.Acquired = unixMilli(reply[3])
		rec.Renewed = unixMilli(reply[4])
		rec.ClientAddr, _ = reply[5].(string)
	}
	return rec, true, nil
}

// Top returns the n resources whose acquires most often found them held
// (approximate, from a bounded sketch), each with the acquires now waiting.
func (m *Manager) Top(n int) (top []Contended, waiters []int) {
	top = m.hot.top(n)
	waiters = make([]int, len(top))
	for i, c := range top {
		waiters[i] = m.waiting.count(c.Resource)
	}
	return top, waiters
}

// Info describes a resource's lock.
type Info struct {
	Owner     string // "" when free
	Held      bool
	Token     uint64        // newest token issued, 0 if none
	LeaseLeft time.Duration // remaining lease; meaningful when Held
	Waiters   int
	// When the holder's token was granted and its lease last armed, and the
	// client address it was granted for: zero when free, or unknown for a
	// record written before these were kept.
	Acquired, Renewed time.Time
	ClientAddr        string
}

// Info reads resource's owner record and newest token.
func (m *Manager) Info(ctx context.Context, resource string) (Info, error) {
	newest, err := m.opts.Store.Newest(resource)
	if err != nil {
		return Info{}, err
	}
	rec, held, err := m.readRecord(ctx, resource)
	if err != nil {
		return Info{}, err
	}
	info := Info{Token: newest, Waiters: m.waiting.count(resource), Held: held}
	if held {
		info.Owner, info.LeaseLeft = rec.Owner, rec.LeaseLeft
		info.Acquired, info.Renewed, info.ClientAddr = rec.Acquired, rec.Renewed, rec.ClientAddr
	}
	return info, nil
}

// unixMilli reads a record's time field; zero if absent or malformed.
func unixMilli(v any) time.Time {
	s, _ := v.(string)
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// slowEntry adds e to the slow-lock log and counts it.
func (m *Manager) slowEntry(e SlowEntry) {
	m.opts.Metrics.SlowLockEntries.WithLabelValues(e.Kind).Inc()
	m.slow.add(e)
}

// SlowLog returns up to n slow-lock log entries, newest first (n < 0: all).
func (m *Manager) SlowLog(n int) []SlowEntry { return m.slow.get(n) }

// SlowLogLen is the number of slow-lock log entries kept.
func (m *Manager) SlowLogLen() int { return m.slow.len() }

// SlowLogReset empties the slow-lock log.
func (m *Manager) SlowLogReset() { m.slow.reset() }

// Stats is what INFO's "# locks" section shows of the manager.
type Stats struct {
	Held      int    // leases granted through this proxy not yet seen to end (at most maxTracked)
	Untracked uint64 // grants not tracked because maxTracked were
	Waiters   int64  // acquires waiting in line, all resources
	SlowLen   int
	Options   Options
}

// Stats returns the manager's current figures and settings.
func (m *Manager) Stats() Stats {
	held, untracked := m.leases.counts()
	return Stats{Held: held, Untracked: untracked, Waiters: m.waitersNow.Load(), SlowLen: m.slow.len(), Options: m.opts}
}

// rawPair reads opAcquire's usual replies, {kind, value} or a grant's
// token alone, straight from their bytes (see bulkReply); ok is false for
// any other, which pair reads.
func rawPair(w *lockwriter.Write) (kind, value int64, ok bool) {
	if tok, ok := bulkReply(w); ok {
		value, ok = resp.ParseInt(tok)
		return int64(kindGranted), value, ok
	}
	raw, err := w.Raw()
	if err != nil {
		return 0, 0, false
	}
	elems, n, ok := resp.ArrayHeader(raw)
	if !ok || n != 2 {
		return 0, 0, false
	}
	kind, elems, ok = intOf(elems)
	if !ok {
		return 0, 0, false
	}
	value, elems, ok = intOf(elems)
	return kind, value, ok && len(elems) == 0
}

// pair decodes opAcquire's reply: {kind, value}, or a grant's token alone.
func pair(reply any) (kind, value int64, err error) {
	if tok, ok := reply.(string); ok { // a grant is its token alone
		value, err = toInt(tok)
		return int64(kindGranted), value, err
	}
	arr, ok := reply.([]any)
	if !ok || len(arr) != 2 {
		return 0, 0, fmt.Errorf("locks: unexpected script reply %v", reply)
	}
	if kind, err = toInt(arr[0]); err != nil {
		return 0, 0, err
	}
	value, err = toInt(arr[1])
	return kind, value, err
}

func toInt(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("locks: unexpected script value %v", v)
}
