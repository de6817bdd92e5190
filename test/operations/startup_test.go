package operations

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestNoClientBeforeReady: while fenceproxy is still starting (here: its
// Redis is stopped, so the first dial waits), its port accepts no client.
// A client the kernel accepted meanwhile would have its requests read only
// once the proxy is ready, and a lease counted from that read would leave
// the client, who counts from its send, less than promised. Before the
// listeners moved to the end of the start, the dial below succeeded at once.
func TestNoClientBeforeReady(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	bin := testenv.BuildProxy(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))

	redis.Stop()
	cmd := exec.Command(bin, "--listen", addr, "--backend", redis.Addr, "--metrics-listen", "", "--data-dir", t.TempDir())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		redis.Cont()
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	// The start tries the port first: give it time to have done so.
	refused := 0
	for range 10 {
		time.Sleep(100 * time.Millisecond)
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			redis.Cont()
			t.Fatalf("a client connected to %s while fenceproxy was still starting (its Redis stopped)", addr)
		}
		refused++
	}
	redis.Cont()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fenceproxy never listened on %s after its Redis came back: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c := testenv.Dial(t, addr)
	if got := c.Do("PING"); string(got) != "+PONG\r\n" {
		t.Fatalf("PING once ready = %q", got)
	}
	t.Logf("%d dials refused while starting, then served", refused)
}
