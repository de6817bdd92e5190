package operations

import (
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
