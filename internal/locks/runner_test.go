package locks

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10s", what)
	}
}

// TestRunnerOrder: one connection's requests for a resource run in the
// order sent, one at a time; requests for other resources do not wait.
func TestRunnerOrder(t *testing.T) {
	r := NewRunner(time.Second)
	var c ConnRequests
	var mu sync.Mutex
	var order []int
	release := make(chan struct{})
	done := make(chan struct{}, 4)
	for i := range 3 {
		r.Run(&c, "x", 0, func(ctx context.Context) {
			if i == 0 {
				<-release
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			done <- struct{}{}
		})
	}
	if !c.Busy("x") || c.Busy("y") {
		t.Fatalf("Busy: x %v, y %v", c.Busy("x"), c.Busy("y"))
	}
	r.Run(&c, "y", 0, func(context.Context) { done <- struct{}{} })
	within(t, done, "a request for another resource, while x's first is held")
	close(release)
	for range 3 {
		within(t, done, "x's requests")
	}
	if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
		t.Fatalf("x's requests ran in order %v", order)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Busy("x") {
		if time.Now().After(deadline) {
			t.Fatal("x still busy after its requests ended")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRunnerWaitsHoldNoWorker: a request that may wait long, or that is
// queued behind the connection's previous one for its resource, does not
// hold one of the bounded workers, so other requests still run.
func TestRunnerWaitsHoldNoWorker(t *testing.T) {
	r := &Runner{workers: newWorkers(1), waiters: newWorkers(0), slack: time.Second}
	var c ConnRequests
	release := make(chan struct{})
	defer close(release)
	r.Run(&c, "x", time.Minute, func(context.Context) { <-release }) // LOCK.ACQUIRE … WAIT
	r.Run(&c, "x", 0, func(context.Context) {})                      // behind it
	done := make(chan struct{})
	r.Run(&c, "y", 0, func(context.Context) { close(done) })
	within(t, done, "a request with the one worker free")
}

// TestRunnerCancel: the connection going away cancels its requests, and
// each request's context allows its own wait plus the slack; a request
// that starts later runs under a live context.
func TestRunnerCancel(t *testing.T) {
	r := NewRunner(time.Second)
	var c ConnRequests
	started, ended := make(chan struct{}), make(chan struct{})
	var deadline time.Time
	before := time.Now()
	r.Run(&c, "x", time.Minute, func(ctx context.Context) {
		deadline, _ = ctx.Deadline()
		close(started)
		<-ctx.Done()
		close(ended)
	})
	within(t, started, "the request")
	if min := before.Add(time.Minute + 11*time.Second); deadline.Before(min) {
		t.Errorf("deadline %v, want at least the wait and the slack after %v", deadline, before)
	}
	quickStarted, quick := make(chan struct{}), make(chan struct{})
	r.Run(&c, "y", 0, func(ctx context.Context) { close(quickStarted); <-ctx.Done(); close(quick) })
	within(t, quickStarted, "the request that does not wait for the lock")
	c.CancelAll()
	within(t, ended, "the cancelled request")
	within(t, quick, "the cancelled request that does not wait for the lock")
	live := make(chan error, 1)
	r.Run(&c, "x", 0, func(ctx context.Context) { live <- ctx.Err() })
	if err := <-live; err != nil {
		t.Errorf("a request started after CancelAll: context %v, want live", err)
	}
}

// TestRunnerGo: Go runs its task on a worker.
func TestRunnerGo(t *testing.T) {
	done := make(chan struct{})
	NewRunner(0).Go(func() { close(done) })
	within(t, done, "the task")
}

// endedWhenAnswered is a reply's completer that records whether, at the
// moment the reply was completed, its connection's request for resource
// had ended (a client told may send its next request at once).
type endedWhenAnswered struct {
	c        *ConnRequests
	resource string
	ended    chan bool
}

func (e endedWhenAnswered) Complete(*resp.Reply) { e.ended <- !e.c.Busy(e.resource) }

// TestRunnerEndsBeforeAnswering: a request's reply is completed only after
// the request has ended, so the client's next request for the resource,
// sent on reading the reply, never finds it running (and queues behind a
// request already done, on a worker where it could have run as callbacks).
// Mutation: completing the reply before Finished (the order until stop
// 34, which CI's TestRecipesOnTheLoop caught once) fails it.
func TestRunnerEndsBeforeAnswering(t *testing.T) {
	r := NewRunner(time.Second)
	var c ConnRequests
	e := endedWhenAnswered{c: &c, resource: "x", ended: make(chan bool, 1)}
	r.Reply(&c, "x", 0, resp.NewReplyTo(e), func(_ context.Context, dst []byte) ([]byte, error) {
		return append(dst, ":1\r\n"...), nil
	})
	select {
	case ended := <-e.ended:
		if !ended {
			t.Fatal("the reply was completed while its request still ran")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reply within 10s")
	}
}
