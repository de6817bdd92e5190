package limits

import (
	"regexp"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// clientFD is the fd= of client id in the proxy's CLIENT LIST, asked on a
// connection of its own, closed at once (so it is never idle).
func clientFD(t *testing.T, p *testenv.Proxy, id string) string {
	t.Helper()
	c := testenv.Dial(t, p.Addr)
	defer c.Close()
	list, _ := testenv.ParseBulk(c.Do("CLIENT", "LIST", "ID", id))
	m := regexp.MustCompile(`\bfd=(-?\d+)`).FindSubmatch(list)
	if m == nil {
		t.Fatalf("CLIENT LIST ID %s = %q", id, list)
	}
	return string(m[1])
}

// TestIdleTimeoutOnTheLoop: with --timeout the --serve-loop still serves
// clients (a client's socket, and so its fd= in CLIENT LIST, changes as it
// leaves the loop for a goroutine and comes back): a client blocked in
// BLPOP past the timeout is not idle, and once it is back on the loop
// after its BLPOP and two PINGs, it is closed when idle, and counted as
// idle-timeout as a goroutine's client is.
func TestIdleTimeoutOnTheLoop(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, Args: []string{"--timeout", "1"}})
	c := testenv.Dial(t, p.Addr)
	c.SetTimeout(2 * patience)
	id := strings.TrimSpace(strings.TrimPrefix(string(c.Do("CLIENT", "ID")), ":"))
	onLoop := clientFD(t, p, id)

	c.Send("BLPOP", "idle-loop-list", "0")
	c.Flush()
	blocked := onLoop
	eventually(t, "the client's fd changes as its BLPOP moves it from the serve loop to a goroutine", func() bool {
		blocked = clientFD(t, p, id)
		return blocked != onLoop
	})
	// Connected after the BLPOP: once it is closed as idle, the blocked
	// client has been quiet at least as long.
	idle := testenv.Dial(t, p.Addr)
	if r := idle.Do("PING"); string(r) != "+PONG\r\n" {
		t.Fatalf("PING = %q", r)
	}
	drainUntilClosed(t, idle.NetConn())
	if !stillOpen(c.NetConn()) {
		t.Fatal("the client blocked in BLPOP was closed as idle")
	}
	other := testenv.Dial(t, p.Addr)
	other.Do("RPUSH", "idle-loop-list", "x")
	other.Close()
	if r, err := c.ReadReply(); err != nil || string(r) != "*2\r\n$14\r\nidle-loop-list\r\n$1\r\nx\r\n" {
		t.Fatalf("BLPOP after the push = %q, %v", r, err)
	}

	for range 2 { // two batches the loop would serve: back to it
		if r := c.Do("PING"); string(r) != "+PONG\r\n" {
			t.Fatalf("PING = %q", r)
		}
	}
	eventually(t, "the client's fd changes as it goes back to the serve loop", func() bool {
		return clientFD(t, p, id) != blocked
	})
	drainUntilClosed(t, c.NetConn())
	eventually(t, "2 clients counted as closed for idle-timeout", func() bool {
		return closedFor(t, p, "idle-timeout") == 2
	})
}
