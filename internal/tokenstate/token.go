package tokenstate

import (
	"encoding/binary"
	"errors"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// ErrCorrupt means a stored token is not 8 bytes, or a key does not parse.
var ErrCorrupt = errors.New("tokenstate: corrupt stored value")

// EncodeToken is a token as stored: 8 bytes, big-endian (so t/ values and
// reservation keys sort as numbers).
func EncodeToken(t uint64) []byte { return binary.BigEndian.AppendUint64(nil, t) }

// DecodeToken reads a stored token; 0 and ErrCorrupt if v is not 8 bytes.
func DecodeToken(v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, ErrCorrupt
	}
	return binary.BigEndian.Uint64(v), nil
}

// MaxMerger makes a key's value (an 8-byte big-endian token) the maximum
// of every token merged into it (invariant 1): t/<resource> in both
// stores. Its name is stored in every database; never change it.
var MaxMerger = &pebble.Merger{
	Name: "fenceproxy.max_u64_be.v1",
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		m := &maxValueMerger{}
		return m, m.MergeNewer(value)
	},
}

type maxValueMerger struct{ max uint64 }

func (m *maxValueMerger) MergeNewer(value []byte) error {
	t, err := DecodeToken(value)
	m.max = max(m.max, t)
	return err
}

func (m *maxValueMerger) MergeOlder(value []byte) error { return m.MergeNewer(value) }

func (m *maxValueMerger) Finish(bool) ([]byte, io.Closer, error) {
	return EncodeToken(m.max), nil, nil
}
