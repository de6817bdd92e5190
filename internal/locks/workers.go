package locks

import (
	"sync/atomic"
	"time"
)

// workers runs lock requests on goroutines that outlive them. A lock request
// goes deep (Redis, Pebble) and grows its goroutine's stack; a fresh
// goroutine per request paid for that growth every time (about 9% of the
// proxy's CPU in a lock benchmark). An idle worker takes the next request;
// when none is idle a new one starts, up to maxWorkers; beyond that requests
// wait in a backlog, oldest first. Workers idle for a while exit.
//
// Unbounded, a load of pipelined LOCK.ACQUIREs (64 connections × 256 each)
// ran 14,000 workers whose grown stacks left the proxy at 580 MiB of RSS.
// The bound is well above what fills the lock writers' batches (256 scripts
// share one WAIT). Requests that may wait for long (LOCK.ACQUIRE … WAIT, or
// one queued behind another request of its connection for the same
// resource) never take a worker while they wait: a few thousand of them
// would hold every worker and stall all other lock requests (see Runner.Run).
type workers struct {
	handoff chan func() // unbuffered: a send succeeds only if a worker is idle
	backlog chan func() // tasks waiting while max workers are busy
	running atomic.Int32
	max     int32 // 0: no bound
	// idleTimer makes a worker's idle clock (a time.Timer of workerIdle;
	// a test's own clock in workers_test.go).
	idleTimer func() idleTimer
}

// idleTimer is what a worker needs of its idle clock.
type idleTimer interface {
	Fired() <-chan time.Time
	Reset()
	Stop()
}

// realTimer is a time.Timer of workerIdle.
type realTimer struct{ t *time.Timer }

func newRealTimer() idleTimer               { return realTimer{time.NewTimer(workerIdle)} }
func (r realTimer) Fired() <-chan time.Time { return r.t.C }
func (r realTimer) Reset()                  { r.t.Reset(workerIdle) }
func (r realTimer) Stop()                   { r.t.Stop() }

const (
	maxWorkers = 512
	// maxBacklog bounds the queued tasks; beyond it the client connection
	// that submits one waits (backpressure, as a full socket would).
	maxBacklog = 1 << 14
	workerIdle = 10 * time.Second
)

// newWorkers returns a pool of at most max workers (0: no bound, for
// requests that mostly wait, such as LOCK.ACQUIRE … WAIT: they cost a
// goroutine each whatever the pool).
func newWorkers(max int32) *workers {
	return &workers{handoff: make(chan func()), backlog: make(chan func(), maxBacklog), max: max, idleTimer: newRealTimer}
}

func (w *workers) run(task func()) {
	select {
	case w.handoff <- task:
		return
	default:
	}
	if n := w.running.Add(1); w.max == 0 || n <= w.max {
		go w.loop(task)
		return
	}
	w.running.Add(-1)
	w.backlog <- task
}

// loop runs task, then the tasks handed to it, until it has been idle for
// a whole period of its idle timer (workerIdle). The timer runs on, and is
// looked at only when it fires: a worker that ran a task since is not
// idle, and looks again a period later. (Resetting the timer after every
// task took the runtime's timer lock twice per lock request.)
func (w *workers) loop(task func()) {
	idle := w.idleTimer()
	defer idle.Stop()
	for {
		ran := false
		for task != nil {
			task()
			ran = true
			task = nil
			select { // the backlog first: its tasks are older than any new one
			case task = <-w.backlog:
			default:
			}
		}
		select {
		case task = <-w.handoff:
		case task = <-w.backlog:
		case <-idle.Fired():
			idle.Reset()
			if ran {
				continue
			}
			w.running.Add(-1)
			// run may have queued a task while every worker was counted
			// busy: take it rather than leave it stranded.
			select {
			case task = <-w.backlog:
				w.running.Add(1)
			default:
				return
			}
		}
	}
}
