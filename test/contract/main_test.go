// Package contract_test checks fenceproxy against docs/contract.md:
// every clause of "The lock family" and "The guarantees", against the real
// fenceproxy binary in front of real redis-server processes (testenv).
//
// Exact reply bytes are compared wherever the contract fixes them
// (":1\r\n", "$-1\r\n"); error replies are checked by their code prefix.
package contract_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Replies the contract fixes byte for byte.
const (
	replyNull = "$-1\r\n"
	replyOne  = ":1\r\n"
	replyZero = ":0\r\n"
	replyPong = "+PONG\r\n"
)

// env is a fenceproxy in front of a master and one replica, with
// --min-replicas 1.
type env struct {
	master, replica *testenv.Redis
	proxy           *testenv.Proxy
}

// defaultReplicaTimeout is --replica-timeout for tests that do not test it:
// generous, so a loaded machine (race detector, two CPUs) does not turn a
// slow acknowledgement into -NOREPLICAS.
const defaultReplicaTimeout = 2 * time.Second

// startEnv starts master, replica and proxy. replicaTimeout 0 means
// defaultReplicaTimeout.
func startEnv(t *testing.T, replicaTimeout time.Duration) *env {
	t.Helper()
	if replicaTimeout == 0 {
		replicaTimeout = defaultReplicaTimeout
	}
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	waitReplicaAcks(t, master)
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{
		Backend:        master.Addr,
		MinReplicas:    1,
		ReplicaTimeout: replicaTimeout,
	})
	return &env{master: master, replica: replica, proxy: proxy}
}

// dial opens a raw connection to the proxy.
func (e *env) dial(t *testing.T) *testenv.Conn {
	t.Helper()
	return testenv.Dial(t, e.proxy.Addr)
}

// expect sends args and fails unless the reply is exactly want.
func expect(t *testing.T, c *testenv.Conn, want string, args ...string) {
	t.Helper()
	if got := c.Do(args...); string(got) != want {
		t.Fatalf("%s: reply %q, want %q", testenv.ShowCommand(args), got, want)
	}
}

// expectErr sends args and fails unless the reply is an error starting with
// prefix (e.g. "-ERR", "-NOREPLICAS"). It returns the reply.
func expectErr(t *testing.T, c *testenv.Conn, prefix string, args ...string) string {
	t.Helper()
	got := string(c.Do(args...))
	if !strings.HasPrefix(got, prefix) || !strings.HasSuffix(got, "\r\n") || strings.Count(got, "\r\n") != 1 {
		t.Fatalf("%s: reply %q, want one error line starting with %q", testenv.ShowCommand(args), got, prefix)
	}
	return got
}

// token sends args (a LOCK.ACQUIRE or LOCK.RENEW) and fails unless the
// reply is a positive integer, which it returns.
func token(t *testing.T, c *testenv.Conn, args ...string) int64 {
	t.Helper()
	got := c.Do(args...)
	n, ok := testenv.ParseInt(got)
	if !ok || n <= 0 {
		t.Fatalf("%s: reply %q, want a positive integer token", testenv.ShowCommand(args), got)
	}
	return n
}

// itoa formats a token as a command argument.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// lockInfo is a LOCK.INFO reply, field by field.
type lockInfo = testenv.LockInfo

// info runs LOCK.INFO resource and decodes the four contract fields.
func info(t *testing.T, c *testenv.Conn, resource string) lockInfo {
	t.Helper()
	li, err := tryInfo(c, resource)
	if err != nil {
		t.Fatalf("%s: %v", testenv.ShowCommand([]string{"LOCK.INFO", resource}), err)
	}
	return li
}

// tryInfo is info returning its error; usable from any goroutine.
func tryInfo(c *testenv.Conn, resource string) (lockInfo, error) {
	raw, err := c.TryDo("LOCK.INFO", resource)
	if err != nil {
		return lockInfo{}, err
	}
	return testenv.ParseLockInfo(raw)
}

// waitInfo polls LOCK.INFO resource (every 10ms, at most d) until cond
// holds, and returns the last reply.
func waitInfo(t *testing.T, c *testenv.Conn, resource string, d time.Duration, what string, cond func(lockInfo) bool) lockInfo {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		li := info(t, c, resource)
		if cond(li) {
			return li
		}
		if time.Now().After(deadline) {
			t.Fatalf("LOCK.INFO %q: not %s within %v; last reply %q", resource, what, d, li.Raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFree waits until resource has no owner (its lease ran out).
func waitFree(t *testing.T, c *testenv.Conn, resource string, d time.Duration) lockInfo {
	t.Helper()
	return waitInfo(t, c, resource, d, "free", func(li lockInfo) bool { return li.Owner == nil })
}

// expectFree fails unless LOCK.INFO shows resource free: null owner,
// ttl-ms -2.
func expectFree(t *testing.T, c *testenv.Conn, resource string) lockInfo {
	t.Helper()
	li := info(t, c, resource)
	if li.OwnerRaw != replyNull || li.TTL != -2 {
		t.Fatalf("LOCK.INFO %q: reply %q, want owner %q and ttl-ms -2 (free)", resource, li.Raw, replyNull)
	}
	return li
}

// expectHeld fails unless LOCK.INFO shows resource held by owner with token.
func expectHeld(t *testing.T, c *testenv.Conn, resource, owner string, tok int64) lockInfo {
	t.Helper()
	li := info(t, c, resource)
	if li.Owner == nil || string(li.Owner) != owner || li.Token != tok || li.TTL <= 0 {
		t.Fatalf("LOCK.INFO %q: reply %q, want owner %q, token %d, ttl-ms > 0", resource, li.Raw, owner, tok)
	}
	return li
}

// expectPing checks, on a fresh connection, that the proxy still serves
// other clients.
func expectPing(t *testing.T, addr string) {
	t.Helper()
	c := testenv.Dial(t, addr)
	expect(t, c, replyPong, "PING")
	c.Close()
}

// resName returns a resource name unique to the test.
func resName(t *testing.T, suffix string) string {
	return t.Name() + "/" + suffix
}

// waitReplicaAcks waits (at most 10s) until a write on master is
// acknowledged by its replica. A replica listed online right after a full
// sync may not acknowledge until its first REPLCONF ACK; without this the
// first lock write of a test could get -NOREPLICAS for a reason that has
// nothing to do with the proxy.
func waitReplicaAcks(t *testing.T, master *testenv.Redis) {
	t.Helper()
	c := testenv.Dial(t, master.Addr)
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		expect(t, c, "+OK\r\n", "SET", "contract-test:warmup", "1")
		got := c.Do("WAIT", "1", "1000")
		if string(got) == replyOne {
			expect(t, c, replyOne, "DEL", "contract-test:warmup")
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("WAIT 1 1000 on master %s: reply %q for 10s, want %q", master.Addr, got, replyOne)
		}
	}
}
