package commands

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// pipelineTokens is pipeline where a want of ":" stands for a fencing
// token (a positive integer), and returns the replies.
func pipelineTokens(t *testing.T, c *testenv.Conn, reqs [][]string, want []string) []string {
	t.Helper()
	for _, r := range reqs {
		c.Send(r...)
	}
	c.Flush()
	got := make([]string, len(want))
	for i, w := range want {
		r, err := c.ReadReply()
		got[i] = string(r)
		if err != nil || !strings.HasPrefix(got[i], w) || w == ":" && (got[i] == ":0\r\n" || strings.HasPrefix(got[i], ":-")) {
			t.Fatalf("reply %d (%q): %q, %v; want %q", i, reqs[i], r, err, w)
		}
	}
	return got
}

// pipeline sends reqs at once on c and checks the replies, in order.
func pipeline(t *testing.T, c *testenv.Conn, reqs [][]string, want []string) {
	t.Helper()
	for _, r := range reqs {
		c.Send(r...)
	}
	c.Flush()
	for i, w := range want {
		if got, err := c.ReadReply(); err != nil || string(got) != w {
			t.Fatalf("reply %d (%q): %q, %v; want %q", i, reqs[i], got, err, w)
		}
	}
}

// TestSelectBehindOthersOnTheLoop: SELECT behind other requests switches
// connections once their replies are in (AfterReplies), on the serve
// loop: the replies come in order, each request in its database, and the
// client stays on the loop's thread (no goroutine detour).
func TestSelectBehindOthersOnTheLoop(t *testing.T) {
	po := proxyOptions{}
	w := watchLoop(&po)
	p, _ := startStandalone(t, po, false)
	// Database 1's connections are opened by another client (a dial is a
	// goroutine's).
	o := p.dial(t)
	run(t, o, []exchange{{[]string{"SELECT", "1"}, "+OK\r\n"}, {[]string{"DEL", "a"}, ":0\r\n"}})
	w.take()

	c := p.dial(t)
	pipeline(t, c, [][]string{{"SET", "a", "1"}, {"SELECT", "1"}, {"GET", "a"}, {"SELECT", "0"}, {"GET", "a"}},
		[]string{"+OK\r\n", "+OK\r\n", "$-1\r\n", "+OK\r\n", "$1\r\n1\r\n"})
	const want = "SET:loop SELECT:loop GET:loop SELECT:loop GET:loop"
	w.expect(t, want)
	pipeline(t, c, [][]string{{"PING"}, {"SET", "b", "2"}, {"PING"}}, []string{"+PONG\r\n", "+OK\r\n", "+PONG\r\n"})
	w.expect(t, "PING:loop SET:loop PING:loop")
}

// TestAuthBehindOthersOnTheLoop: with fenceproxy's own users, AUTH between
// other requests is answered on the serve loop, and each request is
// checked as the user the client was when it was sent.
func TestAuthBehindOthersOnTheLoop(t *testing.T) {
	po := proxyOptions{acl: "user alice on >pw ~a* +@all\nuser default on nopass ~* +@all\n"}
	w := watchLoop(&po)
	p, _ := startStandalone(t, po, false)
	c := p.dial(t)
	pipeline(t, c, [][]string{{"SET", "b", "1"}, {"AUTH", "alice", "pw"}, {"GET", "b"}, {"SET", "a", "2"}, {"AUTH", "default", "x"}, {"GET", "a"}},
		[]string{"+OK\r\n", "+OK\r\n", "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n", "+OK\r\n", "+OK\r\n", "$1\r\n2\r\n"})
	const want = "SET:loop AUTH:loop GET:loop SET:loop AUTH:loop GET:loop"
	w.expect(t, want)
}

// TestClusterCrossSlotBehindOthersOnTheLoop: in front of a Redis Cluster,
// an MGET whose keys span slots, behind other requests, is split on the
// serve loop, its reply in its place.
func TestClusterCrossSlotBehindOthersOnTheLoop(t *testing.T) {
	cl := testenv.StartCluster(t, testenv.ClusterOptions{ReplicasPerMaster: -1})
	po := proxyOptions{seeds: []string{cl.Masters[0].Addr}}
	w := watchLoop(&po)
	p := startProxy(t, po)
	c := p.dial(t)
	pipeline(t, c, [][]string{{"SET", "{a}k", "A"}, {"SET", "{b}k", "B"}, {"MGET", "{a}k", "{b}k", "{c}k"}, {"GET", "{a}k"}},
		[]string{"+OK\r\n", "+OK\r\n", "*3\r\n$1\r\nA\r\n$1\r\nB\r\n$-1\r\n", "$1\r\nA\r\n"})
	const want = "SET:loop SET:loop MGET:loop GET:loop"
	w.expect(t, want)
}
