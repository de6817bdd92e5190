package persist

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// A grant's token must be on disk before its reply, but whether the grant
// will be replied at all is known only when Redis's replicas have answered.
// Reserve, Confirm and Cancel let the fsync run while they answer:
//
//   - Reserve(resource, token) syncs "p/"+token+resource: token may be
//     issued. Reads ignore it while the process lives.
//   - Confirm(grant) makes token the resource's newest ("t/") and drops the
//     reservation, in one batch without a sync: the reservation already made
//     the token durable.
//   - Cancel(resource, token) drops the reservation, without a sync.
//
// Each reservation has a key of its own. With one key per resource, two
// overlapping grants of one resource would lose a token after a crash: B
// reserves 536, A reserves 544, B's Confirm writes t/=536 and deletes p/,
// A's Confirm is not yet synced when the process dies, and 544 (replied to
// A) is gone. TestCrashKeepsSyncedState found exactly that.
//
// After a crash, Open folds every reservation left into "t/": a token that
// may have been issued counts as issued (invariant 7). A grant refused for
// want of replicas can thus become a resource's newest token only if the
// process crashed between its Reserve and its Cancel.

var reservedPrefix = []byte("p/")

// reservedKey is "p/", the token (8 bytes, big-endian), then the resource:
// fixed-width before the resource, so any resource bytes parse back.
func reservedKey(resource []byte, token uint64) []byte {
	k := make([]byte, 0, len(reservedPrefix)+8+len(resource))
	k = append(k, reservedPrefix...)
	k = binary.BigEndian.AppendUint64(k, token)
	return append(k, resource...)
}

// Reserve durably records that token may be issued for resource. It returns
// after the sync; concurrent Reserves share fsyncs.
func (s *Store) Reserve(resource []byte, token uint64) error {
	if err := s.check(Grant{Resource: resource, Token: token}); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(reservedKey(resource, token), nil, nil); err != nil {
		return err
	}
	return s.commitSync(b)
}

// Confirm makes a reserved token the resource's newest. It does not sync:
// call it only after Reserve of the same token returned nil.
func (s *Store) Confirm(g Grant) error {
	if err := s.check(g); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := putToken(b, g); err != nil {
		return err
	}
	if err := b.Delete(reservedKey(g.Resource, g.Token), nil); err != nil {
		return err
	}
	if err := s.commitNoSync(b); err != nil {
		return err
	}
	s.cache.Raise(g.Resource, g.Token, g.AboveAll)
	return nil
}

// Cancel drops the reservation of token for resource: it was not issued.
func (s *Store) Cancel(resource []byte, token uint64) error {
	if err := s.usable(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Delete(reservedKey(resource, token), nil); err != nil {
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
