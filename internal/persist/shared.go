package persist

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

// The store's bound is only as safe as the directory it is on: an empty,
// new or restored --data-dir knows nothing of tokens issued from the one it
// replaces. A Shared store therefore also keeps its bound on the backend
// (internal/authority writes it to Redis, with WAIT), and the floor says
// which tokens it cannot judge:
//
//   - Join (at start) and every later reservation write the new bound
//     locally first (synced), then share it, and only then publish it: no
//     token is returned above a bound held by both copies. So losing either
//     copy alone loses no bound.
//   - Adopt(t) says tokens up to t may have been issued without this store
//     (a shared bound above its own, a token found in an owner record).
//     The floor goes to t+1, synced, and the counter above it. Tokens below
//     the floor count as issued for every resource and are never current
//     again (Newest is never below the floor); the floor itself was
//     issued to nobody. Raising the floor is thus issuing one token, the
//     floor, to every resource at once and to no owner: holders of older
//     tokens are stale, and their next acquire gets a token above all.
//
// The store's id (m/id) names it on the backend; the run ids of the last
// processes that opened it (m/run) let the next process on the same
// directory tell its dead predecessors from a live copy of the directory
// (a copy has the same id). A directory whose inode changed since it was
// last opened (m/dir) was copied or restored: it knows no predecessor.

// ErrNotShared means a Shared store has not (yet) had a reservation's bound
// written to the backend: no token is issued until it has.
var ErrNotShared error = &notShared{clientError{text: "persist: the token bound is not yet written to the backend; no token was issued",
	code: "TRYAGAIN", reply: "fenceproxy: this proxy is not confirmed as the backend's token authority right now " +
		"(its heartbeat to Redis is late, or the token bound is not yet written there with the required replicas); nothing was done, retry shortly"}}

// notShared is ErrNotShared's type: a client error that, as
// authority.ErrUnconfirmed, is answered with the backend's own refusal
// while the backend refuses the proxy's writes (that is then why the bound
// is not written).
type notShared struct{ clientError }

// AuthorityUnconfirmed marks the error as the token authority's not being
// confirmed on the backend right now.
func (*notShared) AuthorityUnconfirmed() {}

// ID is the store's id: random, made with the directory, kept for its life
// (a copy of the directory has the same id).
func (s *Store) ID() string { return s.id }

// Run is this process's run id, random at every Open.
func (s *Store) Run() string { return s.run }

// PreviousRun reports whether run is the run id of one of the last
// keptRuns processes that opened this directory. Only one process holds a
// directory at a time (ErrLocked), so such a process has ended. A copied
// directory (Copied) has no previous run: the process that wrote its run
// ids may live on, on the original.
func (s *Store) PreviousRun(run string) bool {
	return !s.copied && run != "" && run != s.run && slices.Contains(strings.Split(s.runs, ","), run)
}

// Copied reports whether the directory is not the one the store was last
// opened in (its inode changed: a copy, a restored backup).
func (s *Store) Copied() bool { return s.copied }

// SyncedBound is m/bound as last synced: never below a bound this store
// has shared.
func (s *Store) SyncedBound() uint64 { return s.synced.Load() }

// keptRuns is how many run ids m/run keeps, newest first.
const keptRuns = 8

// Floor is the token floor (invariant 8): every token returned is above it,
// and Newest is never below it.
func (s *Store) Floor() uint64 { return s.floor.Load() }

// Join makes a Shared store issue tokens. It adopts foreign (see Adopt; 0
// for none), then reserves a window above every token this store, the
// floor and foreign allow, syncs it, and shares its bound with share, which
// must raise the backend's copy to at least its argument and return the
// copy's value after that (above the argument if another store wrote a
// higher one). Until Join returns nil, NextToken returns ErrNotShared; a
// failed Join may be retried.
func (s *Store) Join(foreign uint64, share func(bound uint64) (uint64, error)) error {
	if !s.opts.Shared {
		return errors.New("persist: Join needs a store opened with Options.Shared")
	}
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	s.share = share
	s.raiseFloorLocked(foreign)
	if err := s.reserveLocked(max(s.last.Load(), s.synced.Load())); err != nil {
		return err
	}
	s.joined = true
	return nil
}

// Adopt records, durably, that tokens up to foreign may have been issued
// without this store: the floor goes above foreign (a no-op if it is
// already), and the counter above the floor. A floor above the published
// bound also reserves (and shares) a new window above it.
func (s *Store) Adopt(foreign uint64) error {
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if !s.raiseFloorLocked(foreign) {
		return nil
	}
	s.log.Warn("fence store: tokens up to a foreign token are no longer honoured", "foreign", foreign, "floor", s.floorNext)
	if !s.joined || s.floorNext < s.bound.Load() {
		return s.syncMetaLocked()
	}
	return s.reserveLocked(max(s.last.Load(), s.floorNext))
}

// raiseFloorLocked sets floorNext above foreign and reports whether it rose.
func (s *Store) raiseFloorLocked(foreign uint64) bool {
	if foreign == 0 || foreign < s.floorNext {
		return false
	}
	s.floorNext = tokenstate.FloorAbove(foreign)
	return true
}

// publishFloorLocked publishes floorNext once it is synced, and raises the
// counter to it so that the next token is above it.
func (s *Store) publishFloorLocked() {
	f := s.floorNext
	s.floor.Store(f)
	for {
		cur := s.last.Load()
		if cur >= f || s.last.CompareAndSwap(cur, f) {
			return
		}
	}
}

// putMeta adds the floor and the store's identity to b.
func (s *Store) putMeta(b *pebble.Batch) error {
	return errors.Join(
		b.Set(tokenstate.FloorKey, tokenstate.EncodeToken(s.floorNext), nil),
		b.Set(tokenstate.IDKey, []byte(s.id), nil),
		b.Set(tokenstate.RunKey, []byte(s.runs), nil),
		b.Set(tokenstate.DirKey, []byte(s.dirID), nil),
	)
}

// syncMetaLocked syncs the floor and identity, then publishes the floor.
func (s *Store) syncMetaLocked() error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := s.putMeta(b); err != nil {
		return err
	}
	if err := s.commitSync(b); err != nil {
		return err
	}
	s.publishFloorLocked()
	return nil
}

// loadMeta reads the bound, floor and identity at Open (making an id for a
// directory that has none) and sets the counter; it returns the bound.
func (s *Store) loadMeta(dir string) (bound uint64, err error) {
	if bound, err = s.get(tokenstate.BoundKey); err != nil {
		return 0, err
	}
	floor, err := s.get(tokenstate.FloorKey)
	if err != nil {
		return 0, err
	}
	if s.id, err = s.getString(tokenstate.IDKey); err != nil {
		return 0, err
	}
	if s.id == "" {
		s.id = randomID()
	}
	prev, err := s.getString(tokenstate.RunKey)
	if err != nil {
		return 0, err
	}
	s.dirID = dirIdentity(s.opts.FS, dir)
	was, err := s.getString(tokenstate.DirKey)
	if err != nil {
		return 0, err
	}
	if s.copied = was != "" && s.dirID != "" && was != s.dirID; s.copied {
		s.log.Warn("fence store: the data dir was copied or restored since it was last used (its inode changed); "+
			"its previous processes may live on elsewhere", "dir", dir, "id", s.id)
	}
	s.run = randomID()
	runs := []string{s.run}
	if prev != "" {
		runs = append(runs, strings.Split(prev, ",")...)
	}
	s.runs = strings.Join(runs[:min(len(runs), keptRuns)], ",")
	s.floorNext = floor
	if s.opts.TokenFloor > 0 {
		s.raiseFloorLocked(s.opts.TokenFloor)
	}
	s.synced.Store(bound)
	s.floor.Store(floor) // the synced one; a raise is published once synced
	s.last.Store(min(max(bound, floor), MaxToken))
	return bound, nil
}

// getString reads a string value; a missing key reads as "".
func (s *Store) getString(key []byte) (string, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("persist: read %q: %w", key, err)
	}
	defer closer.Close()
	return string(v), nil
}

// randomID is 16 hex digits from crypto/rand.
func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on Linux (Go 1.24+ crashes rather than return an error)
	return hex.EncodeToString(b[:])
}
