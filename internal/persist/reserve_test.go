package persist

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

// TestReserveConfirmCancel: while the process lives, only confirmed tokens
// count; a cancelled reservation never shows.
func TestReserveConfirmCancel(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := []byte("res")
	t1, _ := s.NextToken()
	t2, _ := s.NextToken()
	if err := s.Reserve(r, t1); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Newest(r); n != 0 {
		t.Fatalf("Newest after Reserve only = %d, want 0", n)
	}
	if err := s.Confirm(Grant{Resource: r, Token: t1, AboveAll: true}); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Newest(r); n != t1 {
		t.Fatalf("Newest after Confirm = %d, want %d", n, t1)
	}
	if err := s.Reserve(r, t2); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(r, t2); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Newest(r); n != t1 {
		t.Fatalf("Newest after a cancelled reservation = %d, want %d", n, t1)
	}
}

// TestReservationSurvivesCrash: a token written by Reserve counts as
// issued after a crash, confirmed, cancelled or neither; one reserved
// ahead counts if confirmed or left, and not if cancelled before a later
// sync.
func TestReservationSurvivesCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := Open("/data", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := []byte("a"), []byte("b"), []byte("c")
	ea, eb, ec := []byte("ahead-a"), []byte("ahead-b"), []byte("ahead-c")
	ta, tb, tc := nextT(t, s), nextT(t, s), nextT(t, s)
	tea, teb, tec := nextT(t, s), nextT(t, s), nextT(t, s)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Reserve(a, ta)) // replied
	must(s.Confirm(Grant{Resource: a, Token: ta}))
	must(s.Reserve(b, tb)) // crash before its replicas answered
	must(s.Reserve(c, tc)) // refused: a later sync carries the cancel
	must(s.Cancel(c, tc))
	must(s.ReserveAll(ea, []uint64{tea})) // granted: confirmed without a sync
	must(s.Confirm(Grant{Resource: ea, Token: tea}))
	must(s.ReserveAll(eb, []uint64{teb})) // left in line at the crash
	must(s.ReserveAll(ec, []uint64{tec})) // unused: a later sync carries the cancel
	must(s.Cancel(ec, tec))
	td := nextT(t, s)
	must(grant(s, Grant{Resource: []byte("d"), Token: td}))

	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s2, err := Open("/data", Options{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for _, tc := range []struct {
		r    []byte
		want uint64
	}{{a, ta}, {b, tb}, {c, 0}, {ea, tea}, {eb, teb}, {ec, 0}} {
		if n, _ := s2.Newest(tc.r); n != tc.want {
			t.Errorf("after the crash Newest(%s) = %d, want %d", tc.r, n, tc.want)
		}
	}
	s.Close()
}

// TestOverlappingReservationsOfOneResource: two tokens of one resource
// reserved ahead and in flight at once (B's token older than A's). B's Confirm reaches the disk,
// A's does not; A's token was replied, so it must survive the crash. With
// one reservation key per resource B's Confirm deleted A's reservation too.
func TestOverlappingReservationsOfOneResource(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := Open("/data", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	r := []byte("r")
	tb, _ := s.NextToken()
	ta, _ := s.NextToken()
	must(s.ReserveAll(r, []uint64{tb}))
	must(s.ReserveAll(r, []uint64{ta}))
	must(s.Confirm(Grant{Resource: r, Token: tb}))
	td, _ := s.NextToken() // a synced write that carries B's Confirm
	must(s.Reserve([]byte("other"), td))
	must(s.Confirm(Grant{Resource: r, Token: ta})) // not synced

	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s2, err := Open("/data", Options{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if n, _ := s2.Newest(r); n != ta {
		t.Errorf("after the crash Newest(r) = %d, want %d (the later grant)", n, ta)
	}
	s.Close()
}

// TestNewestCached: it answers only from the cache (a resource never read
// nor confirmed is not known, also after a restart), knows a confirmed
// token at once, and knows what Newest read from disk.
func TestNewestCached(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	r := []byte("cached")
	if _, ok, err := s.NewestCached(r); ok || err != nil {
		t.Fatalf("NewestCached of a resource never seen: ok %v, err %v; want not known", ok, err)
	}
	tok := nextT(t, s)
	if err := s.Reserve(r, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.Confirm(Grant{Resource: r, Token: tok, AboveAll: true}); err != nil {
		t.Fatal(err)
	}
	if n, ok, err := s.NewestCached(r); !ok || err != nil || n != tok {
		t.Fatalf("NewestCached after Confirm = %d, %v, %v; want %d, known", n, ok, err, tok)
	}
	s.Close()

	s = openT(t, dir, Options{})
	defer s.Close()
	if _, ok, _ := s.NewestCached(r); ok {
		t.Fatal("NewestCached after a restart knows a token it never read")
	}
	if n := newestT(t, s, string(r)); n != tok {
		t.Fatalf("Newest after a restart = %d, want %d", n, tok)
	}
	if n, ok, _ := s.NewestCached(r); !ok || n != tok {
		t.Fatalf("NewestCached after Newest read it = %d, %v; want %d, known", n, ok, tok)
	}
	if _, _, err := s.NewestCached([]byte("")); err == nil {
		t.Fatal("NewestCached of an empty resource name: no error")
	}
}

// TestDeferredConfirmations: a Confirm of a token reserved ahead writes
// nothing of its own; the next group commit's batch carries it. Until then Newest knows it even with the cache
// holding nothing of the resource, and a crash before it is written loses
// nothing: its reservation counts. A clean Close writes what is deferred.
func TestDeferredConfirmations(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := openT(t, "/data", Options{FS: fs, CacheEntries: 1})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	r := []byte("r")
	tr := nextT(t, s)
	must(s.ReserveAll(r, []uint64{tr}))
	commits := s.Stats().SyncedCommits
	must(s.Confirm(Grant{Resource: r, Token: tr, AboveAll: true}))
	// Evict r from the one-entry cache.
	for i := range 4 {
		newestT(t, s, fmt.Sprintf("other-%d", i))
	}
	if got := newestT(t, s, "r"); got != tr {
		t.Fatalf("Newest(r) with its confirmation deferred and r out of the cache = %d, want %d", got, tr)
	}
	if v, err := s.get(tokenstate.TokenKey(r)); err != nil || v != 0 {
		t.Fatalf("t/r on disk before the next Reserve: %d, %v; want nothing written by Confirm", v, err)
	}
	if s.Stats().SyncedCommits != commits {
		t.Fatalf("Confirm made a synced commit")
	}

	// A crash now: the reservation stands for the confirmation.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s2 := openT(t, "/data", Options{FS: crashed})
	if got := newestT(t, s2, "r"); got != tr {
		t.Errorf("after a crash before the next Reserve, Newest(r) = %d, want %d", got, tr)
	}
	s2.Close()

	// The next Reserve writes it: t/r is on disk, and the reservation gone.
	to := nextT(t, s)
	must(s.Reserve([]byte("o"), to))
	if v, err := s.get(tokenstate.TokenKey(r)); err != nil || v != tr {
		t.Fatalf("t/r on disk after the next Reserve: %d, %v; want %d", v, err, tr)
	}
	if v, closer, err := s.db.Get(tokenstate.ReservedKey(r, tr)); err == nil {
		closer.Close()
		t.Fatalf("r's reservation still on disk after its confirmation was written: %q", v)
	}
	if got := newestT(t, s, "r"); got != tr {
		t.Fatalf("Newest(r) after the write = %d, want %d", got, tr)
	}
	must(s.Confirm(Grant{Resource: []byte("o"), Token: to, AboveAll: true}))
	must(s.Close())
	var log bytes.Buffer
	s3 := openT(t, "/data", Options{FS: fs, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	defer s3.Close()
	if v, err := s3.get(tokenstate.TokenKey([]byte("o"))); err != nil || v != to {
		t.Fatalf("t/o after a clean Close: %d, %v; want %d", v, err, to)
	}
	if strings.Contains(log.String(), "reserved before a crash") {
		t.Fatalf("a clean Close left reservations to fold: %s", log.String())
	}
}
