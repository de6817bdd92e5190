package protocol

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// idleNoter is echoHandler (BLOCK blocks until release) that notes whether
// the loop served each request, and holds the reply of SLOW, which the loop
// serves, until slow is closed.
type idleNoter struct {
	*echoHandler
	slow   chan struct{}
	mu     sync.Mutex
	onLoop map[string]bool // by the request's words: the loop served it
	closed atomic.Int64
}

func (h *idleNoter) ServeCommand(c *Conn, args [][]byte, p *resp.Reply) {
	h.mu.Lock()
	h.onLoop[string(echoReply(args))] = c.OnLoop()
	h.mu.Unlock()
	if string(args[0]) == "SLOW" {
		reply := echoReply(args)
		go func() {
			<-h.slow
			p.Buf = append(p.Buf, reply...)
			p.Done()
		}()
		return
	}
	h.echoHandler.ServeCommand(c, args, p)
}

func (h *idleNoter) Closed(*Conn) { h.closed.Add(1) }

// served reports whether the request of words w was served.
func (h *idleNoter) served(w string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.onLoop[string(echoReply(words(w)[0]))]
	return ok
}

// servedOnLoop reports whether the loop served the request of words w.
func (h *idleNoter) servedOnLoop(w string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.onLoop[string(echoReply(words(w)[0]))]
}

// idleLoopServer starts a server whose loop serves plaintext clients, with
// an IdleTimeout of idle, and returns its Handler, its address and its
// count of clients closed as idle (OnLimitClose).
func idleLoopServer(t *testing.T, idle time.Duration) (*idleNoter, string, *atomic.Int64) {
	t.Helper()
	h := &idleNoter{echoHandler: newEchoHandler(false, true), slow: make(chan struct{}), onLoop: map[string]bool{}}
	var idleClosed atomic.Int64
	_, addr := startServer(t, h, func(s *Server) {
		onLoop(t, s)
		s.IdleTimeout = idle
		s.OnLimitClose = func(reason string) {
			if reason == CloseIdle {
				idleClosed.Add(1)
			}
		}
	})
	return h, addr, &idleClosed
}

// idleClient is a client of the test server.
type idleClient struct {
	nc net.Conn
	rd *bufio.Reader
}

func dialIdle(t *testing.T, addr string) *idleClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &idleClient{nc: nc, rd: bufio.NewReader(nc)}
}

// do sends the request of words w as a multibulk and expects its echo.
func (c *idleClient) do(t *testing.T, w string) {
	t.Helper()
	c.nc.Write([]byte(multibulk(strings.Fields(w)...)))
	expectReplies(t, c.nc, c.rd, w, words(w)...)
}

// closedWithin reads until the server closes the connection, within
// replyWait past idle (a hang, not a threshold), and reports whether it
// did (false: still open then).
func (c *idleClient) closedWithin(idle time.Duration) bool {
	c.nc.SetReadDeadline(time.Now().Add(idle + replyWait))
	_, err := io.ReadAll(c.rd)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// stillOpen reports whether nothing but a timeout comes from the client's
// connection within a short read: the server has not closed it.
func (c *idleClient) stillOpen() bool {
	c.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.rd.Peek(1)
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestLoopClosesIdleClients: with an IdleTimeout, clients are served on
// the loop, and one that sends nothing more, after a request or in the
// middle of one, is closed and counted as idle, as a goroutine's client is.
func TestLoopClosesIdleClients(t *testing.T) {
	const idle = 200 * time.Millisecond
	h, addr, idleClosed := idleLoopServer(t, idle)
	after := dialIdle(t, addr)
	after.do(t, "ECHO after")
	if !h.servedOnLoop("ECHO after") {
		t.Fatal("with an IdleTimeout, a request the loop serves was served by a goroutine")
	}
	mid := dialIdle(t, addr)
	mid.do(t, "ECHO mid")
	mid.nc.Write([]byte("*2\r\n$4\r\nECHO\r\n$1")) // and nothing more
	silent := dialIdle(t, addr)                    // sends nothing at all
	for name, c := range map[string]*idleClient{"after a request": after, "mid-request": mid, "silent": silent} {
		if !c.closedWithin(idle) {
			t.Errorf("the client idle %s is still open %v past the idle timeout", name, replyWait)
		}
	}
	waitFor(t, "3 clients closed as idle, and released", func() bool {
		return idleClosed.Load() == 3 && h.closed.Load() == 3
	})
}

// TestLoopKeepsClientsThatSend: a client on the loop that sends requests,
// or one request a byte at a time, each pause a tenth of the IdleTimeout,
// for three times the IdleTimeout, is not idle; a client whose request the
// loop served is not idle while its reply takes longer than the timeout.
func TestLoopKeepsClientsThatSend(t *testing.T) {
	const idle = 500 * time.Millisecond
	h, addr, idleClosed := idleLoopServer(t, idle)
	// SLOW's client connects when its subtest begins: the three run two at
	// a time on a 2-core machine (-parallel), so one connected before them
	// could wait out the timeout idle before it sends SLOW.
	var slow *idleClient
	top := t
	t.Run("group", func(t *testing.T) {
		t.Run("requests", func(t *testing.T) {
			t.Parallel()
			c := dialIdle(t, addr)
			for i := range 30 {
				time.Sleep(idle / 10)
				c.do(t, "ECHO talker "+string(rune('a'+i%26)))
			}
		})
		t.Run("a request a byte at a time", func(t *testing.T) {
			t.Parallel()
			c := dialIdle(t, addr)
			c.do(t, "ECHO trickle first")
			req := multibulk("ECHO", "trickled")
			for i := range len(req) {
				time.Sleep(idle / 10)
				if _, err := c.nc.Write([]byte(req[i : i+1])); err != nil {
					t.Fatalf("the client trickling a request was closed: %v", err)
				}
			}
			expectReplies(t, c.nc, c.rd, "the trickled request", words("ECHO trickled")...)
			if !h.servedOnLoop("ECHO trickled") {
				t.Error("the trickled request was served by a goroutine")
			}
		})
		t.Run("reply slower than the timeout", func(t *testing.T) {
			t.Parallel()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			top.Cleanup(func() { nc.Close() }) // open past the subtest: checked below
			slow = &idleClient{nc: nc, rd: bufio.NewReader(nc)}
			slow.nc.Write([]byte(multibulk("SLOW", "x")))
			waitFor(t, "SLOW served", func() bool { return h.served("SLOW x") })
			if !h.servedOnLoop("SLOW x") {
				t.Fatal("with an IdleTimeout, SLOW was served by a goroutine")
			}
			// A client connected after SLOW was served: once it is closed
			// as idle, SLOW's client has waited at least as long.
			if !dialIdle(t, addr).closedWithin(idle) {
				t.Fatal("the idle client is still open")
			}
			if !slow.stillOpen() {
				t.Fatal("the client waiting for SLOW's reply on the loop was closed as idle")
			}
			close(h.slow)
			expectReplies(t, slow.nc, slow.rd, "SLOW", words("SLOW x")...)
		})
	})
	// Quiet since its reply: its idle time counts from the reply's write.
	if !slow.closedWithin(idle) {
		t.Error("the client quiet after SLOW's reply is still open")
	}
	waitFor(t, "2 clients closed as idle (the one that sent nothing, SLOW's)", func() bool {
		return idleClosed.Load() == 2
	})
}

// TestLoopIdleAfterBlocking: a client of the loop blocked (on a goroutine
// of its own) longer than the IdleTimeout is not idle; given back to the
// loop after two more batches, it is closed once it is idle again.
func TestLoopIdleAfterBlocking(t *testing.T) {
	const idle = 200 * time.Millisecond
	h, addr, idleClosed := idleLoopServer(t, idle)
	c := dialIdle(t, addr)
	c.do(t, "ECHO before")
	c.nc.Write([]byte(multibulk("BLOCK")))
	// Connected once BLOCK is served: once it is closed, the blocked
	// client has waited at least as long.
	waitFor(t, "BLOCK served", func() bool { return h.served("BLOCK") })
	if h.servedOnLoop("BLOCK") || !h.servedOnLoop("ECHO before") {
		t.Fatal("ECHO was not served on the loop, or BLOCK was")
	}
	if !dialIdle(t, addr).closedWithin(idle) {
		t.Fatal("the idle client is still open")
	}
	if !c.stillOpen() {
		t.Fatal("the blocked client was closed as idle")
	}
	close(h.release)
	expectReplies(t, c.nc, c.rd, "BLOCK", words("BLOCK")...)
	c.do(t, "ECHO one")
	c.do(t, "ECHO two") // the second batch the loop would serve: back to it
	c.do(t, "ECHO back")
	if !h.servedOnLoop("ECHO back") {
		t.Fatal("the client did not go back to the loop after two batches")
	}
	if !c.closedWithin(idle) {
		t.Fatal("the client given back to the loop is still open past the idle timeout")
	}
	waitFor(t, "2 clients closed as idle", func() bool { return idleClosed.Load() == 2 })
}
