package persist

import (
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

// Group commit: the Reserves that arrive while a synced commit is under
// way share the next one, in one Pebble batch (invariant 3).
//
// The first caller to find no group forming starts one; if no commit is
// under way it leads at once: it takes its group (itself and whoever
// joined meanwhile), commits it with one synced Apply and wakes the
// others. Callers that arrive while that commit runs join the next group,
// whose starter waits for the commit in progress and then leads. So there
// is at most one commit in progress and one group forming, the leader is
// always a caller (no goroutine of the store's own, no hop on the path of
// a lone Reserve), and every caller of a group gets its commit's outcome:
// a failed commit fails them all (invariant 6).
//
// Pebble group-commits synced batches too (one fsync for all), but it
// applies each batch on its own: a commit per grant cost about 10 µs more
// CPU per lock cycle than a commit per round (issue 26).
//
// Tried and dropped: letting the next group apply as soon as the running
// one was applied, before its fsync ended (Pebble's next fsync would have
// covered both): the groups shrank to one caller each (1.1 grants per
// commit at 64 callers, against about 31 here), and so did the saving.
// Having the running leader apply the next group right after its own
// fsync (no wait for the next leader to be scheduled) kept the groups at
// 64 callers but made them one caller each at 2 (the leader could never
// join the next group), for no throughput gain that a shared machine
// could show.
type committer struct {
	mu      sync.Mutex
	forming *commitGroup // the group new callers join; nil if none
	running *commitGroup // the group being committed; nil if none
	// holds counts HoldCommits not yet released. While it is above 0 a
	// ReserveThen that starts a group leaves it forming (held): others
	// join it until the last ReleaseCommits starts its commit.
	holds int
	// beforeCommit, if set (tests), runs in the leader before its group's
	// commit, without mu.
	beforeCommit func(g *commitGroup)
}

// commitGroup is one batch and the callers that share it.
type commitGroup struct {
	b       *pebble.Batch
	callers int
	held    bool          // started under a hold and no commit begun for it yet
	done    chan struct{} // closed once err is set
	err     error
	// thens are the callers that do not wait (ReserveThen): each is told
	// err once the group is committed, on the leader's goroutine.
	thens  []Synced
	inline [8]Synced // thens' first room: no allocation for a small group
}

// Synced is a caller of ReserveThen, told the outcome of the group commit
// that carried its reservation. (An interface, not a func: the caller's
// own struct is the callback, with no closure to allocate per grant.)
type Synced interface {
	Synced(err error)
}

// groupCommit adds the reservations of tokens for resource to the forming
// group's batch and returns once that batch is synced, with its outcome.
//
// With then, it returns at once instead (nil, or the error of adding them,
// then not told), and then is told the outcome once the batch is synced:
// the caller must not wait (ReserveThen). Such a caller that starts a
// group does not lead it: a goroutine of the group's own does, one per
// group, not per caller.
func (s *Store) groupCommit(resource []byte, tokens []uint64, then Synced) error {
	c := &s.commits
	c.mu.Lock()
	g := c.forming
	starter := g == nil
	if starter {
		g = &commitGroup{b: s.db.NewBatch(), done: make(chan struct{})}
		g.thens = g.inline[:0]
		c.forming = g
	}
	if err := addReservations(g.b, resource, tokens); err != nil {
		// Only a closed or oversized batch refuses a write. What was
		// added is harmless: a token written counts as issued. A group
		// nobody else joined yet goes: it would have no leader.
		if starter {
			c.forming = nil
			g.b.Close()
		}
		c.mu.Unlock()
		return err
	}
	g.callers++
	if then != nil {
		g.thens = append(g.thens, then)
		switch {
		case !starter:
			c.mu.Unlock()
		case c.holds > 0:
			g.held = true // ReleaseCommits starts it
			c.mu.Unlock()
		default:
			s.startLocked(g)
		}
		return nil
	}
	if !starter && !g.held {
		c.mu.Unlock()
		<-g.done
		return g.err
	}
	// A caller that waits never waits for a held group: it leads it (the
	// hold may be its own goroutine's, waiting for it to return).
	g.held = false
	return s.lead(g)
}

// startLocked starts the commit of g, the forming group, on a goroutine of
// its own: at once if no commit is under way (nobody joins it after this),
// else once that commit is done. Called with the committer's mutex held;
// returns with it released.
func (s *Store) startLocked(g *commitGroup) {
	c := &s.commits
	if c.running == nil {
		c.forming, c.running = nil, g
		c.mu.Unlock()
		go s.commitRunning(g)
		return
	}
	c.mu.Unlock()
	go func() {
		c.mu.Lock()
		s.lead(g)
	}()
}

// HoldCommits keeps the commits that ReserveThen callers start from
// beginning until the matching ReleaseCommits: the grants of one lock
// writer round, whose script replies come in together, then go to disk in
// one synced commit. Without it the first grant of a round would start a
// commit of its own, and the rest would wait for it and take the next:
// two fsyncs a round (about three grants a commit with Redisson's 16
// threads, issue 26). A caller that waits for its reservation (Reserve) is
// never held: it commits whatever is forming itself. Hold only briefly,
// across callbacks that run one after another.
func (s *Store) HoldCommits() {
	c := &s.commits
	c.mu.Lock()
	c.holds++
	c.mu.Unlock()
}

// ReleaseCommits ends a HoldCommits; the last one starts the commit of the
// group held meanwhile, if any.
func (s *Store) ReleaseCommits() {
	c := &s.commits
	c.mu.Lock()
	c.holds--
	if g := c.forming; c.holds == 0 && g != nil && g.held {
		g.held = false
		s.startLocked(g)
		return
	}
	c.mu.Unlock()
}

// lead commits g, the group its caller started, once the commit in
// progress, if any, is done, and returns its outcome. Nobody else waits
// for the commit in progress: the others joined g. Called with the
// committer's mutex held.
func (s *Store) lead(g *commitGroup) error {
	c := &s.commits
	for c.running != nil {
		running := c.running.done
		c.mu.Unlock()
		<-running
		c.mu.Lock()
	}
	c.forming, c.running = nil, g
	c.mu.Unlock()
	return s.commitRunning(g)
}

// commitRunning commits g, the running group, and hands its outcome to
// every caller of it.
func (s *Store) commitRunning(g *commitGroup) error {
	c := &s.commits
	g.err = s.commitGroupBatch(g)
	c.mu.Lock()
	c.running = nil
	c.mu.Unlock()
	close(g.done)
	for _, then := range g.thens {
		then.Synced(g.err)
	}
	return g.err
}

// addReservations adds the reservations of tokens for resource to b.
func addReservations(b *pebble.Batch, resource []byte, tokens []uint64) error {
	for _, t := range tokens {
		if err := b.Set(tokenstate.ReservedKey(resource, t), nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// commitGroupBatch commits g's batch, with the confirmations deferred so
// far (reserve.go), synced.
func (s *Store) commitGroupBatch(g *commitGroup) error {
	defer g.b.Close()
	if h := s.commits.beforeCommit; h != nil {
		h(g)
	}
	taken, err := s.deferred.takeInto(g.b)
	if err != nil {
		return err
	}
	err = s.commitSync(g.b)
	s.deferred.written(taken, err == nil)
	return err
}
