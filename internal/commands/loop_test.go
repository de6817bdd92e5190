package commands

import (
	"strings"
	"sync"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
)

// loopWatcher records what ServesOnLoop answered, per request name.
type loopWatcher struct {
	*Handler
	mu      sync.Mutex
	answers []string // "NAME:true" or "NAME:false", in order
}

func (w *loopWatcher) ServesOnLoop(c *protocol.Conn, args [][]byte) bool {
	ok := w.Handler.ServesOnLoop(c, args)
	name := strings.ToUpper(string(args[0]))
	if len(args) > 1 && (name == "CLIENT" || name == "FUNCTION") {
		name += " " + strings.ToUpper(string(args[1]))
	}
	w.mu.Lock()
	if ok {
		w.answers = append(w.answers, name+":loop")
	} else {
		w.answers = append(w.answers, name+":leaves")
	}
	w.mu.Unlock()
	return ok
}

func (w *loopWatcher) take() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := strings.Join(w.answers, " ")
	w.answers = nil
	return a
}

// TestServesOnLoop: with the serve loop, a client's forwarded requests and
// what client libraries send when they connect (CLIENT SETINFO, SETNAME,
// ID, GETNAME, ECHO) are served on the loop, with Redis's and the proxy's
// replies in order; the first request the loop must not serve (one that
// waits for earlier replies, changes the client's protocol, database or
// reply mode, pins a connection, subscribes, may block, or is a lock
// command) moves the client to a goroutine, which serves it and every
// later request (ServesOnLoop is not asked again).
func TestServesOnLoop(t *testing.T) {
	var w *loopWatcher
	p, _ := startStandalone(t, proxyOptions{loop: true, wrap: func(h *Handler) protocol.Handler {
		w = &loopWatcher{Handler: h}
		return w
	}}, false)

	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"CLIENT", "SETINFO", "lib-name", "redis-py"}, "+OK\r\n"},
		{[]string{"CLIENT", "SETNAME", "app"}, "+OK\r\n"},
		{[]string{"SET", "k", "v"}, "+OK\r\n"},
		{[]string{"CLIENT", "GETNAME"}, "$3\r\napp\r\n"},
		{[]string{"ECHO", "e"}, "$1\r\ne\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
		{[]string{"CLIENT", "NO-EVICT", "on"}, "+OK\r\n"},
	})
	// Pipelined: the proxy's own replies stay in their places among
	// Redis's.
	c.Send("INCR", "n")
	c.Send("CLIENT", "GETNAME")
	c.Send("INCR", "n")
	c.Send("ECHO", "x")
	c.Flush()
	for i, want := range []string{":1\r\n", "$3\r\napp\r\n", ":2\r\n", "$1\r\nx\r\n"} {
		if got, err := c.ReadReply(); err != nil || string(got) != want {
			t.Fatalf("pipelined reply %d: %q, %v; want %q", i, got, err, want)
		}
	}
	const onLoop = "CLIENT SETINFO:loop CLIENT SETNAME:loop SET:loop CLIENT GETNAME:loop ECHO:loop GET:loop CLIENT NO-EVICT:loop " +
		"INCR:loop CLIENT GETNAME:loop INCR:loop ECHO:loop"
	if got := w.take(); got != onLoop {
		t.Fatalf("ServesOnLoop answered\n%s\nwant\n%s", got, onLoop)
	}

	for _, tc := range []struct {
		first []string
		reply string
	}{
		{[]string{"PING"}, "+PONG\r\n"}, // waits for the replies before it
		{[]string{"SELECT", "1"}, "+OK\r\n"},
		{[]string{"HELLO", "3"}, ""},
		{[]string{"CLIENT", "REPLY", "ON"}, "+OK\r\n"},
		{[]string{"CLIENT", "LIST"}, ""},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"WATCH", "k"}, "+OK\r\n"},
		{[]string{"BLPOP", "nolist", "0.01"}, "*-1\r\n"},
		{[]string{"SUBSCRIBE", "ch"}, ""},
		{[]string{"LOCK.ACQUIRE", "r", "o", "10000"}, ""},
		{[]string{"FUNCTION", "STATS"}, ""},
		{[]string{"INFO", "server"}, ""},
	} {
		c := p.dial(t)
		run(t, c, []exchange{{[]string{"GET", "k"}, "$1\r\nv\r\n"}})
		got, err := c.TryDo(tc.first...)
		if err != nil {
			t.Fatalf("%s: %v", tc.first, err)
		}
		if tc.reply != "" && string(got) != tc.reply {
			t.Fatalf("%s: %q; want %q", tc.first, got, tc.reply)
		} else if strings.HasPrefix(string(got), "-") {
			t.Fatalf("%s: %q", tc.first, got)
		}
		if tc.first[0] != "SUBSCRIBE" && tc.first[0] != "MULTI" {
			// Served on its goroutine from now on: ServesOnLoop is not
			// asked again.
			c.TryDo("ECHO", "after")
		}
		name := strings.ToUpper(tc.first[0])
		if name == "CLIENT" || name == "FUNCTION" {
			name += " " + tc.first[1]
		}
		if got, want := w.take(), "GET:loop "+name+":leaves"; got != want {
			t.Errorf("%s: ServesOnLoop answered %q; want %q", tc.first, got, want)
		}
	}
}
