// Package operations tests fenceproxy as an operator meets it: start-up
// checks, metrics and health endpoints, a backend outage and recovery.
package operations

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestStartupFailsClearly: each unusable setting stops the start with a
// non-zero exit and one line on stderr naming the flag.
func TestStartupFailsClearly(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	file := filepath.Join(t.TempDir(), "a-file")
	os.WriteFile(file, []byte("x"), 0o644)
	closedPort := net.JoinHostPort("127.0.0.1", itoa(testenv.FreePort(t)))
	replica := testenv.StartReplica(t, redis)

	cases := []struct {
		name, want string
		args       []string
	}{
		{"backend unreachable", "--backend", []string{"--backend", closedPort}},
		{"backend is a replica", "not a master", []string{"--backend", replica.Addr}},
		{"port taken", "--listen", []string{"--backend", redis.Addr, "--listen", busy.Addr().String()}},
		{"data dir unusable", "--data-dir", []string{"--backend", redis.Addr, "--data-dir", filepath.Join(file, "sub")}},
		{"bad flag value", "--min-replicas", []string{"--backend", redis.Addr, "--min-replicas", "-1"}},
		{"replica timeout zero", "--replica-timeout", []string{"--backend", redis.Addr, "--replica-timeout", "0s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", t.TempDir()}, tc.args...)
			code, stderr := testenv.StartFails(t, args...)
			if code == 0 {
				t.Fatalf("exit code 0, want non-zero; stderr: %q", stderr)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("stderr = %q, want one line mentioning %q", stderr, tc.want)
			}
		})
	}
}

func TestDataDirHeldByAnotherProxy(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0})
	code, stderr := testenv.StartFails(t, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--backend", redis.Addr, "--data-dir", p.DataDir)
	if code == 0 || !strings.Contains(stderr, "--data-dir") {
		t.Fatalf("second proxy on one data dir: exit %d, stderr %q; want a refusal naming --data-dir", code, stderr)
	}
}

// TestMetricsCountWhatHappened drives every result the metrics promise and
// reads them back from /metrics.
func TestMetricsCountWhatHappened(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1, ReplicaTimeout: time.Second})
	c := testenv.Dial(t, p.Addr)

	c.Do("SET", "k", "v")
	c.Do("GET", "k")
	tok := c.Do("LOCK.ACQUIRE", "r", "a", "10000")
	c.Do("LOCK.ACQUIRE", "r", "b", "10000")                      // busy
	c.Do("LOCK.ACQUIRE", "r", "b", "0")                          // invalid
	c.Do("FENCE.CHECK", "r", "99999999")                         // invalid: never issued
	c.Do("LOCK.RENEW", "r", "a", "10000")                        // renewed
	c.Do("LOCK.RENEW", "r", "b", "10000")                        // lost
	c.Do("FENCE.CHECK", "r", strings.TrimSpace(string(tok[1:]))) // current
	c.Do("LOCK.RELEASE", "r", "a")                               // released
	c.Do("LOCK.RELEASE", "r", "a")                               // notheld
	c.Do("LOCK.ACQUIRE", "r2", "a", "10000")
	c.Do("FENCE.CHECK", "r2", strings.TrimSpace(string(tok[1:]))) // stale
	replica.Stop()
	if r := c.Do("LOCK.ACQUIRE", "r3", "a", "10000"); !strings.HasPrefix(string(r), "-NOREPLICAS") {
		t.Fatalf("LOCK.ACQUIRE with the replica stopped = %q, want -NOREPLICAS", r)
	}
	replica.Cont()

	code, body := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics status %d", code)
	}
	for _, want := range []string{
		`fenceproxy_lock_acquires_total{result="granted"} 2`,
		`fenceproxy_lock_acquires_total{result="busy"} 1`,
		`fenceproxy_lock_acquires_total{result="invalid"} 1`,
		`fenceproxy_lock_acquires_total{result="error"} 0`, // the caller's mistakes are not errors
		`fenceproxy_fence_checks_total{result="invalid"} 1`,
		`fenceproxy_fence_checks_total{result="error"} 0`,
		`fenceproxy_lock_acquires_total{result="noreplicas"} 1`,
		`fenceproxy_lock_renewals_total{result="renewed"} 1`,
		`fenceproxy_lock_renewals_total{result="lost"} 1`,
		`fenceproxy_lock_releases_total{result="released"} 1`,
		`fenceproxy_lock_releases_total{result="notheld"} 1`,
		`fenceproxy_fence_checks_total{result="current"} 1`,
		`fenceproxy_fence_checks_total{result="stale"} 1`,
		`fenceproxy_replica_shortfalls_total 1`,
		`fenceproxy_passthrough_commands_total 2`,
		`fenceproxy_connected_clients 1`,
		`fenceproxy_fence_store_sync_seconds_count`,
		`fenceproxy_replica_ack_seconds_count`,
		`fenceproxy_passthrough_seconds_count 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, `resource="`) || strings.Contains(body, "r3") {
		t.Errorf("/metrics carries a per-resource label")
	}
	if code, _ := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, _ := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d with Redis up", code)
	}
}

// TestBackendOutage: with Redis gone, clients get a retryable error at once,
// the proxy stays up and reports not ready, and it recovers by itself.
func TestBackendOutage(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	if r := c.Do("SET", "k", "v"); string(r) != "+OK\r\n" {
		t.Fatalf("SET = %q", r)
	}
	redis.Kill()
	deadline := time.Now().Add(5 * time.Second)
	var r []byte
	for time.Now().Before(deadline) {
		r = c.Do("GET", "k")
		if strings.HasPrefix(string(r), "-TRYAGAIN") {
			break
		}
		if !strings.HasPrefix(string(r), "-ERR fenceproxy: lost the connection") {
			t.Fatalf("GET with Redis down = %q, want -TRYAGAIN or a lost-connection error", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasPrefix(string(r), "-TRYAGAIN") {
		t.Fatalf("GET with Redis down = %q, want -TRYAGAIN", r)
	}
	if code, _ := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/readyz"); code != 503 {
		t.Errorf("/readyz = %d with Redis down, want 503", code)
	}
	if r := c.Do("PING"); string(r) != "+PONG\r\n" {
		t.Fatalf("PING with Redis down = %q", r)
	}

	redis.Restart(t)
	deadline = time.Now().Add(10 * time.Second)
	for {
		r = c.Do("SET", "k", "again")
		if string(r) == "+OK\r\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET after Redis came back = %q after 10s", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := c.Do("GET", "k"); string(r) != "$5\r\nagain\r\n" {
		t.Fatalf("GET after recovery = %q", r)
	}
}

// TestSigtermDrains: requests already sent when SIGTERM arrives are answered,
// then the proxy exits 0.
func TestSigtermDrains(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1, ReplicaTimeout: 2 * time.Second})
	c := testenv.Dial(t, p.Addr)
	const n = 200
	for i := 0; i < n; i++ {
		c.Send("INCR", "drain")
	}
	c.Send("LOCK.ACQUIRE", "drain-lock", "owner", "10000")
	c.Flush()
	first, err := c.ReadReply()
	if err != nil || string(first) != ":1\r\n" {
		t.Fatalf("first reply %q, %v", first, err)
	}
	code, err := p.Terminate()
	if err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit %d, %v; want 0", code, err)
	}
	for i := 2; i <= n; i++ {
		r, err := c.ReadReply()
		if err != nil || string(r) != ":"+itoa(i)+"\r\n" {
			t.Fatalf("reply %d after SIGTERM = %q, %v", i, r, err)
		}
	}
	r, err := c.ReadReply()
	if err != nil || !strings.HasPrefix(string(r), ":") {
		t.Fatalf("LOCK.ACQUIRE in flight at SIGTERM = %q, %v; want a token", r, err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestStoppedRedisDoesNotHangLocks: with Redis frozen (SIGSTOP), a lock
// request gets an error within a bounded time instead of hanging, PING still
// answers, and locks work again once Redis resumes.
func TestStoppedRedisDoesNotHangLocks(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0, ReplicaTimeout: 200 * time.Millisecond})
	c := testenv.Dial(t, p.Addr)
	c.SetTimeout(20 * time.Second)
	if r := c.Do("LOCK.ACQUIRE", "frozen", "a", "60000"); r[0] != ':' {
		t.Fatalf("LOCK.ACQUIRE before the freeze = %q", r)
	}
	redis.Stop()
	defer redis.Cont()
	r := c.Do("LOCK.ACQUIRE", "other", "a", "60000")
	if !strings.HasPrefix(string(r), "-ERR fenceproxy: lost contact with Redis") {
		t.Fatalf("LOCK.ACQUIRE with Redis frozen = %q, want a lost-contact error", r)
	}
	if r := testenv.Dial(t, p.Addr).Do("PING"); string(r) != "+PONG\r\n" {
		t.Fatalf("PING with Redis frozen = %q", r)
	}
	redis.Cont()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = c.Do("LOCK.ACQUIRE", "other", "a", "60000")
		if r[0] == ':' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("LOCK.ACQUIRE 10s after Redis resumed = %q", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBackendWithPassword: fenceproxy reaches a Redis that requires a
// password with its own credentials, and a client's AUTH is checked by
// Redis itself (on a connection of its own), so wrong passwords get Redis's
// answer and right ones +OK.
func TestBackendWithPassword(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--requirepass", "s3cret"}})
	t.Setenv("FENCEPROXY_BACKEND_PASSWORD", "s3cret")
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	for _, tc := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"SET", "k", "v"}, "+OK\r\n"},
		{[]string{"AUTH", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"AUTH", "s3cret"}, "+OK\r\n"},
		{[]string{"AUTH", "default", "s3cret"}, "+OK\r\n"},
		{[]string{"AUTH", "nobody", "s3cret"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"HELLO", "2", "AUTH", "default", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
	} {
		if got := c.Do(tc.cmd...); string(got) != tc.want {
			t.Errorf("%v = %q, want %q", tc.cmd, got, tc.want)
		}
	}
	if r := c.Do("LOCK.ACQUIRE", "pw", "o", "1000"); r[0] != ':' {
		t.Fatalf("LOCK.ACQUIRE against a password-protected Redis = %q", r)
	}
	if r := c.Do("HELLO", "3", "AUTH", "default", "s3cret"); !strings.HasPrefix(string(r), "%7\r\n") {
		t.Fatalf("HELLO 3 AUTH with the right password = %q", r)
	}
}
