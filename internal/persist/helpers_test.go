package persist

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

func openT(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	return s
}

func nextT(t testing.TB, s *Store) uint64 {
	t.Helper()
	tok, err := s.NextToken()
	if err != nil {
		t.Fatalf("NextToken: %v", err)
	}
	return tok
}

func newestT(t testing.TB, s *Store, r string) uint64 {
	t.Helper()
	tok, err := s.Newest([]byte(r))
	if err != nil {
		t.Fatalf("Newest(%q): %v", r, err)
	}
	return tok
}

// isWALSync reports whether op makes a write-ahead log durable.
func isWALSync(op errorfs.Op) bool {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return strings.HasSuffix(op.Path, ".log")
	}
	return false
}

// syncCountingFS wraps fs and counts WAL fsyncs.
func syncCountingFS(fs vfs.FS, n *atomic.Int64) vfs.FS {
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if isWALSync(op) {
			n.Add(1)
		}
		return nil
	}))
}

// failingWALFS wraps fs and fails every WAL fsync while *on is true.
func failingWALFS(fs vfs.FS, on *atomic.Bool) vfs.FS {
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if on.Load() && isWALSync(op) {
			return errorfs.ErrInjected
		}
		return nil
	}))
}

// atomicMax raises m to v.
func atomicMax(m *atomic.Uint64, v uint64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}

func mustIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want %v", err, target)
	}
}
