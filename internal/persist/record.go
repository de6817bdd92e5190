package persist

import (
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// Newest returns the newest token recorded for resource, 0 if none, or the
// floor if that is higher (invariant 8). Cache first, then Pebble
// (invariant 5).
func (s *Store) Newest(resource []byte) (uint64, error) {
	if err := checkResource(resource); err != nil {
		return 0, err
	}
	if err := s.usable(); err != nil {
		return 0, err
	}
	t, epoch, ok := s.cache.Get(resource)
	if ok {
		return max(t, s.floor.Load()), nil
	}
	// A confirmation not yet on disk, then the disk: in that order, since
	// one is dropped from the deferred writes only after it is on disk.
	d := s.deferred.get(resource)
	t, err := s.get(tokenKey(resource))
	if err != nil {
		return 0, err
	}
	t = max(t, d)
	// A failure while we read may have left unsynced data visible.
	if err := s.usable(); err != nil {
		return 0, err
	}
	s.cache.Fill(resource, t, epoch)
	return max(t, s.floor.Load()), nil
}

// check validates a grant before anything is written.
func (s *Store) check(g Grant) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := checkResource(g.Resource); err != nil {
		return err
	}
	if g.Token == 0 || g.Token > min(s.last.Load(), s.bound.Load()) {
		return ErrBadToken
	}
	return nil
}

func checkResource(r []byte) error {
	if len(r) == 0 || len(r) > MaxResourceLen {
		return ErrBadResource
	}
	return nil
}

// putToken adds g to b: a plain Set when the caller vouches that the token
// is above every one recorded before (AboveAll), since a key with one value
// reads faster than a stack of merge operands waiting for compaction; a
// max-merge otherwise (invariant 3).
func putToken(b *pebble.Batch, g Grant) error {
	if g.AboveAll {
		return b.Set(tokenKey(g.Resource), encodeToken(g.Token), nil)
	}
	return b.Merge(tokenKey(g.Resource), encodeToken(g.Token), nil)
}

func tokenKey(resource []byte) []byte {
	k := make([]byte, 0, 2+len(resource))
	return append(append(k, "t/"...), resource...)
}

// MaxMerger makes a key's value (an 8-byte big-endian token) the maximum
// of every token merged into it: t/<resource> here, and the tier's state
// (internal/tier). Its name is stored in the database; never change it.
var MaxMerger = &pebble.Merger{
	Name: "fenceproxy.max_u64_be.v1",
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		m := &maxValueMerger{}
		return m, m.MergeNewer(value)
	},
}

type maxValueMerger struct{ max uint64 }

func (m *maxValueMerger) MergeNewer(value []byte) error {
	t, err := decodeToken(value)
	m.max = max(m.max, t)
	return err
}

func (m *maxValueMerger) MergeOlder(value []byte) error { return m.MergeNewer(value) }

func (m *maxValueMerger) Finish(bool) ([]byte, io.Closer, error) {
	return encodeToken(m.max), nil, nil
}

// NewestCached is Newest when the resource's newest token is in the cache,
// without reading the disk; ok is false when it is not. A lock manager
// granting a resource it has not seen lately needs no newest token at all
// (every token it issues is above all), so it asks here first: a disk read
// for every new resource was an eighth of the proxy's CPU on lock cycles.
func (s *Store) NewestCached(resource []byte) (token uint64, ok bool, err error) {
	if err := checkResource(resource); err != nil {
		return 0, false, err
	}
	if err := s.usable(); err != nil {
		return 0, false, err
	}
	token, _, ok = s.cache.Get(resource)
	return max(token, s.floor.Load()), ok, nil
}
