package tokenstate

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// The memtable (Pebble's default: 4 MB; up to two more are held while they
// flush) and Lbase's target size (default 64 MB) of a token state's
// database.
const (
	memTableSize  = 16 << 20
	lbaseMaxBytes = 256 << 20
)

// PebbleOptions are the options of a Pebble database that holds token
// state (persist's store, the tier's state machine), for the caller to
// add its FS, lock and logger to:
//   - the max merge (MaxMerger), so that recording a token reads nothing;
//   - Bloom filters, since most reads of a resource new to a cache look
//     for a key that is not there at all (a resource never granted
//     before), which they answer without reading data blocks;
//   - a larger memtable and Lbase. Grants of new resources are keys
//     spread over the whole key space, so every L0 compaction rewrites
//     the part of Lbase they overlap, which is all of it: the fewer and
//     larger the flushes, and the fewer the levels, the less of the store
//     each grant pays to rewrite as it grows. After 1.3M resources a grant
//     cost 2.1-3.5x a fresh store's CPU with Pebble's defaults, 1.1-1.25x
//     with these (docs/design/persist.md, "Size and compaction").
func PebbleOptions() *pebble.Options {
	opts := &pebble.Options{
		FormatMajorVersion: pebble.FormatNewest,
		Merger:             MaxMerger,
		MemTableSize:       memTableSize,
		LBaseMaxBytes:      lbaseMaxBytes,
	}
	opts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	return opts
}
