package persist

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

// formingCallers is how many callers the group now forming holds.
func (c *committer) formingCallers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.forming == nil {
		return 0
	}
	return c.forming.callers
}

// holdFirstCommit makes the first group's leader wait, before its commit,
// until want callers have joined the next group (or the test gives up),
// so that grouping does not depend on timing.
func holdFirstCommit(t *testing.T, s *Store, want int) {
	var first atomic.Bool
	s.commits.beforeCommit = func(*commitGroup) {
		if first.Swap(true) {
			return
		}
		for range 10_000 {
			if s.commits.formingCallers() >= want {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Errorf("only %d callers joined the next group, want %d", s.commits.formingCallers(), want)
	}
}

// syncedFunc makes a func a Synced.
type syncedFunc func(err error)

func (f syncedFunc) Synced(err error) { f(err) }

// TestConcurrentReservesShareOneCommit: Reserves that arrive while a commit
// is under way share the next one (one batch, one synced commit), and
// each token, confirmed, survives a crash (its reservation is what does).
//
// Half the callers (the odd ones, with then) use ReserveThen, which does
// not wait: they share the groups of those that do, and a group one of
// them starts is led by a goroutine of its own.
func TestConcurrentReservesShareOneCommit(t *testing.T) {
	for _, then := range []bool{false, true} {
		t.Run(fmt.Sprintf("then=%v", then), func(t *testing.T) { testReservesShareOneCommit(t, then) })
	}
}

func testReservesShareOneCommit(t *testing.T, then bool) {
	const callers = 16
	fs := vfs.NewCrashableMem()
	s := openT(t, "/data", Options{FS: fs})
	holdFirstCommit(t, s, callers-1)
	tokens := make([]uint64, callers)
	for i := range tokens {
		tokens[i] = nextT(t, s)
	}
	commits := s.Stats().SyncedCommits
	reserve := func(i int, r string) error {
		if !then || i%2 == 0 {
			return s.Reserve([]byte(r), tokens[i])
		}
		done := make(chan error, 1)
		if err := s.ReserveThen([]byte(r), tokens[i], syncedFunc(func(err error) { done <- err })); err != nil {
			return err
		}
		return <-done
	}
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := fmt.Sprintf("r%d", i)
			if err := reserve(i, r); err != nil {
				t.Error(err)
				return
			}
			if n := newestT(t, s, r); n != 0 {
				t.Errorf("Newest(%s) right after its Reserve = %d, want 0 (a reservation does not count)", r, n)
			}
			if err := s.Confirm(Grant{Resource: []byte(r), Token: tokens[i]}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := s.Stats().SyncedCommits - commits; got != 2 {
		t.Fatalf("%d concurrent Reserves made %d synced commits, want 2 (the first alone, then the rest in one)", callers, got)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s.Close()
	s2 := openT(t, "/data", Options{FS: crashed})
	defer s2.Close()
	for i, tok := range tokens {
		if n := newestT(t, s2, fmt.Sprintf("r%d", i)); n != tok {
			t.Errorf("after a crash Newest(r%d) = %d, want %d", i, n, tok)
		}
	}
}

// TestHeldReservesShareOneCommit: the ReserveThen calls made under
// HoldCommits (a lock writer round's grants, handed their replies one
// after another) start no commit until the last ReleaseCommits, then go
// in one; a Reserve under the hold (a caller that waits, possibly on the
// holder's own goroutine) does not wait for the release: it commits what
// is forming itself.
func TestHeldReservesShareOneCommit(t *testing.T) {
	s := openT(t, "/data", Options{FS: vfs.NewMem()})
	defer s.Close()
	const grants = 8
	tokens := make([]uint64, grants+1)
	for i := range tokens {
		tokens[i] = nextT(t, s)
	}
	commits := s.Stats().SyncedCommits
	synced := make(chan error, grants)
	s.HoldCommits()
	s.HoldCommits() // a second writer's round, ending later
	for i := range grants {
		if err := s.ReserveThen([]byte(fmt.Sprintf("r%d", i)), tokens[i], syncedFunc(func(err error) { synced <- err })); err != nil {
			t.Fatal(err)
		}
	}
	s.ReleaseCommits()
	select {
	case err := <-synced:
		t.Fatalf("a reservation was synced (%v) while a hold was still on", err)
	case <-time.After(20 * time.Millisecond):
	}
	if got := s.Stats().SyncedCommits - commits; got != 0 {
		t.Fatalf("%d synced commits under the hold, want 0", got)
	}
	s.ReleaseCommits()
	for range grants {
		if err := <-synced; err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Stats().SyncedCommits - commits; got != 1 {
		t.Fatalf("%d grants reserved in one round made %d synced commits, want 1", grants, got)
	}

	// Held again: a waiting Reserve leads the held group, with whoever
	// joined it, and the release finds nothing left to start.
	commits = s.Stats().SyncedCommits
	s.HoldCommits()
	if err := s.ReserveThen([]byte("held"), tokens[grants-1], syncedFunc(func(err error) { synced <- err })); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve([]byte("waits"), tokens[grants]); err != nil {
		t.Fatal(err)
	}
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	s.ReleaseCommits()
	if got := s.Stats().SyncedCommits - commits; got != 1 {
		t.Fatalf("a Reserve under a hold made %d synced commits with the held one, want 1", got)
	}
}

// TestFailedGroupCommitFailsEveryCaller: a group whose synced commit fails
// fails every caller in it (fail-stop), and none of their tokens shows
// while the process lives.
func TestFailedGroupCommitFailsEveryCaller(t *testing.T) {
	const callers = 8
	mem := vfs.NewCrashableMem()
	var failing atomic.Bool
	s := openT(t, "/data", Options{FS: failingWALFS(mem, &failing)})
	defer s.Close()
	holdFirstCommit(t, s, callers-1)
	tokens := make([]uint64, callers)
	for i := range tokens {
		tokens[i] = nextT(t, s)
	}
	failing.Store(true)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := []byte(fmt.Sprintf("r%d", i))
			if err := s.Reserve(r, tokens[i]); err != nil {
				failed.Add(1)
			}
			if tok, _, ok := s.cache.Get(r); ok {
				t.Errorf("cache holds %d for %s after a failed Reserve", tok, r)
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n != callers {
		t.Fatalf("%d of %d Reserves in failed commits returned an error", n, callers)
	}
}

// TestOpenFoldsOldReservations: a directory written before one record per
// grant (every grant reserved as "p/"+token+resource, confirmed into "t/"
// later) and killed with reservations left: Open counts each as issued,
// and deletes them.
func TestOpenFoldsOldReservations(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := openT(t, "/data", Options{FS: fs})
	a, b := nextT(t, s), nextT(t, s)
	c := nextT(t, s)
	// What the old Reserve and deferred Confirm wrote: "t/x" = a
	// confirmed, then "p/" reservations of b (x) and c (y) left by a kill.
	batch := s.db.NewBatch()
	for _, err := range []error{
		batch.Merge(tokenstate.TokenKey([]byte("x")), tokenstate.EncodeToken(a), nil),
		batch.Set(tokenstate.ReservedKey([]byte("x"), b), nil, nil),
		batch.Set(tokenstate.ReservedKey([]byte("y\x00z"), c), nil, nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.commitSync(batch); err != nil {
		t.Fatal(err)
	}
	batch.Close()
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s.Close()

	s2 := openT(t, "/data", Options{FS: crashed})
	defer s2.Close()
	if n := newestT(t, s2, "x"); n != b {
		t.Errorf("Newest(x) after the fold = %d, want %d (its reservation)", n, b)
	}
	if n := newestT(t, s2, "y\x00z"); n != c {
		t.Errorf("Newest(y\\x00z) after the fold = %d, want %d", n, c)
	}
	it, err := s2.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for it.SeekGE(tokenstate.ReservedPrefix); it.Valid() && it.Key()[0] == 'p'; it.Next() {
		t.Errorf("reservation %q still there after the fold", it.Key())
	}
	if tok := nextT(t, s2); tok <= c {
		t.Errorf("first token after the fold %d <= %d", tok, c)
	}
}
