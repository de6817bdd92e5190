package operations

import (
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// What a new user trips over on a first try (issue 25, item 6).

// TestTTLTooShortSaysSo: a ttl-ms no grant or renewal could ever be
// replied with (1 ms: less than Redlock's drift allowance) is refused with
// -ERR saying it is too short and naming the shortest that can be granted.
// Before, it was granted, undone and answered "-TRYAGAIN ... retry", which
// no retry could change. A ttl that can be granted is still granted.
func TestTTLTooShortSaysSo(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	for _, args := range [][]string{
		{"LOCK.ACQUIRE", "r", "o", "1"},
		{"LOCK.RENEW", "r", "o", "1"},
	} {
		got := string(c.Do(args...))
		if !strings.HasPrefix(got, "-ERR") || !strings.Contains(got, "too short") || !strings.Contains(got, "shortest ttl that can be granted is") {
			t.Errorf("%s = %q, want -ERR saying the ttl is too short and naming the shortest", testenv.ShowCommand(args), got)
		}
	}
	if got := c.Do("LOCK.ACQUIRE", "r", "o", "60000"); got[0] != ':' {
		t.Fatalf("LOCK.ACQUIRE r o 60000 after the refusals = %q, want a token", got)
	}
	if got := c.Do("LOCK.RENEW", "r", "o", "60000"); got[0] != ':' {
		t.Fatalf("LOCK.RENEW r o 60000 = %q, want the token", got)
	}
}

// TestLockCommandsInMultiSaySo: a lock command inside MULTI is refused by
// the proxy, naming the command and MULTI, and EXEC then aborts the
// transaction (EXECABORT) as Redis does for a command refused while
// queuing: nothing of it runs. Before, Redis answered "unknown command",
// as if the proxy were not there.
func TestLockCommandsInMultiSaySo(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	for _, lockCmd := range [][]string{
		{"LOCK.ACQUIRE", "r", "o", "60000"},
		{"FENCE.CHECK", "r", "1"},
	} {
		if got := string(c.Do("MULTI")); got != "+OK\r\n" {
			t.Fatalf("MULTI = %q", got)
		}
		if got := string(c.Do("SET", "k", lockCmd[0])); got != "+QUEUED\r\n" {
			t.Fatalf("SET in MULTI = %q", got)
		}
		got := string(c.Do(lockCmd...))
		if !strings.HasPrefix(got, "-ERR fenceproxy: "+lockCmd[0]+" cannot run inside MULTI") {
			t.Errorf("%s in MULTI = %q, want -ERR fenceproxy: %s cannot run inside MULTI ...", lockCmd[0], got, lockCmd[0])
		}
		if got := string(c.Do("EXEC")); !strings.HasPrefix(got, "-EXECABORT") {
			t.Errorf("EXEC after %s in MULTI = %q, want -EXECABORT", lockCmd[0], got)
		}
		if got := string(c.Do("GET", "k")); got != "$-1\r\n" {
			t.Errorf("GET k after the aborted transaction = %q, want nil: the SET must not have run", got)
		}
	}
	// Outside MULTI the connection serves the lock family as ever.
	if got := c.Do("LOCK.ACQUIRE", "r", "o", "60000"); got[0] != ':' {
		t.Fatalf("LOCK.ACQUIRE after the transactions = %q, want a token", got)
	}
}

// TestLockCommandsWhileSubscribedSaySo: a lock command on a subscribed
// connection is answered, in order among Redis's replies, with Redis's
// own refusal of a command not allowed in subscribed mode (RESP2) or the
// proxy's (RESP3), never "unknown command"; the subscription goes on.
func TestLockCommandsWhileSubscribedSaySo(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, MinReplicas: 0})
	for _, tc := range []struct {
		proto, want string
	}{
		{"2", "-ERR Can't execute 'lock.acquire': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n"},
		{"3", "-ERR fenceproxy: LOCK.ACQUIRE cannot run on a subscribed connection"},
	} {
		c := testenv.Dial(t, p.Addr)
		c.Do("HELLO", tc.proto)
		// Pipelined: the refusal comes after SUBSCRIBE's confirmation and
		// before PING's reply.
		c.Send("SUBSCRIBE", "ch")
		c.Send("LOCK.ACQUIRE", "r", "o", "60000")
		c.Send("PING")
		c.Flush()
		var got []string
		for range 3 {
			reply, err := c.ReadReply()
			if err != nil {
				t.Fatalf("RESP%s: reading the replies: %v (so far %q)", tc.proto, err, got)
			}
			got = append(got, string(reply))
		}
		if !strings.Contains(got[0], "subscribe") || !strings.HasPrefix(got[1], tc.want) || !strings.Contains(strings.ToLower(got[2]), "pong") {
			t.Errorf("RESP%s: SUBSCRIBE, LOCK.ACQUIRE, PING answered %q; want the confirmation, %q..., and pong", tc.proto, got, tc.want)
		}
		c.Close()
	}
}

// TestBadFlagValueSaysWhatWasExpected: a flag value that does not parse
// stops the start with exit 2, one line naming the flag, what was wrong
// and the expected form, and one line pointing to --help: not the whole
// usage (101 lines before, with no hint that a duration needs a unit).
func TestBadFlagValueSaysWhatWasExpected(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--replica-timeout", "500"}, "--replica-timeout: 500 needs a unit: 500ms"},
		{[]string{"--shutdown-timeout", "ten"}, "--shutdown-timeout: \"ten\" is not a duration"},
		{[]string{"--max-clients", "many"}, "--max-clients: \"many\" is not an integer"},
		{[]string{"--no-such-flag"}, "unknown flag --no-such-flag"},
	} {
		code, stderr := testenv.StartFails(t, tc.args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 2 || len(lines) != 2 || !strings.Contains(lines[0], tc.want) || !strings.Contains(lines[1], "--help") {
			t.Errorf("fenceproxy %s: exit %d, stderr (%d lines) %q; want exit 2, a line with %q and a line pointing to --help",
				strings.Join(tc.args, " "), code, len(lines), clip(stderr), tc.want)
		}
	}
}

// TestSettingsOutOfRangeRefused: a negative --max-clients or
// --shutdown-timeout and an empty --key-prefix stop the start with one
// line naming the flag (all three were accepted before).
func TestSettingsOutOfRangeRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-clients", "-1"}, "--max-clients"},
		{[]string{"--shutdown-timeout", "-1s"}, "--shutdown-timeout"},
		{[]string{"--key-prefix", ""}, "--key-prefix"},
	} {
		args := append([]string{"--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", t.TempDir(), "--backend", "127.0.0.1:1"}, tc.args...)
		code, stderr := testenv.StartFails(t, args...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
			t.Errorf("fenceproxy %q: exit %d, stderr %q; want exit 2 and one line naming %s", tc.args, code, clip(stderr), tc.want)
		}
	}
}

// TestVersionFlag: --version prints one line, "fenceproxy <module
// version> ...", and exits 0.
func TestVersionFlag(t *testing.T) {
	out, err := exec.Command(testenv.BuildProxy(t), "--version").Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || len(lines) != 1 || !strings.HasPrefix(lines[0], "fenceproxy ") {
		t.Fatalf("fenceproxy --version: %v, stdout %q; want exit 0 and one line starting \"fenceproxy \"", err, out)
	}
}

// clip is s cut to a few hundred bytes, for a failure message.
func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// TestMetricsPortTakenSaysSoFirst: a --metrics-listen port in use stops
// the start with exit 1 and one line naming the flag and the address,
// before anything else is logged; and so does one equal to --listen.
// Before, the clash was reported after the log lines of a start that
// looked good (the fence store, the backend).
func TestMetricsPortTakenSaysSoFirst(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	listen := net.JoinHostPort("127.0.0.1", itoa(testenv.FreePort(t)))
	for _, metrics := range []string{busy.Addr().String(), listen} {
		code, stderr := testenv.StartFails(t, "--listen", listen, "--metrics-listen", metrics,
			"--backend", redis.Addr, "--data-dir", t.TempDir()) // --min-replicas 1, no replica: the authority warns while it starts
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 1 || len(lines) != 1 || !strings.Contains(lines[0], "--metrics-listen "+metrics) {
			t.Errorf("--metrics-listen %s (--listen %s): exit %d, stderr %q; want exit 1 and one line naming --metrics-listen %s",
				metrics, listen, code, clip(stderr), metrics)
		}
	}
}
