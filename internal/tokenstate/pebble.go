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
	// l0Compaction is L0CompactionThreshold (Pebble's default: 4).
	// Pebble compacts L0 once twice its depth reaches it: at 8 sublevels
	// here, at 2 by default. Each such compaction rewrites about all of
	// Lbase, so four times fewer of them rewrite a quarter of the bytes per
	// grant. A read of a resource missing from the cache checks up to 6
	// more L0 Bloom filters. l0StopWrites (default 12, in sublevels)
	// stays well above it: Pebble stalls writes there.
	l0Compaction = 16
	l0StopWrites = 48
)

// PebbleOptions are the options of a Pebble database that holds token
// state (persist's store, the tier's state machine), for the caller to
// add its FS, lock and logger to:
//   - the max merge (MaxMerger), so that recording a token reads nothing;
//   - Bloom filters, since most reads of a resource new to a cache look
//     for a key that is not there at all (a resource never granted
//     before), which they answer without reading data blocks;
//   - a larger memtable and Lbase, and more of L0 gathered before a
//     compaction. Grants of new resources are keys spread over the whole
//     key space, so every L0 compaction rewrites the part of Lbase they
//     overlap, which is all of it: the fewer and larger the flushes and
//     L0 compactions, and the fewer the levels, the less of the store
//     each grant pays to rewrite as it grows (docs/design/persist.md,
//     "Size and compaction", has the figures).
func PebbleOptions() *pebble.Options {
	opts := &pebble.Options{
		FormatMajorVersion: pebble.FormatNewest,
		Merger:             MaxMerger,
		MemTableSize:       memTableSize,
		LBaseMaxBytes:      lbaseMaxBytes,

		L0CompactionThreshold: l0Compaction,
		L0StopWritesThreshold: l0StopWrites,
	}
	opts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	return opts
}
