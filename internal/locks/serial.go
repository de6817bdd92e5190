package locks

import "sync"

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

// lock waits for the resource's turn; the returned func ends it.
func (s *serializer) lock(resource string) (unlock func()) {
	s.mu.Lock()
	if s.entries == nil {
		s.entries = make(map[string]*serialEntry)
	}
	e := s.entries[resource]
	if e == nil {
		e = &serialEntry{turn: make(chan struct{}, 1)}
		s.entries[resource] = e
	}
	e.refs++
	s.mu.Unlock()
	e.turn <- struct{}{}
	return func() {
		<-e.turn
		s.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(s.entries, resource)
		}
		s.mu.Unlock()
	}
}

// waitList lets acquires that wait for a busy resource sleep until a release
// made through this proxy frees it (expiries are caught by the sleeper's own
// timer, set from the lease's remaining time).
type waitList struct {
	mu      sync.Mutex
	entries map[string]*waitEntry
}

type waitEntry struct {
	freed   chan struct{}
	waiters int
}

// add registers a waiter and returns the channel closed at the next release.
func (w *waitList) add(resource string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.entries == nil {
		w.entries = make(map[string]*waitEntry)
	}
	e := w.entries[resource]
	if e == nil {
		e = &waitEntry{freed: make(chan struct{})}
		w.entries[resource] = e
	}
	e.waiters++
	return e.freed
}

// done unregisters a waiter that stopped waiting.
func (w *waitList) done(resource string, freed <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.entries[resource]; e != nil && e.freed == freed {
		if e.waiters--; e.waiters == 0 {
			delete(w.entries, resource)
		}
	}
}

// wake tells every waiter of resource that it was freed.
func (w *waitList) wake(resource string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.entries[resource]; e != nil {
		close(e.freed)
		delete(w.entries, resource)
	}
}

// count returns how many acquires wait for resource.
func (w *waitList) count(resource string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.entries[resource]; e != nil {
		return e.waiters
	}
	return 0
}
