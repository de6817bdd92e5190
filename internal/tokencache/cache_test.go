package tokencache

import "testing"

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := New(3) // small: one shard
	fill := func(k string, v uint64) {
		_, ep, ok := c.Get([]byte(k))
		if !ok {
			c.Fill([]byte(k), v, ep)
		}
	}
	fill("a", 1)
	fill("b", 2)
	fill("c", 3)
	c.Get([]byte("a")) // a is now the most recent; b the least
	fill("d", 4)
	for k, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, _, ok := c.Get([]byte(k)); ok != want {
			t.Errorf("%s cached = %v, want %v", k, ok, want)
		}
	}
	if n := c.Stats().Entries; n != 3 {
		t.Fatalf("%d entries, want 3", n)
	}
}

// A Record that syncs while Newest reads Pebble must not be hidden by the
// (older) value that read returns (invariant 5).
func TestCacheFillLosesToConcurrentRaise(t *testing.T) {
	c := New(3)
	_, ep, _ := c.Get([]byte("r")) // Newest misses, goes to Pebble, reads 5...
	c.Raise([]byte("r"), 9, false) // ...meanwhile a Record of 9 syncs: no entry to raise
	c.Fill([]byte("r"), 5, ep)     // the stale 5 must not be cached
	if tok, _, ok := c.Get([]byte("r")); ok {
		t.Fatalf("stale fill cached %d", tok)
	}
	_, ep, _ = c.Get([]byte("r"))
	c.Fill([]byte("r"), 9, ep)
	c.Raise([]byte("r"), 7, false) // raise never lowers
	if tok, _, _ := c.Get([]byte("r")); tok != 9 {
		t.Fatalf("cached %d, want 9", tok)
	}
}

func TestCacheShardsSumToBound(t *testing.T) {
	for _, n := range []int{1, 7, 100, 1000, 4097, 65536} {
		c := New(n)
		total := 0
		for i := range c.shards {
			total += c.shards[i].cap
		}
		if total != n {
			t.Errorf("New(%d): shard caps sum to %d", n, total)
		}
	}
}

// TestExactRaiseInserts: a Record the caller knows is above all before it
// caches its token at once, so the next Newest needs no read; and a stale fill
// racing it cannot lower it.
func TestExactRaiseInserts(t *testing.T) {
	c := New(3)
	_, ep, _ := c.Get([]byte("r"))
	c.Raise([]byte("r"), 9, true)
	c.Fill([]byte("r"), 5, ep)
	if tok, _, ok := c.Get([]byte("r")); !ok || tok != 9 {
		t.Fatalf("after an exact raise of 9: cached %d, %v; want 9", tok, ok)
	}
}

// Clear drops every entry, and a fill from a read begun before it.
func TestClear(t *testing.T) {
	c := New(3)
	c.Raise([]byte("a"), 4, true)
	_, ep, _ := c.Get([]byte("b"))
	c.Clear()
	c.Fill([]byte("b"), 2, ep)
	for _, k := range []string{"a", "b"} {
		if tok, _, ok := c.Get([]byte(k)); ok {
			t.Fatalf("%s cached %d after Clear", k, tok)
		}
	}
	c.Raise([]byte("a"), 5, true)
	if tok, _, ok := c.Get([]byte("a")); !ok || tok != 5 {
		t.Fatalf("after Clear, an exact raise of 5 caches %d, %v", tok, ok)
	}
}
