package limits

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// retryable are the error codes Redis clients retry by themselves
// (Redisson: TRYAGAIN, LOADING, BUSY, CLUSTERDOWN, MASTERDOWN, NOREPLICAS,
// READONLY).
var retryable = []string{"-TRYAGAIN ", "-LOADING ", "-BUSY ", "-CLUSTERDOWN ", "-MASTERDOWN ", "-NOREPLICAS ", "-READONLY "}

func isRetryable(r []byte) bool {
	for _, code := range retryable {
		if strings.HasPrefix(string(r), code) {
			return true
		}
	}
	return false
}

// lostContact is the reply to a lock write whose connection broke under it:
// the grant may or may not have happened, and the client retries with the
// same owner (which is safe: the same owner gets the same token back).
const lostContact = "-ERR fenceproxy: lost contact with Redis; the lock may or may not be granted: retry with the same owner\r\n"

func token(t *testing.T, r []byte) int64 {
	t.Helper()
	n, ok := testenv.ParseInt(r)
	if !ok || n <= 0 {
		t.Fatalf("want a token, got %q", r)
	}
	return n
}

// TestBackendOutage: Redis is killed (SIGKILL) and restarted on the same
// port, empty. Meanwhile ordinary commands get a retryable error, lock
// commands get an error and never a token, /readyz answers 503; afterwards
// the same client connections work again without a proxy restart, and
// tokens keep rising though Redis lost every key.
func TestBackendOutage(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	before := token(t, c.Do("LOCK.ACQUIRE", "outage", "a", "600000"))
	c.Do("SET", "k", "v")

	redis.Kill()
	// The first requests may meet the dying connection (their outcome is
	// unknown and they say so); once the proxy knows, the errors are
	// retryable ones.
	eventually(t, "GET never got a retryable error with Redis down", func() bool {
		r := c.Do("GET", "k")
		if !isRetryable(r) && !strings.HasPrefix(string(r), "-ERR fenceproxy: lost the connection to Redis") {
			t.Fatalf("GET with Redis down = %q", r)
		}
		return isRetryable(r)
	})
	for _, cmd := range [][]string{
		{"GET", "k"}, {"SET", "k", "v2"}, {"INCR", "n"}, {"EVAL", "return 1", "0"}, {"BLPOP", "l", "1"},
		// A connection of the client's own cannot be had either (issue 16's
		// note: MULTI answers -TRYAGAIN, and the client is not left in a
		// transaction: the GET after it is answered, not queued).
		{"MULTI"}, {"GET", "k"}, {"WATCH", "k"}, {"GET", "k"},
	} {
		if r := c.Do(cmd...); !isRetryable(r) {
			t.Errorf("%s with Redis down = %q, want a retryable error", testenv.ShowCommand(cmd), r)
		}
	}
	for _, cmd := range [][]string{
		{"LOCK.ACQUIRE", "outage", "b", "10000"},
		{"LOCK.ACQUIRE", "outage-2", "a", "10000"},
		{"LOCK.ACQUIRE", "outage-3", "a", "10000", "WAIT", "1000"},
		{"LOCK.ACQUIRE", "outage", "a", "600000"},
		{"LOCK.RENEW", "outage", "a", "600000"},
		{"LOCK.RELEASE", "outage", "a"},
	} {
		r := c.Do(cmd...)
		t.Logf("%s with Redis down: %q", testenv.ShowCommand(cmd), r)
		if r[0] != '-' {
			t.Errorf("%s with Redis down = %q, want an error (never a token)", testenv.ShowCommand(cmd), r)
		} else if !isRetryable(r) && string(r) != lostContact {
			t.Errorf("%s with Redis down = %q, want a retryable error", testenv.ShowCommand(cmd), r)
		}
	}
	if code, body := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/readyz"); code != 503 {
		t.Errorf("/readyz with Redis down = %d %q, want 503", code, body)
	}
	if r := c.Do("PING"); string(r) != "+PONG\r\n" {
		t.Errorf("PING with Redis down = %q", r)
	}

	redis.Restart(t)
	eventually(t, "the proxy did not recover after Redis came back", func() bool {
		return string(c.Do("SET", "k", "again")) == "+OK\r\n"
	})
	if r := c.Do("GET", "k"); string(r) != "$5\r\nagain\r\n" {
		t.Errorf("GET after recovery = %q", r)
	}
	var after int64
	eventually(t, "LOCK.ACQUIRE did not work again after Redis came back", func() bool {
		r := c.Do("LOCK.ACQUIRE", "outage", "b", "600000")
		if r[0] == ':' {
			after = token(t, r)
			return true
		}
		return false
	})
	if after <= before {
		t.Errorf("token after the outage %d <= token before it %d", after, before)
	}
	// Every shared connection reconnects on its own backoff (at most 2s).
	eventually(t, "/readyz never answered 200 after recovery", func() bool {
		code, _ := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/readyz")
		return code == 200
	})
}

// TestReplicaGone: with --min-replicas 1 and the only replica killed, a
// lock write gets -NOREPLICAS (nothing granted: the resource stays free);
// with the replica back, the grant goes through.
func TestReplicaGone(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1, ReplicaTimeout: 2 * time.Second})
	c := testenv.Dial(t, p.Addr)
	token(t, c.Do("LOCK.ACQUIRE", "rg", "a", "600000"))

	replica.Kill()
	r := c.Do("LOCK.ACQUIRE", "rg-2", "a", "600000")
	if !strings.HasPrefix(string(r), "-NOREPLICAS ") {
		t.Fatalf("LOCK.ACQUIRE with the replica gone = %q, want -NOREPLICAS", r)
	}
	if r := c.Do("LOCK.INFO", "rg-2"); !strings.Contains(string(r), "$5\r\nowner\r\n$-1\r\n") {
		t.Errorf("LOCK.INFO after NOREPLICAS = %q, want no owner", r)
	}
	if r := c.Do("GET", "x"); string(r) != "$-1\r\n" {
		t.Errorf("GET with the replica gone = %q", r)
	}

	replica.Restart(t)
	master.WaitReplicas(t, 1)
	eventually(t, "LOCK.ACQUIRE did not work again with the replica back", func() bool {
		return c.Do("LOCK.ACQUIRE", "rg-2", "a", "600000")[0] == ':'
	})
}

// TestMasterDownPassesThrough: when the backend turns into a replica that
// lost its master and will not serve stale data, clients get a retryable
// error (Redis's own -MASTERDOWN until the proxy notices the replica, then
// fenceproxy's -READONLY, which says why: it sends a replica nothing), and
// lock commands grant nothing.
func TestMasterDownPassesThrough(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--replica-serve-stale-data", "no"}})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	c.Do("SET", "k", "v")
	// A master that nobody runs: the link stays down.
	dead := testenv.FreePort(t)
	direct := testenv.Dial(t, redis.Addr)
	if r := direct.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(dead)); string(r) != "+OK\r\n" {
		t.Fatalf("REPLICAOF = %q", r)
	}
	want := string(direct.Do("GET", "k"))
	if !strings.HasPrefix(want, "-MASTERDOWN ") {
		t.Fatalf("Redis itself answers GET with %q, want -MASTERDOWN", want)
	}
	eventually(t, "GET through the proxy never said the backend is a replica", func() bool {
		r := string(c.Do("GET", "k"))
		if r != want && !strings.HasPrefix(r, "-READONLY fenceproxy: the backend Redis reports itself a replica") {
			t.Fatalf("GET through the proxy = %q, want Redis's %q or fenceproxy's -READONLY", r, want)
		}
		return r != want
	})
	if r := c.Do("LOCK.ACQUIRE", "md", "a", "10000"); !isRetryable(r) {
		t.Errorf("LOCK.ACQUIRE on a replica that lost its master = %q, want a retryable error", r)
	}
	direct.Do("REPLICAOF", "NO", "ONE")
	eventually(t, "GET after REPLICAOF NO ONE never served again", func() bool {
		return string(c.Do("GET", "k")) == "$1\r\nv\r\n"
	})
}
