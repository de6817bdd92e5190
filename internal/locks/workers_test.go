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

// TestWorkersIdleExit: a worker kept busy does not exit, however long it
// runs; one idle for a whole period does.
func TestWorkersIdleExit(t *testing.T) {
	w := newWorkers(1)
	w.idle = 30 * time.Millisecond
	var ran atomic.Int32
	for end := time.Now().Add(5 * w.idle); time.Now().Before(end); time.Sleep(w.idle / 10) {
		if n := w.running.Load(); n != 1 && ran.Load() > 0 {
			t.Fatalf("%d workers running between tasks of a stream, want the one kept busy", n)
		}
		done := make(chan struct{})
		w.run(func() { ran.Add(1); close(done) })
		<-done
	}
	for deadline := time.Now().Add(10 * time.Second); w.running.Load() != 0; time.Sleep(w.idle / 10) {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers still running 10s after their last task", w.running.Load())
		}
	}
	if ran.Load() < 10 {
		t.Fatalf("only %d tasks ran", ran.Load())
	}
}
