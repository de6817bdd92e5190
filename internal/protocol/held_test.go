package protocol

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// replyWait bounds each wait for a reply that is due: it only ends a hang.
const replyWait = 5 * time.Second

// echoHandler answers each request with a bulk string of its arguments
// joined by spaces, at once or (later) from another goroutine as a backend
// reader does. With blocking, "BLOCK" is a blocking request (MayBlock)
// answered once release is closed; ClientGone closes gone.
type echoHandler struct {
	later, blocking bool
	release, gone   chan struct{}
}

func newEchoHandler(later, blocking bool) *echoHandler {
	return &echoHandler{later: later, blocking: blocking, release: make(chan struct{}), gone: make(chan struct{})}
}

func (h *echoHandler) ServeCommand(c *Conn, args [][]byte, p *resp.Reply) {
	reply := echoReply(args)
	switch {
	case h.blocking && string(args[0]) == "BLOCK":
		c.MayBlock()
		go func() {
			<-h.release
			p.Buf = append(p.Buf, reply...)
			p.Done()
		}()
	case h.later:
		go func() {
			p.Buf = append(p.Buf, reply...)
			p.Done()
		}()
	default:
		p.Buf = append(p.Buf, reply...)
		p.Done()
	}
}
func (h *echoHandler) BatchDone(*Conn)  {}
func (h *echoHandler) ClientGone(*Conn) { close(h.gone) }
func (h *echoHandler) Closed(*Conn)     {}

func echoReply(args [][]byte) []byte {
	joined := bytes.Join(args, []byte(" "))
	return fmt.Appendf(nil, "$%d\r\n%s\r\n", len(joined), joined)
}

// heldSetup is one way of serving: each takes another path to the write.
type heldSetup struct {
	name  string
	later bool          // replies completed off the connection's goroutine
	idle  time.Duration // the server's IdleTimeout
	tls   bool
	loop  bool // served from an event loop (loop.go) while it can be
}

var heldSetups = []heldSetup{
	{name: "replies at once"},
	{name: "replies later", later: true},
	// An idle timeout keeps batches off writeLater and arms read deadlines.
	{name: "idle timeout", later: true, idle: time.Hour},
	{name: "tls", later: true, tls: true},
	{name: "loop, replies at once", loop: true},
	{name: "loop, replies later", later: true, loop: true},
	// The loop closes idle clients itself (loopidle.go); its clients that
	// leave for a goroutine arm read deadlines there.
	{name: "loop, idle timeout", later: true, loop: true, idle: time.Hour},
}

// serveEcho starts a server with h, stopped when tb ends, and returns a
// function that dials it for t (the connection closed when t ends).
func serveEcho(tb testing.TB, h Handler, setup heldSetup) func(t testing.TB) net.Conn {
	tb.Helper()
	s := NewServer(h, slog.New(slog.DiscardHandler))
	s.IdleTimeout = setup.idle
	if setup.loop {
		onLoop(tb, s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var clientCfg *tls.Config
	if setup.tls {
		certs := testenv.MakeCerts(tb)
		pair, err := tls.LoadX509KeyPair(certs.ServerCert, certs.ServerKey)
		if err != nil {
			tb.Fatal(err)
		}
		go s.ServeTLS(ln, &tls.Config{Certificates: []tls.Certificate{pair}})
		clientCfg = certs.ClientConfig(tb, false)
	} else {
		go s.Serve(ln)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return func(t testing.TB) net.Conn {
		t.Helper()
		var nc net.Conn
		var err error
		if clientCfg != nil {
			nc, err = tls.Dial("tcp", ln.Addr().String(), clientCfg)
		} else {
			nc, err = net.Dial("tcp", ln.Addr().String())
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
}

// expectReplies reads one echo reply per request in want, each within
// replyWait, and fails unless they are the replies to want, in order.
func expectReplies(t *testing.T, nc net.Conn, rd *bufio.Reader, after string, want ...[][]byte) {
	t.Helper()
	var expected []byte
	for _, args := range want {
		expected = append(expected, echoReply(args)...)
	}
	nc.SetReadDeadline(time.Now().Add(replyWait))
	got := make([]byte, len(expected))
	if n, err := io.ReadFull(rd, got); err != nil {
		t.Fatalf("after %q: %d of %d replies' bytes (%q), then %v", short(after), n, len(expected), short(string(got[:n])), err)
	}
	if !bytes.Equal(got, expected) {
		t.Fatalf("after %q: replies %q, want %q", short(after), short(string(got)), short(string(expected)))
	}
}

func short(s string) string {
	if len(s) > 120 {
		return s[:60] + fmt.Sprintf("…(%d bytes)…", len(s)-120) + s[len(s)-60:]
	}
	return s
}

func words(s ...string) [][][]byte {
	out := make([][][]byte, len(s))
	for i, w := range s {
		for _, f := range strings.Fields(w) {
			out[i] = append(out[i], []byte(f))
		}
	}
	return out
}

// TestCompleteRequestAnsweredBeforeRest: bytes that hold complete requests
// and then only part of one (or an empty line, or a request with no
// arguments, which are skipped) get the complete requests' replies before
// anything more is sent, on every path a batch is written by; the rest then
// gets its own.
func TestCompleteRequestAnsweredBeforeRest(t *testing.T) {
	const big = 1 << 20
	value := strings.Repeat("v", big)
	bigSet := fmt.Sprintf("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n%s\r\n", big, value)
	cases := []struct {
		name  string
		steps []string   // sent one after the other
		want  [][]string // the replies due after each step
	}{
		{"empty line after a request", []string{"PING\r\n\r\n", "ECHO x\r\n"}, [][]string{{"PING"}, {"ECHO x"}}},
		{"empty lines around a request", []string{"\r\n\r\nPING\r\n\r\n\n\r\n", "PING\r\n"}, [][]string{{"PING"}, {"PING"}}},
		{"blank inline request after a request", []string{"PING\r\n   \r\n", "PING\r\n"}, [][]string{{"PING"}, {"PING"}}},
		{"empty multibulk requests after a request", []string{"PING\r\n*0\r\n*-1\r\n", "PING\r\n"}, [][]string{{"PING"}, {"PING"}}},
		{"partial inline request", []string{"PING\r\nPI", "NG\r\n"}, [][]string{{"PING"}, {"PING"}}},
		{"partial inline line end", []string{"PING\r\nPING\r", "\n"}, [][]string{{"PING"}, {"PING"}}},
		{"multibulk header alone", []string{"PING\r\n*1\r\n", "$4\r\nPING\r\n"}, [][]string{{"PING"}, {"PING"}}},
		{"multibulk missing an argument", []string{"PING\r\n*2\r\n$3\r\nGET\r\n", "$1\r\nk\r\n"}, [][]string{{"PING"}, {"GET k"}}},
		{"bulk missing its CRLF", []string{"PING\r\n*1\r\n$4\r\nPING", "\r\n"}, [][]string{{"PING"}, {"PING"}}},
		{"pipeline then a partial request", []string{"A\r\nB\r\n*1\r\n$1\r\nC\r\nD", "\r\n"}, [][]string{{"A", "B", "C"}, {"D"}}},
		{"big argument on its way", []string{"PING\r\n" + bigSet[:64<<10], bigSet[64<<10 : 512<<10], bigSet[512<<10:]},
			[][]string{{"PING"}, nil, {"SET k " + value}}},
	}
	for _, setup := range heldSetups {
		t.Run(setup.name, func(t *testing.T) {
			dial := serveEcho(t, newEchoHandler(setup.later, false), setup)
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					nc := dial(t)
					rd := bufio.NewReader(nc)
					for i, step := range tc.steps {
						if _, err := nc.Write([]byte(step)); err != nil {
							t.Fatal(err)
						}
						expectReplies(t, nc, rd, step, words(tc.want[i]...)...)
					}
					// Nothing else was sent: the next reply is the next request's.
					nc.Write([]byte("LAST\r\n"))
					expectReplies(t, nc, rd, "LAST", words("LAST")...)
				})
			}
		})
	}
}

// splitPipeline is requests of every shape, each ended where a cut can fall
// anywhere (inline with CRLF or a bare LF, multibulk, empty lines, blank
// and empty requests, an argument holding CRLF).
var splitPipeline = "PING\r\n\r\nECHO a b\n*2\r\n$4\r\nECHO\r\n$4\r\nc\r\nd\r\n" +
	"*0\r\n  \r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$300\r\n" + strings.Repeat("x", 300) +
	"\r\n*-1\r\n\"q u\" 'o te'\r\nLAST\r\n"

// completeIn is the requests a Reader parses from in before it runs out:
// those the server must answer before it gets another byte.
func completeIn(in []byte) ([][][]byte, error) {
	cmds, err := parseAll(bytes.NewReader(in), DefaultLimits, 16)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = nil
	}
	return cmds, err
}

// sendInChunks sends in to a connection, cut after each length in cuts, and
// after each chunk expects the replies to every request complete so far
// before it sends the next.
func sendInChunks(t *testing.T, nc net.Conn, rd *bufio.Reader, in []byte, cuts []int) {
	t.Helper()
	answered, at := 0, 0
	for _, end := range append(cuts, len(in)) {
		if end = min(end, len(in)); end <= at {
			continue
		}
		if _, err := nc.Write(in[at:end]); err != nil {
			t.Fatal(err)
		}
		at = end
		cmds, err := completeIn(in[:end])
		if err != nil {
			t.Fatalf("the test's own input %q: %v", in, err)
		}
		expectReplies(t, nc, rd, string(in[:end]), cmds[answered:]...)
		answered = len(cmds)
	}
}

// TestSplitPipelineAnsweredBeforeNextChunk cuts a pipeline at every byte:
// every request complete before the cut is answered before the rest is
// sent, then the rest is answered, in order.
func TestSplitPipelineAnsweredBeforeNextChunk(t *testing.T) {
	for _, setup := range heldSetups {
		t.Run(setup.name, func(t *testing.T) {
			nc := serveEcho(t, newEchoHandler(setup.later, false), setup)(t)
			rd := bufio.NewReader(nc)
			for cut := range len(splitPipeline) {
				sendInChunks(t, nc, rd, []byte(splitPipeline), []int{cut})
			}
		})
	}
}

// FuzzServeSplit sends a pipeline cut into chunks (each byte of cuts is a
// chunk's length) and checks that after each chunk every request complete
// so far is answered before the next chunk is sent.
func FuzzServeSplit(f *testing.F) {
	f.Add([]byte(splitPipeline), []byte{1, 7, 3, 30, 2})
	f.Add([]byte("PING\r\n\r\nPING\r\n*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), []byte{5, 1, 1, 1, 9, 4, 13})
	f.Add([]byte("\r\n\r\nA\r\nB\nC\r\n   \r\n*0\r\nD\r\n"), []byte{0, 3, 2})
	// NOLOOP takes a goroutine detour (onLoop's handler), with plain
	// requests around it: cut between them.
	nl := "*1\r\n$6\r\nNOLOOP\r\n"
	f.Add([]byte(nl+"*1\r\n$1\r\nA\r\n*1\r\n$1\r\nB\r\n*1\r\n$1\r\nC\r\n"+nl+nl+"*1\r\n$1\r\nD\r\n*1\r\n$1\r\nE\r\n*1\r\n$1\r\nF\r\n"), []byte{16, 11, 11, 11, 16, 16, 11, 11, 11})
	dial := map[heldSetup]func(testing.TB) net.Conn{}
	for _, setup := range []heldSetup{{}, {later: true}, {loop: true}, {later: true, loop: true}} {
		dial[setup] = serveEcho(f, newEchoHandler(setup.later, false), setup)
	}
	f.Fuzz(func(t *testing.T, in, cuts []byte) {
		if len(in) > 8<<10 || len(cuts) > 256 {
			t.Skip()
		}
		if _, err := completeIn(in); err != nil {
			t.Skip() // a protocol error closes the connection: not this test's subject
		}
		var ends []int
		at := 0
		for _, c := range cuts {
			at += int(c)
			ends = append(ends, at)
		}
		for _, dial := range dial {
			nc := dial(t)
			sendInChunks(t, nc, bufio.NewReader(nc), in, ends)
			nc.Close()
		}
	})
}

// TestBlockedRequestAnsweredBeforeRest: a blocking request followed by part
// of another gets its reply when it is done, without the rest; bytes the
// client sends while it waits are served after it, in order; a client that
// goes away while it waits is noticed; and with an idle timeout the blocked
// client is not idle (Redis exempts blocked clients).
func TestBlockedRequestAnsweredBeforeRest(t *testing.T) {
	for _, setup := range []heldSetup{heldSetups[0], heldSetups[3], {name: "short idle timeout", idle: 100 * time.Millisecond}, heldSetups[4],
		{name: "loop, short idle timeout", idle: 100 * time.Millisecond, loop: true}} {
		t.Run(setup.name, func(t *testing.T) {
			t.Run("reply without the rest", func(t *testing.T) {
				h := newEchoHandler(false, true)
				nc := serveEcho(t, h, setup)(t)
				rd := bufio.NewReader(nc)
				nc.Write([]byte("PING\r\nBLOCK\r\nPI"))
				if setup.idle > 0 {
					time.Sleep(3 * setup.idle) // long past the idle timeout
				}
				close(h.release)
				expectReplies(t, nc, rd, "BLOCK, then PI", words("PING", "BLOCK")...)
				nc.Write([]byte("NG\r\n"))
				expectReplies(t, nc, rd, "NG", words("PING")...)
			})
			t.Run("rest sent while blocked", func(t *testing.T) {
				h := newEchoHandler(false, true)
				nc := serveEcho(t, h, setup)(t)
				rd := bufio.NewReader(nc)
				nc.Write([]byte("BLOCK\r\nPI"))
				nc.Write([]byte("NG\r\nECHO x\r\n"))
				close(h.release)
				expectReplies(t, nc, rd, "BLOCK, then PING and ECHO", words("BLOCK", "PING", "ECHO x")...)
			})
			t.Run("client gone while blocked", func(t *testing.T) {
				h := newEchoHandler(false, true)
				nc := serveEcho(t, h, setup)(t)
				nc.Write([]byte("BLOCK\r\nPI"))
				nc.Close()
				select {
				case <-h.gone:
				case <-time.After(replyWait):
					t.Fatal("ClientGone was not called for a client that went away while blocked")
				}
				close(h.release)
			})
		})
	}
}

// TestHeldBatchAllocations: a request followed by part of the next, whose
// reply is written before the rest arrives, allocates nothing (counted,
// not timed), whichever goroutine completes the reply.
func TestHeldBatchAllocations(t *testing.T) {
	for name, h := range map[string]Handler{"at once": okHandler{}, "later": laterNowHandler{}} {
		t.Run(name, func(t *testing.T) {
			nc := connectServer(t, h, func(*Server) {})
			first := []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$3\r\nGET")
			rest := []byte("\r\n$1\r\nk\r\n")
			reply := make([]byte, 5)
			nc.SetDeadline(time.Now().Add(time.Minute))
			roundTrip := func() {
				for _, b := range [][]byte{first, rest} {
					if _, err := nc.Write(b); err != nil {
						t.Fatal(err)
					}
					if _, err := io.ReadFull(nc, reply); err != nil {
						t.Fatal(err)
					}
				}
			}
			for range 100 {
				roundTrip()
			}
			if n := testing.AllocsPerRun(500, roundTrip); n >= 1 {
				t.Errorf("%.2f allocations per held batch, want 0", n)
			}
		})
	}
}
