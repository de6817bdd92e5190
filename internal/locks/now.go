package locks

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/persist"
)

// Lock requests finished where their steps complete.
//
// Acquire and Release wait on each step of a request in turn: the
// resource's turn, the script's reply, the token's fsync, the replicas'
// WAIT. Run on a worker goroutine, that is a hand-off to the worker and a
// wake-up of it at every step; on a machine whose cores are busy each is
// an OS thread's, and together they cost a lock cycle on the serve loop
// more than the goroutine per client they replaced (issue 24: 1.7-2.0
// context switches per cycle against 1.1-1.4). AcquireNow, RenewNow and
// ReleaseNow (and the recipes' twins) run the same steps as callbacks
// instead: the caller (the serve loop)
// takes the turn and queues the script, the lock writer's goroutine runs
// the next step when it reads the script's reply, the fence store's
// committer when the fsync is done, and whichever of those finishes last
// judges the grant and answers it. Nothing wakes per request: the writer
// and the committer wake once per batch.
//
// Only the usual course runs so: a free turn, nobody waiting in line, a
// token the store hands out without I/O, and a reply that grants, re-arms
// or says busy. Anything else (a turn taken, a line, a reply that asks
// again, an error, a grant to undo) goes on as the blocking code does, on
// a goroutine of its own from where it is: the steps are the same
// functions (attempted, settleVerdict, renewed, releaseReplied), so the
// two courses cannot disagree.

// nowStore is a TokenStore that draws and reserves tokens without waiting
// (persist's): AcquireNow needs one.
type nowStore interface {
	// NextTokenNow is NextToken when it needs no I/O; ok false (and the
	// token drawn skipped) when it would.
	NextTokenNow() (token uint64, ok bool, err error)
	// ReserveThen is Reserve that returns at once (an error then is
	// Reserve's, done not told) and tells done the outcome once the
	// reservation is durable, on the goroutine that made it so.
	ReserveThen(resource string, token uint64, done persist.Synced) error
}

// nowRunner is a ScriptRunner that runs a script without waiting for its
// reply (lockwriter.Writer.StartThen): then is told on the goroutine that
// reads it, or not at all when StartThen reports false.
type nowRunner interface {
	StartThen(w *lockwriter.Write, key string, call lockwriter.ScriptCall, wantAcks bool, then lockwriter.ReplyIn) bool
}

// errWouldWait: a token the store cannot hand out without I/O (a new
// window), asked for by a caller that must not wait.
var errWouldWait = errors.New("locks: the fence store needs I/O for the next token")

// nextToken is the store's next token; with now, only one it hands out
// without I/O (else errWouldWait).
func (m *Manager) nextToken(now bool) (uint64, error) {
	if !now {
		return m.opts.Store.NextToken()
	}
	s, ok := m.opts.Store.(nowStore)
	if !ok {
		return 0, errWouldWait
	}
	t, ok, err := s.NextTokenNow()
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return 0, errWouldWait
	}
	return t, nil
}

// leaseTurn begins a request that writes a lease, as callbacks: the
// writer's no-wait form, the authority's admission, the eviction guard of
// guardKey (the record the script writes), then resource's turn, taken
// without waiting. ok is false, with nothing held, when any of them
// refuses or would wait: the blocking course then says why.
func (m *Manager) leaseTurn(resource, guardKey string) (runner nowRunner, evictable bool, turn *serialEntry, ok bool) {
	if runner, ok = m.opts.Scripts.(nowRunner); !ok || m.admit() != nil {
		return nil, false, nil, false
	}
	evictable, err := m.evictionGuard(guardKey)
	if err != nil {
		return nil, false, nil, false
	}
	turn, ok = m.serial.tryLock(resource)
	return runner, evictable, turn, ok
}

// AcquireDone is told an AcquireNow's outcome, once. (An interface, not a
// func: the caller's own struct for the request is the callback.)
type AcquireDone interface {
	Acquired(g Grant, err error)
}

// RenewDone is told a RenewNow's outcome, once.
type RenewDone interface {
	Renewed(token uint64, err error)
}

// ReleaseDone is told a ReleaseNow's outcome, once.
type ReleaseDone interface {
	Released(released bool, err error)
}

// AcquireNow is AcquireGrant with no wait in line, for a caller that must
// not block: it starts the acquire and returns true, and done is told once
// what AcquireGrant would have returned, on the goroutine that completes
// the request's last step (it must not block either). It
// returns false, having done nothing, when the request cannot start
// without waiting (the resource's turn is taken, acquires wait in line,
// the store or the writer would wait, or the guard or the authority
// refuses, which AcquireGrant then says): the caller calls AcquireGrant.
// ctx ends what waits on a rare course (see above).
func (m *Manager) AcquireNow(ctx context.Context, resource, owner, clientAddr string, ttl time.Duration, received time.Time, done AcquireDone) bool {
	if _, stores := m.opts.Store.(nowStore); !stores || m.waiting.count(resource) > 0 {
		return false
	}
	keys := m.keys(resource)
	runner, evictable, turn, ok := m.leaseTurn(resource, keys[0])
	if !ok {
		return false
	}
	var err error
	x := &acquiring{m: m, ctx: ctx, resource: resource, owner: owner, clientAddr: clientAddr, keys: keys,
		ttl: ttl, leaseFrom: received, evictable: evictable, turn: turn, done: done}
	if x.leaseFrom.IsZero() {
		x.leaseFrom = time.Now()
	}
	if x.a, err = m.acquireCall(resource, keys, owner, clientAddr, ttl, false, false, nil, true); err != nil ||
		!runner.StartThen(&x.kept, keys[0], x.a.call, true, x) {
		m.serial.unlock(resource, turn) // a candidate drawn is skipped: tokens need not be consecutive
		return false
	}
	return true
}

// acquiring is one AcquireNow in flight: tryAcquire's arguments and
// attempt, and the grant's settling.
type acquiring struct {
	kept lockwriter.Write // its script's write (StartThen keeps it here: no allocation of its own)
	settling
	m                           *Manager
	ctx                         context.Context
	resource, owner, clientAddr string
	keys                        []string
	ttl                         time.Duration
	leaseFrom                   time.Time
	evictable                   bool
	turn                        *serialEntry
	done                        AcquireDone

	a     attempt
	token uint64
}

// ReplyIn is the script's reply (on the lock writer's goroutine).
func (x *acquiring) ReplyIn(w *lockwriter.Write) {
	m, a := x.m, &x.a
	a.write = w
	var err error
	if kind, value, ok := rawPair(w); ok {
		a.kind, a.value = replyKind(kind), value
	} else if reply, rerr := w.Reply(); rerr != nil {
		err = deposed(rerr)
	} else {
		var kind int64
		kind, a.value, err = pair(reply)
		a.kind = replyKind(kind)
	}
	switch {
	case err != nil || a.kind != kindBusy && a.kind != kindGranted && a.kind != kindRearmed:
		go x.attempted(err) // asks again, or counts an unknown outcome: it waits
	case a.kind == kindBusy:
		x.finish(Grant{}, ErrBusy)
	default:
		x.token = a.candidate
		if a.kind == kindRearmed {
			x.token = uint64(a.value) // the owner's existing grant, re-armed
		}
		// Reserved as settle reserves it: a token above the newest.
		m.settleThen(&x.settling, w, x.token > a.newest, x.resource, x.token, x)
	}
}

// verdict judges the grant once its steps are in (settle's).
func (x *acquiring) verdict() error {
	m, a := x.m, &x.a
	return m.grantVerdict(a.write, a.start, x.reserveErr, m.replyBy(x.leaseFrom, x.ttl))
}

// settle is settleVerdict for the attempt.
func (x *acquiring) settle(verdict error) {
	x.finish(x.m.settleVerdict(x.ctx, &x.a, verdict, x.reserveErr == nil, x.resource, x.owner, x.clientAddr, x.ttl, x.leaseFrom, x.token, x.evictable))
}

// attempted finishes the attempt as tryAcquire does (on a goroutine of
// its own: it may wait).
func (x *acquiring) attempted(err error) {
	g, _, err := x.m.attempted(x.ctx, &x.a, err, x.resource, x.keys, x.owner, x.clientAddr, x.ttl, false, x.leaseFrom, nil, x.evictable)
	x.finish(g, err)
}

// finish ends the resource's turn and answers.
func (x *acquiring) finish(g Grant, err error) {
	x.m.serial.unlock(x.resource, x.turn)
	if err == ErrBusy {
		x.m.hot.add(x.resource)
	}
	x.done.Acquired(g, err)
}

// settling joins the two steps a grant waits for before it is judged, the
// new token's fsync and the replicas' WAIT, and then settles it, on the
// goroutine that ends the last of them; or, when the verdict is against
// the grant, on a goroutine of its own (the grant is undone: that waits on
// Redis).
type settling struct {
	out        atomic.Int32 // steps out
	reserveErr error        // the reservation's outcome; read once out is 0
	of         settled
}

// settled is a grant in flight that settling settles.
type settled interface {
	verdict() error       // grantVerdict's, once the steps are in: it does not wait then
	settle(verdict error) // settleVerdict's course: confirm and answer, or undo
}

// settleThen starts s for the grant of: the WAIT behind w and, with
// reserve, token's reservation for resource (the fsync runs while Redis
// waits for the replicas).
func (m *Manager) settleThen(s *settling, w *lockwriter.Write, reserve bool, resource string, token uint64, of settled) {
	s.of = of
	if !reserve {
		s.out.Store(1)
	} else {
		s.out.Store(2)
		if err := m.opts.Store.(nowStore).ReserveThen(resource, token, s); err != nil {
			s.reserveErr = err
			s.out.Add(-1)
		}
	}
	w.AcksThen(s)
}

// Synced is the reservation's outcome (on the committer's goroutine).
func (s *settling) Synced(err error) {
	s.reserveErr = err
	s.stepDone()
}

// AcksIn: the WAIT's reply is in.
func (s *settling) AcksIn() { s.stepDone() }

// stepDone ends one step; the last settles the grant.
func (s *settling) stepDone() {
	if s.out.Add(-1) != 0 {
		return
	}
	if v := s.of.verdict(); v != nil {
		go s.of.settle(v)
		return
	}
	s.of.settle(nil)
}

// RenewNow is Renew for a caller that must not block, as AcquireNow is
// AcquireGrant: done is told Renew's outcome once, on the lock writer's
// goroutine (when the renewal's WAIT is in). It returns false, having done
// nothing, when the resource's turn is taken, its newest token is not
// cached, the writer would wait, or the guard or the authority refuses
// (Renew then says so): the caller calls Renew.
func (m *Manager) RenewNow(resource, owner string, ttl time.Duration, received time.Time, done RenewDone) bool {
	keys := m.keys(resource)
	runner, evictable, turn, ok := m.leaseTurn(resource, keys[0])
	if !ok {
		return false
	}
	newest, known, err := m.opts.Store.NewestCached(resource)
	if err != nil || !known {
		m.serial.unlock(resource, turn)
		return false
	}
	x := &renewing{m: m, resource: resource, key: keys[0], ttl: ttl, now: time.Now(), received: received, evictable: evictable, turn: turn, done: done}
	if !runner.StartThen(&x.kept, x.key, m.renewCall(keys, owner, ttl, newest, x.now), true, x) {
		m.serial.unlock(resource, turn)
		return false
	}
	return true
}

// renewing is one RenewNow in flight.
type renewing struct {
	kept          lockwriter.Write // its script's write (StartThen keeps it here: no allocation of its own)
	m             *Manager
	resource, key string
	ttl           time.Duration
	now, received time.Time
	evictable     bool
	turn          *serialEntry
	done          RenewDone
	write         *lockwriter.Write
}

// ReplyIn is the script's reply (on the lock writer's goroutine): the
// renewal is judged once its WAIT is in too.
func (x *renewing) ReplyIn(w *lockwriter.Write) {
	x.write = w
	if reply, err := w.Reply(); err != nil || reply == nil {
		x.AcksIn() // failed, or not held: Renew does not wait for the count either
		return
	}
	w.AcksThen(x)
}

// AcksIn: the WAIT's count is in (or the script failed: none is asked);
// renewed waits for neither.
func (x *renewing) AcksIn() {
	token, err := x.m.renewed(x.write, x.resource, x.key, x.ttl, x.now, x.received, x.evictable)
	x.m.serial.unlock(x.resource, x.turn)
	x.done.Renewed(token, err)
}

// ReleaseNow is Release for a caller that must not block, as AcquireNow
// is AcquireGrant: done is told Release's outcome once, on the lock
// writer's goroutine. With acquires waiting in line it hands the lock to
// the head as Release does (the head, waiting on its own goroutine,
// settles the grant). It returns false, having done nothing, when the
// resource's turn is taken, the head's handoff would read the disk, or
// the writer would wait: the caller calls Release.
func (m *Manager) ReleaseNow(resource, owner string, done ReleaseDone) bool {
	runner, ok := m.opts.Scripts.(nowRunner)
	if !ok {
		return false
	}
	turn, ok := m.serial.tryLock(resource)
	if !ok {
		return false
	}
	keys := m.keys(resource)
	head, token, newest, ok := m.claimHead(resource, keys[0], true)
	if !ok {
		m.serial.unlock(resource, turn)
		return false
	}
	x := &releasing{m: m, resource: resource, turn: turn, done: done}
	var now time.Time
	if head != nil {
		now = time.Now()
	}
	call := m.releaseCall(keys, owner, head, token, now)
	if head != nil {
		x.hand = &handing{head: head, token: token, newest: newest, call: call, now: now}
	}
	if !runner.StartThen(&x.kept, keys[0], call, head != nil, x) {
		if head != nil {
			m.waiting.unclaim(resource, head, false, token) // not run: Release claims it again
		}
		m.serial.unlock(resource, turn)
		return false
	}
	return true
}

// releasing is one ReleaseNow in flight; hand is its handoff to the head
// of the line, if it has one.
type releasing struct {
	kept     lockwriter.Write // its script's write (StartThen keeps it here: no allocation of its own)
	m        *Manager
	resource string
	turn     *serialEntry
	done     ReleaseDone
	hand     *handing
}

// handing is a handoff in flight (releaseReplied's): the head of the line,
// the token it is granted, the resource's newest token, the script call
// and when it was made. (Apart, so that a plain release, the usual one,
// allocates none of it.)
type handing struct {
	head          *waiter
	token, newest uint64
	call          lockwriter.ScriptCall
	now           time.Time
}

// ReplyIn is the script's reply (on the lock writer's goroutine). A
// handoff whose script failed goes on a goroutine of its own: its token
// may have to be recorded as issued (countIssued), which waits. (Only a
// handoff decodes the reply here: a plain release's is read from its
// bytes by releaseReplied, and decoding it first cost two allocations a
// lock cycle.)
func (x *releasing) ReplyIn(w *lockwriter.Write) {
	if x.hand != nil {
		if _, err := w.Reply(); err != nil {
			go x.replied(w)
			return
		}
	}
	x.replied(w)
}

// replied is releaseReplied's course for the reply, answered.
func (x *releasing) replied(w *lockwriter.Write) {
	if h := x.hand; h != nil {
		x.done.Released(x.m.releaseReplied(x.resource, x.turn, h.head, h.token, h.newest, h.call, h.now, w))
		return
	}
	x.done.Released(x.m.releaseReplied(x.resource, x.turn, nil, 0, 0, lockwriter.ScriptCall{}, time.Time{}, w))
}

// RecipeAcquireNow is RecipeAcquire (an RLock's, RSpinLock's or
// RFencedLock's grant) for a caller that must not block, as AcquireNow is
// AcquireGrant: done runs once with RecipeAcquire's outcome.
func (m *Manager) RecipeAcquireNow(ctx context.Context, key, tokenKey, holder, clientAddr string, lease time.Duration, received time.Time, done func(token uint64, pttl int64, err error)) bool {
	if _, stores := m.opts.Store.(nowStore); !stores {
		return false
	}
	side := m.recordKey(key)
	runner, evictable, turn, ok := m.leaseTurn(key, side)
	if !ok {
		return false
	}
	x := &recipeAcquiring{m: m, ctx: ctx, key: key, side: side, tokenKey: tokenKey, holder: holder, clientAddr: clientAddr,
		lease: lease, received: received, evictable: evictable, turn: turn, done: done}
	// Read in the turn, as sendHashAcquire reads it; not known, it is
	// sent as "", which only a re-entry needs (it answers kindNeedNewest).
	newest, known, err := m.opts.Store.NewestCached(key)
	if err != nil || m.hashAcquireCall(&x.g, key, side, tokenKey, holder, clientAddr, lease, nil, newest, known, true) != nil ||
		!runner.StartThen(&x.kept, key, x.g.call, true, x) {
		m.serial.unlock(key, turn)
		return false
	}
	return true
}

// recipeAcquiring is one RecipeAcquireNow in flight: recipeAcquire's
// arguments and attempt, and the grant's settling.
type recipeAcquiring struct {
	kept lockwriter.Write // its script's write (StartThen keeps it here: no allocation of its own)
	settling
	m                                       *Manager
	ctx                                     context.Context
	key, side, tokenKey, holder, clientAddr string
	lease                                   time.Duration
	received                                time.Time
	evictable                               bool
	turn                                    *serialEntry
	done                                    func(token uint64, pttl int64, err error)

	g hashGrant
}

// ReplyIn is the twin's reply (on the lock writer's goroutine).
func (x *recipeAcquiring) ReplyIn(w *lockwriter.Write) {
	g := &x.g
	g.write = w
	err := twinReply(w, g.readReply)
	switch {
	case err != nil || g.kind != kindBusy && g.kind != kindGranted && g.kind != kindRearmed:
		go x.attempted(err) // asks again, or counts an unknown outcome: it waits
	case g.kind == kindBusy:
		x.m.hot.add(x.key)
		x.finish(0, g.busy, ErrBusy)
	default:
		x.m.settleThen(&x.settling, w, g.kind == kindGranted, x.key, g.token, x)
	}
}

// verdict judges the grant once its steps are in (settleHashGrant's).
func (x *recipeAcquiring) verdict() error {
	m, g := x.m, &x.g
	return m.grantVerdict(g.write, g.start, x.reserveErr, m.replyBy(x.received, x.lease))
}

// settle is settleHashVerdict for the attempt.
func (x *recipeAcquiring) settle(verdict error) {
	err := x.m.settleHashVerdict(x.ctx, &x.g, verdict, x.reserveErr == nil, x.key, x.holder, x.clientAddr, x.lease, x.evictable)
	x.finish(x.g.token, 0, err)
}

// attempted finishes the attempt as recipeAcquire does (on a goroutine of
// its own: it may wait).
func (x *recipeAcquiring) attempted(err error) {
	x.finish(x.m.hashAttempted(x.ctx, &x.g, err, x.key, x.side, x.tokenKey, x.holder, x.clientAddr, x.lease, x.received, nil, x.evictable))
}

// finish ends the lock's turn and answers.
func (x *recipeAcquiring) finish(token uint64, pttl int64, err error) {
	x.m.serial.unlock(x.key, x.turn)
	x.done(token, pttl, err)
}

// RecipeUnlockNow is RecipeUnlock for a caller that must not block, as
// ReleaseNow is Release: done runs once with RecipeUnlock's outcome, on
// the lock writer's goroutine.
func (m *Manager) RecipeUnlockNow(u RecipeUnlock, done func(n int64, null bool, err error)) bool {
	runner, ok := m.opts.Scripts.(nowRunner)
	if !ok {
		return false
	}
	turn, ok := m.serial.tryLock(u.Key)
	if !ok {
		return false
	}
	x := &recipeUnlocking{m: m, u: u, turn: turn, done: done}
	if !runner.StartThen(&x.kept, u.Key, m.recipeUnlockCall(u), false, x) {
		m.serial.unlock(u.Key, turn)
		return false
	}
	return true
}

// recipeUnlocking is one RecipeUnlockNow in flight.
type recipeUnlocking struct {
	kept lockwriter.Write // its script's write (StartThen keeps it here: no allocation of its own)
	m    *Manager
	u    RecipeUnlock
	turn *serialEntry
	done func(n int64, null bool, err error)
}

// ReplyIn is the twin's reply (on the lock writer's goroutine).
func (x *recipeUnlocking) ReplyIn(w *lockwriter.Write) {
	n, null, err := x.m.recipeUnlocked(x.u, w)
	x.m.serial.unlock(x.u.Key, x.turn)
	x.done(n, null, err)
}

// RecipeValueWriteNow is RecipeValueWrite (a value lock's grant or extend:
// SET NX, redis-py's, redsync's, redislock's and node-redlock's scripts)
// for a caller that must not block, as AcquireNow is AcquireGrant: done
// runs once with RecipeValueWrite's outcome. It returns false, having done
// nothing, when the key's turn is taken, its newest token is needed (an
// extend) and not cached, a fresh token needs I/O, the writer would wait,
// or the guard or the authority refuses: the caller calls
// RecipeValueWrite.
func (m *Manager) RecipeValueWriteNow(ctx context.Context, v ValueWrite, clientAddr string, received time.Time, done func(pttl int64, err error)) bool {
	side := m.recordKey(v.Key)
	runner, evictable, turn, ok := m.leaseTurn(v.Key, side)
	if !ok {
		return false
	}
	newest, known, err := m.opts.Store.NewestCached(v.Key)
	if err == nil && !known && v.Mode == ValueGrant && v.Prefix == 0 {
		// A plain grant (SET NX) never reads the newest token: only an
		// extend of the holder's own key (or redislock's re-obtain)
		// checks its side record against it. So no read from disk.
		newest, known = 0, true
	}
	var candidate uint64
	if err == nil && known && v.Mode.grants() {
		candidate, err = m.nextToken(true) // a candidate drawn and not sent is skipped
	}
	if err != nil || !known {
		m.serial.unlock(v.Key, turn)
		return false
	}
	x := &valueWriting{m: m, ctx: ctx, v: v, side: side, clientAddr: clientAddr, received: received, evictable: evictable, turn: turn, done: done}
	x.g.candidate = candidate
	m.valueWriteCall(&x.g, v, side, clientAddr, newest)
	if !runner.StartThen(&x.kept, v.Key, x.g.call, true, x) {
		m.serial.unlock(v.Key, turn)
		return false
	}
	return true
}

// valueWriting is one RecipeValueWriteNow in flight: RecipeValueWrite's
// arguments and attempt, and the write's settling.
type valueWriting struct {
	kept lockwriter.Write // its script's write (StartThen keeps it here: no allocation of its own)
	settling
	m                *Manager
	ctx              context.Context
	v                ValueWrite
	side, clientAddr string
	received         time.Time
	evictable        bool
	turn             *serialEntry
	done             func(pttl int64, err error)

	g valueGrant
}

// ReplyIn is the script's reply (on the lock writer's goroutine).
func (x *valueWriting) ReplyIn(w *lockwriter.Write) {
	g := &x.g
	g.write = w
	err := twinReply(w, g.read)
	switch {
	case err != nil || g.kind == kindTokenAhead:
		go x.attempted(err) // asks again, or counts an unknown outcome: it waits
	case g.kind == kindGranted || g.kind == kindRearmed:
		x.m.settleThen(&x.settling, w, g.kind == kindGranted, x.v.Key, g.token, x)
	default: // busy, not held, or a kind it does not know: nothing waits
		x.attempted(nil)
	}
}

// verdict judges the write once its steps are in (settleValueWrite's).
func (x *valueWriting) verdict() error {
	return x.m.valueVerdict(&x.g, x.v, x.received, x.reserveErr)
}

// settle is settleValueVerdict for the write.
func (x *valueWriting) settle(verdict error) {
	x.finish(0, x.m.settleValueVerdict(x.ctx, &x.g, x.v, verdict, x.reserveErr == nil, x.clientAddr, x.evictable))
}

// attempted finishes the write as RecipeValueWrite does (on a goroutine of
// its own where it may wait).
func (x *valueWriting) attempted(err error) {
	x.finish(x.m.valueAttempted(x.ctx, &x.g, err, x.v, x.side, x.clientAddr, x.received, x.evictable))
}

// finish ends the key's turn and answers.
func (x *valueWriting) finish(pttl int64, err error) {
	x.m.serial.unlock(x.v.Key, x.turn)
	x.done(pttl, err)
}

// RecipeValueReleaseNow is RecipeValueRelease for a caller that must not
// block, as ReleaseNow is Release: done runs once with its outcome, on the
// lock writer's goroutine. It returns false, having done nothing, when the
// key's turn is taken or the writer would wait: the caller calls
// RecipeValueRelease.
func (m *Manager) RecipeValueReleaseNow(key, holder string, done func(ValueReleased, error)) bool {
	runner, ok := m.opts.Scripts.(nowRunner)
	if !ok {
		return false
	}
	turn, ok := m.serial.tryLock(key)
	if !ok {
		return false
	}
	x := &valueReleasing{m: m, key: key, turn: turn, done: done}
	if !runner.StartThen(&x.kept, key, m.valueReleaseCall(key, m.recordKey(key), holder), false, x) {
		m.serial.unlock(key, turn)
		return false
	}
	return true
}

// valueReleasing is one RecipeValueReleaseNow in flight.
type valueReleasing struct {
	kept lockwriter.Write // its script's write (StartThen keeps it here: no allocation of its own)
	m    *Manager
	key  string
	turn *serialEntry
	done func(ValueReleased, error)
}

// ReplyIn is the script's reply (on the lock writer's goroutine).
func (x *valueReleasing) ReplyIn(w *lockwriter.Write) {
	found, err := x.m.valueReleased(x.key, w)
	x.m.serial.unlock(x.key, x.turn)
	x.done(found, err)
}

// RecipeRenewNow is RecipeRenew (Redisson's watchdog: one batch of its
// holder's locks) for a caller that must not block: done is told
// RecipeRenew's outcome once, when the last lock's renewal is judged. It
// returns false, having done nothing, when the authority refuses, or any
// lock's turn is taken, its guard refuses or its newest token is not
// cached, or the writer would wait: the caller calls RecipeRenew.
func (m *Manager) RecipeRenewNow(ctx context.Context, locks []RecipeLock, lease time.Duration, received time.Time, done func(held []bool, err error)) bool {
	if len(locks) == 0 {
		return false
	}
	b := &renewBatch{m: m, ctx: ctx, held: make([]bool, len(locks)), errs: make([]error, len(locks)), done: done, lease: lease, received: received, now: time.Now()}
	b.locks = make([]hashRenewing, len(locks))
	var runner nowRunner
	for i, l := range locks {
		x := &b.locks[i]
		x.b, x.i, x.key, x.side, x.holder = b, i, l.Key, m.recordKey(l.Key), l.Holder
		var ok bool
		runner, x.evictable, x.turn, ok = m.leaseTurn(x.key, x.side)
		if !ok {
			b.unlockTo(i)
			return false
		}
		newest, known, err := m.opts.Store.NewestCached(x.key)
		if err != nil || !known {
			b.unlockTo(i + 1)
			return false
		}
		x.call = m.hashRenewCall(x.key, x.side, x.holder, lease, newest, b.now)
	}
	// Every turn is held before the first write goes: a batch either
	// starts whole, or leaves nothing behind for RecipeRenew to meet.
	b.out.Store(int32(len(locks)))
	for i := range b.locks {
		x := &b.locks[i]
		if !runner.StartThen(&x.kept, x.key, x.call, true, x) {
			if i == 0 {
				b.unlockTo(len(locks))
				return false
			}
			// Refused half-way (the writer's queue filled): this lock
			// and the ones after it are answered as the blocking course
			// would answer them, on a goroutine of their own.
			rest := b.locks[i:]
			go func() {
				for j := range rest {
					rest[j].renewBlocking()
				}
			}()
			break
		}
	}
	return true
}

// renewBatch is one RecipeRenewNow in flight: each lock's renewal, and
// done, told once the last is judged.
type renewBatch struct {
	m             *Manager
	ctx           context.Context
	lease         time.Duration
	received, now time.Time
	locks         []hashRenewing
	held          []bool
	errs          []error      // each lock's; done is told the first, as RecipeRenew
	out           atomic.Int32 // renewals not yet judged
	done          func(held []bool, err error)
}

// unlockTo gives back the turns of the first n locks (a batch that did not
// start).
func (b *renewBatch) unlockTo(n int) {
	for i := range n {
		b.m.serial.unlock(b.locks[i].key, b.locks[i].turn)
	}
}

// hashRenewing is one lock of a renewBatch: renewHash's steps as
// callbacks.
type hashRenewing struct {
	kept              lockwriter.Write // its script's write (StartThen keeps it here: no allocation of its own)
	b                 *renewBatch
	i                 int
	key, side, holder string
	evictable         bool
	turn              *serialEntry
	call              lockwriter.ScriptCall
	write             *lockwriter.Write
	arr               []any // the script's reply: the lease's state before (undo's arguments) and its token
}

// ReplyIn is the renewal script's reply (on the lock writer's goroutine).
func (x *hashRenewing) ReplyIn(w *lockwriter.Write) {
	x.write = w
	arr, err := hashRenewReplied(w)
	if err != nil || arr == nil {
		x.judged(false, err) // failed, or not held
		return
	}
	x.arr = arr
	w.AcksThen(x)
}

// AcksIn judges the renewal once its WAIT's count is in, as renewHash
// does; a shortfall's undo waits on Redis, so it runs on a goroutine.
func (x *hashRenewing) AcksIn() {
	m := x.b.m
	acked, err := x.write.Acks()
	switch {
	case err != nil:
		x.judged(false, err) // the renewal may stand: nothing to undo
	case acked < m.opts.MinReplicas:
		go func() { x.judged(false, m.undoHashRenewal(x.b.ctx, x.write, x.call.Keys, x.holder, x.arr, acked)) }()
	default:
		m.rearmedSide(x.key, x.side, x.arr[3], x.b.now.Add(x.b.lease), x.evictable)
		x.judged(m.renewalInTime(x.b.received, x.b.now, x.b.lease))
	}
}

// renewBlocking renews the lock by renewHash's own course (its turn is
// held, so that course's is taken here), and judges it.
func (x *hashRenewing) renewBlocking() {
	m := x.b.m
	m.serial.unlock(x.key, x.turn)
	x.turn = nil
	held, err := m.renewHash(x.b.ctx, RecipeLock{Key: x.key, Holder: x.holder}, x.b.lease, x.b.received)
	x.judged(held, err)
}

// judged records the lock's outcome and gives back its turn; the last
// lock's tells done.
func (x *hashRenewing) judged(held bool, err error) {
	b := x.b
	if x.turn != nil {
		b.m.serial.unlock(x.key, x.turn)
	}
	// Each lock writes only its own entries; the counter's last step
	// orders them before done reads them.
	b.held[x.i], b.errs[x.i] = held, err
	if b.out.Add(-1) == 0 {
		for _, err := range b.errs {
			if err != nil {
				b.done(b.held, err)
				return
			}
		}
		b.done(b.held, nil)
	}
}
