package persist

import "encoding/binary"

var boundKey = []byte("m/bound")

// NextToken returns a token strictly greater than every token returned before,
// by this process or any earlier one using the same dir. Safe for concurrent
// use. When the in-memory counter reaches the durable bound, the caller that
// crossed it synchronously persists a new bound (counter+ReserveWindow) before
// returning; callers that crossed it at the same time wait for that one sync.
// Tokens need not be consecutive. It never returns a token above the durable
// bound: if the reservation fails, it returns an error and the store turns
// unhealthy.
func (s *Store) NextToken() (uint64, error) {
	if err := s.usable(); err != nil {
		return 0, err
	}
	t := s.last.Add(1)
	if t <= s.bound.Load() {
		return t, nil
	}
	return s.nextTokenSlow(t)
}

// nextTokenSlow reserves a new window so that t is covered (invariant 1).
func (s *Store) nextTokenSlow(t uint64) (uint64, error) {
	s.reserveMu.Lock()
	defer s.reserveMu.Unlock()
	if t <= s.bound.Load() {
		return t, nil // another caller reserved while we waited
	}
	if t > MaxToken {
		return 0, ErrExhausted
	}
	// Cover every token other callers have already taken, plus a window.
	if err := s.reserveLocked(s.last.Load()); err != nil {
		return 0, err
	}
	return t, nil
}

// reserveLocked durably writes m/bound = above+ReserveWindow (at most
// MaxToken) and only then publishes it in s.bound. The caller holds reserveMu.
func (s *Store) reserveLocked(above uint64) error {
	if err := s.usable(); err != nil {
		return err
	}
	nb := uint64(MaxToken)
	if above < MaxToken-s.opts.ReserveWindow {
		nb = above + s.opts.ReserveWindow
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(boundKey, encodeToken(nb), nil); err != nil {
		return err
	}
	if err := s.commitSync(b); err != nil {
		return err
	}
	s.bound.Store(nb)
	return nil
}

func encodeToken(t uint64) []byte { return binary.BigEndian.AppendUint64(nil, t) }

func decodeToken(v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, ErrCorrupt
	}
	return binary.BigEndian.Uint64(v), nil
}
