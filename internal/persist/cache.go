package persist

import (
	"hash/maphash"
	"sync"
)

// cache is the newest-token cache: a fixed number of LRU shards, each a map
// plus an intrusive doubly-linked list, under its own mutex. Its total size
// never exceeds the entries it was built with. An evicted entry's struct is
// reused for the new key, so a miss allocates only the key string.
type cache struct {
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

func newCache(entries int) *cache {
	n := 64
	for n > 1 && entries/n < 64 {
		n /= 2
	}
	c := &cache{seed: maphash.MakeSeed(), shards: make([]cacheShard, n)}
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

func (c *cache) shard(key []byte) *cacheShard {
	return &c.shards[maphash.Bytes(c.seed, key)%uint64(len(c.shards))]
}

// get returns the cached token. On a miss it returns the shard's epoch, to be
// passed to fill.
func (c *cache) get(key []byte) (token, epoch uint64, ok bool) {
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

// fill caches token, read from Pebble, unless a raise ran on the shard since
// get returned epoch: that Confirm may be newer than what was read, and its
// raise found no entry to raise (invariant 5).
func (c *cache) fill(key []byte, token, epoch uint64) {
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

// raise records that a Confirm of token on key is done. It raises an
// existing entry but creates one only if exact (the caller knows the stored
// value is now token): otherwise the stored value may be higher than token,
// and only a read can tell.
func (c *cache) raise(key []byte, token uint64, exact bool) {
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

func (c *cache) stats() Stats {
	var st Stats
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		st.CacheEntries += len(sh.m)
		st.CacheHits += sh.hits
		st.CacheMisses += sh.misses
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
