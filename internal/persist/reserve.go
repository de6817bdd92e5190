package persist

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// A grant's token must be on disk before its reply, but whether the grant
// will be replied at all is known only when Redis's replicas have answered.
// So the write runs while they answer, and a grant is one record:
//
//   - Reserve(resource, token) writes "t/"+resource = token (max-merge,
//     invariant 3) and syncs it, in one group commit with every Reserve
//     that arrives meanwhile (commit.go). Once it returns nil the token
//     counts as issued: Newest is at least token, now and after any crash.
//   - Confirm(grant) adds nothing to disk: the record is there. It raises
//     the cache (exactly, when the caller vouches Grant.AboveAll).
//   - Cancel(resource, token) does nothing for such a token: a token
//     written whose grant is then refused (no replicas, too late) stays
//     issued, stale, never current again. That is what a crash between
//     the write and the refusal always did, and the contract allows it
//     (an outcome that may not be known counts as issued).
//
// The grants of one resource come one at a time (the lock manager's turn),
// so a Reserve raises what the resource's holder of the moment sees only
// when that holder's lease is over.
//
// Until issue 26 a grant was three entries: a synced reservation
// "p/"+token+resource that reads ignored, its confirmation into "t/"
// written with the next Reserve's batch, and the reservation's delete. A
// refused grant then never showed, but every grant cost three memtable
// entries, and the reservations' sets and deletes made flushes and
// compactions grow with every resource ever seen (4-5 to 18-20 µs of
// compaction per lock cycle after 1.3M resources).
//
// One case keeps that form: tokens a waiting line reserves AHEAD of its
// grants (ReserveAhead, the lock manager's handoff.go) while the resource
// is held. Counting them at once would make the holder of the moment stale
// and every token reserved ahead at most the newest. They are written as
// "p/"+token+resource in the same group commits, ignored by reads while the
// process lives; Confirm of one makes it "t/" (at once in memory: the cache
// and the deferred writes below; on disk with the next group's batch) and
// drops its reservation; Cancel of one deletes its reservation. After a
// crash, Open folds every "p/" left into "t/": a token that may have been
// replied counts as issued (invariant 7). Open folds the "p/" of a
// directory written before issue 26 (every grant reserved so) the same way.
//
// Why a confirmation of a token reserved ahead is deferred: it needs no
// sync of its own (the reservation is durable), and a commit of its own
// cost a commit and its memtable inserts. Until the next group writes
// them, the deferred confirmations are read with the cache: Newest
// consults them before Pebble (invariant 5). They are written with a
// max-merge, since two batches that carry confirmations of one resource
// may commit in either order. A cancellation is not deferred: one lost in
// a crash is a reservation that counts as issued, which makes the
// resource's holder of the moment stale; deferred, that happened after a
// kill -9 whenever no Reserve had come since (the fault suite's
// linearizability check caught a holder called stale after a proxy kill,
// its line's unused tokens cancelled in memory only), where an unsynced
// write of its own reaches the kernel at once.
//
// Each reservation has a key of its own. With one key per resource, two
// overlapping reservations of one resource would lose a token after a
// crash: B reserves 536, A reserves 544, B's Confirm writes t/=536 and
// deletes p/, A's Confirm is not yet synced when the process dies, and 544
// (replied to A) is gone. TestCrashKeepsSyncedState found exactly that.

var reservedPrefix = []byte("p/")

// reservedKey is "p/", the token (8 bytes, big-endian), then the resource:
// fixed-width before the resource, so any resource bytes parse back.
func reservedKey(resource []byte, token uint64) []byte {
	k := make([]byte, 0, len(reservedPrefix)+8+len(resource))
	k = append(k, reservedPrefix...)
	k = binary.BigEndian.AppendUint64(k, token)
	return append(k, resource...)
}

// Reserve durably records token as issued for resource: one max-merged
// "t/" record, synced in a group commit shared with the concurrent
// Reserves (commit.go), which also carries the confirmations deferred so
// far. Once it returns nil, Newest(resource) >= token, now and after any
// crash. An error leaves the outcome unknown (the token may be on disk).
func (s *Store) Reserve(resource []byte, token uint64) error {
	if err := s.check(Grant{Resource: resource, Token: token}); err != nil {
		return err
	}
	err := s.groupCommit(func(b *pebble.Batch) error {
		return b.Merge(tokenKey(resource), encodeToken(token), nil)
	})
	if err != nil {
		return err
	}
	// After the commit (invariant 5): the stored value is now >= token.
	// Not exact: another record may be higher; Confirm of a grant the
	// caller vouches for (AboveAll) makes it so.
	s.cache.Raise(resource, token, false)
	return nil
}

// ReserveAhead durably reserves tokens for resource without issuing them:
// reads ignore them while the process lives, until Confirm makes one the
// newest; Cancel drops one (see above). A crash counts them all as issued.
// One group commit for all.
func (s *Store) ReserveAhead(resource []byte, tokens []uint64) error {
	for _, t := range tokens {
		if err := s.check(Grant{Resource: resource, Token: t}); err != nil {
			return err
		}
	}
	keys := make([][]byte, len(tokens))
	for i, t := range tokens {
		keys[i] = reservedKey(resource, t)
	}
	s.deferred.reserveAhead(keys)
	return s.groupCommit(func(b *pebble.Batch) error {
		for _, k := range keys {
			if err := b.Set(k, nil, nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// Confirm makes a token the resource's newest: call it only after Reserve
// or ReserveAhead of the same token returned nil. After Reserve the record
// is on disk, and Confirm only tells the cache (exactly, with AboveAll);
// after ReserveAhead it makes the token count, at once for every read, on
// disk with the next group commit.
func (s *Store) Confirm(g Grant) error {
	if err := s.check(g); err != nil {
		return err
	}
	s.deferred.confirm(g.Resource, g.Token)
	s.cache.Raise(g.Resource, g.Token, g.AboveAll)
	return nil
}

// Cancel says token was not issued for resource. A token reserved ahead
// (ReserveAhead) has its reservation deleted, without a sync. A token
// written by Reserve stays issued (stale): Cancel does nothing for it.
func (s *Store) Cancel(resource []byte, token uint64) error {
	if err := s.usable(); err != nil {
		return err
	}
	k := s.deferred.cancelAhead(resource, token)
	if k == nil {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Delete(k, nil); err != nil {
		return err
	}
	return s.commitNoSync(b)
}

// commitNoSync applies b without waiting for the disk. A failure is treated
// like a failed sync (fail-stop), since Pebble cannot tell which writes of
// its log made it.
func (s *Store) commitNoSync(b *pebble.Batch) error {
	if err := s.db.Apply(b, pebble.NoSync); err != nil {
		return s.fail(err)
	}
	if p := s.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// flushDeferred writes what is deferred with a commit of its own (at
// Close).
func (s *Store) flushDeferred() error {
	b := s.db.NewBatch()
	defer b.Close()
	taken, err := s.deferred.takeInto(b)
	if err != nil || taken.confirmed == 0 {
		return err
	}
	err = s.commitSync(b)
	s.deferred.written(taken, err == nil)
	return err
}

// deferred holds the tokens reserved ahead, and the confirmations of
// them not yet on disk. Its mutex is a leaf, never held during I/O.
type deferred struct {
	// nAhead counts ahead's keys, so that the Confirm and Cancel of a
	// token written by Reserve (every grant but a line's) skip the mutex.
	nAhead atomic.Int64
	mu     sync.Mutex
	// ahead are the reservation keys of tokens reserved ahead, neither
	// confirmed nor cancelled.
	ahead map[string]struct{}
	// newest is each resource's newest confirmed token not yet written,
	// with the batch that took it to be written (0: none yet).
	newest map[string]deferredToken
	// drop are the reservation keys of confirmed tokens, to delete.
	drop [][]byte
	// batches numbers the batches that take deferred writes.
	batches uint64
}

type deferredToken struct {
	token uint64
	batch uint64
}

// taken is what one batch carries, to be forgotten once it is written.
type taken struct {
	batch     uint64
	confirmed int
}

// reserveAhead notes keys as reserved ahead, before they are written (a
// Cancel after a failed write still deletes them).
func (d *deferred) reserveAhead(keys [][]byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ahead == nil {
		d.ahead = make(map[string]struct{})
	}
	for _, k := range keys {
		if _, ok := d.ahead[string(k)]; !ok {
			d.ahead[string(k)] = struct{}{}
			d.nAhead.Add(1)
		}
	}
}

// takeAheadLocked forgets the reservation of token for resource and
// returns its key, or nil if it was not reserved ahead.
func (d *deferred) takeAheadLocked(resource []byte, token uint64) []byte {
	k := reservedKey(resource, token)
	if _, ok := d.ahead[string(k)]; !ok {
		return nil
	}
	delete(d.ahead, string(k))
	d.nAhead.Add(-1)
	return k
}

// cancelAhead forgets the reservation of token for resource and returns
// its key to delete, or nil if it was not reserved ahead.
func (d *deferred) cancelAhead(resource []byte, token uint64) []byte {
	if d.nAhead.Load() == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.takeAheadLocked(resource, token)
}

// confirm defers the write of a token reserved ahead as resource's newest
// and the delete of its reservation; a token written by Reserve needs
// neither.
func (d *deferred) confirm(resource []byte, token uint64) {
	if d.nAhead.Load() == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.takeAheadLocked(resource, token)
	if k == nil {
		return
	}
	if d.newest == nil {
		d.newest = make(map[string]deferredToken)
	}
	if e, ok := d.newest[string(resource)]; !ok || token > e.token {
		d.newest[string(resource)] = deferredToken{token: token}
	}
	d.drop = append(d.drop, k)
}

// get is resource's deferred newest token, 0 if none.
func (d *deferred) get(resource []byte) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.newest[string(resource)].token
}

// takeInto adds every deferred write not yet taken to b.
func (d *deferred) takeInto(b *pebble.Batch) (t taken, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.batches++
	t.batch = d.batches
	for r, e := range d.newest {
		if e.batch != 0 {
			continue // another batch writes it
		}
		if err = b.Merge(tokenKey([]byte(r)), encodeToken(e.token), nil); err != nil {
			return t, err
		}
		d.newest[r] = deferredToken{token: e.token, batch: t.batch}
		t.confirmed++
	}
	for _, k := range d.drop {
		if err = b.Delete(k, nil); err != nil {
			return t, err
		}
	}
	d.drop = d.drop[:0]
	return t, nil
}

// written forgets what t carried once it is on disk (ok), unless raised
// since; if its commit failed, the store is unhealthy and nothing is
// written again.
func (d *deferred) written(t taken, ok bool) {
	if !ok || t.confirmed == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for r, e := range d.newest {
		if e.batch == t.batch {
			delete(d.newest, r) // not raised since: a raise clears batch
		}
	}
}

// foldReservations turns every reservation a crash left behind into the
// resource's newest token, and syncs that before the store serves anyone.
func (s *Store) foldReservations() (int, error) {
	upper := append([]byte(nil), reservedPrefix...)
	upper[len(upper)-1]++
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: reservedPrefix, UpperBound: upper})
	if err != nil {
		return 0, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[len(reservedPrefix):]
		if len(k) <= 8 {
			it.Close()
			return n, fmt.Errorf("%w: reservation key %q", ErrCorrupt, it.Key())
		}
		token, resource := k[:8], k[8:]
		if err := b.Merge(tokenKey(resource), append([]byte(nil), token...), nil); err != nil {
			it.Close()
			return n, err
		}
		if err := b.Delete(append([]byte(nil), it.Key()...), nil); err != nil {
			it.Close()
			return n, err
		}
		n++
	}
	if err := it.Close(); err != nil {
		return n, err
	}
	if n == 0 {
		return 0, nil
	}
	return n, s.commitSync(b)
}
