package persist

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCrashKeepsSyncedState runs writers, takes a crash image of the
// filesystem mid-run (only synced data is certain to survive; some unsynced
// data may too), reopens it and checks the two promises of a reply:
// NextToken exceeds every token returned before the crash, and Newest(r) is
// at least every token confirmed before the crash: granted one by one, or
// reserved with others (a line's) and then confirmed. Refused grants
// (reserved, then cancelled) run beside them and need not count.
func TestCrashKeepsSyncedState(t *testing.T) {
	const resources = 50
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	fs := vfs.NewCrashableMem()
	var (
		maxReturned uint64            // over all generations, before their crash
		confirmed   [resources]uint64 // per resource, over all generations
		names       [resources][]byte
	)
	for i := range names {
		names[i] = []byte(fmt.Sprintf("res\x00%d", i))
	}
	for gen := 0; gen < 8; gen++ {
		s := openT(t, "/data", Options{FS: fs, ReserveWindow: 64, CacheEntries: 16})
		if tok := nextT(t, s); tok <= maxReturned {
			t.Fatalf("gen %d: first token %d <= %d returned before the crash", gen, tok, maxReturned)
		}
		for i, r := range names {
			if got := newestT(t, s, string(r)); got < confirmed[i] {
				t.Fatalf("gen %d: Newest(%q) = %d < %d recorded before the crash", gen, r, got, confirmed[i])
			}
		}

		var (
			returned atomic.Uint64
			conf     [resources]atomic.Uint64
			stop     atomic.Bool
			wg       sync.WaitGroup
		)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, 2))
				for !stop.Load() {
					tok, err := s.NextToken()
					if err != nil {
						t.Error(err)
						return
					}
					atomicMax(&returned, tok)
					i := rng.IntN(resources)
					counts, err := crashTestOp(s, rng.IntN(10), names[i], tok)
					if err != nil {
						t.Error(err)
						return
					}
					if counts {
						atomicMax(&conf[i], tok)
					}
				}
			}(rng.Uint64())
		}
		time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)

		// Everything acknowledged before this snapshot was synced before the clone.
		maxReturned = max(maxReturned, returned.Load())
		for i := range conf {
			confirmed[i] = max(confirmed[i], conf[i].Load())
		}
		pct := []int{0, 50, 100}[gen%3]
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rng})

		stop.Store(true)
		wg.Wait()
		t.Logf("gen %d: crash with %d%% of unsynced data kept; tokens up to %d, stats %+v",
			gen, pct, maxReturned, s.Stats())
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		fs = crashed
	}
}

// crashTestOp runs tok through the store one of the ways the lock manager
// does, and reports whether it was confirmed: a grant (Reserve, Confirm), a
// refused grant (Reserve, Cancel), or a line's token reserved with others
// and then granted (ReserveAll, Confirm).
func crashTestOp(s *Store, op int, resource []byte, tok uint64) (confirmed bool, err error) {
	switch {
	case op < 6:
		return true, grant(s, Grant{Resource: resource, Token: tok})
	case op < 8:
		if err := s.Reserve(resource, tok); err != nil {
			return false, err
		}
		return false, s.Cancel(resource, tok)
	default:
		if err := s.ReserveAll(resource, []uint64{tok}); err != nil {
			return false, err
		}
		return true, s.Confirm(Grant{Resource: resource, Token: tok})
	}
}
