package limits

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// bigValue is a value whose GET replies pile up fast.
var bigValue = strings.Repeat("v", 256<<10)

// pipelineGETs writes n GETs of key to nc from another goroutine (the
// proxy may stop reading them, and then the writes block until it closes
// the connection).
func pipelineGETs(nc net.Conn, key string, n int) {
	req := testenv.AppendCommand(nil, "GET", key)
	go func() {
		buf := bytes.Repeat(req, n)
		nc.Write(buf)
	}()
}

// others runs clients that keep working beside the slow one: each SETs and
// GETs its own keys and checks every reply. It returns once all are done.
func others(t *testing.T, addr string, clients, rounds int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		c := testenv.Dial(t, addr)
		// They may wait behind the slow client's replies on the shared
		// backend connection (bandwidth, not a stall): no deadline but
		// patience.
		c.SetTimeout(patience)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for j := range rounds {
				key, val := fmt.Sprintf("other:%d:%d", i, j), fmt.Sprintf("val-%d-%d", i, j)
				if r, err := c.TryDo("SET", key, val); err != nil || string(r) != "+OK\r\n" {
					errs <- fmt.Errorf("client %d: SET = %q, %v", i, r, err)
					return
				}
				want := fmt.Sprintf("$%d\r\n%s\r\n", len(val), val)
				if r, err := c.TryDo("GET", key); err != nil || string(r) != want {
					errs <- fmt.Errorf("client %d: GET = %q, %v", i, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestClientThatNeverReadsIsDisconnected: a client pipelines GETs of a
// 256 KB value and never reads. Over the normal class's hard limit it is
// disconnected (counted and logged), while clients sharing the same single
// backend connection keep being served throughout.
func TestClientThatNeverReadsIsDisconnected(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, Args: []string{
		"--backend-conns", "1", "--client-output-buffer-limit", "normal 4mb 0 0",
	}})
	c := testenv.Dial(t, p.Addr)
	c.Do("SET", "big", bigValue)

	slow, _ := rawDial(t, p.Addr)
	pipelineGETs(slow, "big", 4000) // 1 GB of replies, were they all held
	others(t, p.Addr, 4, 200)
	eventually(t, "the slow client was not disconnected for its output buffer", func() bool {
		return closedFor(t, p, "output-buffer-normal") >= 1
	})
	// What reached its socket before the close is at most what the kernel
	// buffers took; then the connection ends.
	drainUntilClosed(t, slow)
	if !logHas(p, "closing client for overcoming output buffer limits") || !logHas(p, "class=normal") {
		t.Errorf("the proxy's log does not say why the client was closed:\n%s", p.Log())
	}
	others(t, p.Addr, 2, 50)
	// The others have hung up too; the proxy notices as it reads.
	eventually(t, "fenceproxy_connected_clients never fell back to 1", func() bool {
		return metric(t, p, "fenceproxy_connected_clients") == 1
	})
}

// TestClientThatNeverReadsHoldsBoundedMemory: with the default normal class
// (no limit, as in Redis) a client that never reads is not disconnected,
// but the proxy stops reading its requests while its replies cannot be
// written, so it holds one batch of replies (a batch of big replies is
// short: about 1 MB), not the 1.25 GB its pipeline asks for; other clients
// on the same backend connection are served meanwhile.
func TestClientThatNeverReadsHoldsBoundedMemory(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, Args: []string{"--backend-conns", "1"}})
	c := testenv.Dial(t, p.Addr)
	c.Do("SET", "big", strings.Repeat("v", 64<<10))

	slow, _ := rawDial(t, p.Addr)
	pipelineGETs(slow, "big", 20000)
	others(t, p.Addr, 4, 200)
	// Sampled after the others are done: the slow client has had all that
	// time to make the proxy grow.
	peak := peakRSS(t, p.Pid())
	t.Logf("proxy peak RSS: %d MiB", peak>>10)
	const bound = 100 << 10 // KiB; all the replies are 1250 MiB, the proxy's own needs about 30
	if peak > bound && !raceBuild {
		t.Errorf("proxy peak RSS %d MiB with a client that never reads; want under %d MiB", peak>>10, bound>>10)
	}
	// Still connected (it and c), though its socket holds unread replies.
	eventually(t, "fenceproxy_connected_clients never settled at 2", func() bool {
		return metric(t, p, "fenceproxy_connected_clients") == 2
	})
	if n := closedFor(t, p, "output-buffer-normal"); n != 0 {
		t.Errorf("clients closed for output buffer = %v with no limit", n)
	}
}

// TestSubscriberThatNeverReadsIsDisconnected: a subscriber that never reads
// while a publisher floods its channel is disconnected by the proxy at the
// pubsub class's hard limit (not by Redis, whose own limit on the proxy's
// connection is never reached because the proxy reads it eagerly). The
// publisher and a subscriber that reads get everything.
func TestSubscriberThatNeverReadsIsDisconnected(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, Args: []string{
		"--client-output-buffer-limit", "pubsub 8mb 4mb 60",
	}})
	subscribe := func() (net.Conn, *testenv.Conn) {
		c := testenv.Dial(t, p.Addr)
		if r := c.Do("SUBSCRIBE", "flood"); !strings.Contains(string(r), "subscribe") {
			t.Fatalf("SUBSCRIBE = %q", r)
		}
		return c.NetConn(), c
	}
	slow, _ := subscribe()
	_, fast := subscribe()
	fast.SetTimeout(patience)

	// The publisher waits for the reading subscriber after each round, so
	// that one's output buffer stays far under the limit; the other's grows
	// by a round each time.
	const rounds, round = 40, 50 // messages of 16 KB: 32 MB for each subscriber
	msg := strings.Repeat("m", 16<<10)
	pub := testenv.Dial(t, p.Addr)
	for i := range rounds {
		for range round {
			pub.Send("PUBLISH", "flood", msg)
		}
		pub.Flush()
		for range round {
			if r, err := pub.ReadReply(); err != nil || r[0] != ':' {
				t.Fatalf("PUBLISH = %q, %v", r, err)
			}
		}
		for j := range round {
			r, err := fast.ReadReply()
			if err != nil || !bytes.HasSuffix(r, []byte(msg+"\r\n")) {
				t.Fatalf("the subscriber that reads: message %d: %.60q, %v", i*round+j, r, err)
			}
		}
	}
	eventually(t, "the subscriber that never reads was not disconnected", func() bool {
		return closedFor(t, p, "output-buffer-pubsub") >= 1
	})
	drainUntilClosed(t, slow)
	if !logHas(p, "class=pubsub") {
		t.Errorf("the proxy's log does not say why the subscriber was closed:\n%s", p.Log())
	}
	eventually(t, "PUBLISH still counts the closed subscriber", func() bool {
		return string(pub.Do("PUBLISH", "flood", "after")) == ":1\r\n"
	})
}

// peakRSS is a process's peak resident set (VmHWM) in KiB.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM: %q", line)
			}
			return n
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
