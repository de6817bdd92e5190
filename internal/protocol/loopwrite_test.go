//go:build linux

package protocol

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// bigReply is a reply several times what the client's and the server's
// socket buffers (shrunk by smallBuffers) hold together: the loop's write
// of it cannot finish at once.
const bigReply = 6 << 20

// bigWait bounds the reads of a big reply (never a measure of speed).
const bigWait = 30 * time.Second

// smallBuffers shrinks the client's receive buffer and the server's send
// buffer of the one client s serves (no autotuning past them).
func smallBuffers(t *testing.T, s *Server, client net.Conn) {
	t.Helper()
	if err := client.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	s.Each(func(c *Conn) {
		if err := syscall.SetsockoptInt(c.FD(), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 64<<10); err != nil {
			t.Fatal(err)
		}
	})
}

// onlyFD is the descriptor of the one client s serves.
func onlyFD(t *testing.T, s *Server) int {
	t.Helper()
	fd := -1
	s.Each(func(c *Conn) { fd = c.FD() })
	if fd < 0 {
		t.Fatal("no client, or one with no descriptor")
	}
	return fd
}

// inode is the socket a descriptor of this process refers to
// ("socket:[N]"), "" if the descriptor is closed.
func inode(fd int) string {
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return ""
	}
	return link
}

// writeUnderWay waits until the client's socket has bytes of the reply
// (its write began, and cannot have finished: the reply is bigger than
// both socket buffers) and the loop has run whatever the write posted to
// it: a function posted from a function posted now runs after what the
// loop posted before it (the reply is completed on the loop, whose write
// and post come before the loop runs anything posted).
func writeUnderWay(t *testing.T, s *Server, client net.Conn) {
	t.Helper()
	raw, err := client.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the client's socket has bytes of the reply", func() bool {
		n := 0
		raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		return n > 0
	})
	done := make(chan struct{})
	s.Loop.Post(func() { s.Loop.Post(func() { close(done) }) })
	waitChan(t, done, "the loop ran what the write posted")
}

// stillOnLoop fails the test unless the one client of s is on the loop,
// on descriptor fd.
func stillOnLoop(t *testing.T, s *Server, fd int, when string) {
	t.Helper()
	if n := s.LoopClients(); n != 1 {
		t.Fatalf("%s: the loop serves %d clients; want the client still on it (1)", when, n)
	}
	if got := onlyFD(t, s); got != fd {
		t.Fatalf("%s: the client's fd is %d; want %d (it never left the loop)", when, got, fd)
	}
}

// readBig reads the bulk reply of BIG n and fails unless it is exact.
func readBig(t *testing.T, nc net.Conn, rd *bufio.Reader, n int) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(bigWait))
	want := fmt.Appendf(nil, "$%d\r\n%s\r\n", n, pattern(n))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(rd, got); err != nil {
		t.Fatalf("reading a bulk of %d bytes: %v", n, err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		t.Fatalf("bulk of %d bytes differs from byte %d on", n, i)
	}
}

// TestLoopWriteStaysOnLoop: a reply bigger than the socket buffers, which
// the client reads only after a pause, is written by the loop as room
// comes: the client keeps its descriptor and its place on the loop while
// the write waits and after, gets the exact bytes, and goes on being
// served there.
func TestLoopWriteStaysOnLoop(t *testing.T) {
	h := &tlsLoopHandler{}
	s, nc, rd, fd := clientOnLoop(t, h)
	stillOnLoop(t, s, fd, "after PING")
	smallBuffers(t, s, nc)

	for round := range 3 {
		n := bigReply + round
		nc.Write([]byte(multibulk("BIG", strconv.Itoa(n)) + multibulk("LATE", "after")))
		writeUnderWay(t, s, nc)
		stillOnLoop(t, s, fd, "while the write waits")
		readBig(t, nc, rd, n)
		expectLines(t, nc, rd, "+after")
		stillOnLoop(t, s, fd, "after the big reply")
	}
	if got := h.take(); strings.Contains(got, ":goroutine") {
		t.Fatalf("dispatched %q; want everything on the loop", got)
	}
}

// TestTLSLoopWriteStaysOnLoop: TestLoopWriteStaysOnLoop for a TLS client:
// the encrypted rest waits in the transport's outbox, written by the loop.
func TestTLSLoopWriteStaysOnLoop(t *testing.T) {
	h := &tlsLoopHandler{}
	s, dial := startTLSOnLoop(t, h, nil)
	tc, rd := dial()
	tc.Write([]byte(multibulk("PING")))
	expectLines(t, tc, rd, "+PING")
	fd := onlyFD(t, s)
	stillOnLoop(t, s, fd, "after PING")
	smallBuffers(t, s, tc.NetConn())

	for round := range 3 {
		n := bigReply + round
		tc.Write([]byte(multibulk("BIG", strconv.Itoa(n)) + multibulk("LATE", "after")))
		writeUnderWay(t, s, tc.NetConn())
		stillOnLoop(t, s, fd, "while the write waits")
		readBig(t, tc, rd, n)
		expectLines(t, tc, rd, "+after")
		stillOnLoop(t, s, fd, "after the big reply")
	}
	if got := h.take(); strings.Contains(got, ":goroutine") {
		t.Fatalf("dispatched %q; want everything on the loop", got)
	}
}

// logBuffer is a slog handler's output, safe for the server's goroutines
// and the test's.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLoopWriteSoftLimit: a client on the loop whose reply stays above
// the normal class's soft limit for its seconds (it reads nothing) is
// closed on the loop, counted and logged as a goroutine's write closes
// it, and its socket is closed.
func TestLoopWriteSoftLimit(t *testing.T) {
	for _, tlsClient := range []bool{false, true} {
		t.Run(map[bool]string{false: "plaintext", true: "tls"}[tlsClient], func(t *testing.T) {
			h := &tlsLoopHandler{}
			var logs logBuffer
			var closes, onLoopAtClose atomic.Int64
			configure := func(s *Server) {
				s.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				s.NormalOutput = OutputLimit{Soft: 1 << 20, SoftFor: 100 * time.Millisecond}
				s.OnLimitClose = func(reason string) {
					if reason == CloseOutputNormal {
						closes.Add(1)
						onLoopAtClose.Store(int64(s.LoopClients()))
					}
				}
			}
			var s *Server
			var nc, sock net.Conn
			var rd *bufio.Reader
			if tlsClient {
				srv, dial := startTLSOnLoopWith(t, h, nil, configure)
				tc, trd := dial()
				s, nc, sock, rd = srv, tc, tc.NetConn(), trd
			} else {
				srv, addr := startServer(t, h, func(s *Server) { onLoop(t, s); configure(s) })
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				s, nc, sock, rd = srv, c, c, bufio.NewReader(c)
			}
			nc.Write([]byte(multibulk("PING")))
			expectLines(t, nc, rd, "+PING")
			fd := onlyFD(t, s)
			socket := inode(fd)
			smallBuffers(t, s, sock)
			nc.Write([]byte(multibulk("BIG", strconv.Itoa(bigReply))))
			waitFor(t, "the client closed for its output buffer", func() bool {
				return closes.Load() == 1 && s.Clients() == 0
			})
			if n := onLoopAtClose.Load(); n != 1 {
				t.Fatalf("when closed for the soft limit the loop served %d clients; want 1 (closed on the loop)", n)
			}
			if s.LoopClients() != 0 {
				t.Fatalf("loop clients %d after the close; want 0", s.LoopClients())
			}
			if got := inode(fd); got == socket && socket != "" {
				t.Fatalf("fd %d still refers to the client's socket %s after its close", fd, socket)
			}
			log := logs.String()
			if !strings.Contains(log, "closing client for overcoming output buffer limits") || !strings.Contains(log, "limit=soft") {
				t.Fatalf("the log does not say why the client was closed:\n%s", log)
			}
			nc.SetReadDeadline(time.Now().Add(bigWait))
			if _, err := io.Copy(io.Discard, rd); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("the client's connection is still open")
				}
			}
		})
	}
}

// TestLoopWriteKilled: a client killed (CLIENT KILL) while its write
// waits for it to read is closed on the loop at once: released, its
// descriptor closed, its connection ended.
func TestLoopWriteKilled(t *testing.T) {
	h := &tlsLoopHandler{}
	s, nc, rd, fd := clientOnLoop(t, h)
	socket := inode(fd)
	smallBuffers(t, s, nc)
	nc.Write([]byte(multibulk("BIG", strconv.Itoa(bigReply))))
	writeUnderWay(t, s, nc)
	stillOnLoop(t, s, fd, "while the write waits")
	s.Each(func(c *Conn) { c.Kill() })
	waitConns(t, s, 0)
	if n := s.LoopClients(); n != 0 {
		t.Fatalf("loop clients %d after the kill; want 0", n)
	}
	if got := inode(fd); got == socket {
		t.Fatalf("fd %d still refers to the killed client's socket %s", fd, socket)
	}
	nc.SetReadDeadline(time.Now().Add(bigWait))
	got, err := io.Copy(io.Discard, rd)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the killed client's connection is still open")
	}
	if got >= bigReply {
		t.Fatalf("the killed client read %d bytes: the whole reply", got)
	}
}

// TestLoopWriteTimeout: the server's WriteTimeout bounds a batch's write
// on the loop as it bounds a goroutine's: a client that reads nothing is
// closed, on the loop, once it has passed.
func TestLoopWriteTimeout(t *testing.T) {
	h := &tlsLoopHandler{}
	s, addr := startServer(t, h, func(s *Server) { onLoop(t, s); s.WriteTimeout = 100 * time.Millisecond })
	nc, rd := dialClient(t, addr)
	do(t, nc, rd, "PING")
	fd := onlyFD(t, s)
	socket := inode(fd)
	smallBuffers(t, s, nc)
	nc.Write([]byte(multibulk("BIG", strconv.Itoa(bigReply))))
	writeUnderWay(t, s, nc)
	if n := s.LoopClients(); n != 1 {
		t.Fatalf("while the write waits the loop serves %d clients; want 1", n)
	}
	waitConns(t, s, 0)
	if got := inode(fd); got == socket {
		t.Fatalf("fd %d still refers to the client's socket %s after its write timed out", fd, socket)
	}
}

// TestLoopWriteHangUp: a client that hangs up while its write waits for
// it to read is closed on the loop (the write fails on the broken socket)
// and released.
func TestLoopWriteHangUp(t *testing.T) {
	h := &tlsLoopHandler{}
	s, nc, _, fd := clientOnLoop(t, h)
	socket := inode(fd)
	smallBuffers(t, s, nc)
	nc.Write([]byte(multibulk("BIG", strconv.Itoa(bigReply))))
	writeUnderWay(t, s, nc)
	stillOnLoop(t, s, fd, "while the write waits")
	nc.Close() // with unread bytes: the server's socket is reset
	waitConns(t, s, 0)
	if n := s.LoopClients(); n != 0 {
		t.Fatalf("loop clients %d after the hang-up; want 0", n)
	}
	if got := inode(fd); got == socket {
		t.Fatalf("fd %d still refers to the client's socket %s after it hung up", fd, socket)
	}
}

// clientOnLoop starts a server of h on an event loop and connects a
// client, which it has answer PING once: the server, the client's
// connection and reader, and its descriptor on the server's side.
func clientOnLoop(t *testing.T, h Handler) (*Server, net.Conn, *bufio.Reader, int) {
	t.Helper()
	s, addr := startOnLoop(t, h)
	nc, rd := dialClient(t, addr)
	do(t, nc, rd, "PING")
	return s, nc, rd, onlyFD(t, s)
}

// dialClient connects a client to addr, closed when the test ends, and its
// reader.
func dialClient(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc, bufio.NewReader(nc)
}
