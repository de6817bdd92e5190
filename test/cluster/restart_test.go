package cluster

import (
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// restartCluster kills every node and starts each again, empty (no
// persistence) but with its nodes.conf, so the same cluster comes back on
// the same addresses with no keys at all.
func restartCluster(t *testing.T, cl *testenv.Cluster) {
	t.Helper()
	for _, n := range cl.Nodes {
		n.Kill()
	}
	for _, n := range cl.Nodes {
		n.Restart(t)
	}
	cl.WaitHealthy(t)
	for _, m := range cl.Masters {
		if keys := clientKeysOn(t, m.Addr); len(keys) > 0 {
			t.Fatalf("keys on %s after its restart: %q, want none (no persistence; the token authority's aside)", m.Addr, keys)
		}
	}
}

// acquireRetry sends LOCK.ACQUIRE until it is answered with a token,
// retrying over the errors allowed while the proxy reconnects (at most
// recoverWait).
func acquireRetry(t *testing.T, c *testenv.Conn, resource, owner string) int64 {
	t.Helper()
	deadline := time.Now().Add(recoverWait)
	for {
		args := cmd("LOCK.ACQUIRE", resource, owner, "60000")
		got, err := c.TryDo(args...)
		if err != nil {
			t.Fatalf("%s: %v", testenv.ShowCommand(args), err)
		}
		noRedirect(t, testenv.ShowCommand(args), got)
		if n, ok := testenv.ParseInt(got); ok && n > 0 {
			return n
		}
		if !allowed(got) || time.Now().After(deadline) {
			t.Fatalf("%s: %s, want a token (Redis lost every record, so the resource is free)", testenv.ShowCommand(args), testenv.ShowReply(got))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestWholeClusterRestart: every node of the cluster dies and comes back
// empty. Tokens granted after that, by a restarted proxy or by one that kept
// running, are above every token granted before for the same resource, and
// FENCE.CHECK calls the old tokens stale (guarantee 1: "restart of Redis with
// every key lost").
func TestWholeClusterRestart(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	c := e.dial(t)

	var resources []string
	for _, m := range e.cl.Masters {
		resources = append(resources, st.resourcesOn(m, "rs:", 20)...)
	}
	old := map[string]int64{}
	for i, r := range resources {
		// A few grants each, the last one held.
		for round := range 1 + i%3 {
			owner := "old-" + strconv.Itoa(round)
			tok := token(t, c, "LOCK.ACQUIRE", r, owner, "60000")
			if tok <= old[r] {
				t.Fatalf("LOCK.ACQUIRE %s %s: token %d after %d", r, owner, tok, old[r])
			}
			old[r] = tok
			if round < i%3 {
				if got := c.Do("LOCK.RELEASE", r, owner); string(got) != ":1\r\n" {
					t.Fatalf("LOCK.RELEASE %s %s: %q", r, owner, got)
				}
			}
		}
		if got := c.Do("FENCE.CHECK", r, itoa(old[r])); string(got) != ":1\r\n" {
			t.Fatalf("FENCE.CHECK %s %d: %q", r, old[r], got)
		}
	}

	// 1. Cluster and proxy both die; the proxy comes back on its data dir.
	e.proxy.Kill9()
	restartCluster(t, e.cl)
	e.proxy.Restart(t)
	c = e.dial(t)
	check := func(phase string) {
		t.Helper()
		for _, r := range resources {
			owner := "new-" + phase
			tok := acquireRetry(t, c, r, owner)
			if tok <= old[r] {
				t.Errorf("%s: LOCK.ACQUIRE %s: token %d, but %d was granted before the cluster lost its keys", phase, r, tok, old[r])
			}
			if got := c.Do("FENCE.CHECK", r, itoa(old[r])); string(got) != ":0\r\n" {
				t.Errorf("%s: FENCE.CHECK %s %d (the old holder's token): %q, want :0", phase, r, old[r], got)
			}
			if got := c.Do("FENCE.CHECK", r, itoa(tok)); string(got) != ":1\r\n" {
				t.Errorf("%s: FENCE.CHECK %s %d (the new token): %q, want :1", phase, r, tok, got)
			}
			if li := info(t, c, r); string(li.Owner) != owner || li.Token != tok {
				t.Errorf("%s: LOCK.INFO %s = %q, want owner %q and token %d", phase, r, li.Raw, owner, tok)
			}
			old[r] = tok
		}
	}
	check("proxy-restarted")

	// 2. The cluster dies again under a proxy that keeps running.
	restartCluster(t, e.cl)
	check("proxy-kept")
}
