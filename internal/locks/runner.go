package locks

import (
	"context"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Runner is the lock path's concurrency policy: it runs each lock request
// on a goroutine of its own, off its client connection's, since it waits on
// Redis, its replicas and the disk while the connection goes on dispatching
// the rest of the client's pipeline. Safe for concurrent use.
//
//   - Requests of one connection for one resource run in the order sent (a
//     pipelined ACQUIRE, RELEASE must not swap); requests for different
//     resources run side by side. (Replies leave in order regardless: that
//     is the connection's business.)
//   - They run on bounded workers (see workers), except those that may wait
//     for long: a LOCK.ACQUIRE … WAIT, or a request queued behind the
//     connection's previous one for its resource, never holds a worker
//     while it waits.
//   - Each runs under a context that ConnRequests.CancelAll ends when the
//     client goes away (a waiting acquire then leaves the line), and, for
//     one that may wait for the lock, that ends with its own timeout plus
//     one replica wait and some slack.
type Runner struct {
	workers *workers // lock requests that do not wait for the lock
	waiters *workers // LOCK.ACQUIRE … WAIT, which may wait long
	slack   time.Duration
}

// NewRunner returns a Runner. replicaTimeout is the longest WAIT of a lock
// write: each request's context allows for one beyond its own timeout.
func NewRunner(replicaTimeout time.Duration) *Runner {
	return &Runner{workers: newWorkers(maxWorkers), waiters: newWorkers(0), slack: replicaTimeout + 10*time.Second}
}

// ConnRequests is one client connection's lock requests in flight. The
// zero value is ready; it must not be copied after first use.
type ConnRequests struct {
	mu sync.Mutex
	// running has an entry for each resource with a request of the
	// connection in flight: the requests queued behind the one running,
	// in the order sent. The entry goes away when the last one finishes.
	// (A channel per request that the next one waited on was an
	// allocation of every lock request, queued or not.)
	running map[string][]queued
	// ctx is the context of the requests that start now (made with the
	// first), and cancel ends it: CancelAll ends every request running
	// under it at once, and the requests that start later get a fresh
	// one. (A context of its own per request, tracked in a map to be
	// cancelled, was three allocations of every lock request.)
	ctx    context.Context
	cancel context.CancelFunc
}

// queued is a request waiting for the connection's previous one for its
// resource: its task and the workers it runs on.
type queued struct {
	task func()
	on   *workers
}

// Run runs fn(ctx) for a request of c's connection for resource, after the
// connection's earlier requests for it, and returns at once. timeout is how
// long the request may wait for the lock (LOCK.ACQUIRE … WAIT), 0 for
// requests that do not wait. fn must answer the request itself.
func (r *Runner) Run(c *ConnRequests, resource string, timeout time.Duration, fn func(ctx context.Context)) {
	r.Reply(c, resource, timeout, nil, func(ctx context.Context, _ []byte) ([]byte, error) {
		fn(ctx)
		return nil, nil
	})
}

// Reply is Run for a request that p answers: fn appends its reply to dst
// (p.Buf) and returns it, or returns an error, and p is completed with
// them. (Completing p in a closure of the caller's, around fn, was one
// allocation of every lock request.) With p nil, fn answers the request
// itself, as Run's does.
func (r *Runner) Reply(c *ConnRequests, resource string, timeout time.Duration, p *resp.Reply, fn func(ctx context.Context, dst []byte) ([]byte, error)) {
	task := func() {
		// A request that may wait for the lock ends with its timeout; one
		// that does not needs no timer of its own (a timer per request
		// was 3-5% of the proxy's CPU on lock cycles): what it waits for
		// ends by itself (the lock connections' reply timeout, WAIT's own
		// timeout, the writer's queue draining), and its client going
		// away still cancels it.
		ctx := c.Context()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout+r.slack)
			defer cancel()
		}
		if p == nil {
			fn(ctx, nil)
			c.Finished(resource)
			return
		}
		p.Buf, p.Err = fn(ctx, p.Buf)
		// Ended before answered: a client told may send its next request
		// for the resource at once, which must not find this one running.
		c.Finished(resource)
		p.Done()
	}
	on := r.workers
	if timeout > 0 {
		// It may wait for a long time: never on one of the bounded
		// workers (see workers).
		on = r.waiters
	}
	// Queued behind the connection's previous request for the resource,
	// it takes a worker only when that one has finished.
	if c.start(resource, queued{task, on}, true) {
		on.run(task)
	}
}

// Crowded reports whether requests wait in the bounded workers' backlog
// beyond half of it: handing over one more may soon wait for room.
func (r *Runner) Crowded() bool { return len(r.workers.backlog) > maxBacklog/2 }

// Go runs task on one of the bounded workers: for another request that
// waits on Redis off its connection's goroutine (INFO), under the same
// bound as lock requests.
func (r *Runner) Go(task func()) { r.workers.run(task) }

// StartNow registers a request for resource that its caller runs itself
// without waiting (Manager.AcquireNow, ReleaseNow) rather than on a
// worker: false if an earlier request of the connection for resource is
// in flight (the caller then uses Runner.Reply, which queues behind it).
// After true, call Finished once the request is answered, or at once if
// it did not start.
func (c *ConnRequests) StartNow(resource string) bool {
	return c.start(resource, queued{}, false)
}

// Busy reports whether a request of the connection for resource is still
// running (or waiting for an earlier one).
func (c *ConnRequests) Busy(resource string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.running[resource]
	return ok
}

// CancelAll cancels every request of the connection still running: a
// waiting acquire leaves the line. Requests that have not started yet get
// a live context when they do.
func (c *ConnRequests) CancelAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
		c.ctx, c.cancel = nil, nil
	}
}

// Context is the context for a request of the connection that starts now
// (CancelAll ends it).
func (c *ConnRequests) Context() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithCancel(context.Background())
	}
	return c.ctx
}

// start registers a request for resource: true if it may run now, false
// if the connection's previous one for resource is in flight, behind which
// it is then queued if queue (else nothing is done).
func (c *ConnRequests) start(resource string, q queued, queue bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running == nil {
		c.running = make(map[string][]queued)
	}
	if waiting, busy := c.running[resource]; busy {
		if queue {
			c.running[resource] = append(waiting, q)
		}
		return false
	}
	c.running[resource] = nil // running now, none queued behind it
	return true
}

// Finished ends the request running for resource (Reply's, or one
// StartNow registered) and starts the next one
// queued behind it, if any. It starts it from a goroutine of its own, as
// a request's worker must not wait for a worker (run may, when the
// backlog is full).
func (c *ConnRequests) Finished(resource string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	waiting := c.running[resource]
	if len(waiting) == 0 {
		delete(c.running, resource)
		return
	}
	next := waiting[0]
	waiting[0] = queued{}
	c.running[resource] = waiting[1:]
	go next.on.run(next.task)
}
