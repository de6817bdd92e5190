//go:build linux

package protocol

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// streamHandler is tlsLoopHandler with a stream and pushes, as pub/sub and
// tracking use them: STREAM takes the client's writes (TakeWrites) and
// answers through the stream, as Redis answers a subscribed client, and
// so does every later request; PUSHES enables pushes, and INVAL k pushes
// an invalidation of k ahead of its own reply, as a tracking connection
// whose read Redis answers after invalidating.
type streamHandler struct {
	tlsLoopHandler
	mu     sync.Mutex
	conn   *Conn
	stream net.Conn
}

func (h *streamHandler) ServeCommand(c *Conn, args [][]byte, p *resp.Reply) {
	name := strings.ToUpper(string(args[0]))
	h.mu.Lock()
	h.conn = c
	stream := h.stream
	h.mu.Unlock()
	if stream != nil {
		h.note(c, name)
		stream.Write(fmt.Appendf(nil, "+%s\r\n", name))
		p.Done()
		return
	}
	switch name {
	case "STREAM":
		h.note(c, name)
		w := c.TakeWrites(p)
		h.mu.Lock()
		h.stream = w
		h.mu.Unlock()
		w.Write([]byte("+STREAM\r\n"))
		p.Done()
	case "PUSHES":
		h.note(c, name)
		c.EnablePushes()
		p.Buf = append(p.Buf, "+PUSHES\r\n"...)
		p.Done()
	case "INVAL":
		h.note(c, name)
		key := string(args[1])
		go func() {
			c.Push(invalidation(key))
			p.Buf = fmt.Appendf(p.Buf, "+%s\r\n", key)
			p.Done()
		}()
	default:
		h.tlsLoopHandler.ServeCommand(c, args, p)
	}
}

func (h *streamHandler) note(c *Conn, name string) {
	where := ":goroutine"
	if c.OnLoop() {
		where = ":loop"
	}
	h.tlsLoopHandler.mu.Lock()
	h.seen = append(h.seen, name+where)
	h.tlsLoopHandler.mu.Unlock()
}

func (h *streamHandler) streamConn() net.Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stream
}

func (h *streamHandler) client() *Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conn
}

// invalidation is a RESP3 invalidation push of key.
func invalidation(key string) []byte {
	return fmt.Appendf(nil, ">2\r\n$10\r\ninvalidate\r\n*1\r\n$%d\r\n%s\r\n", len(key), key)
}

// TestLoopStreamStaysOnLoop: a client that pipelines requests with one
// that takes its writes behind them (a SUBSCRIBE after a GET) stays on
// the loop: the replies before come first, then the stream, exact and in
// order, with the answers to what the client sends later among it, on
// the descriptor it always had.
func TestLoopStreamStaysOnLoop(t *testing.T) {
	h := &streamHandler{}
	s, nc, rd, fd := clientOnLoop(t, h)

	nc.Write([]byte(multibulk("ECHO", "a") + multibulk("LATE", "b") + multibulk("STREAM")))
	expectLines(t, nc, rd, "$1", "a", "+b", "+STREAM")
	stillOnLoop(t, s, fd, "after STREAM behind other requests")
	w := h.streamConn()
	for i := range 50 {
		msg := fmt.Sprintf("+m%d-%s\r\n", i, strings.Repeat("x", i*100))
		if _, err := w.Write([]byte(msg)); err != nil {
			t.Fatalf("relaying message %d: %v", i, err)
		}
		if i == 20 {
			nc.Write([]byte(multibulk("PING")))
		}
	}
	var want []string
	for i := range 50 {
		want = append(want, fmt.Sprintf("+m%d-%s", i, strings.Repeat("x", i*100)))
		if i == 20 {
			want = append(want, "+PING") // somewhere after the 21st: read below
		}
	}
	got := map[string]bool{}
	next := 0
	for range len(want) {
		line := readLine(t, nc, rd)
		if line == "+PING" {
			got[line] = true
			continue
		}
		if want[next] == "+PING" {
			next++
		}
		if line != want[next] {
			t.Fatalf("stream line %d: %.20q, want %.20q", next, line, want[next])
		}
		next++
	}
	if !got["+PING"] {
		t.Fatal("PING's answer is not in the stream")
	}
	stillOnLoop(t, s, fd, "after the stream")
	if seen := h.take(); strings.Contains(seen, ":goroutine") {
		t.Fatalf("dispatched %q; want everything on the loop", seen)
	}
}

// readLine reads one CRLF line.
func readLine(t *testing.T, nc net.Conn, rd *bufio.Reader) string {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(bigWait))
	line, err := rd.ReadString('\n')
	if err != nil {
		t.Fatalf("reading a line: %v", err)
	}
	return strings.TrimSuffix(line, "\r\n")
}

// TestLoopStreamHardLimit: a subscriber on the loop that reads nothing is
// closed, on the loop, once its stream passes the pubsub class's hard
// limit, counted and logged as outbound's goroutine closes it, and the
// relay's next write fails.
func TestLoopStreamHardLimit(t *testing.T) {
	h := &streamHandler{}
	var logs logBuffer
	var closes, onLoopAtClose atomic.Int64
	s, addr := startServer(t, h, func(s *Server) {
		onLoop(t, s)
		s.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		s.PubSubOutput = OutputLimit{Hard: 1 << 20}
		s.OnLimitClose = func(reason string) {
			if reason == CloseOutputPubSub {
				closes.Add(1)
				onLoopAtClose.Store(int64(s.LoopClients()))
			}
		}
	})
	nc, rd := dialClient(t, addr)
	do(t, nc, rd, "PING")
	fd := onlyFD(t, s)
	smallBuffers(t, s, nc)
	nc.Write([]byte(multibulk("STREAM")))
	expectLines(t, nc, rd, "+STREAM")
	stillOnLoop(t, s, fd, "subscribed")
	w := h.streamConn()
	chunk := []byte("+" + strings.Repeat("y", 64<<10-3) + "\r\n")
	var werr error
	for i := 0; i < 1000 && werr == nil; i++ { // 64 MB at most
		_, werr = w.Write(chunk)
	}
	if werr == nil {
		t.Fatal("the relay wrote 64 MB to a client that reads nothing; want it closed at 1 MB")
	}
	waitFor(t, "the client closed for its output buffer", func() bool {
		return closes.Load() == 1 && s.Clients() == 0
	})
	if n := onLoopAtClose.Load(); n != 1 {
		t.Fatalf("when closed for the hard limit the loop served %d clients; want 1 (closed on the loop)", n)
	}
	log := logs.String()
	if !strings.Contains(log, "closing client for overcoming output buffer limits") || !strings.Contains(log, "class=pubsub") || !strings.Contains(log, "limit=hard") {
		t.Fatalf("the log does not say why the client was closed:\n%s", log)
	}
	if _, err := w.Write(chunk); err == nil {
		t.Fatal("the relay's write after the close succeeded")
	}
}

// TestLoopPushesStayOnLoop: a client with pushes (tracking's
// invalidations) stays on the loop: a push that comes before a reply
// still to come is written right before it, one that comes while the
// client waits is written at once, and replies go on in order.
func TestLoopPushesStayOnLoop(t *testing.T) {
	h := &streamHandler{}
	s, nc, rd, fd := clientOnLoop(t, h)

	nc.Write([]byte(multibulk("ECHO", "a") + multibulk("PUSHES") + multibulk("INVAL", "k") + multibulk("ECHO", "b")))
	expectLines(t, nc, rd, "$1", "a", "+PUSHES")
	expectLines(t, nc, rd, strings.Split(strings.TrimSuffix(string(invalidation("k")), "\r\n"), "\r\n")...)
	expectLines(t, nc, rd, "+k", "$1", "b")
	stillOnLoop(t, s, fd, "after pushes between replies")

	h.client().Push(invalidation("idle")) // the client waits for nothing
	expectLines(t, nc, rd, strings.Split(strings.TrimSuffix(string(invalidation("idle")), "\r\n"), "\r\n")...)
	do(t, nc, rd, "PING")
	stillOnLoop(t, s, fd, "after a push to a waiting client")
	if seen := h.take(); strings.Contains(seen, ":goroutine") {
		t.Fatalf("dispatched %q; want everything on the loop", seen)
	}
}
