package locks

import (
	"sync"
	"sync/atomic"
	"testing"
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
