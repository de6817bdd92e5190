package locks

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
)

// Lock requests finished where their steps complete.
//
// Acquire and Release wait on each step of a request in turn: the
// resource's turn, the script's reply, the token's fsync, the replicas'
// WAIT. Run on a worker goroutine, that is a hand-off to the worker and a
// wake-up of it at every step; on a machine whose cores are busy each is
// an OS thread's, and together they cost a lock cycle on the serve loop
// more than the goroutine per client they replaced (issue 24: 1.7-2.0
// context switches per cycle against 1.1-1.4). AcquireNow and ReleaseNow
// run the same steps as callbacks instead: the caller (the serve loop)
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
// functions (attempted, settleVerdict, releaseReplied), so the two courses
// cannot disagree.

// nowStore is a TokenStore that draws and reserves tokens without waiting
// (persist's): AcquireNow needs one.
type nowStore interface {
	// NextTokenNow is NextToken when it needs no I/O; ok false (and the
	// token drawn skipped) when it would.
	NextTokenNow() (token uint64, ok bool, err error)
	// ReserveThen is Reserve that returns at once (an error then is
	// Reserve's, done not run) and runs done with the outcome once the
	// reservation is durable, on the goroutine that made it so.
	ReserveThen(resource string, token uint64, done func(error)) error
}

// nowRunner is a ScriptRunner that runs a script without waiting for its
// reply (lockwriter.Writer.StartThen): then runs on the goroutine that
// reads it, or not at all when StartThen reports false.
type nowRunner interface {
	StartThen(key string, call lockwriter.ScriptCall, wantAcks bool, then func(*lockwriter.Write)) bool
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

// AcquireNow is AcquireGrant with no wait in line, for a caller that must
// not block: it starts the acquire and returns true, and done runs once
// with what AcquireGrant would have returned, on the goroutine that
// completes the request's last step (it must not block either). It
// returns false, having done nothing, when the request cannot start
// without waiting (the resource's turn is taken, acquires wait in line,
// the store or the writer would wait, or the guard or the authority
// refuses, which AcquireGrant then says): the caller calls AcquireGrant.
// ctx ends what waits on a rare course (see above).
func (m *Manager) AcquireNow(ctx context.Context, resource, owner, clientAddr string, ttl time.Duration, received time.Time, done func(Grant, error)) bool {
	_, stores := m.opts.Store.(nowStore)
	runner, runs := m.opts.Scripts.(nowRunner)
	if !stores || !runs || m.waiting.count(resource) > 0 {
		return false
	}
	keys := m.keys(resource)
	evictable, err := m.evictionGuard(keys[0])
	if err != nil {
		return false
	}
	turn, ok := m.serial.tryLock(resource)
	if !ok {
		return false
	}
	x := &acquiring{m: m, ctx: ctx, resource: resource, owner: owner, clientAddr: clientAddr, keys: keys,
		ttl: ttl, leaseFrom: received, evictable: evictable, turn: turn, done: done}
	if x.leaseFrom.IsZero() {
		x.leaseFrom = time.Now()
	}
	if x.a, err = m.acquireCall(resource, keys, owner, clientAddr, ttl, false, false, nil, true); err != nil ||
		!runner.StartThen(keys[0], x.a.call, true, x.replied) {
		m.serial.unlock(resource, turn) // a candidate drawn is skipped: tokens need not be consecutive
		return false
	}
	return true
}

// acquiring is one AcquireNow in flight: tryAcquire's arguments and
// attempt, and the steps still out.
type acquiring struct {
	m                           *Manager
	ctx                         context.Context
	resource, owner, clientAddr string
	keys                        []string
	ttl                         time.Duration
	leaseFrom                   time.Time
	evictable                   bool
	turn                        *serialEntry
	done                        func(Grant, error)

	a          attempt
	token      uint64
	reserveErr error        // the reservation's outcome; read once out is 0
	out        atomic.Int32 // steps out: the token's reservation, the replicas' WAIT
}

// replied is the script's reply (on the lock writer's goroutine).
func (x *acquiring) replied(w *lockwriter.Write) {
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
	if err != nil || a.kind != kindBusy && a.kind != kindGranted && a.kind != kindRearmed {
		go x.attempted(err) // asks again, or counts an unknown outcome: it waits
		return
	}
	switch a.kind {
	case kindBusy:
		x.finish(Grant{}, ErrBusy)
		return
	case kindRearmed:
		x.token = uint64(a.value) // the owner's existing grant, re-armed
		x.out.Store(1)
	case kindGranted:
		x.token = a.candidate
		if x.token <= a.newest {
			x.out.Store(1)
			break
		}
		// The fsync runs while Redis waits for the replicas.
		x.out.Store(2)
		if err := m.opts.Store.(nowStore).ReserveThen(x.resource, x.token, x.reserved); err != nil {
			x.reserveErr = err
			x.out.Add(-1)
		}
	}
	w.AcksThen(x.stepDone)
}

// reserved is the token's reservation's outcome (on the committer's
// goroutine).
func (x *acquiring) reserved(err error) {
	x.reserveErr = err
	x.stepDone()
}

// stepDone ends one step; the last judges the grant (settle's end).
func (x *acquiring) stepDone() {
	if x.out.Add(-1) != 0 {
		return
	}
	m, a := x.m, &x.a
	verdict := m.grantVerdict(a.write, a.start, x.reserveErr, m.replyBy(x.leaseFrom, x.ttl))
	if verdict != nil {
		go x.settle(verdict) // the grant is undone: that waits on Redis
		return
	}
	x.settle(nil)
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
	x.done(g, err)
}

// ReleaseNow is Release for a caller that must not block, as AcquireNow
// is AcquireGrant: done runs once with Release's outcome, on the lock
// writer's goroutine. It returns false, having done nothing, when
// acquires wait in line (Release hands the lock to the head), the
// resource's turn is taken or the writer would wait: the caller calls
// Release.
func (m *Manager) ReleaseNow(resource, owner string, done func(bool, error)) bool {
	runner, ok := m.opts.Scripts.(nowRunner)
	if !ok || m.waiting.count(resource) > 0 {
		return false
	}
	turn, ok := m.serial.tryLock(resource)
	if !ok {
		return false
	}
	keys := m.keys(resource)
	now := time.Now()
	call := m.releaseCall(keys, owner, nil, 0, now)
	if !runner.StartThen(keys[0], call, false, func(w *lockwriter.Write) {
		done(m.releaseReplied(resource, turn, nil, 0, 0, call, now, w))
	}) {
		m.serial.unlock(resource, turn)
		return false
	}
	return true
}
