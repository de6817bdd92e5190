package commands

import (
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// closeWatcher is a loopWatcher that also notes, when a client is
// closed, its descriptor and whether the loop held it then.
type closeWatcher struct {
	*loopWatcher
	closed chan closedClient
}

type closedClient struct {
	fd     int
	onLoop bool
}

func (w *closeWatcher) Closed(c *protocol.Conn) {
	select {
	case w.closed <- closedClient{c.FD(), c.OnLoop()}:
	default:
	}
	w.loopWatcher.Closed(c)
}

// clientFD is the fd CLIENT LIST (asked by admin) shows for the client
// at addr.
func clientFD(t *testing.T, admin interface{ Do(...string) []byte }, addr string) int {
	t.Helper()
	for line := range strings.SplitSeq(string(admin.Do("CLIENT", "LIST")), "\n") {
		if !strings.Contains(line, " addr="+addr+" ") {
			continue
		}
		_, rest, _ := strings.Cut(line, " fd=")
		fd, err := strconv.Atoi(strings.Fields(rest)[0])
		if err != nil {
			t.Fatalf("CLIENT LIST line %q: %v", line, err)
		}
		return fd
	}
	t.Fatalf("no client %s in CLIENT LIST", addr)
	return 0
}

// loopClient is a proxy on the serve loop with one client on it, c, and
// how to check that c is still there, untouched: ServesOnLoop answered
// "loop" for what it sent, its fd in CLIENT LIST (asked by another
// client) and the loop's client count have not changed.
type loopClient struct {
	p     *testProxy
	w     *closeWatcher
	c     *testenv.Conn
	admin *testenv.Conn
	addr  string
	fd    int
	count int
}

func startLoopClient(t *testing.T) *loopClient {
	t.Helper()
	return startLoopClientWith(t, proxyOptions{}, false)
}

// startLoopClientWith is startLoopClient with po, in front of a master
// with a replica if replica.
func startLoopClientWith(t *testing.T, po proxyOptions, replica bool) *loopClient {
	t.Helper()
	lw := watchLoop(&po)
	w := &closeWatcher{loopWatcher: lw, closed: make(chan closedClient, 4)}
	po.wrap = func(h *Handler) protocol.Handler {
		lw.Handler = h
		return w
	}
	p, _ := startStandalone(t, po, replica)
	lc := &loopClient{p: p, w: w, c: p.dial(t), admin: p.dial(t)}
	run(t, lc.c, []exchange{{[]string{"PING"}, "+PONG\r\n"}})
	lc.addr = lc.c.NetConn().LocalAddr().String()
	lc.fd = clientFD(t, lc.admin, lc.addr)
	lc.count = p.Server.LoopClients()
	w.take()
	return lc
}

func (lc *loopClient) stays(t *testing.T, what, answers string) {
	t.Helper()
	if got := lc.w.take(); got != answers {
		t.Fatalf("%s: ServesOnLoop answered %q, want %q", what, got, answers)
	}
	if got := lc.p.Server.LoopClients(); got != lc.count {
		t.Fatalf("%s: %d clients on the loop, want %d", what, got, lc.count)
	}
	if got := clientFD(t, lc.admin, lc.addr); got != lc.fd {
		t.Fatalf("%s: the client's fd went from %d to %d", what, lc.fd, got)
	}
	lc.w.take() // the admin's CLIENT LIST
}

// TestFramerInlineOnTheLoop: inline requests, as redis-cli and telnet
// send them (quoted arguments, a bare LF), are framed and served on the
// loop.
func TestFramerInlineOnTheLoop(t *testing.T) {
	lc := startLoopClient(t)
	for _, ex := range []struct{ in, reply string }{
		{"PING\r\n", "+PONG\r\n"},
		{"SET k \"hello world\"\r\n", "+OK\r\n"},
		{"GET k\n", "$11\r\nhello world\r\n"},
	} {
		lc.c.WriteRaw([]byte(ex.in))
		if got, err := lc.c.ReadReply(); err != nil || string(got) != ex.reply {
			t.Fatalf("inline %q: %q, %v; want %q", ex.in, got, err, ex.reply)
		}
	}
	lc.stays(t, "inline requests", "PING:loop SET:loop GET:loop")
}

// TestFramerLongRequestOnTheLoop: a request longer than the read buffer
// (a 2 MB SET) is framed on the loop, whose buffer grows for it.
func TestFramerLongRequestOnTheLoop(t *testing.T) {
	lc := startLoopClient(t)
	big := strings.Repeat("v", 2<<20)
	run(t, lc.c, []exchange{{[]string{"SET", "big", big}, "+OK\r\n"}, {[]string{"STRLEN", "big"}, ":2097152\r\n"}})
	lc.stays(t, "a 2 MB SET", "SET:loop STRLEN:loop")
}

// TestFramerMalformedOnTheLoop: a malformed request gets Redis's protocol
// error and its client is closed, by the loop, on the fd it always had.
func TestFramerMalformedOnTheLoop(t *testing.T) {
	lc := startLoopClient(t)
	lc.c.WriteRaw([]byte("*1\r\n$abc\r\n"))
	if got, err := lc.c.ReadReply(); err != nil || string(got) != "-ERR Protocol error: invalid bulk length\r\n" {
		t.Fatalf("a malformed request: %q, %v; want Redis's protocol error", got, err)
	}
	if got, err := lc.c.ReadReply(); err != io.EOF {
		t.Fatalf("after a protocol error: %q, %v; want the connection closed", got, err)
	}
	if got := <-lc.w.closed; got != (closedClient{lc.fd, true}) {
		t.Fatalf("the malformed request's client was closed as %+v, want by the loop on fd %d", got, lc.fd)
	}
}
