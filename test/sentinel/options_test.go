package sentinel_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestSentinelPassword: Sentinels that require a password are reached with
// $FENCEPROXY_SENTINEL_PASSWORD; a wrong one stops the start with a line
// that says which Sentinel refused, and never shows the password.
func TestSentinelPassword(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	sentinels := testenv.StartSentinels(t, master, testenv.SentinelOptions{Password: "s3cret-sentinel"})

	t.Setenv("FENCEPROXY_SENTINEL_PASSWORD", "wrong-password")
	args := append(sentinels.Args(), "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", filepath.Join(t.TempDir(), "d"))
	code, stderr := testenv.StartFails(t, args...)
	if code != 1 || !strings.Contains(stderr, "--sentinel") || !strings.Contains(stderr, sentinels.Addrs[0]) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("start with a wrong Sentinel password: exit %d, stderr %q; want 1 and one line naming --sentinel and the Sentinels", code, stderr)
	}
	if strings.Contains(stderr, "wrong-password") {
		t.Errorf("the error shows the password: %q", stderr)
	}

	t.Setenv("FENCEPROXY_SENTINEL_PASSWORD", "s3cret-sentinel")
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{Sentinels: sentinels, MinReplicas: 1, ReplicaTimeout: replicaTimeout})
	c := testenv.Dial(t, proxy.Addr)
	if r := c.Do("SET", "k", "v"); string(r) != "+OK\r\n" {
		t.Fatalf("SET = %s", testenv.ShowReply(r))
	}
	acquire(t, c, "r", "owner")
}

// TestSentinelTLS: Sentinels and Redis that speak only TLS; the proxy
// reaches both (--sentinel-tls, --backend-tls) and follows a failover.
func TestSentinelTLS(t *testing.T) {
	certs := testenv.MakeCerts(t)
	master := testenv.StartTLSRedis(t, certs, nil)
	replica := testenv.StartTLSRedis(t, certs, master)
	sentinels := testenv.StartSentinels(t, master, testenv.SentinelOptions{Certs: certs})
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{Sentinels: sentinels, MinReplicas: 0,
		ReplicaTimeout: replicaTimeout, Args: certs.BackendArgs()})
	c := testenv.Dial(t, proxy.Addr)
	tok := acquire(t, c, "r", "owner")

	master.Kill()
	sentinels.WaitMaster(t, replica.Addr)
	until(t, 30e9, "serving from the new master over TLS", func() (bool, string) {
		r, err := c.TryDo("SET", "after", "1")
		if err != nil {
			c = testenv.Dial(t, proxy.Addr)
			return false, err.Error()
		}
		return string(r) == "+OK\r\n", testenv.ShowReply(r)
	})
	retried(t, c, "LOCK.RELEASE", "r", "owner")
	if next := acquire(t, c, "r", "next"); next <= tok {
		t.Fatalf("token after the failover %d, want above %d", next, tok)
	}
}

// TestSentinelFlags: bad combinations are refused before anything starts,
// and Sentinels that do not know the name stop the start with a clear line.
func TestSentinelFlags(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "d")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sentinel", "127.0.0.1:1"}, "--sentinel needs --master-name"},
		{[]string{"--master-name", "fp"}, "need --sentinel"},
		{[]string{"--sentinel-tls"}, "need --sentinel"},
		{[]string{"--sentinel", "127.0.0.1:1", "--master-name", "fp", "--backend", "127.0.0.1:2"}, "--backend and --sentinel"},
		{[]string{"--sentinel", "127.0.0.1:1,", "--master-name", "fp"}, "empty address"},
	} {
		code, stderr := testenv.StartFails(t, append(tc.args, "--data-dir", dataDir)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}

	master := testenv.StartRedis(t, testenv.RedisOptions{})
	sentinels := testenv.StartSentinels(t, master, testenv.SentinelOptions{Count: 1})
	code, stderr := testenv.StartFails(t, "--sentinel", sentinels.Addr(), "--master-name", "no-such-master",
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", dataDir)
	if code != 1 || !strings.Contains(stderr, "no-such-master") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("an unknown --master-name: exit %d, stderr %q; want 1 and one line naming it", code, stderr)
	}
}
