// Package tokencache is the newest-token cache of fenceproxy's token
// stores (internal/persist's fence store, internal/tier's replicated state):
// for each recently used resource, the newest token recorded for it, in a
// bounded number of entries however many resources the store holds.
//
// # The rule it keeps
//
// The cache never hides a newer token. An entry starts as a value read from
// the store (Fill) or as a value the writer knows exactly (Raise with
// exact), and every write raises it (Raise: max). A read that missed races
// with a write only through a per-shard write epoch: Get returns the
// shard's epoch on a miss, and Fill caches what the read found only if no
// Raise touched that shard since. So a Get after a Raise returned sees at
// least that Raise's token, or misses. The writer must Raise after its
// write is visible to the store's readers.
//
// # Memory
//
// A fixed number of LRU shards, each a map plus an intrusive doubly-linked
// list under its own mutex; the entries never exceed the number it was made
// with. One entry costs about 100 bytes plus the key. An evicted entry's
// struct is reused for the new key, so a miss allocates only the key
// string. Shard mutexes are leaves, never held during I/O.
package tokencache

import (
	"hash/maphash"
	"sync"
)

// Cache is the newest-token cache. Safe for concurrent use.
type Cache struct {
	seed   maphash.Seed
	shards []cacheShard
}

type cacheShard struct {
	mu     sync.Mutex
	m      map[string]*centry
	lru    centry // sentinel: lru.next is the most recent, lru.prev the least
	cap    int
	epoch  uint64 // bumped by every raise; see fill
	hits   uint64
	misses uint64
	_      [64]byte // keep shards on separate cache lines
}

type centry struct {
	key        string
	token      uint64
	prev, next *centry
}

// New returns a cache of at most entries entries (at least 1).
func New(entries int) *Cache {
	entries = max(entries, 1)
	n := 64
	for n > 1 && entries/n < 64 {
		n /= 2
	}
	c := &Cache{seed: maphash.MakeSeed(), shards: make([]cacheShard, n)}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.cap = entries / n
		if i < entries%n {
			sh.cap++
		}
		sh.m = make(map[string]*centry)
		sh.lru.next, sh.lru.prev = &sh.lru, &sh.lru
	}
	return c
}

func (c *Cache) shard(key []byte) *cacheShard {
	return &c.shards[maphash.Bytes(c.seed, key)%uint64(len(c.shards))]
}

// Get returns the cached token. On a miss it returns the shard's epoch, to be
// passed to Fill.
func (c *Cache) Get(key []byte) (token, epoch uint64, ok bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[string(key)]; e != nil {
		sh.hits++
		sh.moveToFrontLocked(e)
		return e.token, 0, true
	}
	sh.misses++
	return 0, sh.epoch, false
}

// Fill caches token, read from the store, unless a Raise ran on the shard
// since Get returned epoch: that write may be newer than what was read, and
// its Raise found no entry to raise.
func (c *Cache) Fill(key []byte, token, epoch uint64) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.epoch != epoch {
		return
	}
	if e := sh.m[string(key)]; e != nil {
		e.token = max(e.token, token)
		sh.moveToFrontLocked(e)
		return
	}
	sh.insertLocked(string(key), token)
}

// insertLocked adds an entry, evicting the least recently used if full.
func (sh *cacheShard) insertLocked(key string, token uint64) {
	var e *centry
	if len(sh.m) >= sh.cap {
		e = sh.lru.prev // evict the least recently used and reuse its struct
		sh.unlinkLocked(e)
		delete(sh.m, e.key)
	} else {
		e = new(centry)
	}
	e.key, e.token = key, token
	sh.m[e.key] = e
	sh.pushFrontLocked(e)
}

// Raise records that a write of token on key is visible in the store. It
// raises an existing entry but creates one only if exact (the caller knows
// the stored value is now token): otherwise the stored value may be higher
// than token, and only a read can tell.
func (c *Cache) Raise(key []byte, token uint64, exact bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.epoch++
	if e := sh.m[string(key)]; e != nil {
		e.token = max(e.token, token)
		sh.moveToFrontLocked(e)
		return
	}
	if exact {
		sh.insertLocked(string(key), token)
	}
}

// Clear drops every entry: for a store whose contents were replaced (a
// snapshot restored), where a cached token may be older than the store's.
// A Fill of a read begun before Clear is dropped (the epochs move on).
func (c *Cache) Clear() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		sh.epoch++
		clear(sh.m)
		sh.lru.next, sh.lru.prev = &sh.lru, &sh.lru
		sh.mu.Unlock()
	}
}

// Stats counts the entries held, and the Gets that hit and missed.
type Stats struct {
	Entries      int
	Hits, Misses uint64
}

// Stats reads the counters.
func (c *Cache) Stats() Stats {
	var st Stats
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		st.Entries += len(sh.m)
		st.Hits += sh.hits
		st.Misses += sh.misses
		sh.mu.Unlock()
	}
	return st
}

func (sh *cacheShard) unlinkLocked(e *centry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (sh *cacheShard) pushFrontLocked(e *centry) {
	e.prev, e.next = &sh.lru, sh.lru.next
	e.next.prev, sh.lru.next = e, e
}

func (sh *cacheShard) moveToFrontLocked(e *centry) {
	if sh.lru.next != e {
		sh.unlinkLocked(e)
		sh.pushFrontLocked(e)
	}
}
