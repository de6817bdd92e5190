package tier

import (
	"fmt"
	"sync"
	"time"
)

// applyTimeout bounds how long an Apply may wait to be taken by raft's
// leader loop (not how long it waits to commit: leadership loss ends that).
const applyTimeout = 5 * time.Second

// Store is the tier's token state as the lock manager uses it
// (locks.TokenStore, whose contract it keeps): tokens come from the
// leader's committed window, a reservation is committed to a majority's
// logs before Reserve returns, and reads answer only after this node has
// confirmed it still leads. On any node but the ready leader every method
// that issues or reads refuses with an UnavailableError (-TRYAGAIN).
type Store struct{ n *Node }

// Store is n's TokenStore.
func (n *Node) Store() *Store { return &Store{n: n} }

// NextToken hands out the next token of the leader's window; the first
// past its end commits a new window (Window entry) first, and with
// Options.Shared writes its bound to the backend before any token of it is
// handed out (Leadership.Join).
func (s *Store) NextToken() (uint64, error) {
	n := s.n
	for {
		n.mu.Lock()
		switch {
		case !n.ready:
			n.mu.Unlock()
			return 0, n.notLeader()
		case n.opts.Shared && !n.joined:
			n.mu.Unlock()
			return 0, ErrNotShared
		case n.last < n.limit:
			n.last++
			t := n.last
			n.mu.Unlock()
			return t, nil
		}
		epoch, share := n.epoch, n.share
		n.mu.Unlock()
		// Rare (once per Window tokens): callers that crossed the end
		// together wait for one new window on windowMu.
		n.windowMu.Lock()
		var err error
		if n.stillEpoch(epoch) && n.exhausted() {
			err = n.newWindow(epoch, share)
		}
		n.windowMu.Unlock()
		if err != nil {
			return 0, err
		}
	}
}

// exhausted reports whether the window is used up.
func (n *Node) exhausted() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.last >= n.limit
}

// Floor is the state's floor.
func (s *Store) Floor() uint64 { return s.n.fsm.floorNow() }

// IssuedBound is the bound of every window the tier committed: no token
// of the tier's is above it (the lock manager's issuedBounder).
func (s *Store) IssuedBound() uint64 { return s.n.fsm.state().bound }

// Adopt commits a floor above token (tokens up to it may have been issued
// without the tier: an owner record carries one) and moves the counter
// above it.
func (s *Store) Adopt(token uint64) error {
	n := s.n
	n.mu.Lock()
	ready, epoch := n.ready, n.epoch
	n.mu.Unlock()
	if !ready {
		return n.notLeader()
	}
	n.windowMu.Lock()
	defer n.windowMu.Unlock()
	return n.adopt(epoch, token)
}

// Newest is resource's newest confirmed token (or the floor), answered
// only after a VerifyLeader round that began after the call.
func (s *Store) Newest(resource string) (uint64, error) {
	if err := s.n.verify.wait(); err != nil {
		return 0, err
	}
	return s.n.newest(resource)
}

// NewestCached is the leader's view without a leadership round and
// without I/O: the acquire path's offer, which a grant only replies after
// its Reserve is committed by this same leadership. ok is false when the
// state's cache does not have the resource (the lock manager then offers a
// token without knowing the newest).
func (s *Store) NewestCached(resource string) (uint64, bool, error) {
	if !s.n.Ready() {
		return 0, false, s.n.notLeader()
	}
	t, ok := s.n.newestCached(resource)
	return t, ok, nil
}

// Reserve commits that token may be issued for resource, and returns once
// a majority of the tier has it in its log. Concurrent Reserves share log
// entries (proposer) and log writes. An error whose outcome is unknown
// (leadership lost after the entry was sent) leaves a reservation the next
// leader may fold: the token then counts as issued.
//
// token must be one NextToken handed out: no Batch carries a token above
// this leader's window, nor one while, with Options.Shared, its window is
// not yet shared with the backend (invariant 8); such a Reserve is refused
// before it is queued.
func (s *Store) Reserve(resource string, token uint64) error {
	n := s.n
	n.mu.Lock()
	ready, term, epoch, limit := n.ready, n.term, n.epoch, n.limit
	unshared := n.opts.Shared && !n.joined
	n.mu.Unlock()
	switch {
	case !ready:
		return n.notLeader()
	case unshared:
		return ErrNotShared
	case token > limit:
		return fmt.Errorf("tier: token %d was not handed out by this leader (its window ends at %d); not reserved", token, limit)
	}
	done := make(chan error, 1)
	n.prop.submit(proposal{op: entry{kind: kindReserve, resource: resource, token: token, term: term}, epoch: epoch, done: done})
	return <-done
}

// Confirm makes token resource's newest: at once in this leader's view
// (the overlay), and in the state when the entry that carries it is
// applied (not awaited: the reservation is committed, and a lost Confirm
// is folded as issued by the next leader).
func (s *Store) Confirm(resource string, token uint64) error {
	n := s.n
	n.mu.Lock()
	ready, epoch := n.ready, n.epoch
	n.mu.Unlock()
	if !ready {
		return n.notLeader()
	}
	n.overlayMu.Lock()
	if token > n.overlay[resource] {
		n.overlay[resource] = token
	}
	n.overlayMu.Unlock()
	n.prop.submit(proposal{op: entry{kind: kindConfirm, resource: resource, token: token}, epoch: epoch})
	return nil
}

// Cancel drops a reservation (not awaited: a lost Cancel leaves the token
// counted as issued, the safe side).
func (s *Store) Cancel(resource string, token uint64) error {
	n := s.n
	n.mu.Lock()
	ready, epoch := n.ready, n.epoch
	n.mu.Unlock()
	if !ready {
		return n.notLeader()
	}
	n.prop.submit(proposal{op: entry{kind: kindCancel, resource: resource, token: token}, epoch: epoch})
	return nil
}

// newest is max(overlay, state, floor). The overlay is read first: an
// entry is dropped from it only after the state (Pebble and its cache) has
// its token, so whichever is read second has it.
func (n *Node) newest(resource string) (uint64, error) {
	o := n.overlaid(resource)
	t, err := n.fsm.newestOf(resource)
	return max(o, t), err
}

// overlaid is this leadership's newest Confirm of resource not yet
// applied (0: none).
func (n *Node) overlaid(resource string) uint64 {
	n.overlayMu.Lock()
	defer n.overlayMu.Unlock()
	return n.overlay[resource]
}

// newestCached is newest when the state's cache has the resource (its
// value is the state's; the overlay may add this leader's Confirms not yet
// applied). An overlay entry alone is not enough: it is a maximum only
// over this leadership's Confirms, and a Confirm of an earlier leadership
// of this node may arrive late, below what another leader confirmed since.
func (n *Node) newestCached(resource string) (uint64, bool) {
	o := n.overlaid(resource)
	t, cached := n.fsm.newestCached(resource)
	return max(o, t), cached
}

// confirmApplied drops an overlay entry the state now holds. Called on
// raft's FSM goroutine once the state and its cache have the Confirm
// (fsm.ApplyBatch).
func (n *Node) confirmApplied(resource string, token uint64) {
	n.overlayMu.Lock()
	if o, ok := n.overlay[resource]; ok && o <= token {
		delete(n.overlay, resource)
	}
	n.overlayMu.Unlock()
}

// VerifyLeader waits for a leadership round that began after the call,
// and fails unless this node is still the ready leader after it.
func (n *Node) VerifyLeader() error { return n.verify.wait() }

// verifier batches readers onto VerifyLeader rounds: every reader waits
// for a round that began after it arrived, and one round serves every
// reader that arrived before it began.
type verifier struct {
	node    *Node
	mu      sync.Mutex
	next    *round // collecting readers; begins when the running one ends
	running bool
	rounds  uint64 // rounds run, for tests and INFO
}

type round struct {
	done chan struct{}
	err  error
}

func (v *verifier) wait() error {
	n := v.node
	if !n.Ready() {
		return n.notLeader()
	}
	v.mu.Lock()
	r := v.next
	if r == nil {
		r = &round{done: make(chan struct{})}
		v.next = r
	}
	if !v.running {
		v.running = true
		go v.run()
	}
	v.mu.Unlock()
	<-r.done
	return r.err
}

// run runs rounds while readers wait for one.
func (v *verifier) run() {
	n := v.node
	for {
		v.mu.Lock()
		r := v.next
		v.next = nil
		if r == nil {
			v.running = false
			v.mu.Unlock()
			return
		}
		v.rounds++
		v.mu.Unlock()
		// The round begins here, after every reader in r arrived.
		n.mu.Lock()
		epoch := n.epoch
		n.mu.Unlock()
		err := n.fromRaft(n.raft.VerifyLeader().Error())
		if err == nil && (!n.Ready() || !n.stillEpoch(epoch)) {
			err = &UnavailableError{Lost: true}
		}
		r.err = err
		close(r.done)
	}
}

// Rounds is how many VerifyLeader rounds have run.
func (n *Node) Rounds() uint64 {
	n.verify.mu.Lock()
	defer n.verify.mu.Unlock()
	return n.verify.rounds
}
