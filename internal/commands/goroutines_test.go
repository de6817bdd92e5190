package commands

import (
	"bytes"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
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

// TestClusterWaitThenHello: in front of a Redis Cluster, WAIT takes a
// connection of its own on every master, and gives them back when the last
// reply is in, on a backend reader. A HELLO 3 pipelined behind the WAIT is
// served meanwhile on the connection's goroutine. The connections must go
// back as what they are (RESP2, as taken), not as what the client speaks by
// the time WAIT ends: a RESP2 connection handed to a RESP3 client later
// answers it in RESP2.
func TestClusterWaitThenHello(t *testing.T) {
	cl := testenv.StartCluster(t, testenv.ClusterOptions{ReplicasPerMaster: -1})
	p := startProxy(t, proxyOptions{seeds: []string{cl.Masters[0].Addr}})
	c := p.dial(t)
	c.Send("WAIT", "0", "1000")
	c.Send("HELLO", "3")
	c.Flush()
	if r, err := c.ReadReply(); err != nil || !bytes.HasPrefix(r, []byte(":")) {
		t.Fatalf("WAIT: %q, %v", r, err)
	}
	if r, err := c.ReadReply(); err != nil || !bytes.HasPrefix(r, []byte("%")) {
		t.Fatalf("HELLO 3: %q, %v", r, err)
	}
	// Each master's connection for RESP3 clients is the one WAIT gave back
	// (if any): a blocking pop that times out answers RESP3's null on it.
	for _, key := range []string{"{a}", "{b}", "{c}", "{d}", "{e}"} {
		if got := string(c.Do("BLPOP", key+"list", "0.01")); got != "_\r\n" {
			t.Errorf("BLPOP %slist timing out, to a RESP3 client: got %q, want RESP3's null _", key, got)
		}
	}
}
