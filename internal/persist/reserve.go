package persist

import (
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

// A grant's token must be on disk before its reply, but whether the grant
// will be replied at all is known only when Redis's replicas have answered.
// Reserve, Confirm and Cancel let the fsync run while they answer:
//
//   - Reserve(resource, token) syncs "p/"+token+resource: token may be
//     issued. Reads ignore it while the process lives. Concurrent Reserves
//     (and ReserveAll, a waiting line's tokens reserved ahead of its
//     grants) share one batch and one synced commit (commit.go), which
//     also carries the confirmations deferred so far.
//   - Confirm(grant) makes token the resource's newest ("t/") and drops the
//     reservation: at once in memory (the cache, and the deferred writes
//     below), on disk with the next group's batch. It needs no write of its
//     own: the reservation already made the token durable.
//   - Cancel(resource, token) drops the reservation, without a sync.
//
// So a refused grant (no replicas, too late) never shows: its token does
// not count while the process lives. That matters for the clients' own
// lock recipes, which cannot tell a refusal from "held" (issue 26 tried
// one record per grant, counted at once; the fault suite's checker then
// found holders called stale by grants their clients saw refused).
//
// After a crash, Open folds every reservation left into "t/": a token that
// may have been replied counts as issued (invariant 7). A grant refused for
// want of replicas can thus become a resource's newest token only if the
// process crashed between its Reserve and its Cancel.
//
// Why a confirmation is deferred: it needs no sync of its own (the
// reservation is durable), and a commit of its own cost a commit and its
// memtable inserts for every grant. Until the next group writes them, the
// deferred confirmations are read with the cache: Newest consults them
// before Pebble (invariant 5). They are written with a max-merge, since
// two batches that carry confirmations of one resource may commit in
// either order. A cancellation is not deferred: one lost in a crash is a
// reservation that counts as issued, which makes the resource's holder of
// the moment stale; deferred, that happened after a kill -9 whenever no
// Reserve had come since (the fault suite's linearizability check caught
// a holder called stale after a proxy kill, its line's unused tokens
// cancelled in memory only), where an unsynced write of its own reaches
// the kernel at once.
//
// Each reservation has a key of its own. With one key per resource, two
// overlapping reservations of one resource would lose a token after a
// crash: B reserves 536, A reserves 544, B's Confirm writes t/=536 and
// deletes p/, A's Confirm is not yet synced when the process dies, and 544
// (replied to A) is gone. TestCrashKeepsSyncedState found exactly that.

// Reserve durably reserves token for resource (see above): it returns
// after the group commit that carries it is synced.
func (s *Store) Reserve(resource []byte, token uint64) error {
	return s.ReserveAll(resource, []uint64{token})
}

// ReserveAll is Reserve of several tokens for one resource (a waiting
// line's, reserved ahead of its grants), in one group commit.
func (s *Store) ReserveAll(resource []byte, tokens []uint64) error {
	for _, t := range tokens {
		if err := s.check(Grant{Resource: resource, Token: t}); err != nil {
			return err
		}
	}
	return s.groupCommit(resource, tokens, nil)
}

// ReserveThen is Reserve for a caller that must not wait (a lock request
// finished where its steps complete): it returns at once, and done is told
// Reserve's outcome once the group commit that carries the reservation is
// synced, on the goroutine that committed it. An error it returns (done
// then not told) is one Reserve would have returned without a commit.
func (s *Store) ReserveThen(resource []byte, token uint64, done Synced) error {
	if err := s.check(Grant{Resource: resource, Token: token}); err != nil {
		return err
	}
	tokens := [1]uint64{token}
	return s.groupCommit(resource, tokens[:], done)
}

// Confirm makes a reserved token the resource's newest, at once for every
// read, on disk with the next group commit: call it only after Reserve of
// the same token returned nil.
func (s *Store) Confirm(g Grant) error {
	if err := s.check(g); err != nil {
		return err
	}
	s.deferred.confirm(g.Resource, g.Token)
	s.cache.Raise(g.Resource, g.Token, g.AboveAll)
	return nil
}

// Cancel drops the reservation of token for resource: it was not issued.
// It does not sync.
func (s *Store) Cancel(resource []byte, token uint64) error {
	if err := s.usable(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	// A reservation key is set once (its token is unique): SingleDelete
	// lets a flush drop the set and the delete together, where a Delete
	// left a tombstone to carry down through every level.
	if err := b.SingleDelete(tokenstate.ReservedKey(resource, token), nil); err != nil {
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

// deferred holds the confirmations not yet on disk. Its mutex is a leaf,
// never held during I/O.
type deferred struct {
	mu sync.Mutex
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

// confirm defers the write of token as resource's newest and the delete
// of its reservation.
func (d *deferred) confirm(resource []byte, token uint64) {
	k := tokenstate.ReservedKey(resource, token)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.drop = append(d.drop, k)
	if d.newest == nil {
		d.newest = make(map[string]deferredToken)
	}
	if e, ok := d.newest[string(resource)]; !ok || token > e.token {
		d.newest[string(resource)] = deferredToken{token: token}
	}
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
		if err = b.Merge(tokenstate.TokenKey([]byte(r)), tokenstate.EncodeToken(e.token), nil); err != nil {
			return t, err
		}
		d.newest[r] = deferredToken{token: e.token, batch: t.batch}
		t.confirmed++
	}
	for _, k := range d.drop {
		if err = b.SingleDelete(k, nil); err != nil {
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
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: tokenstate.ReservedPrefix, UpperBound: tokenstate.PrefixUpper(tokenstate.ReservedPrefix)})
	if err != nil {
		return 0, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		token, resource, ok := tokenstate.ParseReservedKey(it.Key())
		if !ok || len(resource) == 0 {
			it.Close()
			return n, fmt.Errorf("%w: reservation key %q", ErrCorrupt, it.Key())
		}
		if err := b.Merge(tokenstate.TokenKey(resource), tokenstate.EncodeToken(token), nil); err != nil {
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
