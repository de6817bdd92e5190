// Package sentinel_test checks that fenceproxy follows a standalone
// master's failover and never writes to a node that is not the master:
// with Redis Sentinel (--sentinel, --master-name), the proxy follows
// +switch-master without a restart and sends nothing to an old master that
// comes back empty; without Sentinel, a backend that reports itself a
// replica gets nothing, and clients are told why.
//
// Every test runs real redis-server and redis-sentinel processes
// (testenv.StartSentinels) and the real binary.
package sentinel_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// replicaTimeout is --replica-timeout: generous, so a loaded machine does
// not turn a slow acknowledgement into -NOREPLICAS.
const replicaTimeout = 2 * time.Second

// until retries do (every 50ms, at most d) until it reports true, and
// fails the test with the last reply otherwise.
func until(t *testing.T, d time.Duration, what string, do func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, last := do()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s within %v; last: %s", what, d, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// retried sends args through c again while the reply is -TRYAGAIN (at
// most 15s): right after a failover lock commands wait for the proxy's
// token authority to write its heartbeat to the new master.
func retried(t *testing.T, c *testenv.Conn, args ...string) []byte {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := c.Do(args...)
		if !strings.HasPrefix(string(r), "-TRYAGAIN ") || time.Now().After(deadline) {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// acquire takes resource for owner through c and returns the token.
func acquire(t *testing.T, c *testenv.Conn, resource, owner string) int64 {
	t.Helper()
	r := retried(t, c, "LOCK.ACQUIRE", resource, owner, "60000")
	tok, ok := testenv.ParseInt(r)
	if !ok || tok <= 0 {
		t.Fatalf("LOCK.ACQUIRE %s %s = %s, want a token", resource, owner, testenv.ShowReply(r))
	}
	return tok
}

// direct sends one command straight to r, not through the proxy.
func direct(t *testing.T, r *testenv.Redis, args ...string) []byte {
	t.Helper()
	c := testenv.Dial(t, r.Addr)
	defer c.Close()
	return c.Do(args...)
}

// dbsize is the number of keys in r.
func dbsize(t *testing.T, r *testenv.Redis) int64 {
	t.Helper()
	n, ok := testenv.ParseInt(direct(t, r, "DBSIZE"))
	if !ok {
		t.Fatalf("DBSIZE on %s failed", r.Addr)
	}
	return n
}

// role is the first element of r's ROLE.
func role(t *testing.T, r *testenv.Redis) string {
	t.Helper()
	parts, ok := testenv.SplitArray(direct(t, r, "ROLE"))
	if !ok || len(parts) == 0 {
		t.Fatalf("ROLE on %s failed", r.Addr)
	}
	b, _ := testenv.ParseBulk(parts[0])
	return string(b)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
