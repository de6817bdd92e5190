package tier

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// caughtUp waits (bounded, only to end a hang) until node i has applied
// what node l had committed when the wait began.
func caughtUp(t *testing.T, tr *testenv.Tier, i, l int) {
	t.Helper()
	want, _ := strconv.ParseUint(testenv.TierInfo(tr.Nodes[l].Addr)["tier_commit_index"], 10, 64)
	waitFor(t, fmt.Sprintf("%s to apply index %d", tr.IDs[i], want), func() bool {
		got, _ := strconv.ParseUint(testenv.TierInfo(tr.Nodes[i].Addr)["tier_applied_index"], 10, 64)
		return got >= want
	})
}

// readyLeader is the running node among which that says it is the ready
// leader, or -1.
func readyLeader(tr *testenv.Tier, which ...int) int {
	for _, i := range which {
		if f := testenv.TierInfo(tr.Nodes[i].Addr); f["tier_role"] == "leader" && f["tier_ready"] == "1" {
			return i
		}
	}
	return -1
}

// An empty disk does not vote a lagging node in (issue 22, item 2; the
// contract's guarantee 8). Follower A's Raft links are cut while holder
// N's grant commits on B (the leader) and C; B and C are kill -9'd; C
// comes back with an empty data dir (docs/operating.md, "Replacing a node"); A's
// links heal. A's log lacks N's grant: were it elected with C's vote,
// FENCE.CHECK of N's token would answer "never issued". C must refuse to
// vote until it has caught up, so A and C elect nobody and every lock
// command is refused, until B (which has the grant) is back; then N's
// token is known and newer tokens are above it, and C, caught up, votes
// again.
func TestEmptyDiskDoesNotVoteALaggingNodeIn(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	tr := testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr, MinReplicas: 1, RaftLinks: true})
	b := tr.Leader(t)
	fs := followers(tr, b)
	a, c := fs[0], fs[1]

	// The older token, which A has.
	old, ok := testenv.ParseInt(retry(t, tr.Nodes[b].Addr, "LOCK.ACQUIRE", "r", "older", "60000"))
	if !ok {
		t.Fatal("the first grant failed")
	}
	if r := retry(t, tr.Nodes[b].Addr, "LOCK.RELEASE", "r", "older"); string(r) != ":1\r\n" {
		t.Fatalf("LOCK.RELEASE = %s", testenv.ShowReply(r))
	}
	caughtUp(t, tr, a, b)

	tr.IsolateRaft(t, a)
	r := retry(t, tr.Nodes[b].Addr, "LOCK.ACQUIRE", "r", "N", "600000")
	tokN, ok := testenv.ParseInt(r)
	if !ok || tokN <= old {
		t.Fatalf("N's LOCK.ACQUIRE = %s, want a token above %d", testenv.ShowReply(r), old)
	}
	caughtUp(t, tr, c, b)

	tr.Nodes[b].Kill9()
	tr.Nodes[c].Kill9()
	if err := os.RemoveAll(tr.Nodes[c].DataDir); err != nil {
		t.Fatal(err)
	}
	tr.Nodes[c].Restart(t)
	tr.HealRaft(t)

	// A asks C for its vote again and again (an election timeout apart).
	// Until C has refused it several times, nobody may lead: had C voted,
	// A would have led by then.
	refusedBefore := -1
	deadline := time.Now().Add(60 * time.Second)
	for {
		if l := readyLeader(tr, a, c); l >= 0 {
			check := retry(t, tr.Nodes[l].Addr, "FENCE.CHECK", "r", strconv.FormatInt(tokN, 10))
			t.Fatalf("%s was elected by %s (empty disk) and %s (its log without N's grant): FENCE.CHECK r %d (N's token) = %s",
				tr.IDs[l], tr.IDs[c], tr.IDs[a], tokN, testenv.ShowReply(check))
		}
		f := testenv.TierInfo(tr.Nodes[c].Addr)
		refused, err := strconv.Atoi(f["tier_votes_refused"])
		if err == nil && refusedBefore < 0 {
			refusedBefore = refused
		}
		if err == nil && refused >= refusedBefore+6 && f["tier_rejoining"] == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s nobody leads but %s has not refused 6 votes: %v", tr.IDs[c], f)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, i := range []int{a, c} {
		cl := testenv.Dial(t, tr.Nodes[i].Addr)
		for _, cmd := range [][]string{{"LOCK.ACQUIRE", "r", "M", "10000"}, {"FENCE.CHECK", "r", strconv.FormatInt(old, 10)}} {
			if got := cl.Do(cmd...); !bytes.HasPrefix(got, []byte("-TRYAGAIN")) {
				t.Fatalf("%s on %s with no majority = %s, want -TRYAGAIN", testenv.ShowCommand(cmd), tr.IDs[i], testenv.ShowReply(got))
			}
		}
		cl.Close()
	}

	// B comes back: it has N's grant, and leads.
	tr.Nodes[b].Restart(t)
	l := tr.Leader(t)
	if got := retry(t, tr.Nodes[l].Addr, "FENCE.CHECK", "r", strconv.FormatInt(tokN, 10)); string(got) != ":1\r\n" {
		t.Fatalf("FENCE.CHECK r %d (N's token) on the new leader %s = %s, want 1", tokN, tr.IDs[l], testenv.ShowReply(got))
	}
	if got := retry(t, tr.Nodes[l].Addr, "LOCK.RELEASE", "r", "N"); string(got) != ":1\r\n" {
		t.Fatalf("LOCK.RELEASE r N = %s", testenv.ShowReply(got))
	}
	if got, ok := testenv.ParseInt(retry(t, tr.Nodes[a].Addr, "LOCK.ACQUIRE", "r", "M", "10000")); !ok || got <= tokN {
		t.Fatalf("LOCK.ACQUIRE r M after N = %d (ok %v), want a token above N's %d", got, ok, tokN)
	}

	// C catches up, votes again, and is a voter again.
	waitFor(t, tr.IDs[c]+" to catch up and vote again", func() bool {
		return testenv.TierInfo(tr.Nodes[c].Addr)["tier_rejoining"] == "0" &&
			testenv.TierInfo(tr.Nodes[l].Addr)["tier_voters"] == "3"
	})
}
