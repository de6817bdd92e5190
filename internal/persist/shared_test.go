package persist

import (
	"errors"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// backendCopy stands for the bound kept on the backend (Redis in
// fenceproxy): a max register, the narrow seam Join's share function
// writes. fail makes the next writes fail; calls counts them.
type backendCopy struct {
	mu    sync.Mutex
	bound uint64
	fail  bool
	calls int
}

func (b *backendCopy) share(nb uint64) (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	if b.fail {
		return 0, errors.New("backend unreachable")
	}
	b.bound = max(b.bound, nb)
	return b.bound, nil
}

func (b *backendCopy) get() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bound
}

func joinT(t testing.TB, s *Store, foreign uint64, b *backendCopy) {
	t.Helper()
	if err := s.Join(foreign, b.share); err != nil {
		t.Fatalf("Join(%d): %v", foreign, err)
	}
}

// TestSharedIssuesNothingUnshared: a Shared store returns no token before
// Join, nor while its window's bound cannot be shared, and every token it
// returns is at most the bound on the backend.
func TestSharedIssuesNothingUnshared(t *testing.T) {
	s := openT(t, t.TempDir(), Options{Shared: true, ReserveWindow: 8})
	defer s.Close()
	_, err := s.NextToken()
	mustIs(t, err, ErrNotShared)
	if err := s.Reserve([]byte("r"), 1); err == nil {
		t.Fatal("Reserve of a token before Join: no error")
	}
	b := &backendCopy{fail: true}
	mustIs(t, s.Join(0, b.share), ErrNotShared)
	_, err = s.NextToken()
	mustIs(t, err, ErrNotShared)

	b.fail = false
	joinT(t, s, 0, b)
	var last uint64
	for range 30 { // crosses the bound a few times
		tok := nextT(t, s)
		if tok <= last || tok > b.get() {
			t.Fatalf("token %d after %d, backend bound %d", tok, last, b.get())
		}
		last = tok
	}
	b.fail = true // the next window cannot be shared: nothing from it
	for {
		tok, err := s.NextToken()
		if err != nil {
			mustIs(t, err, ErrNotShared)
			break
		}
		if tok > b.get() {
			t.Fatalf("token %d above the backend's bound %d", tok, b.get())
		}
	}
	if !s.Stats().Healthy {
		t.Fatal("a failed share made the store unhealthy; it must only refuse tokens until a share succeeds")
	}
	b.fail = false
	if tok := nextT(t, s); tok <= last || tok > b.get() {
		t.Fatalf("after the backend is back: token %d (last %d, bound %d)", tok, last, b.get())
	}
}

// TestBehindStoreAdopts: a store whose backend copy is above its own (a
// restored or copied directory) or that is told of a foreign token puts
// its floor above it: tokens come from above, Newest is never below the
// floor, and the floor, synced, survives a crash.
func TestBehindStoreAdopts(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := openT(t, "/data", Options{FS: fs, Shared: true, ReserveWindow: 16})
	b := &backendCopy{bound: 1000} // written by another store
	joinT(t, s, 0, b)
	if s.Floor() != 1001 {
		t.Fatalf("floor after sharing below a backend bound of 1000 = %d, want 1001", s.Floor())
	}
	tok := nextT(t, s)
	if tok <= 1001 {
		t.Fatalf("first token %d, not above the floor 1001", tok)
	}
	r := []byte("r")
	if n := newestT(t, s, "r"); n != 1001 {
		t.Fatalf("Newest of a resource this store never granted = %d, want the floor 1001", n)
	}
	if err := grant(s, Grant{Resource: r, Token: tok, AboveAll: true}); err != nil {
		t.Fatal(err)
	}
	if n := newestT(t, s, "r"); n != tok {
		t.Fatalf("Newest after a grant above the floor = %d, want %d", n, tok)
	}

	// A token found in an owner record, inside this store's window.
	if err := s.Adopt(tok + 3); err != nil {
		t.Fatal(err)
	}
	if s.Floor() != tok+4 || newestT(t, s, "r") != tok+4 {
		t.Fatalf("after Adopt(%d): floor %d, Newest %d; want both %d", tok+3, s.Floor(), newestT(t, s, "r"), tok+4)
	}
	if n := nextT(t, s); n <= tok+4 {
		t.Fatalf("token %d after Adopt(%d)", n, tok+3)
	}
	// Far above the window: a new window is reserved and shared above it.
	if err := s.Adopt(1 << 30); err != nil {
		t.Fatal(err)
	}
	if n := nextT(t, s); n <= 1<<30+1 || n > b.get() {
		t.Fatalf("token %d after Adopt(2^30); backend bound %d", n, b.get())
	}
	if err := s.Adopt(5); err != nil || s.Floor() != 1<<30+1 {
		t.Fatalf("Adopt below the floor: %v, floor %d; want a no-op", err, s.Floor())
	}

	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s.Close()
	s = openT(t, "/data", Options{FS: crashed, Shared: true, ReserveWindow: 16})
	defer s.Close()
	if s.Floor() != 1<<30+1 {
		t.Fatalf("floor after a crash = %d, want %d", s.Floor(), 1<<30+1)
	}
	if n := newestT(t, s, "r"); n != 1<<30+1 {
		t.Fatalf("Newest after a crash = %d, want the floor", n)
	}
	joinT(t, s, 0, b)
	if n := nextT(t, s); n <= 1<<30+1 {
		t.Fatalf("token %d after the crash", n)
	}
}

// TestSharedCrashBetweenSyncAndShare: a reservation synced locally whose
// share never happened (a crash in between) still counts after the crash:
// the next process starts above it, though the backend never saw it.
func TestSharedCrashBetweenSyncAndShare(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := openT(t, "/data", Options{FS: fs, Shared: true, ReserveWindow: 4})
	b := &backendCopy{}
	joinT(t, s, 0, b)
	var last uint64
	for range 4 {
		last = nextT(t, s)
	}
	b.fail = true
	if _, err := s.NextToken(); !errors.Is(err, ErrNotShared) {
		t.Fatalf("NextToken with the share failing: %v", err)
	}
	synced := s.SyncedBound()
	if synced <= b.get() {
		t.Fatalf("the failed reservation's local bound %d is not above the shared %d", synced, b.get())
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s.Close()
	s = openT(t, "/data", Options{FS: crashed, Shared: true, ReserveWindow: 4})
	defer s.Close()
	b.fail = false
	joinT(t, s, 0, b)
	if s.Floor() != 0 {
		t.Fatalf("a store ahead of its backend copy raised its floor to %d: only a store behind must", s.Floor())
	}
	if tok := nextT(t, s); tok <= synced || tok <= last {
		t.Fatalf("token %d after the crash; bound synced before it %d", tok, synced)
	}
}

// TestTokenFloorOption: Options.TokenFloor N: the first token is above N,
// Newest is at least N+1 (no token at or below N is current), and the
// floor is kept without the option.
func TestTokenFloorOption(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{TokenFloor: 5000})
	if tok := nextT(t, s); tok <= 5001 {
		t.Fatalf("first token with TokenFloor 5000 = %d", tok)
	}
	if n := newestT(t, s, "never"); n != 5001 {
		t.Fatalf("Newest of a resource never granted = %d, want 5001", n)
	}
	s.Close()
	s = openT(t, dir, Options{TokenFloor: 10}) // lower: no effect
	defer s.Close()
	if s.Floor() != 5001 {
		t.Fatalf("floor after a reopen with a lower TokenFloor = %d, want 5001", s.Floor())
	}
	top, err := Open(filepath.Join(t.TempDir(), "max"), Options{TokenFloor: MaxToken - 1})
	if err != nil {
		t.Fatalf("Open with the highest floor: %v", err)
	}
	defer top.Close()
	_, err = top.NextToken()
	mustIs(t, err, ErrExhausted)
}

// TestIdentity: the id is made with the directory and kept (a copy has
// it too); each Open has a run id of its own, and knows the run ids of
// the processes that opened the directory before it.
func TestIdentity(t *testing.T) {
	fs := vfs.NewMem()
	var runs []string
	var id string
	for i := range keptRuns + 2 {
		s := openT(t, "/data", Options{FS: fs, Shared: i%2 == 0})
		if i == 0 {
			id = s.ID()
			if len(id) != 16 {
				t.Fatalf("id %q, want 16 hex digits", id)
			}
		}
		if s.ID() != id {
			t.Fatalf("open %d: id %q, want %q", i, s.ID(), id)
		}
		if s.PreviousRun(s.Run()) {
			t.Fatal("PreviousRun of this process's own run")
		}
		for j, r := range runs {
			if want := len(runs)-j < keptRuns; s.PreviousRun(r) != want {
				t.Fatalf("open %d: PreviousRun(run of open %d) = %v, want %v", i, j, !want, want)
			}
		}
		runs = append(runs, s.Run())
		s.Close()
	}
	if s := openT(t, "/other", Options{FS: fs}); s.ID() == id {
		t.Fatal("two directories share an id")
	} else {
		s.Close()
	}
}

// TestAdoptUnderLoad: while callers draw tokens, floors are raised (some
// inside the window, some above it): a NextToken that starts after Adopt(x)
// returned never returns a token at or below x+1, and tokens stay unique.
func TestAdoptUnderLoad(t *testing.T) {
	s := openT(t, t.TempDir(), Options{Shared: true, ReserveWindow: 64})
	defer s.Close()
	b := &backendCopy{}
	joinT(t, s, 0, b)
	var adopted atomic.Uint64 // the last floor whose Adopt returned
	var stop atomic.Bool
	var wg sync.WaitGroup
	seen := make([][]uint64, 4)
	for w := range seen {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				f := adopted.Load()
				tok, err := s.NextToken()
				if err != nil {
					t.Error(err)
					return
				}
				if tok <= f {
					t.Errorf("token %d drawn after a floor of %d was adopted", tok, f)
					return
				}
				seen[w] = append(seen[w], tok)
			}
		}()
	}
	for i := range 50 {
		x := s.Stats().LastIssued + uint64(1+i%3*40) // inside, near and past the window
		if err := s.Adopt(x); err != nil {
			t.Fatal(err)
		}
		adopted.Store(x + 1)
	}
	stop.Store(true)
	wg.Wait()
	all := map[uint64]bool{}
	for _, toks := range seen {
		for _, tok := range toks {
			if all[tok] {
				t.Fatalf("token %d returned twice", tok)
			}
			all[tok] = true
		}
	}
	if len(all) == 0 {
		t.Fatal("no token drawn")
	}
}

// TestCopiedDirectory: a directory copied elsewhere (its inode changed)
// knows no predecessor, since the process that wrote its run ids may live
// on on the original; opened again where it is, it is itself again.
func TestCopiedDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := openT(t, dir, Options{Shared: true})
	run := s.Run()
	s.Close()
	s = openT(t, dir, Options{Shared: true})
	if s.Copied() || !s.PreviousRun(run) {
		t.Fatalf("reopened in place: Copied %v, PreviousRun %v; want false, true", s.Copied(), s.PreviousRun(run))
	}
	run = s.Run()
	s.Close()
	copied := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", dir, copied).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	c := openT(t, copied, Options{Shared: true})
	if !c.Copied() || c.PreviousRun(run) {
		t.Fatalf("a copy: Copied %v, PreviousRun %v; want true, false", c.Copied(), c.PreviousRun(run))
	}
	run = c.Run()
	c.Close()
	c = openT(t, copied, Options{Shared: true})
	defer c.Close()
	if c.Copied() || !c.PreviousRun(run) {
		t.Fatalf("the copy reopened in place: Copied %v, PreviousRun %v; want false, true", c.Copied(), c.PreviousRun(run))
	}
}

// TestForeignBoundMetWhileCrossing: the reservation a NextToken makes when
// it crosses the bound finds a higher bound on the backend (another store
// wrote it): that very call returns a token above it, not the one it drew.
func TestForeignBoundMetWhileCrossing(t *testing.T) {
	s := openT(t, t.TempDir(), Options{Shared: true, ReserveWindow: 4})
	defer s.Close()
	b := &backendCopy{}
	joinT(t, s, 0, b)
	for range 4 {
		nextT(t, s) // the whole first window
	}
	b.mu.Lock()
	b.bound = 1000
	b.mu.Unlock()
	if tok := nextT(t, s); tok <= 1001 || tok > b.get() {
		t.Fatalf("the call that met a backend bound of 1000 returned %d (floor %d, backend bound %d)", tok, s.Floor(), b.get())
	}
}
