package locks

import (
	"sync"
	"time"
)

// serializer runs one operation at a time per resource. Its memory is
// proportional to the resources with an operation in flight, not to every
// resource ever seen.
type serializer struct {
	mu      sync.Mutex
	entries map[string]*serialEntry
}

type serialEntry struct {
	turn chan struct{} // holds a token while someone has the resource
	refs int
}

// serialEntries recycles entries (with their channels) of resources whose
// last operation ended: most resources are locked once and forgotten, and a
// fresh entry per operation was three allocations of every lock cycle.
var serialEntries = sync.Pool{New: func() any { return &serialEntry{turn: make(chan struct{}, 1)} }}

// lock waits for the resource's turn; pass what it returns to unlock.
func (s *serializer) lock(resource string) *serialEntry {
	s.mu.Lock()
	if s.entries == nil {
		s.entries = make(map[string]*serialEntry)
	}
	e := s.entries[resource]
	if e == nil {
		e = serialEntries.Get().(*serialEntry)
		s.entries[resource] = e
	}
	e.refs++
	s.mu.Unlock()
	e.turn <- struct{}{}
	return e
}

// unlock ends the turn lock gave.
func (s *serializer) unlock(resource string, e *serialEntry) {
	<-e.turn
	s.mu.Lock()
	e.refs--
	done := e.refs == 0
	if done {
		delete(s.entries, resource)
	}
	s.mu.Unlock()
	if done {
		serialEntries.Put(e) // its channel is empty: the token was taken back above
	}
}

// waitQueue keeps, per resource, the acquires waiting for it in arrival
// order. Only the head waiter tries the lock: a release wakes it alone (no
// herd), and when it leaves, by grant or by timeout, the next one becomes
// head. While anyone waits, an acquire that does not wait may not take the
// resource past them (see acquireScript's ARGV[5]).
type waitQueue struct {
	mu     sync.Mutex
	queues map[string][]*waiter
}

type waiter struct {
	wake chan struct{} // capacity 1: a pending wake-up is never lost

	// What the wake-up was about, under waitQueue.mu: freed by a release
	// (try now), or promoted to head right after the previous head was
	// granted the lock for leaseHint (no use trying before a release or
	// that long). Trying needlessly would hold the resource's serializer
	// and make the holder's release wait behind a doomed attempt.
	freed     bool
	leaseHint time.Duration
	// ended, if set, ends the wait with it (endAll).
	ended error
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// endAll wakes every waiter to leave the line with err.
func (q *waitQueue) endAll(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, ws := range q.queues {
		for _, w := range ws {
			w.ended = err
			w.signal()
		}
	}
}

// endedBy is the error endAll ended w's wait with, if any.
func (q *waitQueue) endedBy(w *waiter) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return w.ended
}

// join appends a waiter for resource, or returns nil if max already wait.
func (q *waitQueue) join(resource string, max int) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queues[resource]) >= max {
		return nil
	}
	if q.queues == nil {
		q.queues = make(map[string][]*waiter)
	}
	w := &waiter{wake: make(chan struct{}, 1)}
	q.queues[resource] = append(q.queues[resource], w)
	return w
}

// leave removes w; if it was the head, the next waiter is woken. granted is
// the lease w was just granted, 0 if it leaves without the lock.
func (q *waitQueue) leave(resource string, w *waiter, granted time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.queues[resource]
	for i, x := range ws {
		if x != w {
			continue
		}
		ws = append(ws[:i], ws[i+1:]...)
		if len(ws) == 0 {
			delete(q.queues, resource)
			return
		}
		q.queues[resource] = ws
		if i == 0 {
			ws[0].leaseHint = granted
			ws[0].signal()
		}
		return
	}
}

// wakeHead tells the first waiter that the resource was freed.
func (q *waitQueue) wakeHead(resource string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if ws := q.queues[resource]; len(ws) > 0 {
		ws[0].freed = true
		ws[0].signal()
	}
}

// news reports whether w is first in line, and takes what its last wake-ups
// said: the resource was freed, or a lease was just granted ahead of it.
func (q *waitQueue) news(resource string, w *waiter) (head, freed bool, leaseHint time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ws := q.queues[resource]
	head = len(ws) > 0 && ws[0] == w
	freed, leaseHint = w.freed, w.leaseHint
	w.freed, w.leaseHint = false, 0
	return head, freed, leaseHint
}

// count returns how many acquires wait for resource.
func (q *waitQueue) count(resource string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queues[resource])
}
