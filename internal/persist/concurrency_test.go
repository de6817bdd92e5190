package persist

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestConcurrentTokensAndRecords: 64 goroutines doing NextToken+Record on
// random resources. Tokens are unique and increase per goroutine; every
// Newest is at least what was confirmed before it started; at the end, and
// after a reopen (cold cache), Newest is exactly the max recorded.
func TestConcurrentTokensAndRecords(t *testing.T) {
	const goroutines, ops, resources = 64, 100, 40
	dir := t.TempDir()
	s := openT(t, dir, Options{ReserveWindow: 97, CacheEntries: 16})
	var (
		names     [resources][]byte
		confirmed [resources]atomic.Uint64
		seen      sync.Map // token -> struct{}
		wg        sync.WaitGroup
	)
	for i := range names {
		names[i] = []byte(fmt.Sprintf("lock:%d", i))
	}
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 0))
			var prev uint64
			for n := 0; n < ops; n++ {
				tok, err := s.NextToken()
				if err != nil {
					t.Error(err)
					return
				}
				if tok <= prev {
					t.Errorf("token %d after %d in one goroutine", tok, prev)
				}
				if _, dup := seen.LoadOrStore(tok, struct{}{}); dup {
					t.Errorf("token %d issued twice", tok)
				}
				prev = tok
				i := rng.IntN(resources)
				if err := grant(s, Grant{Resource: names[i], Token: tok}); err != nil {
					t.Error(err)
					return
				}
				atomicMax(&confirmed[i], tok)
				j := rng.IntN(resources)
				floor := confirmed[j].Load()
				got, err := s.Newest(names[j])
				if err != nil {
					t.Error(err)
					return
				}
				if got < floor {
					t.Errorf("Newest(%s) = %d < %d already recorded", names[j], got, floor)
				}
			}
		}(uint64(g))
	}
	wg.Wait()
	check := func(s *Store) {
		for i, r := range names {
			if got, want := newestT(t, s, string(r)), confirmed[i].Load(); got != want {
				t.Errorf("Newest(%s) = %d, want %d", r, got, want)
			}
		}
	}
	check(s)
	last := s.Stats().LastIssued
	t.Logf("stats %+v", s.Stats())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, Options{})
	defer s.Close()
	check(s)
	if tok := nextT(t, s); tok <= last {
		t.Fatalf("after reopen: token %d <= %d", tok, last)
	}
}

// TestConcurrentRecordsOneResource: Records of one resource commit in any
// order; the stored value must be the max (invariant 3).
func TestConcurrentRecordsOneResource(t *testing.T) {
	s := openT(t, "/data", Options{FS: vfs.NewMem()})
	defer s.Close()
	var (
		top atomic.Uint64
		wg  sync.WaitGroup
	)
	r := []byte("hot")
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 50; n++ {
				a, _ := s.NextToken()
				b, _ := s.NextToken()
				// The newer token first: a later batch carries an older token.
				if err := grant(s, Grant{Resource: r, Token: b}); err != nil {
					t.Error(err)
				}
				if err := grant(s, Grant{Resource: r, Token: a}); err != nil {
					t.Error(err)
				}
				atomicMax(&top, b)
			}
		}()
	}
	wg.Wait()
	if got := newestT(t, s, "hot"); got != top.Load() {
		t.Fatalf("Newest = %d, want %d", got, top.Load())
	}
}

// TestRecordsShareFsyncs checks that concurrent Records are group-committed:
// fewer WAL fsyncs than Records, on the real disk.
func TestRecordsShareFsyncs(t *testing.T) {
	if testing.Short() {
		t.Skip("real fsyncs")
	}
	const goroutines, ops = 64, 20
	var fsyncs atomic.Int64
	s := openT(t, t.TempDir(), Options{FS: syncCountingFS(vfs.Default, &fsyncs)})
	defer s.Close()
	start := fsyncs.Load()
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for n := 0; n < ops; n++ {
				tok, err := s.NextToken()
				if err == nil {
					err = grant(s, Grant{Resource: []byte(fmt.Sprint(g)), Token: tok})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	records, n := goroutines*ops, fsyncs.Load()-start
	t.Logf("%d Records, %d WAL fsyncs (%.1f Records per fsync)", records, n, float64(records)/float64(n))
	if n >= int64(records) {
		t.Fatalf("%d fsyncs for %d concurrent Records: no group commit", n, records)
	}
}
