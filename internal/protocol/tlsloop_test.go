package protocol

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// tlsLoopHandler answers "BIG n" with n bytes of pattern(n), "ECHO x" with
// x, "LATE name" with +name from another goroutine (as a backend reader
// would), HOLD with +HOLD once hold is closed, and anything else with +NAME; it notes, in dispatch order, each
// request's name and whether the loop served it.
type tlsLoopHandler struct {
	orderHandler
	hold chan struct{} // HOLD's reply waits until it is closed
}

func (h *tlsLoopHandler) ServeCommand(c *Conn, args [][]byte, p *resp.Reply) {
	name := strings.ToUpper(string(args[0]))
	h.mu.Lock()
	where := ":goroutine"
	if c.OnLoop() {
		where = ":loop"
	}
	h.seen = append(h.seen, name+where)
	h.mu.Unlock()
	switch name {
	case "BIG":
		n, _ := strconv.Atoi(string(args[1]))
		p.Buf = fmt.Appendf(p.Buf, "$%d\r\n%s\r\n", n, pattern(n))
	case "ECHO":
		p.Buf = fmt.Appendf(p.Buf, "$%d\r\n%s\r\n", len(args[1]), args[1])
	case "LATE":
		reply := fmt.Appendf(nil, "+%s\r\n", args[1])
		go func() {
			time.Sleep(100 * time.Microsecond)
			p.Buf = append(p.Buf, reply...)
			p.Done()
		}()
		return
	case "HOLD":
		go func() {
			<-h.hold
			p.Buf = append(p.Buf, "+HOLD\r\n"...)
			p.Done()
		}()
		return
	default:
		p.Buf = fmt.Appendf(p.Buf, "+%s\r\n", name)
	}
	p.Done()
}

// pattern is n bytes that differ with n and along their length, so that a
// reply cut, shifted or swapped with another is seen.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte((i/7+n)%26)
	}
	return b
}

// startTLSOnLoop starts a TLS server of h on an event loop (onLoop:
// BLOCK and NOLOOP leave it), stopped when t ends, and returns it with a
// function that dials it over TLS (through wrap, if not nil, under the
// client's tls.Conn).
func startTLSOnLoop(t *testing.T, h Handler, wrap func(net.Conn) net.Conn) (*Server, func() (*tls.Conn, *bufio.Reader)) {
	t.Helper()
	return startTLSOnLoopWith(t, h, wrap, func(*Server) {})
}

// startTLSOnLoopWith is startTLSOnLoop with the server configured by
// configure before it serves.
func startTLSOnLoopWith(t *testing.T, h Handler, wrap func(net.Conn) net.Conn, configure func(*Server)) (*Server, func() (*tls.Conn, *bufio.Reader)) {
	t.Helper()
	s := NewServer(h, slog.New(slog.DiscardHandler))
	onLoop(t, s)
	configure(s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	certs := testenv.MakeCerts(t)
	pair, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeTLS(ln, &tls.Config{Certificates: []tls.Certificate{pair}})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	cfg := certs.ClientConfig(t, false)
	return s, func() (*tls.Conn, *bufio.Reader) {
		t.Helper()
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if wrap != nil {
			nc = wrap(nc)
		}
		tc := tls.Client(nc, cfg)
		t.Cleanup(func() { tc.Close() })
		tc.SetDeadline(time.Now().Add(replyWait))
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		tc.SetDeadline(time.Time{})
		return tc, bufio.NewReader(tc)
	}
}

// expectLines reads one line per want, each within replyWait.
func expectLines(t *testing.T, nc net.Conn, rd *bufio.Reader, want ...string) {
	t.Helper()
	for _, w := range want {
		nc.SetReadDeadline(time.Now().Add(replyWait))
		if line, err := rd.ReadString('\n'); err != nil || line != w+"\r\n" {
			t.Fatalf("%q, %v; want %q", line, err, w)
		}
	}
}

// expectBulk reads a bulk string and fails unless it is want.
func expectBulk(t *testing.T, nc net.Conn, rd *bufio.Reader, want []byte) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(replyWait))
	head := fmt.Sprintf("$%d\r\n", len(want))
	got := make([]byte, len(head)+len(want)+2)
	if _, err := io.ReadFull(rd, got); err != nil {
		t.Fatalf("reading a bulk of %d bytes: %v", len(want), err)
	}
	if !bytes.Equal(got, append(append([]byte(head), want...), "\r\n"...)) {
		t.Fatalf("bulk of %d bytes: got %q...", len(want), got[:min(len(got), 40)])
	}
}

// TestTLSLoopServesOnLoop: once its handshake is done, a TLS client is
// served by the event loop, its replies written there or by the goroutine
// that completes them; its descriptor (CLIENT LIST's fd) stays the same.
func TestTLSLoopServesOnLoop(t *testing.T) {
	h := &tlsLoopHandler{}
	s, dial := startTLSOnLoop(t, h, nil)
	tc, rd := dial()
	var fds []int
	for i := range 20 {
		tc.Write([]byte(multibulk("PING")))
		expectLines(t, tc, rd, "+PING")
		tc.Write([]byte(multibulk("LATE", strconv.Itoa(i))))
		expectLines(t, tc, rd, "+"+strconv.Itoa(i))
		s.Each(func(c *Conn) { fds = append(fds, c.FD()) })
	}
	if got, want := h.take(), strings.TrimSpace(strings.Repeat("PING:loop LATE:loop ", 20)); got != want {
		t.Fatalf("dispatched %q; want %q", got, want)
	}
	for _, fd := range fds {
		if fd != fds[0] || fd < 0 {
			t.Fatalf("the client's fd went %v; want one descriptor throughout", fds)
		}
	}
}

// TestTLSLoopBigPipeline: a pipeline of requests for big replies (each
// many TLS records) that the client reads only once it has sent all of
// it, so the socket does not take a batch at once (the loop writes the
// encrypted rest as room comes, and the client stays there), then big
// requests (longer than the Reader's buffer: read on a goroutine): every
// reply comes back whole and in order, and the client is back on the
// loop after.
func TestTLSLoopBigPipeline(t *testing.T) {
	h := &tlsLoopHandler{}
	s, dial := startTLSOnLoop(t, h, nil)
	tc, rd := dial()
	tc.Write([]byte(multibulk("PING"))) // on the loop after this: its fd stays
	expectLines(t, tc, rd, "+PING")
	// Small socket buffers (no autotuning): a batch of replies bigger than
	// what both hold together cannot go in one write.
	tc.NetConn().(*net.TCPConn).SetReadBuffer(64 << 10)
	s.Each(func(c *Conn) {
		if err := syscall.SetsockoptInt(c.FD(), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 64<<10); err != nil {
			t.Fatal(err)
		}
	})
	for round := range 3 {
		var req bytes.Buffer
		var sizes []int
		for i := range 100 {
			n := 16<<10 + 1 + i*997 + round*31
			sizes = append(sizes, n)
			req.WriteString(multibulk("BIG", strconv.Itoa(n)))
			if i%10 == 9 {
				req.WriteString(multibulk("LATE", strconv.Itoa(i)))
			}
		}
		tc.SetWriteDeadline(time.Now().Add(replyWait))
		if _, err := tc.Write(req.Bytes()); err != nil {
			t.Fatal(err)
		}
		tc.SetWriteDeadline(time.Time{})
		for i, n := range sizes {
			expectBulk(t, tc, rd, pattern(n))
			if i%10 == 9 {
				expectLines(t, tc, rd, "+"+strconv.Itoa(i))
			}
		}
		// Big requests, pipelined.
		req.Reset()
		for i := range 10 {
			req.WriteString(multibulk("ECHO", string(pattern(20<<10+i))))
		}
		go tc.Write(req.Bytes())
		for i := range 10 {
			expectBulk(t, tc, rd, pattern(20<<10+i))
		}
		if got := h.take(); strings.Contains(got, "BIG:goroutine") || strings.Contains(got, "LATE:goroutine") {
			t.Fatalf("round %d: dispatched %q; want every BIG and LATE on the loop (a batch's rest is written there)", round, got)
		}
		tc.Write([]byte(multibulk("PING")))
		expectLines(t, tc, rd, "+PING")
		if got := h.take(); !strings.HasSuffix(got, "PING:loop") {
			t.Fatalf("round %d: after the big requests, dispatched %q; want the last PING on the loop", round, got)
		}
	}
}

// splitConn writes each of its client's writes in two halves, a moment
// apart, once split is set: TLS records reach the server cut in two, so
// the loop reads half a record and must wait for the rest.
type splitConn struct {
	net.Conn
	split atomic.Bool
}

func (c *splitConn) Write(b []byte) (int, error) {
	if !c.split.Load() || len(b) < 2 {
		return c.Conn.Write(b)
	}
	n, err := c.Conn.Write(b[:len(b)/2])
	if err != nil {
		return n, err
	}
	time.Sleep(2 * time.Millisecond) // not a bound: only a chance for a read in between
	m, err := c.Conn.Write(b[len(b)/2:])
	return n + m, err
}

// TestTLSLoopPartialRecordsAndRequests: a request cut across TLS records,
// and records cut across TCP segments, each part sent apart: every reply
// is right, and served on the loop.
func TestTLSLoopPartialRecordsAndRequests(t *testing.T) {
	h := &tlsLoopHandler{}
	var sc *splitConn
	_, dial := startTLSOnLoop(t, h, func(nc net.Conn) net.Conn {
		sc = &splitConn{Conn: nc}
		return sc
	})
	tc, rd := dial()
	sc.split.Store(true)
	for i := range 10 {
		arg := fmt.Sprintf("value-%d-%s", i, strings.Repeat("x", i*100))
		req := multibulk("ECHO", arg) + multibulk("PING")
		// In pieces: each Write is a record of its own.
		from := 0
		for _, cut := range []int{3, 12, len(req) - 4, len(req)} {
			if _, err := tc.Write([]byte(req[from:cut])); err != nil {
				t.Fatal(err)
			}
			from = cut
			time.Sleep(time.Millisecond)
		}
		expectBulk(t, tc, rd, []byte(arg))
		expectLines(t, tc, rd, "+PING")
	}
	if got, want := h.take(), strings.TrimSpace(strings.Repeat("ECHO:loop PING:loop ", 10)); got != want {
		t.Fatalf("dispatched %q; want %q", got, want)
	}
}

// TestTLSLoopGoroutineDetours: a TLS client's requests the loop's thread
// does not serve (a blocking command's stand-in) are served on goroutine
// detours while the client stays on the loop, over and over, with a
// pipeline across one answered in order.
func TestTLSLoopGoroutineDetours(t *testing.T) {
	h := &tlsLoopHandler{}
	_, dial := startTLSOnLoop(t, h, nil)
	tc, rd := dial()
	do := func(name string) {
		t.Helper()
		tc.Write([]byte(multibulk(name)))
		expectLines(t, tc, rd, "+"+name)
	}
	for range 30 {
		do("A")
		do("BLOCK")
		do("B")
		do("B")
		tc.Write([]byte(multibulk("C") + multibulk("NOLOOP") + multibulk("D")))
		expectLines(t, tc, rd, "+C", "+NOLOOP", "+D")
		do("E")
		do("E")
	}
	if got, want := h.take(), strings.Repeat("A:loop BLOCK:goroutine B:loop B:loop C:loop NOLOOP:goroutine D:loop E:loop E:loop ", 30); got+" " != want {
		t.Fatalf("dispatched\n%q; want\n%q", got, want)
	}
}

// TestTLSLoopKillAndHangUp: CLIENT KILL (Kill) closes a TLS client on the
// loop, and one that hangs up (close_notify) is released; so is one that
// is killed while its batch is in flight.
func TestTLSLoopKillAndHangUp(t *testing.T) {
	h := &tlsLoopHandler{}
	s, dial := startTLSOnLoop(t, h, nil)
	killed, krd := dial()
	gone, grd := dial()
	for _, c := range []struct {
		tc *tls.Conn
		rd *bufio.Reader
	}{{killed, krd}, {gone, grd}} {
		c.tc.Write([]byte(multibulk("PING")))
		expectLines(t, c.tc, c.rd, "+PING")
	}
	if got := h.take(); got != "PING:loop PING:loop" {
		t.Fatalf("dispatched %q; want both on the loop", got)
	}
	var once sync.Once
	s.Each(func(c *Conn) {
		if c.RemoteAddr == killed.LocalAddr().String() {
			once.Do(c.Kill)
		}
	})
	killed.SetReadDeadline(time.Now().Add(replyWait))
	if b, err := krd.ReadByte(); err == nil {
		t.Fatalf("after Kill: read %q; want the connection closed", b)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("after Kill: the connection is still open")
	}
	waitConns(t, s, 1)
	gone.Close()
	waitConns(t, s, 0)

	// Killed with a reply on its way: closed once it is written, or at
	// once, either way released.
	tc, rd := dial()
	tc.Write([]byte(multibulk("LATE", "x")))
	s.Each(func(c *Conn) { c.Kill() })
	tc.SetReadDeadline(time.Now().Add(replyWait))
	if _, err := io.ReadAll(rd); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("after Kill: the connection is still open")
		}
	}
	waitConns(t, s, 0)
}

// TestTLSLoopShutdown: Shutdown lets a TLS client on the loop have the
// reply to what it sent, then closes it.
func TestTLSLoopShutdown(t *testing.T) {
	h := &tlsLoopHandler{hold: make(chan struct{})}
	s, dial := startTLSOnLoop(t, h, nil)
	tc, rd := dial()
	tc.Write([]byte(multibulk("PING")))
	expectLines(t, tc, rd, "+PING")
	tc.Write([]byte(multibulk("HOLD")))
	waitFor(t, "HOLD dispatched", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.seen) == 2
	})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	close(h.hold)
	tc.SetReadDeadline(time.Now().Add(replyWait))
	got, err := io.ReadAll(rd)
	if string(got) != "+HOLD\r\n" {
		t.Fatalf("after Shutdown: %q, %v; want the reply, then the end", got, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := h.take(); got != "PING:loop HOLD:loop" {
		t.Fatalf("dispatched %q; want both on the loop", got)
	}
}
