package backend_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/netloop"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// newLoop is an event loop for the test, closed after it (and after the
// connections the test closes first).
func newLoop(t testing.TB) *netloop.Loop {
	t.Helper()
	if !netloop.Supported {
		t.Skip("no event loops here")
	}
	l, err := netloop.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// TestLoopConnCarriesEveryReply: many goroutines pipeline requests on one
// connection served by a loop, among them replies far larger than its read
// buffer (read by a goroutine the loop lends the socket to) and a request
// larger than the socket takes in one write (finished when the loop finds
// room): every request gets its own reply, byte for byte.
func TestLoopConnCarriesEveryReply(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	conn, err := backend.Dial(backend.Options{Addr: r.Addr, Loop: newLoop(t), ReadBuffer: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Past what the sockets' buffers hold while Redis is stopped: the
	// write is finished when the loop finds room again, with the requests
	// queued meanwhile behind it.
	big := strings.Repeat("x", 24<<20)
	r.Stop()
	var queued sync.WaitGroup
	set := resp.NewReply(&queued)
	echo := resp.NewReply(&queued)
	queued.Add(2)
	conn.Do([][]byte{[]byte("SET"), []byte("big"), []byte(big)}, set)
	conn.Do([][]byte{[]byte("ECHO"), []byte("behind")}, echo)
	r.Cont()
	waitBounded(t, &queued)
	if set.Err != nil || string(set.Buf) != "+OK\r\n" || echo.Err != nil || string(echo.Buf) != "$6\r\nbehind\r\n" {
		t.Fatalf("SET big = %.40q, %v; ECHO behind it = %q, %v", set.Buf, set.Err, echo.Buf, echo.Err)
	}
	big = big[:3<<20]
	if p := do(t, conn, "SET", "big", big); p.Err != nil || string(p.Buf) != "+OK\r\n" {
		t.Fatalf("SET big = %.40q, %v", p.Buf, p.Err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				var args [][]byte
				var want string
				switch {
				case i%50 == 7:
					args, want = [][]byte{[]byte("GET"), []byte("big")}, fmt.Sprintf("$%d\r\n%s\r\n", len(big), big)
				default:
					v := fmt.Sprintf("g%d-%d-%s", g, i, strings.Repeat("v", i%40))
					args, want = [][]byte{[]byte("ECHO"), []byte(v)}, fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)
				}
				done := make(chan struct{})
				p := resp.NewReplyFunc(func() { close(done) })
				conn.Do(args, p)
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					errs <- fmt.Errorf("%q: no reply", args[0])
					return
				}
				if p.Err != nil || string(p.Buf) != want {
					errs <- fmt.Errorf("%s: got %.60q, %v; want %.60q", args[0], p.Buf, p.Err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestLoopConnPipelines: requests queued while the loop is busy leave
// together and their replies come back in order.
func TestLoopConnPipelines(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	conn, err := backend.Dial(backend.Options{Addr: r.Addr, Loop: newLoop(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 5000
	var wg sync.WaitGroup
	replies := make([]*resp.Reply, n)
	for i := range n {
		wg.Add(1)
		replies[i] = resp.NewReply(&wg)
		conn.Do([][]byte{[]byte("INCR"), []byte("counter")}, replies[i])
	}
	wg.Wait()
	for i, p := range replies {
		if want := fmt.Sprintf(":%d\r\n", i+1); p.Err != nil || string(p.Buf) != want {
			t.Fatalf("reply %d = %q, %v; want %q", i, p.Buf, p.Err, want)
		}
	}
}

// TestLoopConnBreaksAndReconnects: a connection Redis closes fails the
// requests on it with ErrLost, reconnects in the background, and carries
// requests again.
func TestLoopConnBreaksAndReconnects(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	conn, err := backend.Dial(backend.Options{Addr: r.Addr, Loop: newLoop(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	addr := conn.LocalAddr()
	if addr == "" {
		t.Fatal("no local address")
	}
	// Queued behind a command that blocks, so that it is on the wire when
	// the connection is killed.
	done := make(chan struct{})
	blocked := resp.NewReplyFunc(func() { close(done) })
	conn.Do([][]byte{[]byte("BLPOP"), []byte("nothing"), []byte("0")}, blocked)
	ctl := testenv.Dial(t, r.Addr)
	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Contains(ctl.Do("CLIENT", "LIST"), []byte("cmd=blpop")) {
		if time.Now().After(deadline) {
			t.Fatal("BLPOP never reached Redis")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := ctl.Do("CLIENT", "KILL", addr); string(got) != "+OK\r\n" {
		t.Fatalf("CLIENT KILL = %q", got)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed connection's request was not failed")
	}
	if !errors.Is(blocked.Err, backend.ErrLost) {
		t.Fatalf("request on a killed connection: %q, %v; want ErrLost", blocked.Buf, blocked.Err)
	}
	for {
		p := do(t, conn, "PING")
		if p.Err == nil && string(p.Buf) == "+PONG\r\n" {
			break
		}
		if !errors.Is(p.Err, backend.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("PING after the break = %q, %v", p.Buf, p.Err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if conn.LocalAddr() == addr {
		t.Fatal("still the killed connection's address")
	}
}

// TestLoopConnOutOfStep: bytes from the server that are not RESP, or a
// reply no request asked for, break the connection (its requests fail
// with ErrLost, and it connects again), as with goroutines. The "server"
// is a listener that answers what the test says.
func TestLoopConnOutOfStep(t *testing.T) {
	for name, answer := range map[string]string{
		"not RESP":      "?what\r\n",
		"unasked reply": "+OK\r\n+OK\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan struct{}, 10)
			go func() {
				for {
					nc, err := ln.Accept()
					if err != nil {
						return
					}
					accepted <- struct{}{}
					go func() {
						defer nc.Close()
						buf := make([]byte, 1024)
						if _, err := nc.Read(buf); err == nil {
							nc.Write([]byte(answer))
						}
						nc.Read(buf) // until the proxy's side closes
					}()
				}
			}()
			conn, err := backend.Dial(backend.Options{Addr: ln.Addr().String(), Loop: newLoop(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			<-accepted
			p := do(t, conn, "PING")
			if name == "unasked reply" {
				if p.Err != nil || string(p.Buf) != "+OK\r\n" {
					t.Fatalf("first reply = %q, %v", p.Buf, p.Err)
				}
			} else if !errors.Is(p.Err, backend.ErrLost) {
				t.Fatalf("reply %q: %q, %v; want ErrLost", answer, p.Buf, p.Err)
			}
			select {
			case <-accepted: // broken, and connected again
			case <-time.After(10 * time.Second):
				t.Fatalf("connection not broken by %q", answer)
			}
		})
	}
}

// TestLoopForwardAllocations: on a loop too, forwarding a request and
// copying its reply back allocates nothing.
func TestLoopForwardAllocations(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	conn, err := backend.Dial(backend.Options{Addr: r.Addr, Loop: newLoop(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var wg sync.WaitGroup
	p := resp.NewReply(&wg)
	args := [][]byte{[]byte("GET"), []byte("k")}
	for range 100 {
		getRoundTrip(conn, p, &wg, args)
	}
	if n := testing.AllocsPerRun(1000, func() { getRoundTrip(conn, p, &wg, args) }); n >= 1 {
		t.Errorf("%.2f allocations per forwarded request, want 0", n)
	}
}

// BenchmarkLoopForwardGET is BenchmarkForwardGET on a loop.
func BenchmarkLoopForwardGET(b *testing.B) {
	r := testenv.StartRedis(b, testenv.RedisOptions{})
	conn, err := backend.Dial(backend.Options{Addr: r.Addr, Loop: newLoop(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var wg sync.WaitGroup
	p := resp.NewReply(&wg)
	args := [][]byte{[]byte("GET"), []byte("k")}
	b.ReportAllocs()
	for b.Loop() {
		getRoundTrip(conn, p, &wg, args)
	}
}

// waitBounded waits for wg, failing the test after a generous deadline.
func waitBounded(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("replies did not come")
	}
}

// TestLoopConnPushes: a tracking connection (RESP3, OnPush) served by a
// loop hands its invalidation pushes out in their place among the replies,
// the same sequence a connection of goroutines hands out, a push longer
// than its read buffer too (read by the goroutine the loop lends the
// socket to).
func TestLoopConnPushes(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	bigKey := "big:" + strings.Repeat("k", 6<<10)
	run := func(loop *netloop.Loop) []string {
		var mu sync.Mutex
		var events []string
		pushes := 0
		note := func(e string) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
		conn, err := backend.Dial(backend.Options{Addr: r.Addr, RESP3: true, Loop: loop, ReadBuffer: 4 << 10, NoReconnect: true,
			OnPush: func(frame []byte) {
				note("push " + string(frame))
				mu.Lock()
				pushes++
				mu.Unlock()
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if conn.OnLoop() != (loop != nil) {
			t.Fatalf("OnLoop() = %v with loop %v", conn.OnLoop(), loop != nil)
		}
		var wg sync.WaitGroup
		send := func(args ...string) {
			req := make([][]byte, len(args))
			for i, a := range args {
				req[i] = []byte(a)
			}
			wg.Add(1)
			var p *resp.Reply
			p = resp.NewReplyFunc(func() {
				note(args[0] + " " + string(p.Buf))
				wg.Done()
			})
			conn.Do(req, p)
		}
		send("CLIENT", "TRACKING", "ON")
		send("GET", "small")
		send("GET", bigKey)
		waitBounded(t, &wg)
		// Its own writes invalidate what it read (no NOLOOP).
		send("SET", "small", "1")
		send("SET", bigKey, "1")
		send("PING")
		waitBounded(t, &wg)
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := pushes
			mu.Unlock()
			if n >= 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		send("DEL", "small", bigKey)
		waitBounded(t, &wg)
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), events...)
	}
	want := run(nil)
	got := run(newLoop(t))
	pushes := 0
	for _, e := range got {
		if strings.HasPrefix(e, "push >") {
			pushes++
		}
	}
	if pushes < 2 || strings.Join(got, "|") != strings.Join(want, "|") {
		short := func(es []string) []string {
			out := make([]string, len(es))
			for i, e := range es {
				out[i] = fmt.Sprintf("%.60q", e)
			}
			return out
		}
		t.Fatalf("on the loop (%d pushes):\n%s\nwith goroutines:\n%s", pushes, strings.Join(short(got), "\n"), strings.Join(short(want), "\n"))
	}
}
