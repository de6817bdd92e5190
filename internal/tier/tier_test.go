package tier

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// testTier is three real nodes on loopback, each with its own directory.
type testTier struct {
	t     *testing.T
	store string // Options.LogStore
	// trailingLogs: Options.trailingLogs of nodes started after it is set.
	trailingLogs uint64
	// shared: Options.Shared, with every node's leaderships sent on leads.
	shared bool
	leads  chan *Leadership
	peers  []Peer
	dirs   []string
	nodes  []*Node // nil: stopped
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// defaultLogStore is the log store a node uses unless told otherwise.
const defaultLogStore = "pebble"

// logStores are the log stores the tests of the token path run on: the
// default and raft-boltdb (--raft-log-store).
var logStores = []string{defaultLogStore, "bolt"}

// onEachLogStore runs test once per log store, as a subtest named for it.
func onEachLogStore(t *testing.T, test func(t *testing.T, store string)) {
	for _, store := range logStores {
		t.Run(store, func(t *testing.T) { test(t, store) })
	}
}

func startTestTier(t *testing.T, size int) *testTier {
	t.Helper()
	return startTestTierOn(t, size, defaultLogStore)
}

// startTestTierOn is startTestTier with the given log store.
func startTestTierOn(t *testing.T, size int, store string) *testTier {
	t.Helper()
	tt := &testTier{t: t, store: store}
	for i := 0; i < size; i++ {
		tt.peers = append(tt.peers, Peer{ID: fmt.Sprintf("n%d", i+1), Addr: freeAddr(t)})
		tt.dirs = append(tt.dirs, filepath.Join(t.TempDir(), "raft"))
	}
	tt.nodes = make([]*Node, size)
	for i := range tt.peers {
		tt.start(i)
	}
	t.Cleanup(func() {
		for i := range tt.nodes {
			tt.stop(i)
		}
	})
	return tt
}

func (tt *testTier) start(i int) {
	tt.t.Helper()
	n, err := Open(Options{
		trailingLogs: tt.trailingLogs,
		NodeID:       tt.peers[i].ID, RaftListen: tt.peers[i].Addr, Peers: tt.peers, Dir: tt.dirs[i],
		ClientAddr: "client-of-" + tt.peers[i].ID, LogStore: tt.store,
		// raft's defaults: shorter ones lost leadership under -race on a busy machine.
		HeartbeatTimeout: time.Second, ElectionTimeout: time.Second, LeaderLeaseTimeout: 500 * time.Millisecond,
		BootstrapWait: 100 * time.Millisecond,
		Shared:        tt.shared,
		OnLeading: func(l *Leadership) {
			if tt.leads != nil {
				tt.leads <- l
			}
		},
	})
	if err != nil {
		tt.t.Fatal(err)
	}
	tt.nodes[i] = n
}

// crash stops node i as a crash would: no leadership transfer.
func (tt *testTier) crash(i int) {
	if tt.nodes[i] != nil {
		tt.nodes[i].raft.Shutdown().Error()
		tt.stop(i)
	}
}

func (tt *testTier) stop(i int) {
	if tt.nodes[i] != nil {
		tt.nodes[i].Close()
		tt.nodes[i] = nil
	}
}

// leader waits (bounded, only to end a hang) for a ready leader among the
// running nodes and returns its index.
func (tt *testTier) leader() int {
	tt.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for i, n := range tt.nodes {
			if n != nil && n.Ready() {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	tt.t.Fatal("no ready leader within 30s")
	return -1
}

func (tt *testTier) follower(leader int) int {
	for i, n := range tt.nodes {
		if n != nil && i != leader {
			return i
		}
	}
	tt.t.Fatal("no follower running")
	return -1
}

// grant is what the lock manager does for one grant: a token, its
// reservation committed, then its confirmation.
func grant(t *testing.T, s *Store, resource string) uint64 {
	t.Helper()
	tok, err := s.NextToken()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(resource, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.Confirm(resource, tok); err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTokensRiseAcrossLeaderChanges(t *testing.T) {
	onEachLogStore(t, tokensRiseAcrossLeaderChanges)
}

func tokensRiseAcrossLeaderChanges(t *testing.T, store string) {
	tt := startTestTierOn(t, 3, store)
	var last, lastTerm uint64
	for round := 0; round < 3; round++ {
		l := tt.leader()
		s := tt.nodes[l].Store()
		// Owner records carry it: every new leader's is above the last.
		if term := tt.nodes[l].Term(); term <= lastTerm {
			t.Fatalf("round %d: the new leader's Term %d, not above %d", round, term, lastTerm)
		} else {
			lastTerm = term
		}
		if n, err := s.Newest("r"); err != nil || n < last {
			t.Fatalf("round %d: Newest = %d, %v after %d was confirmed", round, n, err, last)
		}
		for i := 0; i < 20; i++ {
			tok := grant(t, s, "r")
			if tok <= last {
				t.Fatalf("round %d: token %d after %d", round, tok, last)
			}
			last = tok
		}
		// The leader goes (crashes, or hands over in round 1); its node
		// comes back as a follower (same disk).
		if round == 1 {
			tt.stop(l)
		} else {
			tt.crash(l)
		}
		tt.leader()
		tt.start(l)
	}
}

func TestReservationCountsAfterFailover(t *testing.T) {
	onEachLogStore(t, reservationCountsAfterFailover)
}

func reservationCountsAfterFailover(t *testing.T, store string) {
	tt := startTestTierOn(t, 3, store)
	l := tt.leader()
	s := tt.nodes[l].Store()
	tok, err := s.NextToken()
	if err != nil {
		t.Fatal(err)
	}
	// Reserved and committed, never confirmed: the leader may have replied it.
	if err := s.Reserve("r", tok); err != nil {
		t.Fatal(err)
	}
	tt.crash(l)
	nl := tt.leader()
	ns := tt.nodes[nl].Store()
	got, err := ns.Newest("r")
	if err != nil {
		t.Fatal(err)
	}
	if got != tok {
		t.Fatalf("new leader's newest for r = %d, want the reserved %d (folded as issued)", got, tok)
	}
	if next := grant(t, ns, "r"); next <= tok {
		t.Fatalf("new leader granted %d, not above %d", next, tok)
	}
}

func TestFollowerRefuses(t *testing.T) { onEachLogStore(t, followerRefuses) }

func followerRefuses(t *testing.T, store string) {
	tt := startTestTierOn(t, 3, store)
	l := tt.leader()
	grant(t, tt.nodes[l].Store(), "r")
	f := tt.nodes[tt.follower(l)]
	// The follower learns the LeaderStart with the next heartbeat.
	deadline := time.Now().Add(10 * time.Second)
	for f.LeaderClientAddr() == "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	fs := f.Store()
	_, err1 := fs.NextToken()
	err2 := fs.Reserve("r", 1)
	_, err3 := fs.Newest("r")
	_, _, err4 := fs.NewestCached("r")
	for i, err := range []error{err1, err2, err3, err4} {
		var u *UnavailableError
		if !errors.As(err, &u) {
			t.Fatalf("call %d on a follower: %v, want an UnavailableError", i, err)
		}
		code, msg := u.RESPError()
		if code != "TRYAGAIN" || u.LeaderAddr != "client-of-"+tt.peers[l].ID {
			t.Fatalf("call %d: -%s %s (leader %q), want -TRYAGAIN naming %s", i, code, msg, u.LeaderAddr, "client-of-"+tt.peers[l].ID)
		}
	}
}

// Concurrent readers share VerifyLeader rounds; every one is answered.
func TestReadsShareLeadershipRounds(t *testing.T) {
	tt := startTestTier(t, 3)
	l := tt.leader()
	n := tt.nodes[l]
	want := grant(t, n.Store(), "r")
	before := n.Rounds()
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := n.Store().Newest("r")
			if err == nil && got != want {
				err = fmt.Errorf("newest %d, want %d", got, want)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	rounds := n.Rounds() - before
	t.Logf("50 concurrent reads took %d VerifyLeader rounds", rounds)
	if rounds >= 50 {
		t.Fatalf("50 concurrent reads took %d rounds: not batched", rounds)
	}
}

// 50 concurrent reservers: their reservations share log entries
// (proposer) and log writes.
func TestReservesShareLogWrites(t *testing.T) { onEachLogStore(t, reservesShareLogWrites) }

func reservesShareLogWrites(t *testing.T, store string) {
	tt := startTestTierOn(t, 3, store)
	l := tt.leader()
	n := tt.nodes[l]
	s := n.Store()
	w0, e0 := n.logs.writes.Load(), n.logs.entries.Load()
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	const reservers, each = 50, 20
	for i := 0; i < reservers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < each; j++ {
				r := fmt.Sprintf("r%d", i)
				tok, err := s.NextToken()
				if err == nil {
					err = s.Reserve(r, tok)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	writes, entries := n.logs.writes.Load()-w0, n.logs.entries.Load()-e0
	t.Logf("%d reservations from %d goroutines: %d leader log writes, %d entries", reservers*each, reservers, writes, entries)
	if writes >= reservers*each || entries >= reservers*each {
		t.Fatalf("%d writes and %d entries for %d reservations: no group commit", writes, entries, reservers*each)
	}
}

// A node added with an empty disk after the leader compacted its log is
// caught up by a snapshot (InstallSnapshot, fsm.Restore): it knows every
// resource's newest token, and leads correctly after the others go.
func TestNewNodeCaughtUpBySnapshot(t *testing.T) {
	tt := startTestTier(t, 3)
	tt.trailingLogs = 1
	l := tt.leader()
	s := tt.nodes[l].Store()
	want := map[string]uint64{}
	for i := 0; i < 30; i++ {
		r := fmt.Sprintf("r%d", i)
		want[r] = grant(t, s, r)
	}
	// Every node restarts with trailingLogs 1 and snapshots, so the log
	// the new node would need is gone everywhere.
	for i := range tt.nodes {
		tt.stop(i)
		tt.start(i)
	}
	l = tt.leader()
	for i := range tt.nodes {
		for j := 0; j < 100 && tt.nodes[i].raft.AppliedIndex() < tt.nodes[l].raft.LastIndex(); j++ {
			time.Sleep(10 * time.Millisecond)
		}
		if err := tt.nodes[i].raft.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot on node %d: %v", i, err)
		}
	}
	// The fourth node: empty disk, added by the leader.
	tt.peers = append(tt.peers, Peer{ID: "n4", Addr: freeAddr(t)})
	tt.dirs = append(tt.dirs, filepath.Join(t.TempDir(), "raft"))
	tt.nodes = append(tt.nodes, nil)
	tt.start(3)
	if err := tt.nodes[l].AddNode("n4", tt.peers[3].Addr); err != nil {
		t.Fatal(err)
	}
	applied := tt.nodes[l].fsm.state().applied
	deadline := time.Now().Add(30 * time.Second)
	for tt.nodes[3].fsm.state().applied < applied {
		if time.Now().After(deadline) {
			t.Fatalf("the new node has applied %+v after 30s, want index %d", tt.nodes[3].fsm.state(), applied)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := tt.nodes[3].fsm.snapResources.Load(); got != int64(len(want)) {
		t.Fatalf("the new node restored a snapshot of %d resources, want %d", got, len(want))
	}
	for r, tok := range want {
		if got, err := tt.nodes[3].fsm.newestOf(r); err != nil || got != tok {
			t.Fatalf("the new node's newest for %s = %d, %v, want %d", r, got, err, tok)
		}
	}
}

// A new leader knows nothing of its followers' progress: their lag is
// unknown until each reports its applied index to it, and then it is how
// far behind the leader's last index the report was.
func TestPeerLagAfterElection(t *testing.T) {
	tt := startTestTier(t, 3)
	l := tt.leader()
	for i := 0; i < 10; i++ {
		grant(t, tt.nodes[l].Store(), "r")
	}
	tt.crash(l)
	nl := tt.leader()
	n := tt.nodes[nl]
	st := n.Status()
	if len(st.Peers) != 2 {
		t.Fatalf("the new leader shows %d peers, want 2", len(st.Peers))
	}
	for _, p := range st.Peers {
		if p.LagKnown {
			t.Fatalf("peer %s right after the election: lag %d known, before it reported anything (last index %d)", p.ID, p.Lag, st.LastIndex)
		}
	}
	f := tt.follower(nl)
	id := tt.peers[f].ID
	last := n.raft.LastIndex()
	n.ReportApplied(id, last-2)
	for i := 0; i < 5; i++ {
		grant(t, n.Store(), "r") // the leader's last moves on; the report stays what it was
	}
	for _, p := range n.Status().Peers {
		switch {
		case p.ID == id && (!p.LagKnown || p.Lag != 2):
			t.Fatalf("peer %s reported %d applied at last index %d: lag %d (known %v), want 2", id, last-2, last, p.Lag, p.LagKnown)
		case p.ID != id && p.LagKnown:
			t.Fatalf("peer %s (crashed, never reported) has lag %d", p.ID, p.Lag)
		}
	}
	// A report older than staleReport: the peer stopped; the lag grows.
	n.health.mu.Lock()
	r := n.health.reports[id]
	r.at = r.at.Add(-2 * staleReport)
	n.health.reports[id] = r
	n.health.mu.Unlock()
	for _, p := range n.Status().Peers {
		if p.ID == id && p.Lag <= 2 {
			t.Fatalf("peer %s silent for %v: lag %d, want the distance to the last index now", id, 2*staleReport, p.Lag)
		}
	}
	// Leadership moves away and back: the old reports are forgotten.
	waitReady := func(n *Node) {
		deadline := time.Now().Add(30 * time.Second)
		for !n.Ready() {
			if time.Now().After(deadline) {
				t.Fatal("leadership did not move within 30s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := n.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(tt.peers[f].Addr)).Error(); err != nil {
		t.Fatal(err)
	}
	waitReady(tt.nodes[f])
	if err := tt.nodes[f].raft.LeadershipTransferToServer(raft.ServerID(tt.peers[nl].ID), raft.ServerAddress(tt.peers[nl].Addr)).Error(); err != nil {
		t.Fatal(err)
	}
	waitReady(n)
	for _, p := range n.Status().Peers {
		if p.LagKnown {
			t.Fatalf("peer %s: lag %d from a report to an earlier leadership", p.ID, p.Lag)
		}
	}
}

// settled waits (bounded) until every running node has applied what the
// leader has, and fails unless their states agree. The leader's queued
// Confirms go first (they ride in Batches after the grants returned).
func (tt *testTier) settled(l int) fsmState {
	tt.t.Helper()
	waitProposed(tt.t, tt.nodes[l])
	if err := tt.nodes[l].raft.Barrier(10 * time.Second).Error(); err != nil {
		tt.t.Fatal(err)
	}
	want := tt.nodes[l].fsm.state()
	for i, n := range tt.nodes {
		if n == nil {
			continue
		}
		deadline := time.Now().Add(30 * time.Second)
		for n.fsm.state().applied < want.applied && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := n.fsm.state(); got != want {
			tt.t.Fatalf("node %d's state:\n%+v\nthe leader's:\n%+v", i, got, want)
		}
	}
	return want
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	if err := os.RemoveAll(to); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

// Nodes restart on the state they have: raft replays its log after its
// last snapshot at every start, and the state skips what it has applied
// (a Window applied twice would move a node's bound away from the
// others'). A node whose state is behind its log (a crash lost the
// state's last unsynced batches: here an older copy put back) catches up
// from the log, or from a snapshot when the log it needs is compacted; a
// node whose state dir alone was lost is rebuilt the same way.
func TestRestartsKeepTheState(t *testing.T) {
	tt := startTestTier(t, 3)
	l := tt.leader()
	n := 0
	grantSome := func(k int) {
		s := tt.nodes[tt.leader()].Store()
		for range k {
			n++
			grant(t, s, fmt.Sprintf("r%d", n))
		}
	}
	grantSome(30)
	tt.settled(l)
	x := tt.follower(l)
	stateDir := filepath.Join(tt.dirs[x], "state")
	backup := filepath.Join(t.TempDir(), "state-backup")

	// A plain restart of each node, the leader too (crashed).
	for _, i := range []int{x, tt.follower(x), l} {
		tt.crash(i)
		if i == x {
			copyTree(t, stateDir, backup)
		}
		tt.start(i)
		grantSome(10)
	}
	l = tt.leader()
	tt.settled(l)

	// x's state falls behind its log: the older copy is put back.
	x = tt.follower(l)
	stateDir = filepath.Join(tt.dirs[x], "state")
	tt.stop(x)
	copyTree(t, stateDir, backup)
	tt.start(x)
	grantSome(5)
	tt.settled(tt.leader())

	// Behind a snapshot: every node compacts its log, and x's state is
	// put back to the older copy again.
	tt.trailingLogs = 1
	for i := range tt.nodes {
		tt.stop(i)
		tt.start(i)
	}
	l = tt.leader()
	grantSome(5)
	tt.settled(l)
	for i := range tt.nodes {
		if err := tt.nodes[i].raft.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot on node %d: %v", i, err)
		}
	}
	x = tt.follower(l)
	stateDir = filepath.Join(tt.dirs[x], "state")
	tt.stop(x)
	copyTree(t, backup, stateDir)
	tt.start(x)
	grantSome(5)
	tt.settled(tt.leader())

	// The state dir alone lost.
	x = tt.follower(tt.leader())
	tt.stop(x)
	if err := os.RemoveAll(filepath.Join(tt.dirs[x], "state")); err != nil {
		t.Fatal(err)
	}
	tt.start(x)
	grantSome(5)
	tt.settled(tt.leader())
	for i, node := range tt.nodes {
		for r := 1; r <= n; r++ {
			if tok, err := node.fsm.newestOf(fmt.Sprintf("r%d", r)); err != nil || tok == 0 {
				t.Fatalf("node %d: newest of r%d = %d, %v", i, r, tok, err)
			}
		}
	}
}

// NewestCached answers without I/O only from the state's cache: unknown
// for a resource the cache lacks (even while this leader's own Confirm is
// in the overlay, queued for the next Batch), exact once a read has filled
// it, and raised by later Confirms as their Batches are applied.
func TestNewestCachedOnlyFromTheCache(t *testing.T) {
	tt := startTestTier(t, 3)
	n := tt.nodes[tt.leader()]
	s := n.Store()
	tok := grant(t, s, "r")
	if got, ok, err := s.NewestCached("r"); err != nil || ok {
		t.Fatalf("NewestCached of an uncached resource, its Confirm just made = %d, %v, %v; want unknown", got, ok, err)
	}
	waitProposed(t, n)
	if got, ok, err := s.NewestCached("r"); err != nil || ok {
		t.Fatalf("NewestCached of an uncached resource = %d, %v, %v; want unknown", got, ok, err)
	}
	if got, err := s.Newest("r"); err != nil || got != tok {
		t.Fatalf("Newest = %d, %v; want %d", got, err, tok)
	}
	if got, ok, err := s.NewestCached("r"); err != nil || !ok || got != tok {
		t.Fatalf("NewestCached after a read = %d, %v, %v; want %d", got, ok, err, tok)
	}
	next := grant(t, s, "r")
	// Before its Batch is applied the overlay has the Confirm; after, the
	// overlay has dropped it and the cache alone must have been raised.
	if got, ok, err := s.NewestCached("r"); err != nil || !ok || got != next {
		t.Fatalf("NewestCached after a second grant = %d, %v, %v; want %d", got, ok, err, next)
	}
	waitProposed(t, n)
	n.overlayMu.Lock()
	o, inOverlay := n.overlay["r"]
	n.overlayMu.Unlock()
	if inOverlay {
		t.Fatalf("the overlay still holds %d after the Confirm's Batch was applied", o)
	}
	if got, ok, err := s.NewestCached("r"); err != nil || !ok || got != next {
		t.Fatalf("NewestCached after the second grant's Batch was applied = %d, %v, %v; want %d", got, ok, err, next)
	}
}
