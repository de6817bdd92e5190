package sentinel_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestDemotedBackendGetsNothing, without Sentinel: the backend the proxy
// was started on is made a replica (REPLICAOF) behind its back. From then
// on writes and lock commands get an error that says why, and nothing
// reaches it: not a write (it is started with replica-read-only no, so a
// write sent to it would land), not a LOCK.INFO read of an owner record, not
// a MULTI on a connection pinned before. Made a master again, it is served
// again by the same proxy.
func TestDemotedBackendGetsNothing(t *testing.T) {
	backend := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--replica-read-only", "no"}})
	other := testenv.StartReplica(t, backend)
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{Backend: backend.Addr, MinReplicas: 0, ReplicaTimeout: replicaTimeout})
	c := testenv.Dial(t, proxy.Addr)
	held := acquire(t, c, "held", "owner")
	tx := testenv.Dial(t, proxy.Addr)
	if r := tx.Do("MULTI"); string(r) != "+OK\r\n" {
		t.Fatalf("MULTI = %s", testenv.ShowReply(r))
	}
	tx.Do("SET", "in-tx", "1")

	// other becomes the master and backend its replica (the data it holds
	// comes back by replication). With --min-replicas 0 the grant did not
	// wait for other, so the test does before it stages the failover.
	backend.WaitReplicated(t, 1)
	other.Promote(t)
	backend.Follow(t, other)

	until(t, 10*time.Second, "refusing writes to the demoted backend", func() (bool, string) {
		r := c.Do("SET", "probe", "1")
		return strings.HasPrefix(string(r), "-READONLY fenceproxy:"), testenv.ShowReply(r)
	})
	before := dbsize(t, backend)
	for _, cmd := range [][]string{
		{"SET", "k", "v"},
		{"INCR", "n"},
		{"LOCK.ACQUIRE", "new", "owner", "60000"},
		{"LOCK.RENEW", "held", "owner", "60000"},
		{"LOCK.RELEASE", "held", "owner"},
		{"LOCK.INFO", "held"},
		{"FENCE.EXEC", "held", itoa(held), "SET", "fenced", "1"},
		{"GET", "k"},
	} {
		r := string(c.Do(cmd...))
		if !strings.HasPrefix(r, "-READONLY fenceproxy:") || !strings.Contains(r, "replica") {
			t.Errorf("%v on a demoted backend = %q, want -READONLY saying it is a replica", cmd, r)
		}
		if strings.Contains(r, backend.Addr) || strings.Contains(r, "127.0.0.1") {
			t.Errorf("%v: the error names an address: %q", cmd, r)
		}
	}
	// The transaction pinned before the demotion is over, not carried on.
	if r := string(tx.Do("EXEC")); !strings.HasPrefix(r, "-") {
		t.Errorf("EXEC of a transaction begun on the demoted backend = %q, want an error", r)
	}
	if r := string(testenv.Dial(t, proxy.Addr).Do("SUBSCRIBE", "ch")); !strings.HasPrefix(r, "-READONLY fenceproxy:") {
		t.Errorf("SUBSCRIBE on a demoted backend = %q, want -READONLY", r)
	}
	if after := dbsize(t, backend); after != before {
		t.Fatalf("the demoted backend went from %d keys to %d while the proxy refused", before, after)
	}
	direct := testenv.Dial(t, backend.Addr)
	if r := direct.Do("EXISTS", "k", "n", "fenced", "in-tx"); string(r) != ":0\r\n" {
		t.Fatalf("EXISTS k n fenced in-tx on the demoted backend = %s, want 0", testenv.ShowReply(r))
	}
	if status, body := testenv.HTTPGet(t, "http://"+proxy.MetricsAddr+"/readyz"); status != 503 {
		t.Errorf("/readyz with a demoted backend = %d %q, want 503", status, body)
	}
	if !strings.Contains(proxy.Log(), "reports itself a replica") {
		t.Errorf("the proxy's log does not say the backend is a replica")
	}

	// A master again: served again, the lock it held still held.
	backend.Promote(t)
	until(t, 10*time.Second, "serving the backend again", func() (bool, string) {
		r := c.Do("SET", "k", "v")
		return string(r) == "+OK\r\n", testenv.ShowReply(r)
	})
	if r := retried(t, c, "LOCK.ACQUIRE", "held", "owner", "60000"); string(r) != ":"+itoa(held)+"\r\n" {
		t.Fatalf("the holder's retry once the backend is a master again = %s, want %d", testenv.ShowReply(r), held)
	}
	if tok := acquire(t, c, "new", "owner"); tok <= held {
		t.Fatalf("a new token %d is not above %d", tok, held)
	}
}
