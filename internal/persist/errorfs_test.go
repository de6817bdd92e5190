package persist

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestRecordSyncFailureIsFailStop injects a failing WAL fsync (errorfs).
// Record must fail without touching the cache, and the store must refuse
// every later call (invariant 6). A crash image taken then must still honour
// everything acknowledged.
func TestRecordSyncFailureIsFailStop(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var failing atomic.Bool
	s := openT(t, "/data", Options{FS: failingWALFS(mem, &failing)})
	r := []byte("r")
	t1, t2 := nextT(t, s), nextT(t, s)
	if err := grant(s, Grant{Resource: r, Token: t1}); err != nil {
		t.Fatal(err)
	}
	if got := newestT(t, s, "r"); got != t1 { // now cached
		t.Fatalf("Newest = %d, want %d", got, t1)
	}

	failing.Store(true)
	err := grant(s, Grant{Resource: r, Token: t2})
	mustIs(t, err, ErrUnhealthy)
	if !errors.Is(err, errorfs.ErrInjected) {
		t.Errorf("error %v does not carry the cause", err)
	}
	if tok, _, _ := s.cache.Get(r); tok != t1 {
		t.Fatalf("cache holds %d after a failed Record, want %d", tok, t1)
	}
	failing.Store(false) // even once the disk recovers, the store stays down
	_, err = s.NextToken()
	mustIs(t, err, ErrUnhealthy)
	_, err = s.Newest(r)
	mustIs(t, err, ErrUnhealthy)
	mustIs(t, grant(s, Grant{Resource: r, Token: t1}), ErrUnhealthy)
	if s.Stats().Healthy {
		t.Fatal("Stats().Healthy after a failed sync")
	}

	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = s.Close() // may report the failure; must not hang or panic
	s = openT(t, "/data", Options{FS: crashed})
	defer s.Close()
	if tok := nextT(t, s); tok <= t2 {
		t.Fatalf("after restart: token %d <= %d", tok, t2)
	}
	if got := newestT(t, s, "r"); got < t1 {
		t.Fatalf("after restart: Newest = %d < %d", got, t1)
	}
}

// TestReserveFailureIsFailStop: when the bound cannot be synced, NextToken
// fails and hands out nothing beyond the durable bound.
func TestReserveFailureIsFailStop(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var failing atomic.Bool
	s := openT(t, "/data", Options{FS: failingWALFS(mem, &failing), ReserveWindow: 4})
	failing.Store(true)
	var last uint64
	for {
		tok, err := s.NextToken()
		if err != nil {
			mustIs(t, err, ErrUnhealthy)
			break
		}
		last = tok
	}
	if last != 4 {
		t.Fatalf("last token %d, want 4 (the bound reserved by Open)", last)
	}
	_, err := s.NextToken()
	mustIs(t, err, ErrUnhealthy)
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = s.Close()
	s = openT(t, "/data", Options{FS: crashed})
	defer s.Close()
	if tok := nextT(t, s); tok <= last {
		t.Fatalf("after restart: token %d <= %d", tok, last)
	}
}
