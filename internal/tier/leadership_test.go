package tier

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// startSharedTier is a tier whose leader issues only from shared windows
// (Options.Shared), and its first leadership.
func startSharedTier(t *testing.T) (*testTier, *Leadership) {
	t.Helper()
	tt := &testTier{t: t, store: defaultLogStore, shared: true, leads: make(chan *Leadership, 16)}
	for i := 0; i < 3; i++ {
		tt.peers = append(tt.peers, Peer{ID: fmt.Sprintf("n%d", i+1), Addr: freeAddr(t)})
		tt.dirs = append(tt.dirs, filepath.Join(t.TempDir(), "raft"))
	}
	tt.nodes = make([]*Node, 3)
	for i := range tt.peers {
		tt.start(i)
	}
	t.Cleanup(func() {
		for i := range tt.nodes {
			tt.stop(i)
		}
	})
	select {
	case l := <-tt.leads:
		return tt, l
	case <-time.After(30 * time.Second):
		t.Fatal("no leadership within 30s")
	}
	return nil, nil
}

// backend is a fake of the backend's copy of the bound (the authority's
// share function, a narrow seam): it keeps the highest bound written.
type backend struct {
	mu    sync.Mutex
	bound uint64
	err   error
}

func (b *backend) share(bound uint64) (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return 0, b.err
	}
	b.bound = max(b.bound, bound)
	return b.bound, nil
}

func (b *backend) get() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bound
}

// Invariant 8: no token before Join; every token at most the bound the
// backend holds, across windows; a higher backend bound (another store)
// is adopted; a failed share issues nothing.
func TestSharedWindows(t *testing.T) {
	tt, lead := startSharedTier(t)
	n := lead.n
	s := n.Store()
	if _, err := s.NextToken(); !errors.Is(err, ErrNotShared) {
		t.Fatalf("NextToken before Join: %v, want ErrNotShared", err)
	}
	be := &backend{}
	if err := lead.Join(0, be.share); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := 0; i < 2*Window+10; i++ { // crosses two windows
		tok, err := s.NextToken()
		if err != nil {
			t.Fatal(err)
		}
		if tok <= last || tok > be.get() {
			t.Fatalf("token %d after %d; the backend's bound is %d", tok, last, be.get())
		}
		last = tok
	}
	if got := lead.SyncedBound(); got < be.get() {
		t.Fatalf("the tier's bound %d is below the one it shared, %d", got, be.get())
	}

	// Another store raised the backend's bound far above the tier's.
	other := lead.SyncedBound() + 10*Window
	be.mu.Lock()
	be.bound = other
	be.mu.Unlock()
	n.mu.Lock()
	n.last = n.limit // the next token needs a new window
	n.mu.Unlock()
	tok, err := s.NextToken()
	if err != nil {
		t.Fatal(err)
	}
	if tok <= other+1 || tok > be.get() || s.Floor() != other+1 {
		t.Fatalf("after the backend's bound rose to %d: token %d, floor %d, backend %d", other, tok, s.Floor(), be.get())
	}
	if got, err := s.Newest("never-granted"); err != nil || got != other+1 {
		t.Fatalf("Newest of a resource never granted = %d, %v; want the floor %d", got, err, other+1)
	}

	// The backend refuses: no token from a new window.
	be.mu.Lock()
	be.err = errors.New("no replicas")
	be.mu.Unlock()
	n.mu.Lock()
	n.last = n.limit
	n.mu.Unlock()
	if tok, err := s.NextToken(); !errors.Is(err, ErrNotShared) {
		t.Fatalf("NextToken while the backend refuses: %d, %v; want ErrNotShared", tok, err)
	}

	// The leadership ends: its methods refuse, Done closes.
	l := tt.leader()
	tt.crash(l)
	select {
	case <-lead.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the leadership's Done did not close")
	}
	if err := lead.Adopt(5); err == nil {
		t.Fatal("Adopt on an ended leadership succeeded")
	}
	if err := lead.Join(0, be.share); err == nil {
		t.Fatal("Join on an ended leadership succeeded")
	}
}

// Store.Adopt puts the floor above the adopted token (the TokenStore
// contract): that token is stale, and the floor itself never issued.
func TestAdoptFloorAbove(t *testing.T) {
	tt := startTestTier(t, 3)
	s := tt.nodes[tt.leader()].Store()
	tok := grant(t, s, "r")
	if err := s.Adopt(tok + 100); err != nil {
		t.Fatal(err)
	}
	if f := s.Floor(); f != tok+101 {
		t.Fatalf("floor %d after adopting %d, want %d", f, tok+100, tok+101)
	}
	if next, err := s.NextToken(); err != nil || next <= tok+101 {
		t.Fatalf("next token %d, %v: not above the floor %d", next, err, tok+101)
	}
}

// Grants through Batch entries on a leader with Options.Shared: no Reserve
// is queued before Join (nor one of a token above the window), and grants
// that cross a window's end reserve only tokens at or below the bound the
// backend held when NextToken handed them out.
func TestBatchedGrantsOnlyFromSharedWindows(t *testing.T) {
	_, lead := startSharedTier(t)
	n := lead.n
	s := n.Store()
	if err := s.Reserve("r", 1); !errors.Is(err, ErrNotShared) {
		t.Fatalf("Reserve before Join: %v, want ErrNotShared", err)
	}
	if st := n.Status(); st.BatchOps != 0 {
		t.Fatalf("%d ops proposed before Join", st.BatchOps)
	}
	be := &backend{}
	if err := lead.Join(0, be.share); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	n.last = n.limit - 8 // the grants below cross into a new window
	limit := n.limit
	n.mu.Unlock()
	if err := s.Reserve("r", limit+1); err == nil {
		t.Fatalf("Reserve of %d, above the window's end %d, was accepted", limit+1, limit)
	}
	const workers, each = 16, 4
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				r := fmt.Sprintf("r%d", w)
				tok, err := s.NextToken()
				if err != nil {
					errs <- err
					return
				}
				if shared := be.get(); tok > shared {
					errs <- fmt.Errorf("token %d handed out above the backend's bound %d", tok, shared)
					return
				}
				if err := s.Reserve(r, tok); err != nil {
					errs <- err
					return
				}
				if err := s.Confirm(r, tok); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitProposed(t, n)
	if st := n.Status(); st.BatchOps < 2*workers*each || st.Bound <= limit {
		t.Fatalf("after %d grants across a window's end: %d ops in %d Batches, bound %d (the first window ended at %d)",
			workers*each, st.BatchOps, st.BatchEntries, st.Bound, limit)
	}
}
