package commands

import (
	"bytes"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
)

// Which goroutine runs what (docs/lock-order.md): ServeCommand runs on the
// connection's goroutine; BatchDone on whichever goroutine completes the
// batch's last reply when the batch was left to it (protocol's later.go),
// which for EXEC on a pinned connection is that connection's own reader.
// These tests run under -race in CI: they are where a missing
// happens-before edge around the session shows.

// watchedHandler counts the BatchDone calls made off the connection's
// goroutine.
type watchedHandler struct {
	*Handler
	offConn atomic.Int64
	total   atomic.Int64
}

func (w *watchedHandler) BatchDone(c *protocol.Conn) {
	w.total.Add(1)
	var stack [16 << 10]byte
	if !bytes.Contains(stack[:runtime.Stack(stack[:], false)], []byte("protocol.(*Conn).serve(")) {
		w.offConn.Add(1)
	}
	w.Handler.BatchDone(c)
}

// TestBatchDoneOffTheConnection: a client that pins and unpins a connection
// one unpipelined request at a time (WATCH, MULTI, EXEC) has most of its
// batches ended by the backend reader that completes them, where BatchDone
// gives the pinned connection back, while the connection's goroutine is
// already reading the next request, which pins one again. The session's
// pinned connection must stay ordered between the two (under -race), and
// the transactions must still be right.
func TestBatchDoneOffTheConnection(t *testing.T) {
	var w *watchedHandler
	p, _ := startStandalone(t, proxyOptions{wrap: func(h *Handler) protocol.Handler {
		w = &watchedHandler{Handler: h}
		return w
	}}, false)
	c := p.dial(t)
	const rounds = 100
	for i := 1; i <= rounds; i++ {
		run(t, c, []exchange{
			{[]string{"WATCH", "counter"}, "+OK\r\n"},
			{[]string{"GET", "counter"}, nullOrInt(i - 1)},
			{[]string{"MULTI"}, "+OK\r\n"},
			{[]string{"INCR", "counter"}, "+QUEUED\r\n"},
			{[]string{"EXEC"}, "*1\r\n:" + strconv.Itoa(i) + "\r\n"},
		})
		if t.Failed() {
			return
		}
	}
	if w.offConn.Load() == 0 {
		t.Fatalf("none of %d BatchDone calls ran off the connection's goroutine: the test did not take the path it is about", w.total.Load())
	}
	t.Logf("%d of %d BatchDone calls ran off the connection's goroutine", w.offConn.Load(), w.total.Load())
}

func nullOrInt(n int) string {
	if n == 0 {
		return "$-1\r\n"
	}
	s := strconv.Itoa(n)
	return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n"
}
