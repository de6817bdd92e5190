package locks

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWorkersBounded: with every worker busy, further tasks queue instead
// of starting goroutines, and all of them run once the workers free up.
func TestWorkersBounded(t *testing.T) {
	w := newWorkers(3)
	release := make(chan struct{})
	var busy, most atomic.Int32
	var done sync.WaitGroup
	for range 100 {
		done.Add(1)
		w.run(func() {
			defer done.Done()
			n := busy.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-release
			busy.Add(-1)
		})
	}
	if got := w.running.Load(); got != 3 {
		t.Fatalf("%d workers running with 100 blocked tasks, want the bound 3", got)
	}
	close(release)
	done.Wait()
	if m := most.Load(); m > 3 {
		t.Fatalf("%d tasks ran at once, want at most 3", m)
	}
}

// testTimer is an idle clock a test fires by hand; every Reset (the
// worker has looked at a firing) is announced on looked.
type testTimer struct {
	fire   chan time.Time
	looked chan struct{}
}

func (t *testTimer) Fired() <-chan time.Time { return t.fire }
func (t *testTimer) Reset()                  { t.looked <- struct{}{} }
func (t *testTimer) Stop()                   {}

// TestWorkersIdleExit: a worker whose idle period ran out with a task run
// in it does not exit; one that ran none in a whole period does.
func TestWorkersIdleExit(t *testing.T) {
	w := newWorkers(1)
	timers := make(chan *testTimer, 1)
	w.idleTimer = func() idleTimer {
		tt := &testTimer{fire: make(chan time.Time), looked: make(chan struct{})}
		timers <- tt
		return tt
	}
	ran := make(chan struct{})
	task := func() { ran <- struct{}{} }
	w.run(task)
	<-ran
	tt := <-timers
	fire := func() { tt.fire <- time.Time{}; <-tt.looked }

	fire() // the task ran in this period
	if n := w.running.Load(); n != 1 {
		t.Fatalf("%d workers after a period with a task, want the one", n)
	}
	w.run(task) // handed to the waiting worker
	<-ran
	fire()
	if n := w.running.Load(); n != 1 {
		t.Fatalf("%d workers after a second period with a task, want the one", n)
	}
	fire() // a whole period without one: it exits
	for deadline := time.Now().Add(10 * time.Second); w.running.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers still running after an idle period", w.running.Load())
		}
	}
}
