package limits

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// loopClients is INFO fenceproxy's loop_clients, less the asking client:
// how many other clients the serve loop holds. Asked on a connection of its
// own (served on the loop too, so counted), closed at once.
func loopClients(t *testing.T, p *testenv.Proxy) int {
	t.Helper()
	c := testenv.Dial(t, p.Addr)
	defer c.Close()
	m := regexp.MustCompile(`\bloop_clients:(\d+)`).FindSubmatch(c.Do("INFO", "fenceproxy"))
	if m == nil {
		t.Fatal("INFO fenceproxy has no loop_clients")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n - 1
}

// wantLoopClients fails the test unless loop_clients comes to want within
// patience. It asks again while the count is off: a connection closed just
// before (the setup's, or the last question's) leaves the count only when
// the loop sees it go, which may be after it serves the next question. A
// client that left the loop never comes back to the count.
func wantLoopClients(t *testing.T, p *testenv.Proxy, want int, when string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		n := loopClients(t, p)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: loop_clients %d; want %d", when, n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIdleTimeoutOnTheLoop: with --timeout the --serve-loop still serves
// clients (INFO's loop_clients counts them): a client blocked in
// BLPOP past the timeout is not idle (it stays on the loop, which dials
// its connection of its own on a goroutine: no spare is open yet), and
// after its BLPOP and two PINGs it is closed when idle, and counted as
// idle-timeout as a goroutine's client is.
func TestIdleTimeoutOnTheLoop(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, Args: []string{"--timeout", "1"}})
	c := testenv.Dial(t, p.Addr)
	c.SetTimeout(2 * patience)
	c.Do("CLIENT", "ID")
	wantLoopClients(t, p, 1, "with one client that sent CLIENT ID")

	// The proxy's first blocking command: no spare pinned connection is
	// open yet, so one is dialled off the loop; the client stays there.
	c.Send("BLPOP", "idle-loop-list", "0")
	c.Flush()
	eventually(t, "Redis blocks the client's BLPOP", func() bool {
		return regexp.MustCompile(`blocked_clients:1\b`).Match(testenv.Dial(t, redis.Addr).Do("INFO", "clients"))
	})
	wantLoopClients(t, p, 1, "with the client blocked in BLPOP")
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
	wantLoopClients(t, p, 1, "after the BLPOP and two PINGs")
	drainUntilClosed(t, c.NetConn())
	eventually(t, "2 clients counted as closed for idle-timeout", func() bool {
		return closedFor(t, p, "idle-timeout") == 2
	})
}
