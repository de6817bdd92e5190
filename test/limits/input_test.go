package limits

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// bulkRequest renders a multibulk request whose arguments are given by
// size: a string of that many bytes each, after the command name.
func bulkRequest(name string, sizes ...int) []byte {
	b := fmt.Appendf(nil, "*%d\r\n$%d\r\n%s\r\n", len(sizes)+1, len(name), name)
	for _, n := range sizes {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", n, strings.Repeat("q", n))
	}
	return b
}

// TestQueryBufferLimit: a request larger than --client-query-buffer-limit
// closes the connection with no reply, as Redis 7 does, and says so in the
// log; proto-max-bulk-len stays its own limit, with Redis's protocol error.
// A request under both limits is served, and other clients never notice.
func TestQueryBufferLimit(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, Args: []string{
		"--client-query-buffer-limit", "2mb", "--proto-max-bulk-len", "1mb",
	}})
	other := testenv.Dial(t, p.Addr)

	// Under both limits: served.
	c := testenv.Dial(t, p.Addr)
	c.WriteRaw(bulkRequest("SET", 1, 1<<20))
	if r, err := c.ReadReply(); err != nil || string(r) != "+OK\r\n" {
		t.Fatalf("SET of a 1 MB value = %q, %v", r, err)
	}

	// One argument over proto-max-bulk-len: Redis's protocol error, then
	// close. Only the header is sent: the proxy must not wait for the rest.
	c = testenv.Dial(t, p.Addr)
	c.WriteRaw([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1048577\r\n"))
	if r, err := c.ReadReply(); err != nil || string(r) != "-ERR Protocol error: invalid bulk length\r\n" {
		t.Fatalf("a bulk over proto-max-bulk-len = %q, %v", r, err)
	}
	if b := drainUntilClosed(t, c.NetConn()); len(b) != 0 {
		t.Errorf("after the protocol error: %q", b)
	}

	// Three arguments of 1 MB: each within proto-max-bulk-len, together
	// over the query buffer limit. Closed without a reply, and MSET did
	// not run.
	before := closedFor(t, p, "query-buffer")
	nc, _ := rawDial(t, p.Addr)
	go nc.Write(bulkRequest("MSET", 8, 1<<20, 8, 1<<20, 8, 1<<20-100))
	if b := drainUntilClosed(t, nc); len(b) != 0 {
		t.Errorf("a request over the query buffer limit got %q, want no reply", b)
	}
	if n := closedFor(t, p, "query-buffer"); n != before+1 {
		t.Errorf("clients closed for the query buffer = %v, want %v", n, before+1)
	}
	if !logHas(p, "closing client that reached max query buffer length") {
		t.Errorf("the proxy's log does not say why the client was closed:\n%s", p.Log())
	}
	if r := other.Do("EXISTS", "qqqqqqqq"); string(r) != ":0\r\n" {
		t.Errorf("EXISTS of the refused MSET's key = %q: it ran", r)
	}
	if r := other.Do("PING"); string(r) != "+PONG\r\n" {
		t.Errorf("another client's PING = %q", r)
	}
}

// TestBadLimitFlags: a malformed limit stops the start with Redis's own
// complaint on stderr.
func TestBadLimitFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--client-output-buffer-limit", "normal 1mb 0"}, "Wrong number of arguments in buffer limit configuration."},
		{[]string{"--client-output-buffer-limit", "master 1mb 0 0"}, "Invalid client class specified in buffer limit configuration."},
		{[]string{"--client-output-buffer-limit", "pubsub 1xb 0 0"}, "Error in hard, soft or soft_seconds setting in buffer limit configuration."},
		{[]string{"--client-output-buffer-limit", "pubsub 1mb 1mb -1"}, "Error in hard, soft or soft_seconds setting"},
		{[]string{"--client-query-buffer-limit", "1k"}, "must be at least 1mb"},
		{[]string{"--proto-max-bulk-len", "lots"}, "is not a memory size"},
		{[]string{"--timeout", "-1"}, "--timeout must be 0"},
	} {
		code, stderr := testenv.StartFails(t, tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("fenceproxy %q: exit %d, stderr %q; want non-zero and %q", tc.args, code, stderr, tc.want)
		}
	}
}

// TestIdleTimeout: with --timeout 1 idle clients are closed, while a
// client blocked in BLPOP, one waiting in LOCK.ACQUIRE ... WAIT, a
// subscriber, and one that keeps talking stay, as Redis exempts blocked and
// subscribed clients; each blocked one then gets its reply.
func TestIdleTimeout(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, Args: []string{"--timeout", "1"}})
	holder := testenv.Dial(t, p.Addr)
	if r := holder.Do("LOCK.ACQUIRE", "idle-lock", "holder", "600000"); r[0] != ':' {
		t.Fatalf("LOCK.ACQUIRE = %q", r)
	}

	blpop := testenv.Dial(t, p.Addr)
	blpop.SetTimeout(2 * patience)
	blpop.Send("BLPOP", "idle-list", "0")
	blpop.Flush()
	waiter := testenv.Dial(t, p.Addr)
	waiter.SetTimeout(2 * patience)
	waiter.Send("LOCK.ACQUIRE", "idle-lock", "waiter", "10000", "WAIT", "600000")
	waiter.Flush()
	sub := testenv.Dial(t, p.Addr)
	sub.SetTimeout(2 * patience)
	if r := sub.Do("SUBSCRIBE", "idle-channel"); !strings.Contains(string(r), "subscribe") {
		t.Fatalf("SUBSCRIBE = %q", r)
	}
	idle := testenv.Dial(t, p.Addr)
	if r := idle.Do("PING"); string(r) != "+PONG\r\n" {
		t.Fatalf("PING = %q", r)
	}
	// The talker's pauses are a small fraction of the timeout.
	stop := make(chan struct{})
	talked := make(chan error, 1)
	talker := testenv.Dial(t, p.Addr)
	go func() {
		for {
			select {
			case <-stop:
				talked <- nil
				return
			case <-time.After(20 * time.Millisecond):
			}
			if r, err := talker.TryDo("PING"); err != nil || string(r) != "+PONG\r\n" {
				talked <- fmt.Errorf("PING = %q, %v", r, err)
				return
			}
		}
	}()

	// The idle client was connected after the blocked ones: once it is
	// closed, they have been quiet at least as long.
	drainUntilClosed(t, idle.NetConn())
	close(stop)
	if err := <-talked; err != nil {
		t.Errorf("a client that keeps talking: %v", err)
	}
	drainUntilClosed(t, holder.NetConn()) // idle since its LOCK.ACQUIRE
	if n := closedFor(t, p, "idle-timeout"); n != 2 {
		t.Errorf("clients closed as idle = %v, want 2", n)
	}
	for name, c := range map[string]*testenv.Conn{"BLPOP": blpop, "LOCK.ACQUIRE WAIT": waiter, "subscriber": sub} {
		if !stillOpen(c.NetConn()) {
			t.Errorf("the %s client was closed as idle", name)
		}
	}

	other := testenv.Dial(t, p.Addr)
	other.Do("RPUSH", "idle-list", "x")
	if r, err := blpop.ReadReply(); err != nil || string(r) != "*2\r\n$9\r\nidle-list\r\n$1\r\nx\r\n" {
		t.Errorf("BLPOP after the push = %q, %v", r, err)
	}
	if r := other.Do("LOCK.RELEASE", "idle-lock", "holder"); string(r) != ":1\r\n" {
		t.Fatalf("LOCK.RELEASE = %q", r)
	}
	if r, err := waiter.ReadReply(); err != nil || r[0] != ':' {
		t.Errorf("LOCK.ACQUIRE ... WAIT after the release = %q, %v", r, err)
	}
	other.Do("PUBLISH", "idle-channel", "hello")
	if r, err := sub.ReadReply(); err != nil || !strings.HasSuffix(string(r), "$5\r\nhello\r\n") {
		t.Errorf("message after the idle period = %q, %v", r, err)
	}
}

// TestLimitFlagsAsRedisParsesThem: the limits take redis.conf's syntax and
// units, several classes in one value (semicolons allowed) or the flag
// repeated, and INFO fenceproxy shows them in bytes and seconds.
func TestLimitFlagsAsRedisParsesThem(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, Args: []string{
		"--client-output-buffer-limit", "normal 1gb 512MB 30; replica 256mb 64mb 60",
		"--client-output-buffer-limit", "pubsub 64kb 1k 5",
		"--client-query-buffer-limit", "2G", "--proto-max-bulk-len", "100mb", "--timeout", "7",
	}})
	info := string(testenv.Dial(t, p.Addr).Do("INFO", "fenceproxy"))
	for _, want := range []string{
		"\r\nclient_output_buffer_limit:normal 1073741824 536870912 30 pubsub 65536 1000 5\r\n",
		"\r\nclient_query_buffer_limit:2000000000\r\n",
		"\r\nproto_max_bulk_len:104857600\r\n",
		"\r\ntimeout:7\r\n",
		"\r\nmaxclients:10000\r\n",
	} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO fenceproxy lacks %q:\n%s", strings.TrimSpace(want), info)
		}
	}
	// On a Redis of its own: a second fenceproxy does not start beside p.
	defaults := testenv.StartProxy(t, testenv.ProxyOptions{Backend: testenv.StartRedis(t, testenv.RedisOptions{}).Addr})
	info = string(testenv.Dial(t, defaults.Addr).Do("INFO", "fenceproxy"))
	if want := "\r\nclient_output_buffer_limit:normal 0 0 0 pubsub 33554432 8388608 60\r\n"; !strings.Contains(info, want) {
		t.Errorf("INFO fenceproxy with Redis's defaults lacks %q:\n%s", strings.TrimSpace(want), info)
	}
}

// TestIdleTimeoutMidRequest: with a timeout of 1 s, fenceproxy and Redis
// alike keep a client that sends a request a byte at a time, slower than
// nothing at all but faster than the timeout, and a client blocked in BLPOP
// with part of its next request sent (blocked clients are not idle, and its
// BLPOP is answered without the rest); a client that stops in the middle of
// a request is closed.
func TestIdleTimeoutMidRequest(t *testing.T) {
	backend := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: backend.Addr, Args: []string{"--timeout", "1"}})
	redis := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--timeout", "1"}})
	for name, addr := range map[string]string{"fenceproxy": p.Addr, "redis": redis.Addr} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			trickler, trickled := rawDial(t, addr)
			blocked, blockedReplies := rawDial(t, addr)
			stopped, _ := rawDial(t, addr)
			trickler.Write([]byte("*3\r\n$3\r\nSET\r\n$7\r\ntrickle\r\n$20\r\n"))
			blocked.Write([]byte("BLPOP idle-partial 0\r\nPI"))
			stopped.Write([]byte("*1\r\n$4\r\nPI"))
			done := make(chan error, 1)
			go func() {
				// 20 bytes 200 ms apart: 4 s, four times the timeout.
				for range 20 {
					time.Sleep(200 * time.Millisecond)
					if _, err := trickler.Write([]byte("x")); err != nil {
						done <- err
						return
					}
				}
				_, err := trickler.Write([]byte("\r\n"))
				done <- err
			}()

			// The stopped client was quiet no longer than the blocked one:
			// once it is closed, the blocked one was idle as long.
			if got := drainUntilClosed(t, stopped); len(got) != 0 {
				t.Errorf("the client stopped mid-request got %q before its close", got)
			}
			if !stillOpen(blocked) {
				t.Fatal("the client blocked in BLPOP, with part of its next request sent, was closed")
			}
			if r := testenv.Dial(t, addr).Do("RPUSH", "idle-partial", "x"); string(r) != ":1\r\n" {
				t.Fatalf("RPUSH = %q", r)
			}
			blocked.SetReadDeadline(time.Now().Add(patience))
			want := "*2\r\n$12\r\nidle-partial\r\n$1\r\nx\r\n"
			if got, err := readN(blockedReplies, len(want)); err != nil || got != want {
				t.Fatalf("BLPOP after the push = %q, %v", got, err)
			}
			blocked.Write([]byte("NG\r\n"))
			if got, err := readN(blockedReplies, len("+PONG\r\n")); err != nil || got != "+PONG\r\n" {
				t.Fatalf("the rest of the request after the BLPOP: %q, %v", got, err)
			}

			if err := <-done; err != nil {
				t.Fatalf("the client sending a byte every 200 ms: %v", err)
			}
			trickler.SetReadDeadline(time.Now().Add(patience))
			if got, err := readN(trickled, len("+OK\r\n")); err != nil || got != "+OK\r\n" {
				t.Fatalf("the request sent a byte every 200 ms: %q, %v", got, err)
			}
		})
	}
}

// readN reads exactly n bytes.
func readN(rd *bufio.Reader, n int) (string, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(rd, b)
	return string(b), err
}
