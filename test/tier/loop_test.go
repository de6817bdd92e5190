package tier

import (
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestTierNodesServeLocksOnTheLoop: a tier node's clients get the lock
// family (and a recognised recipe) from the serve loop, as a single node's
// do: through a follower (which hands the relay to the leader to a lock
// worker) and through the leader (whose grants run on workers, and which
// serves the followers' TIER.RELAY on its loop too), lock cycles with their
// fence checks, tokens and a Redisson RLock acquire take no goroutine
// detour on either node: INFO fenceproxy's goroutine_detours moves by at
// most the followers' TIER.APPLIED reports (one a second each, a detour:
// a report may wait for Raft) over 30 cycles of 6 requests, while CLIENT
// TRACKING, which takes one, moves it: the count is read. Mutation: with
// LeaseOnLoop and RecipesOnLoop refusing a tier node (as before), each
// node's count grew by the requests sent (180).
func TestTierNodesServeLocksOnTheLoop(t *testing.T) {
	tr := startTier(t)
	l := tr.Leader(t)
	f := followers(tr, l)
	retry(t, tr.Nodes[f[0]].Addr, "LOCK.ACQUIRE", "warm-up", "w", "30000") // the relay link is up
	detours := func(addr string) int {
		t.Helper()
		n, err := strconv.Atoi(infoField(addr, "fenceproxy", "goroutine_detours"))
		if err != nil {
			t.Fatalf("INFO fenceproxy of %s has no goroutine_detours: %v", addr, err)
		}
		return n
	}
	for _, tc := range []struct{ via, addr string }{
		{"a follower", tr.Nodes[f[0]].Addr},
		{"the leader", tr.Nodes[l].Addr},
	} {
		before, leaderBefore := detours(tc.addr), detours(tr.Nodes[l].Addr)
		start := time.Now()
		c := testenv.Dial(t, tc.addr)
		const cycles = 30
		for i := range cycles {
			res := "loop-" + strconv.Itoa(len(tc.via)) + "-" + strconv.Itoa(i)
			tok, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", res, "o", "30000"))
			if !ok || tok <= 0 {
				t.Fatalf("LOCK.ACQUIRE via %s: no token", tc.via)
			}
			ts := strconv.FormatInt(tok, 10)
			for _, ex := range []struct {
				args []string
				want string
			}{
				{[]string{"FENCE.CHECK", res, ts}, ":1\r\n"},
				{[]string{"LOCK.RENEW", res, "o", "30000"}, ":" + ts + "\r\n"},
				{[]string{"LOCK.TOKEN", res, "o"}, ":" + ts + "\r\n"},
				{[]string{"LOCK.RELEASE", res, "o"}, ":1\r\n"},
				{[]string{"EVALSHA", shaRLockAcquire, "1", "rlock-" + res, "30000", "uuid:1"}, "$-1\r\n"},
			} {
				if got := string(c.Do(ex.args...)); got != ex.want {
					t.Fatalf("%s via %s = %q, want %q", testenv.ShowCommand(ex.args), tc.via, got, ex.want)
				}
			}
		}
		// TIER.APPLIED: one a second from each follower, and one more of
		// each at most where a second began.
		reports := 2 * (int(time.Since(start)/time.Second) + 2)
		if after := detours(tc.addr); after-before > reports {
			t.Errorf("via %s: goroutine_detours went from %d to %d over %d lock cycles, want at most %d (the followers' reports)", tc.via, before, after, cycles, reports)
		}
		if after := detours(tr.Nodes[l].Addr); after-leaderBefore > reports {
			t.Errorf("via %s: the leader's goroutine_detours went from %d to %d over %d lock cycles, want at most %d (the followers' reports)", tc.via, leaderBefore, after, cycles, reports)
		}
		// The count is read: a request that does take a detour moves it.
		c.Do("HELLO", "3")
		c.Do("CLIENT", "TRACKING", "ON")
		if after := detours(tc.addr); after <= before {
			t.Errorf("via %s: goroutine_detours %d after CLIENT TRACKING ON, want above %d", tc.via, after, before)
		}
		c.Close()
	}
}
