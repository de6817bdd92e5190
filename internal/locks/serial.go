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
	e := s.entry(resource)
	e.refs++
	s.mu.Unlock()
	e.turn <- struct{}{}
	return e
}

// entry is resource's entry, made if it has none. Under mu.
func (s *serializer) entry(resource string) *serialEntry {
	if s.entries == nil {
		s.entries = make(map[string]*serialEntry)
	}
	e := s.entries[resource]
	if e == nil {
		e = serialEntries.Get().(*serialEntry)
		s.entries[resource] = e
	}
	return e
}

// tryLock is lock for a caller that must not wait: false, with nothing
// taken, if someone has the resource's turn.
func (s *serializer) tryLock(resource string) (*serialEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(resource)
	select {
	case e.turn <- struct{}{}: // never waits: the channel holds one token
		e.refs++
		return e, true
	default:
		return nil, false // taken: someone holds a ref, so the entry stays
	}
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
// herd), or grants it the lock outright (a handoff, handoff.go), and when
// it leaves, by grant or by timeout, the next one becomes head. While
// anyone waits, an acquire that does not wait may not take the resource
// past them (see opAcquire's others-waiting argument).
type waitQueue struct {
	mu    sync.Mutex
	lines map[string]*line
}

// line is one resource's waiters, and the tokens reserved ahead for their
// grants (handoff.go).
type line struct {
	waiters []*waiter
	// tokens are reserved ahead, in the order drawn (ascending): the next
	// grant to a waiter takes tokens[0]. reserving: a refill is under
	// way; noAhead: one failed, the line does without. headWaits: the
	// head found the resource free but no token, and waits for the
	// refill under way rather than draw one of its own (which would make
	// the refill's older than the newest: never to be used).
	tokens                        []uint64
	reserving, noAhead, headWaits bool
}

type waiter struct {
	wake chan struct{} // capacity 1: a pending wake-up is never lost

	// What the acquire asks for, for a release that hands it the lock.
	owner, addr string
	ttl         time.Duration

	// The rest is under waitQueue.mu.

	// What the wake-up was about: freed by a release (try now), or
	// promoted to head right after the previous head was granted the lock
	// for leaseHint (no use trying before a release or that long). Trying
	// needlessly would hold the resource's serializer and make the
	// holder's release wait behind a doomed attempt.
	freed     bool
	leaseHint time.Duration
	// ended, if set, ends the wait with it (endAll).
	ended error

	// idle: asleep in its wait, so a release may claim it; leaving: it
	// is on its way out of the line and may not be claimed. claimed: a
	// release is handing it the lock, and it may not leave before handed
	// says how that went.
	idle, leaving, claimed bool
	handed                 *handoff
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
	for _, l := range q.lines {
		for _, w := range l.waiters {
			w.ended = err
			w.signal()
		}
	}
}

// join appends a waiter for resource, or returns nil if max already wait.
func (q *waitQueue) join(resource, owner, addr string, ttl time.Duration, max int) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lines[resource]
	if l == nil {
		if max <= 0 {
			return nil
		}
		if q.lines == nil {
			q.lines = make(map[string]*line)
		}
		l = &line{}
		q.lines[resource] = l
	}
	if len(l.waiters) >= max {
		return nil
	}
	w := &waiter{wake: make(chan struct{}, 1), owner: owner, addr: addr, ttl: ttl}
	l.waiters = append(l.waiters, w)
	return w
}

// leave removes w; if it was the head, the next waiter is woken and told
// granted, the lease w was just granted (0 if it leaves without the lock).
// When the line empties, its tokens reserved ahead are returned: the
// caller cancels them. The caller has made sure no release still claims w
// (stop).
func (q *waitQueue) leave(resource string, w *waiter, granted time.Duration) (unused []uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lines[resource]
	if l == nil {
		return nil
	}
	for i, x := range l.waiters {
		if x != w {
			continue
		}
		l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
		if len(l.waiters) == 0 {
			delete(q.lines, resource)
			return l.tokens
		}
		if i == 0 {
			l.waiters[0].leaseHint = granted
			l.waiters[0].signal()
		}
		return nil
	}
	return nil
}

// wakeHead tells the first waiter that the resource was freed.
func (q *waitQueue) wakeHead(resource string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.lines[resource]; l != nil {
		l.waiters[0].freed = true
		l.waiters[0].signal()
	}
}

// sleep marks w asleep in its wait: from now a release may claim it.
func (q *waitQueue) sleep(w *waiter) {
	q.mu.Lock()
	w.idle = true
	q.mu.Unlock()
}

// news is what a waiter learns when it wakes (waitQueue.news).
type news struct {
	pos       int // its place in line, 0 the head
	freed     bool
	leaseHint time.Duration
	ended     error
	handed    *handoff
}

// news marks w awake (no release may claim it now), and takes what its
// last wake-ups said. If a release claimed it, it first waits for that
// release to say how its handoff went.
func (q *waitQueue) news(resource string, w *waiter) (n news) {
	q.lockSettled(w)
	defer q.mu.Unlock()
	w.idle = false
	n.pos = -1
	if l := q.lines[resource]; l != nil {
		for i, x := range l.waiters {
			if x == w {
				n.pos = i
				break
			}
		}
	}
	n.freed, n.leaseHint, n.ended, n.handed = w.freed, w.leaseHint, w.ended, w.handed
	w.freed, w.leaseHint = false, 0
	return n
}

// lockSettled takes q.mu once no release has w claimed without having said
// how its handoff went: a claimed waiter waits for that outcome (its wake)
// before it reads or changes its state.
func (q *waitQueue) lockSettled(w *waiter) {
	q.mu.Lock()
	for w.claimed && w.handed == nil {
		q.mu.Unlock()
		<-w.wake
		q.mu.Lock()
	}
}

// stop marks w leaving, so that no release claims it from now; if one
// already has, it waits for that release's outcome and returns it (nil if
// there was none).
func (q *waitQueue) stop(w *waiter) *handoff {
	q.lockSettled(w)
	defer q.mu.Unlock()
	w.idle, w.leaving = false, true
	return w.handed
}

// claim returns the head of resource's line, claimed for a handoff, and
// the token reserved ahead for it (taken from the line), if the head
// sleeps in its wait, is not leaving, and a token is there; nil
// otherwise. The caller holds the resource's turn and ends the claim with
// hand or unclaim.
func (q *waitQueue) claim(resource string) (*waiter, uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lines[resource]
	if l == nil || len(l.tokens) == 0 {
		return nil, 0
	}
	w := l.waiters[0]
	if !w.idle || w.leaving || w.claimed || w.ended != nil {
		return nil, 0
	}
	w.claimed = true
	t := l.tokens[0]
	l.tokens = l.tokens[1:]
	return w, t
}

// hand gives a claimed waiter the outcome of its handoff and wakes it.
func (q *waitQueue) hand(w *waiter, h *handoff) {
	q.mu.Lock()
	w.handed = h
	w.signal()
	q.mu.Unlock()
}

// unclaim ends a claim that handed w nothing: freed if the release freed
// the resource (w then tries itself). unused, if not 0, is the claimed
// token, not used and still good: it goes back to the front of the line's.
func (q *waitQueue) unclaim(resource string, w *waiter, freed bool, unused uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.claimed = false
	if freed {
		w.freed = true
	}
	w.signal()
	if unused != 0 {
		q.giveBackLocked(resource, unused)
	}
}

// takeToken takes the next token reserved ahead for resource's line, for
// its head's own attempt (0 if none); giveBack returns one unused. If
// there is none but a refill is under way, it returns wait: the head is
// woken as if freed when the refill is in.
func (q *waitQueue) takeToken(resource string) (token uint64, wait bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lines[resource]
	if l == nil {
		return 0, false
	}
	if len(l.tokens) == 0 {
		l.headWaits = l.reserving
		return 0, l.reserving
	}
	t := l.tokens[0]
	l.tokens = l.tokens[1:]
	return t, false
}

// giveBack returns an unused token to the front of resource's line; if
// the line is gone, the caller cancels it (false).
func (q *waitQueue) giveBack(resource string, token uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.giveBackLocked(resource, token)
}

func (q *waitQueue) giveBackLocked(resource string, token uint64) bool {
	l := q.lines[resource]
	if l == nil {
		return false
	}
	l.tokens = append([]uint64{token}, l.tokens...)
	return true
}

// dropStale takes out of resource's line every token reserved ahead at or
// below newest (drawn before a grant of a newer token: never to be
// issued), for the caller to cancel.
func (q *waitQueue) dropStale(resource string, newest uint64) (stale []uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lines[resource]
	if l == nil {
		return nil
	}
	for len(l.tokens) > 0 && l.tokens[0] <= newest {
		stale = append(stale, l.tokens[0])
		l.tokens = l.tokens[1:]
	}
	return stale
}

// refill reports how many tokens resource's line (returned) should
// reserve ahead now: none while it has low or more, or a refill is under
// way; else up to high, at most one per waiter. If any, it marks the line
// reserving: the caller then reserves them and hands them over with
// refilled.
func (q *waitQueue) refill(resource string, low, high int) (*line, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lines[resource]
	if l == nil || l.reserving || l.noAhead || len(l.tokens) >= min(low, len(l.waiters)) {
		return nil, 0
	}
	need := min(high, len(l.waiters)) - len(l.tokens)
	if need <= 0 {
		return nil, 0
	}
	l.reserving = true
	return l, need
}

// refilled appends the tokens a refill of l reserved (in the order drawn),
// and ends the refill; failed says it failed, and the line stops
// reserving ahead. If l is gone (its waiters all left), the tokens are
// returned for the caller to cancel.
func (q *waitQueue) refilled(resource string, l *line, tokens []uint64, failed bool) (unused []uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lines[resource] != l {
		return tokens
	}
	l.reserving = false
	l.noAhead = failed
	l.tokens = append(l.tokens, tokens...)
	if l.headWaits {
		l.headWaits = false
		l.waiters[0].freed = true
		l.waiters[0].signal()
	}
	return nil
}

// count returns how many acquires wait for resource.
func (q *waitQueue) count(resource string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.lines[resource]; l != nil {
		return len(l.waiters)
	}
	return 0
}
