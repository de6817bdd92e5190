package tier

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// startTierBehindLinks starts a tier of three nodes as testenv.StartTier
// does, but each node reaches the backend through a Link of its own
// (links[i] for Nodes[i]), so that one node's writes to Redis can be held.
func startTierBehindLinks(t *testing.T, backend string) (*testenv.Tier, []*testenv.Link) {
	t.Helper()
	tr := &testenv.Tier{}
	var peers []string
	for i := range 3 {
		tr.IDs = append(tr.IDs, fmt.Sprintf("n%d", i+1))
		tr.Raft = append(tr.Raft, fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
		peers = append(peers, tr.IDs[i]+"="+tr.Raft[i])
	}
	var links []*testenv.Link
	for i := range 3 {
		links = append(links, testenv.StartLink(t, backend))
		tr.Nodes = append(tr.Nodes, testenv.StartProxy(t, testenv.ProxyOptions{
			Backend: links[i].Addr, MinReplicas: 0, ReplicaTimeout: 100 * time.Millisecond,
			Args: []string{"--node-id", tr.IDs[i], "--raft-listen", tr.Raft[i], "--peers", strings.Join(peers, ",")},
		}))
	}
	tr.Leader(t)
	return tr, links
}

// TestDelayedFenceExecAcrossLeaderChange is issue 22's item 1 (a): the
// leader checks holder X's token and sends X's FENCE.EXEC, whose bytes are
// held on the way to Redis (the leader's Link to the backend, cut); the
// leader is killed (-9); the others elect a new leader, through which X's
// lock is released, Y is granted a newer token and writes with FENCE.EXEC;
// then the Link heals and X's held bytes reach Redis. They must not
// overwrite Y's write. (Before the fence mark they did: the old leader's
// check was made in the proxy alone.)
func TestDelayedFenceExecAcrossLeaderChange(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	tr, links := startTierBehindLinks(t, master.Addr)
	m := testenv.Dial(t, master.Addr)
	const r, k = "acct:1", "acct:1:balance"

	l := tr.Leader(t)
	tokX, ok := testenv.ParseInt(retry(t, tr.Nodes[l].Addr, "LOCK.ACQUIRE", r, "X", "60000"))
	if !ok {
		t.Fatalf("X's LOCK.ACQUIRE on the leader failed")
	}
	x := testenv.Dial(t, tr.Nodes[l].Addr)
	x.SetTimeout(30 * time.Second)
	if got := string(x.Do("FENCE.EXEC", r, strconv.FormatInt(tokX, 10), "SET", k, "x-first")); got != "+OK\r\n" {
		t.Fatalf("X's first fenced SET = %q", got)
	}

	// X's second write is checked by the leader and sent, and held in its
	// Link. The leader's lock connection gives up on the reply and answers
	// that it may or may not have run: the write was sent.
	landed := master.SeenInMonitor(t, "x-stale")
	links[l].Cut(t, testenv.Upstream)
	got := x.Do("FENCE.EXEC", r, strconv.FormatInt(tokX, 10), "SET", k, "x-stale")
	if !strings.Contains(string(got), "may or may not") {
		t.Fatalf("X's FENCE.EXEC with its bytes held = %q, want the may-or-may-not-have-run error", got)
	}
	tr.Nodes[l].Kill9()

	nl := tr.Leader(t)
	if nl == l {
		t.Fatalf("the killed node %s still leads", tr.IDs[l])
	}
	if n, _ := testenv.ParseInt(retry(t, tr.Nodes[nl].Addr, "LOCK.RELEASE", r, "X")); n != 1 {
		t.Fatalf("X's release through the new leader did not release")
	}
	tokY, ok := testenv.ParseInt(retry(t, tr.Nodes[nl].Addr, "LOCK.ACQUIRE", r, "Y", "60000"))
	if !ok || tokY <= tokX {
		t.Fatalf("Y's token %d after X's %d", tokY, tokX)
	}
	if got := string(retry(t, tr.Nodes[nl].Addr, "FENCE.EXEC", r, strconv.FormatInt(tokY, 10), "SET", k, "y")); got != "+OK\r\n" {
		t.Fatalf("Y's fenced SET = %q", got)
	}

	links[l].Heal(t)
	select {
	case <-landed:
	case <-time.After(30 * time.Second):
		t.Fatalf("X's held FENCE.EXEC never reached Redis after the Link healed: the scenario did not happen")
	}
	if v, _ := testenv.ParseBulk(m.Do("GET", k)); string(v) != "y" {
		t.Fatalf("%s = %q after X's delayed write arrived, want Y's \"y\": a stale fenced write landed after a newer token's", k, v)
	}
}
