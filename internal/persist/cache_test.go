package persist

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := newCache(3) // small: one shard
	fill := func(k string, v uint64) {
		_, ep, ok := c.get([]byte(k))
		if !ok {
			c.fill([]byte(k), v, ep)
		}
	}
	fill("a", 1)
	fill("b", 2)
	fill("c", 3)
	c.get([]byte("a")) // a is now the most recent; b the least
	fill("d", 4)
	for k, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, _, ok := c.get([]byte(k)); ok != want {
			t.Errorf("%s cached = %v, want %v", k, ok, want)
		}
	}
	if n := c.stats().CacheEntries; n != 3 {
		t.Fatalf("%d entries, want 3", n)
	}
}

// A Record that syncs while Newest reads Pebble must not be hidden by the
// (older) value that read returns (invariant 5).
func TestCacheFillLosesToConcurrentRaise(t *testing.T) {
	c := newCache(3)
	_, ep, _ := c.get([]byte("r")) // Newest misses, goes to Pebble, reads 5...
	c.raise([]byte("r"), 9, false) // ...meanwhile a Record of 9 syncs: no entry to raise
	c.fill([]byte("r"), 5, ep)     // the stale 5 must not be cached
	if tok, _, ok := c.get([]byte("r")); ok {
		t.Fatalf("stale fill cached %d", tok)
	}
	_, ep, _ = c.get([]byte("r"))
	c.fill([]byte("r"), 9, ep)
	c.raise([]byte("r"), 7, false) // raise never lowers
	if tok, _, _ := c.get([]byte("r")); tok != 9 {
		t.Fatalf("cached %d, want 9", tok)
	}
}

func TestCacheShardsSumToBound(t *testing.T) {
	for _, n := range []int{1, 7, 100, 1000, 4097, 65536} {
		c := newCache(n)
		total := 0
		for i := range c.shards {
			total += c.shards[i].cap
		}
		if total != n {
			t.Errorf("newCache(%d): shard caps sum to %d", n, total)
		}
	}
}

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

// TestExactRaiseInserts: a Record the caller knows is above all before it
// caches its token at once, so the next Newest needs no read; and a stale fill
// racing it cannot lower it.
func TestExactRaiseInserts(t *testing.T) {
	c := newCache(3)
	_, ep, _ := c.get([]byte("r"))
	c.raise([]byte("r"), 9, true)
	c.fill([]byte("r"), 5, ep)
	if tok, _, ok := c.get([]byte("r")); !ok || tok != 9 {
		t.Fatalf("after an exact raise of 9: cached %d, %v; want 9", tok, ok)
	}
}
