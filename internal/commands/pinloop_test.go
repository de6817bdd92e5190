package commands

import (
	"strings"
	"testing"
)

// txRequests is a transaction behind and before plain requests, sent at
// once, and its replies.
var (
	txRequests = [][]string{{"SET", "a", "1"}, {"MULTI"}, {"SET", "b", "2"}, {"EXEC"}, {"GET", "b"}}
	txReplies  = []string{"+OK\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n+OK\r\n", "$1\r\n2\r\n"}
)

const txOnLoop = "SET:loop MULTI:loop SET:loop EXEC:loop GET:loop"

// TestTransactionBehindOthersOnTheLoop: MULTI behind another request, the
// command it queues, EXEC and a request after it are served on the loop,
// with a spare connection of the client's own ready (the master's idle
// one) and without (dialled on a goroutine: OffLoop); the client keeps
// its fd and the loop its client count.
func TestTransactionBehindOthersOnTheLoop(t *testing.T) {
	lc := startLoopClient(t)
	// No spare yet: the proxy dials one for MULTI.
	pipeline(t, lc.c, txRequests, txReplies)
	lc.stays(t, "a transaction with no spare connection", txOnLoop)

	primeSpares(t, lc.p, 1)
	lc.w.take()
	pipeline(t, lc.c, txRequests, txReplies)
	lc.stays(t, "a transaction with a spare connection", txOnLoop)
}

// TestWatchOnTheLoop: WATCH, a write of another client to the watched key,
// then MULTI ... EXEC, all on the loop: EXEC is refused (a null array) as
// on Redis, and the next transaction runs.
func TestWatchOnTheLoop(t *testing.T) {
	lc := startLoopClient(t)
	other := lc.admin // another client, counted on the loop already
	pipeline(t, lc.c, [][]string{{"SET", "w", "0"}, {"WATCH", "w"}, {"GET", "w"}}, []string{"+OK\r\n", "+OK\r\n", "$1\r\n0\r\n"})
	run(t, other, []exchange{{[]string{"SET", "w", "other"}, "+OK\r\n"}})
	pipeline(t, lc.c, [][]string{{"MULTI"}, {"SET", "w", "mine"}, {"EXEC"}, {"GET", "w"}},
		[]string{"+OK\r\n", "+QUEUED\r\n", "*-1\r\n", "$5\r\nother\r\n"})
	lc.w.take() // other's SET
	pipeline(t, lc.c, [][]string{{"WATCH", "w"}, {"MULTI"}, {"SET", "w", "mine"}, {"EXEC"}, {"GET", "w"}},
		[]string{"+OK\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n+OK\r\n", "$4\r\nmine\r\n"})
	lc.stays(t, "WATCH and EXEC", "WATCH:loop MULTI:loop SET:loop EXEC:loop GET:loop")
}

// TestWaitBehindWritesOnTheLoop: WAIT 1 behind writes, in front of a
// master with a replica, counts the replica on the loop (the master's
// connection of the client's own dialled on a goroutine the first time,
// its spare after).
func TestWaitBehindWritesOnTheLoop(t *testing.T) {
	lc := startLoopClientWith(t, proxyOptions{}, true)
	for i := range 2 {
		pipeline(t, lc.c, [][]string{{"SET", "a", "1"}, {"INCR", "n"}, {"WAIT", "1", "5000"}, {"GET", "a"}},
			[]string{"+OK\r\n", ":" + string(rune('1'+i)) + "\r\n", ":1\r\n", "$1\r\n1\r\n"})
		lc.stays(t, "WAIT behind writes", "SET:loop INCR:loop WAIT:loop GET:loop")
	}
}

// TestBlockingBehindOthersOnTheLoop: a blocking command behind another
// request, with no spare connection, is served on the loop and ends its
// batch; the client stays there.
func TestBlockingBehindOthersOnTheLoop(t *testing.T) {
	lc := startLoopClient(t)
	pipeline(t, lc.c, [][]string{{"RPUSH", "l", "x"}, {"BLPOP", "l", "1"}, {"GET", "a"}},
		[]string{":1\r\n", "*2\r\n$1\r\nl\r\n$1\r\nx\r\n", "$-1\r\n"})
	lc.stays(t, "BLPOP behind RPUSH", "RPUSH:loop BLPOP:loop GET:loop")
}

// TestAuthCheckedByRedisOnTheLoop: without fenceproxy's own users, AUTH
// between other requests is checked by Redis (a round trip off the loop:
// OffLoop) and the client stays on the loop as the proxy's Redis user;
// Redis's refusal is its reply.
func TestAuthCheckedByRedisOnTheLoop(t *testing.T) {
	lc := startLoopClient(t)
	pipeline(t, lc.c, [][]string{{"SET", "a", "1"}, {"AUTH", "default", "any"}, {"GET", "a"}, {"AUTH", "any"}, {"INCR", "a"}},
		[]string{"+OK\r\n", "+OK\r\n", "$1\r\n1\r\n",
			"-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n", ":2\r\n"})
	lc.stays(t, "AUTH between requests", "SET:loop AUTH:loop GET:loop AUTH:loop INCR:loop")
}

// TestHelloBehindOthersOnTheLoop: HELLO 3 behind other requests switches
// the client's protocol on the loop once their replies are in; what
// follows gets Redis's RESP3 replies, and HELLO 2 switches back.
func TestHelloBehindOthersOnTheLoop(t *testing.T) {
	lc := startLoopClient(t)
	c := lc.c
	c.Send("SET", "a", "1")
	c.Send("HELLO", "3")
	c.Send("GET", "missing")
	c.Send("HELLO", "2")
	c.Send("GET", "missing")
	c.Flush()
	for i, want := range []string{"+OK\r\n", "%7\r\n", "_\r\n", "*14\r\n", "$-1\r\n"} {
		got, err := c.ReadReply()
		if err != nil || !strings.HasPrefix(string(got), want) {
			t.Fatalf("reply %d: %q, %v; want %q...", i, got, err, want)
		}
	}
	lc.stays(t, "HELLO behind requests", "SET:loop HELLO:loop GET:loop HELLO:loop GET:loop")
}
