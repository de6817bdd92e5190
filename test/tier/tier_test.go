// Package tier tests a tier of three real fenceproxy processes (--node-id,
// --raft-listen, --peers) in front of a real Redis master with a replica:
// lock commands through any node, and kill -9 of the leader under lock load.
package tier

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func startTier(t *testing.T) *testenv.Tier {
	t.Helper()
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	return testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr, MinReplicas: 1})
}

// retry sends a lock command until it answers something other than
// -TRYAGAIN (bounded: it only ends a hang).
func retry(t *testing.T, addr string, args ...string) []byte {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		c, err := testenv.TryDial(addr, 5*time.Second)
		if err == nil {
			r, err := c.TryDo(args...)
			c.Close()
			if err == nil && !bytes.HasPrefix(r, []byte("-TRYAGAIN")) {
				return r
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s via %s: still -TRYAGAIN after 60s", testenv.ShowCommand(args), addr)
	return nil
}

func followers(tr *testenv.Tier, leader int) []int {
	var out []int
	for i := range tr.Nodes {
		if i != leader {
			out = append(out, i)
		}
	}
	return out
}

// A client on a follower gets a token (relayed to the leader), and
// FENCE.CHECK and LOCK.INFO through the other follower agree with it.
func TestAnyNodeServesLocks(t *testing.T) {
	tr := startTier(t)
	l := tr.Leader(t)
	f := followers(tr, l)
	reply := retry(t, tr.Nodes[f[0]].Addr, "LOCK.ACQUIRE", "res", "alice", "30000")
	tok, ok := testenv.ParseInt(reply)
	if !ok || tok <= 0 {
		t.Fatalf("LOCK.ACQUIRE via follower = %s, want a token", testenv.ShowReply(reply))
	}
	other := tr.Nodes[f[1]].Addr
	if r := retry(t, other, "FENCE.CHECK", "res", fmt.Sprint(tok)); string(r) != ":1\r\n" {
		t.Fatalf("FENCE.CHECK res %d via the other follower = %s, want 1", tok, testenv.ShowReply(r))
	}
	if r := retry(t, other, "LOCK.ACQUIRE", "res", "bob", "30000"); !testenv.IsNull(r) {
		t.Fatalf("bob's LOCK.ACQUIRE via the other follower = %s, want null (alice holds it)", testenv.ShowReply(r))
	}
	if r := retry(t, tr.Nodes[l].Addr, "LOCK.RELEASE", "res", "alice"); string(r) != ":1\r\n" {
		t.Fatalf("alice's LOCK.RELEASE via the leader = %s, want 1", testenv.ShowReply(r))
	}
	next := retry(t, other, "LOCK.ACQUIRE", "res", "bob", "30000")
	if n, ok := testenv.ParseInt(next); !ok || n <= tok {
		t.Fatalf("bob's LOCK.ACQUIRE after the release = %s, want a token above %d", testenv.ShowReply(next), tok)
	}
	if r := retry(t, other, "FENCE.CHECK", "res", fmt.Sprint(tok)); string(r) != ":0\r\n" {
		t.Fatalf("FENCE.CHECK of alice's old token = %s, want 0 (stale)", testenv.ShowReply(r))
	}
}

// kill -9 of the leader while clients on every node acquire and release:
// no token is ever below one granted before it, and a new leader grants.
func TestLeaderKilledUnderLoad(t *testing.T) {
	tr := startTier(t)
	l := tr.Leader(t)
	var (
		mu      sync.Mutex
		highest = map[string]int64{}  // resource -> highest token granted so far
		holder  = map[string]string{} // resource -> the owner it was granted to
		grants  atomic.Int64
		regress []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			resource := fmt.Sprintf("r%d", w%3)
			owner := fmt.Sprintf("w%d", w)
			var c *testenv.Conn
			for i := 0; ; i++ {
				select {
				case <-stop:
					if c != nil {
						c.Close()
					}
					return
				default:
				}
				if c == nil {
					var err error
					if c, err = testenv.TryDial(tr.Nodes[(w+i)%len(tr.Nodes)].Addr, 2*time.Second); err != nil {
						c = nil
						time.Sleep(20 * time.Millisecond)
						continue
					}
					c.SetTimeout(10 * time.Second)
				}
				// Read what highest was before the request: a grant must be above it.
				mu.Lock()
				before, prev := highest[resource], holder[resource]
				mu.Unlock()
				r, err := c.TryDo("LOCK.ACQUIRE", resource, owner, "5000")
				if err != nil {
					c.Close()
					c = nil
					continue
				}
				tok, ok := testenv.ParseInt(r)
				if !ok || tok <= 0 {
					continue // busy, -TRYAGAIN during the election, ...
				}
				grants.Add(1)
				mu.Lock()
				// The contract's one exception: an owner whose release was
				// lost (the leader killed under it) still holds the lock, and
				// its next acquire re-arms it with the same token.
				if tok < before || tok == before && prev != owner {
					regress = append(regress, fmt.Sprintf("%s: token %d granted to %s after %d", resource, tok, owner, before))
				}
				if tok > highest[resource] {
					highest[resource], holder[resource] = tok, owner
				}
				mu.Unlock()
				c.TryDo("LOCK.RELEASE", resource, owner)
			}
		}(w)
	}
	waitGrants := func(n int64, what string) {
		deadline := time.Now().Add(60 * time.Second)
		for grants.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: only %d grants within 60s", what, grants.Load())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitGrants(100, "before the kill")
	tr.Nodes[l].Kill9()
	killedAt := grants.Load()
	nl := tr.Leader(t)
	if nl == l {
		t.Fatalf("the killed node %d still leads", l)
	}
	waitGrants(killedAt+100, "after the kill")
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(regress) > 0 {
		t.Fatalf("tokens regressed:\n%v", regress)
	}
	t.Logf("%d grants; the leader was killed after %d; new leader %s", grants.Load(), killedAt, tr.IDs[nl])
}

// A follower whose data dir is wiped comes back without bootstrapping a
// tier of its own: the leader catches it up, and once it is caught up (and
// votes again) the leader can go and tokens still rise.
func TestWipedNodeRejoins(t *testing.T) {
	tr := startTier(t)
	l := tr.Leader(t)
	var last int64
	for i := 0; i < 20; i++ {
		r := retry(t, tr.Nodes[l].Addr, "LOCK.ACQUIRE", fmt.Sprintf("w%d", i), "o", "60000")
		tok, ok := testenv.ParseInt(r)
		if !ok || tok <= last {
			t.Fatalf("LOCK.ACQUIRE = %s after %d", testenv.ShowReply(r), last)
		}
		last = tok
	}
	if r := retry(t, tr.Nodes[l].Addr, "TIER.INFO"); !bytes.Contains(r, []byte("tier_role:leader")) {
		t.Fatalf("TIER.INFO on the leader = %s", testenv.ShowReply(r))
	}
	f := followers(tr, l)[0]
	fc := testenv.Dial(t, tr.Nodes[f].Addr)
	if r := fc.Do("TIER.REMOVE", tr.IDs[l]); !bytes.HasPrefix(r, []byte("-TRYAGAIN")) || !bytes.Contains(r, []byte(tr.Nodes[l].Addr)) {
		t.Fatalf("TIER.REMOVE on a follower = %s, want -TRYAGAIN naming the leader %s", testenv.ShowReply(r), tr.Nodes[l].Addr)
	}
	fc.Close()
	node := tr.Nodes[f]
	node.Kill9()
	if err := os.RemoveAll(node.DataDir); err != nil {
		t.Fatal(err)
	}
	node.Restart(t)
	want, _ := strconv.ParseUint(testenv.TierInfo(tr.Nodes[l].Addr)["tier_applied_index"], 10, 64)
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := testenv.TierInfo(node.Addr)
		applied, _ := strconv.ParseUint(got["tier_applied_index"], 10, 64)
		// Caught up, voting again and a voter again (a node that lost its
		// Raft state refuses to vote until then, and the leader makes it
		// a non-voter meanwhile; a binary without the fields does
		// neither).
		lead := testenv.TierInfo(tr.Nodes[l].Addr)
		if applied >= want && got["tier_leader_id"] == tr.IDs[l] && got["tier_rejoining"] != "1" &&
			(lead["tier_voters"] == "" || lead["tier_voters"] == "3") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the wiped node did not catch up within 60s: %v (the leader had applied %d)", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tr.Nodes[l].Kill9()
	nl := tr.Leader(t)
	r := retry(t, tr.Nodes[nl].Addr, "LOCK.ACQUIRE", "after", "o", "60000")
	if tok, ok := testenv.ParseInt(r); !ok || tok <= last {
		t.Fatalf("the new leader %s granted %s, want a token above %d", tr.IDs[nl], testenv.ShowReply(r), last)
	}
}

// A relayed grant's lease counts from when the follower read the request:
// a link to the leader slow enough to eat the lease gets the client
// -TRYAGAIN, not a token whose lease is mostly gone; a lease the delay does
// not eat is granted. So too a renewal.
func TestRelayedLeaseCountsTheLink(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	tr := testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr, MinReplicas: 1, RelayLinks: true})
	l := tr.Leader(t)
	f := tr.Nodes[followers(tr, l)[0]].Addr
	// Relayed before the delay: dave holds r2 (and the relay's connection
	// to the leader is open).
	if r := retry(t, f, "LOCK.ACQUIRE", "r2", "dave", "30000"); !isToken(r) {
		t.Fatalf("LOCK.ACQUIRE r2 dave via a follower = %s, want a token", testenv.ShowReply(r))
	}
	const delay = 600 * time.Millisecond
	tr.RelayLinks[l].Delay(t, testenv.Upstream, delay)
	c := testenv.Dial(t, f)
	c.SetTimeout(30 * time.Second)
	start := time.Now()
	r := c.Do("LOCK.ACQUIRE", "short", "alice", "500")
	if !bytes.HasPrefix(r, []byte("-TRYAGAIN")) || time.Since(start) < delay {
		t.Fatalf("LOCK.ACQUIRE short alice 500 via a follower whose link to the leader takes %v: %s after %v, want -TRYAGAIN",
			delay, testenv.ShowReply(r), time.Since(start))
	}
	if r := c.Do("LOCK.ACQUIRE", "long", "bob", "30000"); !isToken(r) {
		t.Fatalf("LOCK.ACQUIRE long bob 30000 via the slow link: %s, want a token", testenv.ShowReply(r))
	}
	if r := c.Do("LOCK.RENEW", "r2", "dave", "30000"); !isToken(r) {
		t.Fatalf("LOCK.RENEW r2 dave 30000 via the slow link: %s, want its token", testenv.ShowReply(r))
	}
	if r := c.Do("LOCK.RENEW", "r2", "dave", "500"); !bytes.HasPrefix(r, []byte("-TRYAGAIN")) {
		t.Fatalf("LOCK.RENEW r2 dave 500 via the slow link: %s, want -TRYAGAIN", testenv.ShowReply(r))
	}
}

// The leader counts a relayed lease from when the follower read the
// request (TIER.RELAY's elapsed time): a grant the time spent on the
// follower has eaten is undone and answered -TRYAGAIN.
func TestRelayCarriesElapsedTime(t *testing.T) {
	tr := startTier(t)
	l := tr.Leader(t)
	// The new leader grants once it is the backend's token authority; until
	// then every acquire is -TRYAGAIN, alice's below for the wrong reason.
	if r := retry(t, tr.Nodes[l].Addr, "LOCK.ACQUIRE", "warm", "w", "500"); !isToken(r) {
		t.Fatalf("LOCK.ACQUIRE warm on the leader = %s", testenv.ShowReply(r))
	}
	peer := testenv.Dial(t, tr.Nodes[l].Addr)
	// No secret configured: the tier secret is the (empty) requirepass.
	if r := peer.Do("TIER.PEER", "", "n9", "", "2", "2"); string(r) != "+OK\r\n" {
		t.Fatalf("TIER.PEER = %s", testenv.ShowReply(r))
	}
	if r := peer.Do("TIER.RELAY", "700000", "LOCK.ACQUIRE", "y", "alice", "500"); !bytes.HasPrefix(r, []byte("-TRYAGAIN")) {
		t.Fatalf("a relayed LOCK.ACQUIRE y alice 500 that spent 700ms on the follower: %s, want -TRYAGAIN", testenv.ShowReply(r))
	}
	// Undone: bob gets it at once.
	if r := peer.Do("TIER.RELAY", "0", "LOCK.ACQUIRE", "y", "bob", "500"); !isToken(r) {
		t.Fatalf("bob's relayed LOCK.ACQUIRE y after alice's late one: %s, want a token", testenv.ShowReply(r))
	}
	for _, bad := range [][]string{
		{"TIER.RELAY", "-1", "LOCK.ACQUIRE", "z", "a", "500"},
		{"TIER.RELAY", "x", "LOCK.ACQUIRE", "z", "a", "500"},
		{"TIER.RELAY", "0"},
		{"TIER.RELAY"},
		{"TIER.RELAY", "0", "TIER.RELAY", "0", "LOCK.ACQUIRE", "z", "a", "500"},
	} {
		if r := peer.Do(bad...); !bytes.HasPrefix(r, []byte("-ERR")) {
			t.Fatalf("%s = %s, want an error", testenv.ShowCommand(bad), testenv.ShowReply(r))
		}
	}
	// Not a relay link: TIER.RELAY is nobody's command.
	if r := testenv.Dial(t, tr.Nodes[l].Addr).Do("TIER.RELAY", "0", "LOCK.ACQUIRE", "z", "a", "500"); !bytes.HasPrefix(r, []byte("-ERR")) {
		t.Fatalf("TIER.RELAY from a client = %s, want an error", testenv.ShowReply(r))
	}
}

func isToken(r []byte) bool {
	n, ok := testenv.ParseInt(r)
	return ok && n > 0
}

// Right after an election INFO tells no untruth about the followers'
// progress: each peer's lag is -1 (it has not reported to the new leader
// yet) or how far behind it really is, which in an idle tier is at most
// the new leader's own first entries; the live follower's soon reads 0.
func TestPeerLagAfterElection(t *testing.T) {
	tr := startTier(t)
	l := tr.Leader(t)
	for i := 0; i < 30; i++ {
		retry(t, tr.Nodes[l].Addr, "LOCK.ACQUIRE", fmt.Sprintf("g%d", i), "o", "60000")
	}
	tr.Nodes[l].Kill9()
	nl := tr.Leader(t)
	live := ""
	for _, i := range followers(tr, nl) {
		if i != l {
			live = tr.IDs[i]
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		info := testenv.TierInfo(tr.Nodes[nl].Addr)
		caughtUp := false
		for k, v := range info {
			id, ok := strings.CutPrefix(k, "tier_peer_")
			if !ok {
				continue
			}
			_, lagText, _ := strings.Cut(v, "lag=")
			lag, err := strconv.Atoi(lagText)
			// The new leader's own entries: raft's no-op, the barrier and
			// its LeaderStart.
			if err != nil || lag < -1 || lag > 3 || (id == tr.IDs[l] && lag != -1) {
				t.Fatalf("INFO on the new leader (last index %s): %s:%s; the live follower's lag is at most 3, the killed node's unknown (-1)",
					info["tier_last_index"], k, v)
			}
			caughtUp = caughtUp || (id == live && lag == 0)
		}
		if caughtUp {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the live follower %s's lag never read 0 within 15s: %v", live, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTierNodesServeClientsOnTheLoop: a tier node's clients are served by
// its event loop as a single node's are, for their whole life: after a
// client's forwarded requests and its lock commands (relayed to the leader
// from a follower, on a goroutine while the client stays on the loop),
// INFO's loop_clients counts every client CLIENT LIST shows (peers' relay
// links come and go meanwhile, so the two are compared, not a count
// before and after). The client asks both itself.
func TestTierNodesServeClientsOnTheLoop(t *testing.T) {
	tr := startTier(t)
	l := tr.Leader(t)
	for _, i := range []int{l, followers(tr, l)[0]} {
		addr := tr.Nodes[i].Addr
		c := testenv.Dial(t, addr)
		allOnTheLoop := func(after string) {
			t.Helper()
			deadline := time.Now().Add(10 * time.Second)
			for {
				loop, err := strconv.Atoi(infoFieldOf(c.Do("INFO", "fenceproxy"), "loop_clients"))
				if err != nil {
					t.Fatalf("node %d: INFO fenceproxy has no loop_clients", i)
				}
				list, ok := testenv.ParseBulk(c.Do("CLIENT", "LIST"))
				if !ok {
					t.Fatalf("node %d: CLIENT LIST is not a bulk string", i)
				}
				clients := strings.Count(strings.TrimSpace(string(list)), "\n") + 1
				if loop == clients {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("node %d: after %s, loop_clients %d of %d clients in CLIENT LIST", i, after, loop, clients)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		c.Do("SET", "plain", "v")
		allOnTheLoop("a SET")
		retry(t, addr, "LOCK.ACQUIRE", fmt.Sprintf("loopres%d", i), "o", "30000")
		if r := c.Do("LOCK.INFO", fmt.Sprintf("loopres%d", i)); bytes.HasPrefix(r, []byte("-")) {
			t.Fatalf("node %d: LOCK.INFO = %s", i, testenv.ShowReply(r))
		}
		if r := c.Do("LOCK.ACQUIRE", fmt.Sprintf("mine%d", i), "o", "30000"); bytes.HasPrefix(r, []byte("-")) {
			t.Fatalf("node %d: LOCK.ACQUIRE = %s", i, testenv.ShowReply(r))
		}
		allOnTheLoop("the client's lock commands")
		c.Do("GET", "plain")
		allOnTheLoop("a GET")
	}
}
