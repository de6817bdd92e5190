package tier

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fenceproxy/fenceproxy/internal/tokenstate"
)

// The state machine alone, without raft: entries applied by hand.

func openTestFSM(t *testing.T, dir string) *fsm {
	t.Helper()
	f, err := openFSM(dir, 1000, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.close() })
	return f
}

// entryLogs numbers entries as raft would, from index first.
func entryLogs(first uint64, es ...entry) []*raft.Log {
	var ls []*raft.Log
	for i, e := range es {
		ls = append(ls, &raft.Log{Index: first + uint64(i), Term: 1, Type: raft.LogCommand, Data: e.encode()})
	}
	return ls
}

// grants is n resources granted once each after a LeaderStart, one Reserve
// and one Confirm each, and one reservation left pending.
func grants(n int) []entry {
	es := []entry{{kind: kindLeaderStart, term: 1, node: "n1", addr: "a1", tierID: "tier1"}}
	for i := 1; i <= n; i++ {
		r := fmt.Sprintf("resource-%06d", i)
		es = append(es, entry{kind: kindReserve, resource: r, token: uint64(i), term: 1},
			entry{kind: kindConfirm, resource: r, token: uint64(i)})
	}
	return append(es, entry{kind: kindWindow}, entry{kind: kindReserve, resource: "open", token: 7, term: 1})
}

type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

func snapshotOf(t *testing.T, f *fsm) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var sink memSink
	if err := s.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// sameState fails unless a and b hold the same small fields and newest
// tokens for resources 1..n.
func sameState(t *testing.T, a, b *fsm, n int) {
	t.Helper()
	sa, sb := a.state(), b.state()
	if sa != sb {
		t.Fatalf("states differ:\n%+v\n%+v", sa, sb)
	}
	for i := 1; i <= n; i++ {
		r := fmt.Sprintf("resource-%06d", i)
		ta, errA := a.newestOf(r)
		tb, errB := b.newestOf(r)
		if errA != nil || errB != nil || ta != tb {
			t.Fatalf("%s: %d (%v) and %d (%v)", r, ta, errA, tb, errB)
		}
	}
}

// A snapshot streams the state out and a Restore streams it in, over more
// than one restore batch; what was pending stays pending.
func TestSnapshotRoundTrip(t *testing.T) {
	const n = 40_000 // about 1.3 restore batches of tokens
	src := openTestFSM(t, filepath.Join(t.TempDir(), "src"))
	src.ApplyBatch(entryLogs(1, grants(n)...))
	snap := snapshotOf(t, src)
	dst := openTestFSM(t, filepath.Join(t.TempDir(), "dst"))
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	sameState(t, src, dst, n)
	if st := dst.state(); st.pending != 1 || st.tierID != "tier1" || st.applied != uint64(2*n+3) || dst.snapResources.Load() != n {
		t.Fatalf("restored state %+v, %d resources", st, dst.snapResources.Load())
	}
	// The pending reservation is folded by the next leader, as on src.
	next := entryLogs(uint64(2*n+4), entry{kind: kindLeaderStart, term: 2, node: "n2", addr: "a2"})
	src.ApplyBatch(next)
	dst.ApplyBatch(next)
	sameState(t, src, dst, n)
	if tok, _ := dst.newestOf("open"); tok != 7 {
		t.Fatalf("the pending reservation folded to %d, want 7", tok)
	}
}

// Entries at or below the state's applied index are skipped: raft replays
// the log after its last snapshot at every start, and a Window applied
// twice would move one node's bound away from the others'.
func TestReplayIsSkipped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	f := openTestFSM(t, dir)
	logs := entryLogs(1, grants(10)...)
	f.ApplyBatch(logs)
	want := f.state()
	f.ApplyBatch(logs[5:])
	if got := f.state(); got != want {
		t.Fatalf("replaying applied entries changed the state:\n%+v\nwant\n%+v", got, want)
	}
	// And across a reopen: the applied index is in Pebble with the rest.
	f.close()
	g := openTestFSM(t, dir)
	if got := g.state(); got != want {
		t.Fatalf("reopened state:\n%+v\nwant\n%+v", got, want)
	}
	g.ApplyBatch(logs)
	if got := g.state(); got != want {
		t.Fatalf("replay after a reopen changed the state:\n%+v\nwant\n%+v", got, want)
	}
}

// A Restore of a snapshot the state already holds (raft restores its last
// snapshot at every start) keeps the state, entries applied after the
// snapshot included; one the state is behind replaces it.
func TestRestoreKeepsNewerState(t *testing.T) {
	f := openTestFSM(t, filepath.Join(t.TempDir(), "state"))
	f.ApplyBatch(entryLogs(1, grants(10)...))
	snap := snapshotOf(t, f)
	f.ApplyBatch(entryLogs(24, entry{kind: kindAdopt, token: 1000}))
	newer := f.state()
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if got := f.state(); got != newer {
		t.Fatalf("restoring an older snapshot changed the state:\n%+v\nwant\n%+v", got, newer)
	}
	behind := openTestFSM(t, filepath.Join(t.TempDir(), "behind"))
	behind.ApplyBatch(entryLogs(1, grants(3)...))
	if err := behind.Restore(io.NopCloser(bytes.NewReader(snapshotOf(t, f)))); err != nil {
		t.Fatal(err)
	}
	sameState(t, f, behind, 10)
}

// A snapshot written by the in-memory state (version 1) restores, and
// counts as having applied nothing (raft replays every entry after it).
func TestRestoreVersion1(t *testing.T) {
	var b []byte
	b = append(b, snapshotMagicV1...)
	b = binary.AppendUvarint(b, 5000) // bound
	b = binary.AppendUvarint(b, 3)    // floor
	b = appendString(b, "tier1")
	b = binary.AppendUvarint(b, 2)
	b = appendString(b, "n1")
	b = appendString(b, "a1")
	b = binary.AppendUvarint(b, 2)
	b = appendString(b, "x")
	b = binary.AppendUvarint(b, 10)
	b = appendString(b, "y")
	b = binary.AppendUvarint(b, 20)
	b = binary.AppendUvarint(b, 1)
	b = appendString(b, "z")
	b = binary.AppendUvarint(b, 30)
	b = binary.AppendUvarint(b, 2)
	f := openTestFSM(t, filepath.Join(t.TempDir(), "state"))
	f.ApplyBatch(entryLogs(1, grants(3)...))
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	st := f.state()
	if st.applied != 0 || st.bound != 5000 || st.floor != 3 || f.snapResources.Load() != 2 || st.pending != 1 || st.tierID != "tier1" || st.leader.node != "n1" {
		t.Fatalf("state after a version 1 snapshot: %+v", st)
	}
	for r, want := range map[string]uint64{"x": 10, "y": 20, "resource-000001": 3} {
		if got, err := f.newestOf(r); err != nil || got != want {
			t.Fatalf("newest of %s = %d, %v; want %d", r, got, err, want)
		}
	}
}

// batchLogs is grants of resources b-1..b-n as the leader proposes them:
// every Reserve in one Batch, every Confirm in the next with one more
// Reserve (left pending), then a Window.
func batchLogs(first uint64, n int) []*raft.Log {
	reserves := entry{kind: kindBatch}
	confirms := entry{kind: kindBatch}
	for i := 1; i <= n; i++ {
		r := fmt.Sprintf("b-%d", i)
		reserves.ops = append(reserves.ops, entry{kind: kindReserve, resource: r, token: uint64(i), term: 1})
		confirms.ops = append(confirms.ops, entry{kind: kindConfirm, resource: r, token: uint64(i)})
	}
	confirms.ops = append(confirms.ops, entry{kind: kindReserve, resource: "open", token: uint64(n + 1), term: 1})
	return entryLogs(first, entry{kind: kindLeaderStart, term: 1, node: "n1", addr: "a1", tierID: "tier1"},
		reserves, confirms, entry{kind: kindWindow})
}

// A Batch is one entry under one index: its ops are applied in order, all
// with it, and a replay (raft's at every start, or a batch raft hands over
// that straddles the applied index) skips it whole. Without the skip, the
// first Batch replayed would make its reservations pending again.
func TestBatchAppliedAndReplayedWhole(t *testing.T) {
	const n = 5
	dir := filepath.Join(t.TempDir(), "state")
	f := openTestFSM(t, dir)
	logs := batchLogs(1, n)
	f.ApplyBatch(logs)
	want := f.state()
	if want.applied != 4 || want.pending != 1 || want.bound != 2*Window {
		t.Fatalf("state after the Batches: %+v", want)
	}
	for i := 1; i <= n; i++ {
		if tok, err := f.newestOf(fmt.Sprintf("b-%d", i)); err != nil || tok != uint64(i) {
			t.Fatalf("newest of b-%d = %d, %v", i, tok, err)
		}
	}
	f.ApplyBatch(logs[1:2])
	f.ApplyBatch(logs)
	if got := f.state(); got != want {
		t.Fatalf("replaying the Batches changed the state:\n%+v\nwant\n%+v", got, want)
	}
	// A state that has the first Batch only, handed the log from it on.
	g := openTestFSM(t, filepath.Join(t.TempDir(), "g"))
	g.ApplyBatch(logs[:2])
	if st := g.state(); st.applied != 2 || st.pending != n {
		t.Fatalf("state after the Reserves' Batch: %+v", st)
	}
	g.ApplyBatch(logs[1:])
	sameState(t, f, g, 0)
	// And across a reopen.
	f.close()
	h := openTestFSM(t, dir)
	h.ApplyBatch(logs)
	if got := h.state(); got != want {
		t.Fatalf("replay after a reopen changed the state:\n%+v\nwant\n%+v", got, want)
	}
}

// A snapshot taken between the Batch with a grant's Reserve and the one
// with its Confirm holds the reservation pending; the Confirm, applied
// after a Restore, drops it as it does on the node that took it.
func TestSnapshotBetweenBatches(t *testing.T) {
	logs := batchLogs(1, 3)
	src := openTestFSM(t, filepath.Join(t.TempDir(), "src"))
	src.ApplyBatch(logs[:2])
	snap := snapshotOf(t, src)
	src.ApplyBatch(logs[2:])
	dst := openTestFSM(t, filepath.Join(t.TempDir(), "dst"))
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if st := dst.state(); st.applied != 2 || st.pending != 3 {
		t.Fatalf("restored mid-grants: %+v, want the 3 reservations pending at index 2", st)
	}
	dst.ApplyBatch(logs[1:]) // raft hands over the log after the snapshot; the first is skipped
	sameState(t, src, dst, 0)
	for i := 1; i <= 3; i++ {
		a, _ := src.newestOf(fmt.Sprintf("b-%d", i))
		b, _ := dst.newestOf(fmt.Sprintf("b-%d", i))
		if a != uint64(i) || b != a {
			t.Fatalf("b-%d: %d on the snapshot's node, %d on the restored one; want %d", i, a, b, i)
		}
	}
}

// Confirms in a Batch raise the cache's entries (never below what it has:
// a late lower Confirm changes nothing), make none, and are reported to
// the overlay only once the state and the cache have them, so a read the
// moment the overlay drops an entry finds its token in the state.
func TestBatchConfirmsAndTheCache(t *testing.T) {
	f := openTestFSM(t, filepath.Join(t.TempDir(), "state"))
	f.ApplyBatch(entryLogs(1, entry{kind: kindLeaderStart, term: 1, node: "n1", addr: "a1", tierID: "tier1"},
		entry{kind: kindBatch, ops: []entry{{kind: kindConfirm, resource: "cached", token: 5}}}))
	if tok, err := f.newestOf("cached"); err != nil || tok != 5 { // fills the cache
		t.Fatalf("newest of cached = %d, %v", tok, err)
	}
	var seen []string
	f.onConfirmApplied = func(resource string, token uint64) {
		// What a read would find, without filling the cache.
		if c, _, ok := f.cache.Get([]byte(resource)); ok && c < token {
			seen = append(seen, fmt.Sprintf("%s: the cache has %d when the overlay drops %d", resource, c, token))
		}
		v, closer, err := f.db.Get(tokenstate.TokenKey(resource))
		if err != nil {
			seen = append(seen, fmt.Sprintf("%s: %v when the overlay drops %d", resource, err, token))
			return
		}
		if got := decodeUint(v); got < token {
			seen = append(seen, fmt.Sprintf("%s: Pebble has %d when the overlay drops %d", resource, got, token))
		}
		closer.Close()
	}
	f.ApplyBatch(entryLogs(3, entry{kind: kindBatch, ops: []entry{
		{kind: kindConfirm, resource: "cached", token: 9},
		{kind: kindConfirm, resource: "cached", token: 7}, // late, lower: the maximum stays
		{kind: kindConfirm, resource: "uncached", token: 8},
	}}))
	for _, s := range seen {
		t.Error(s)
	}
	if tok, ok := f.newestCached("cached"); !ok || tok != 9 {
		t.Fatalf("cached after a Batch of Confirms: %d, %v; want 9 from the cache", tok, ok)
	}
	if tok, ok := f.newestCached("uncached"); ok {
		t.Fatalf("a Confirm in a Batch made a cache entry (%d): only a read may", tok)
	}
	if tok, err := f.newestOf("uncached"); err != nil || tok != 8 {
		t.Fatalf("newest of uncached = %d, %v; want 8", tok, err)
	}
}
