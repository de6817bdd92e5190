package commands

import "time"

// workers runs lock requests on goroutines that outlive them. A lock request
// goes deep (Redis, Pebble) and grows its goroutine's stack; a fresh
// goroutine per request paid for that growth every time (about 9% of the
// proxy's CPU in a lock benchmark). An idle worker takes the next request;
// when none is idle a new one starts, so a request never waits for a worker
// (some wait minutes for a lock), and workers idle for a while exit.
type workers struct {
	tasks chan func() // unbuffered: a send succeeds only if a worker is idle
}

const workerIdle = 10 * time.Second

func newWorkers() *workers { return &workers{tasks: make(chan func())} }

func (w *workers) run(task func()) {
	select {
	case w.tasks <- task:
	default:
		go w.loop(task)
	}
}

func (w *workers) loop(task func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		task()
		idle.Reset(workerIdle)
		select {
		case task = <-w.tasks:
		case <-idle.C:
			return
		}
	}
}
