package persist

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestLRUBound: 200k distinct resources through a 1000-entry cache. The cache
// never holds more than 1000 entries and Newest still answers from Pebble.
func TestLRUBound(t *testing.T) {
	const total, batch, entries = 200_000, 1000, 1000
	s := openT(t, "/data", Options{FS: vfs.NewMem(), CacheEntries: entries})
	defer s.Close()
	name := func(i int) []byte { return []byte(fmt.Sprintf("resource/%07d", i)) }
	want := make([]uint64, total)
	grants := make([]Grant, 0, batch)
	for i := 0; i < total; i += batch {
		grants = grants[:0]
		for j := i; j < i+batch; j++ {
			want[j] = nextT(t, s)
			grants = append(grants, Grant{Resource: name(j), Token: want[j]})
		}
		if err := grant(s, grants...); err != nil {
			t.Fatal(err)
		}
		for j := i; j < i+batch; j += 3 {
			if got := newestT(t, s, string(name(j))); got != want[j] {
				t.Fatalf("Newest(%s) = %d, want %d", name(j), got, want[j])
			}
		}
		if n := s.Stats().CacheEntries; n > entries {
			t.Fatalf("cache holds %d entries, bound %d", n, entries)
		}
	}
	for j := 0; j < total; j += 7 { // long evicted: answered from Pebble
		if got := newestT(t, s, string(name(j))); got != want[j] {
			t.Fatalf("Newest(%s) = %d, want %d", name(j), got, want[j])
		}
	}
	st := s.Stats()
	t.Logf("stats %+v", st)
	if st.CacheEntries > entries || st.CacheEntries < entries*9/10 {
		t.Fatalf("cache holds %d entries, want about %d", st.CacheEntries, entries)
	}
}
