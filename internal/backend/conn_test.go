package backend_test

import (
	"errors"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// do sends args on conn and waits (bounded) for the reply.
func do(t *testing.T, conn *backend.Conn, args ...string) *resp.Reply {
	t.Helper()
	req := make([][]byte, len(args))
	for i, a := range args {
		req[i] = []byte(a)
	}
	done := make(chan struct{})
	p := resp.NewReplyFunc(func() { close(done) })
	conn.Do(req, p)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%q: no reply", args)
	}
	return p
}

// TestFailuresAreErrors: what keeps a request from Redis is an error value
// in its reply's Err, with nothing in Buf: a closed gate's refusal, a
// connection lost with the request on it (ErrLost), a connection down when
// the request comes (ErrUnavailable). Redis's own error reply is bytes.
func TestFailuresAreErrors(t *testing.T) {
	// With a password, no reconnection succeeds while Redis is stopped (its
	// AUTH goes unanswered), so the connection stays down below.
	r := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--requirepass", "pw"}})
	var gate backend.Gate
	conn, err := backend.Dial(backend.Options{Addr: r.Addr, Password: "pw", Gate: &gate, ReplyTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	if p := do(t, conn, "LPUSH", "k", "v"); p.Err != nil || string(p.Buf) != ":1\r\n" {
		t.Fatalf("LPUSH = %q, %v", p.Buf, p.Err)
	}
	if p := do(t, conn, "GET", "k"); p.Err != nil || string(p.Buf) != "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n" {
		t.Fatalf("GET of a list = %q, %v; want Redis's error reply as bytes", p.Buf, p.Err)
	}

	gate.Close("READONLY fenceproxy: not the master")
	p := do(t, conn, "SET", "k", "v")
	var re resp.Error
	if !errors.As(p.Err, &re) || re.Code != "READONLY" || len(p.Buf) != 0 {
		t.Fatalf("through a closed gate: %q, %v; want the gate's refusal as Err", p.Buf, p.Err)
	}
	if got := gate.Refusal(); got != p.Err {
		t.Fatalf("Gate.Refusal() = %v, want the request's %v", got, p.Err)
	}
	gate.Open()

	r.Stop() // SIGSTOP: the reply never comes, and ReplyTimeout breaks the connection
	defer r.Cont()
	if p := do(t, conn, "PING"); !errors.Is(p.Err, backend.ErrLost) || len(p.Buf) != 0 {
		t.Fatalf("PING to a stopped Redis: %q, %v; want ErrLost", p.Buf, p.Err)
	}
	// Down now (it tries to reconnect in the background, in vain while
	// Redis is stopped): a request is not sent.
	p = do(t, conn, "PING")
	if !errors.Is(p.Err, backend.ErrUnavailable) || len(p.Buf) != 0 {
		t.Fatalf("PING while disconnected: %q, %v; want ErrUnavailable", p.Buf, p.Err)
	}
	var coded resp.CodedError
	if !errors.As(p.Err, &coded) {
		t.Fatal("ErrUnavailable does not know its reply")
	}
	if code, msg := coded.RESPError(); code != "TRYAGAIN" || msg != "fenceproxy: Redis is unreachable, retry shortly" {
		t.Fatalf("ErrUnavailable's reply = %s %s", code, msg)
	}
}

// TestDoNow: DoNow writes the request to Redis itself, before it returns,
// not later by the connection's writer goroutine (as Do does): it is
// already readable on the server's side when DoNow returns,
// with no other goroutine able to run meanwhile (GOMAXPROCS 1, nothing
// that yields between the two). A pinned connection's blocking command
// (or a watched transaction's EXEC) so leaves for Redis as soon as it is
// read, a goroutine hop ahead of the writer of a shared connection, which
// makes it far more likely to run before another client's write sent just
// after it (unit/type/stream-cgroups "Blocking XREADGROUP: key deleted").
func TestDoNow(t *testing.T) {
	for _, inline := range []bool{true, false} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan net.Conn, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				accepted <- c
			}
		}()
		conn, err := backend.Dial(backend.Options{Addr: ln.Addr().String()})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		server := (<-accepted).(*net.TCPConn)
		defer server.Close()
		raw, err := server.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n := -1
		func() {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			do := conn.Do
			if inline {
				do = conn.DoNow
			}
			do([][]byte{[]byte("PING")}, resp.NewReplyFunc(func() {}))
			raw.Read(func(fd uintptr) bool {
				n, _ = syscall.Read(int(fd), buf) // the socket is non-blocking: EAGAIN if nothing came
				return true
			})
		}()
		got := ""
		if n > 0 {
			got = string(buf[:n])
		}
		switch {
		case inline && got != "*1\r\n$4\r\nPING\r\n":
			t.Errorf("DoNow: %q on the server when it returned, want the request", got)
		case !inline && got != "":
			// The check itself: a writer goroutine could not have run.
			t.Errorf("Do: %q on the server when it returned, want nothing yet", got)
		}
	}
}
