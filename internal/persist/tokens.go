package persist

import (
	"fmt"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

// NextToken returns a token strictly greater than every token returned before,
// by this process or any earlier one using the same dir, and above the
// floor. Safe for concurrent use. When the in-memory counter reaches the
// durable bound, the caller that crossed it synchronously persists a new
// bound (counter+ReserveWindow) before returning, and shares it if the store
// is Shared; callers that crossed it at the same time wait for that one
// sync. Tokens need not be consecutive. It never returns a token above the
// durable bound: if the reservation fails, it returns an error (a failed
// sync also turns the store unhealthy; a failed share does not).
func (s *Store) NextToken() (uint64, error) {
	if err := s.usable(); err != nil {
		return 0, err
	}
	t := s.last.Add(1)
	if tokenstate.Issuable(t, s.floor.Load(), s.bound.Load()) {
		return t, nil
	}
	return s.nextTokenSlow(t)
}

// NextTokenNow is NextToken for a caller that must not wait: ok is false
// when the next token needs a new window (I/O), and the token drawn is
// skipped (tokens need not be consecutive; NextToken covers it with the
// next window).
func (s *Store) NextTokenNow() (token uint64, ok bool, err error) {
	if err := s.usable(); err != nil {
		return 0, false, err
	}
	t := s.last.Add(1)
	return t, tokenstate.Issuable(t, s.floor.Load(), s.bound.Load()), nil
}

// nextTokenSlow reserves a new window so that t is covered (invariant 1),
// or takes a token above a floor raised since t was drawn (invariant 8).
func (s *Store) nextTokenSlow(t uint64) (uint64, error) {
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	for {
		if !s.joined {
			return 0, ErrNotShared
		}
		floor, bound := s.floor.Load(), s.bound.Load()
		switch {
		case tokenstate.Issuable(t, floor, bound):
			return t, nil // covered: by another caller's reservation, or by ours below
		case t > MaxToken:
			return 0, ErrExhausted
		case t <= floor:
			t = s.last.Add(1) // below a floor raised meanwhile: never issued
		default:
			// Cover every token other callers have already taken, plus a
			// window (which may raise the floor: then t is looked at again).
			if err := s.reserveLocked(s.last.Load()); err != nil {
				return 0, err
			}
		}
	}
}

// maxShareRounds bounds how often one reservation meets a shared bound
// above its own (each time the floor goes above that one).
const maxShareRounds = 4

// reserveLocked durably writes m/bound = above+ReserveWindow (at most
// MaxToken), with the floor and the store's identity, then shares the bound
// if the store is Shared, and only then publishes it in s.bound. A shared
// bound found above the new one was written by another fence store (or an
// older copy of this one): tokens up to it may have been issued without
// this store, so the floor goes above it and the reservation is made again
// above the floor. The caller holds reserveMu.
func (s *Store) reserveLocked(above uint64) error {
	for range maxShareRounds {
		if err := s.usable(); err != nil {
			return err
		}
		above = max(above, s.floorNext)
		nb := tokenstate.NextBound(above, s.opts.ReserveWindow)
		b := s.db.NewBatch()
		err := s.putMeta(b)
		if err == nil {
			err = b.Set(tokenstate.BoundKey, tokenstate.EncodeToken(nb), nil)
		}
		if err == nil {
			err = s.commitSync(b)
		}
		b.Close()
		if err != nil {
			return err
		}
		s.synced.Store(nb)
		s.publishFloorLocked()
		if s.share != nil {
			got, err := s.share(nb)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrNotShared, err)
			}
			if got > nb {
				s.log.Warn("fence store: the token bound on the backend is above this store's: "+
					"another fence store issued tokens there; tokens up to it are no longer honoured",
					"backend_bound", got, "bound", nb)
				s.floorNext = max(s.floorNext, got+1)
				continue
			}
		}
		s.bound.Store(nb)
		return nil
	}
	return fmt.Errorf("%w: the backend's bound kept rising above this store's", ErrNotShared)
}
