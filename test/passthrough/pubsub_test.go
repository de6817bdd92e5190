package passthrough

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// readAll reads n replies from conn.
func readN(t *testing.T, conn *testenv.Conn, n int) [][]byte {
	t.Helper()
	var out [][]byte
	for i := 0; i < n; i++ {
		r, err := conn.ReadReply()
		if err != nil {
			t.Fatalf("reading reply %d of %d: %v (so far %q)", i+1, n, err, out)
		}
		out = append(out, r)
	}
	return out
}

// TestPubSubLikeRedis: subscribe, pattern and shard subscriptions, messages
// (from PUBLISH and from Lua), PING while subscribed, a command refused in
// subscribed mode, and unsubscribing (including from channels never
// subscribed, and with no arguments) give the same bytes as on Redis.
func TestPubSubLikeRedis(t *testing.T) {
	pr := startPair(t)
	subP, subD := pr.conns(t)
	pubP, pubD := pr.conns(t)
	steps := []struct {
		cmd     []string
		replies int
	}{
		{c("UNSUBSCRIBE", "never"), 1},
		{c("SUBSCRIBE", "news", "sport"), 2},
		{c("PSUBSCRIBE", "n*"), 1},
		{c("SSUBSCRIBE", "shard"), 1},
		{c("PING"), 1},
		{c("PING", "hi"), 1},
		{c("GET", "x"), 1},
		{c("UNSUBSCRIBE", "sport", "weather"), 2},
	}
	for _, st := range steps {
		subP.Send(st.cmd...)
		subP.Flush()
		subD.Send(st.cmd...)
		subD.Flush()
		got, want := readN(t, subP, st.replies), readN(t, subD, st.replies)
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Errorf("%s reply %d: proxy %q, redis %q", testenv.ShowCommand(st.cmd), i, got[i], want[i])
			}
		}
	}
	// Messages: PUBLISH through the proxy and from a Lua script.
	for _, pair := range []struct{ pub *testenv.Conn }{{pubP}, {pubD}} {
		pair.pub.Do("PUBLISH", "news", "hello")
		pair.pub.Do("EVAL", "return redis.call('PUBLISH', KEYS[1], ARGV[1])", "1", "news", "from-lua")
		pair.pub.Do("SPUBLISH", "shard", "s-msg")
	}
	got, want := readN(t, subP, 5), readN(t, subD, 5) // 2 channel + 2 pattern + 1 shard message
	sortReplies(got)
	sortReplies(want)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("message %d: proxy %q, redis %q", i, got[i], want[i])
		}
	}
	// Unsubscribing from everything, with no arguments.
	for _, conn := range []*testenv.Conn{subP, subD} {
		conn.Send("UNSUBSCRIBE")
		conn.Send("PUNSUBSCRIBE")
		conn.Flush()
	}
	got, want = readN(t, subP, 2), readN(t, subD, 2)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("unsubscribe-all reply %d: proxy %q, redis %q", i, got[i], want[i])
		}
	}
	same(t, pubP, pubD, "PUBSUB", "NUMSUB", "news")
	pr.alive(t)
}

func sortReplies(rs [][]byte) {
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			if bytes.Compare(rs[j], rs[i]) < 0 {
				rs[i], rs[j] = rs[j], rs[i]
			}
		}
	}
}

// TestPubSubAfterPipelinedReplies: replies queued before SUBSCRIBE in the
// same pipeline come first; a subscriber that leaves leaves no connection.
func TestPubSubAfterPipelinedReplies(t *testing.T) {
	pr := startPair(t)
	base := backendClients(t, pr.A.Addr)
	sub := testenv.Dial(t, pr.Proxy.Addr)
	sub.Send("SET", "k", "v")
	sub.Send("GET", "k")
	sub.Send("SUBSCRIBE", "ch")
	sub.Flush()
	got := readN(t, sub, 3)
	if string(got[0]) != "+OK\r\n" || string(got[1]) != "$1\r\nv\r\n" || !strings.HasPrefix(string(got[2]), "*3\r\n$9\r\nsubscribe\r\n") {
		t.Fatalf("pipeline SET, GET, SUBSCRIBE answered %q", got)
	}
	if n := backendClients(t, pr.A.Addr); n != base+1 {
		t.Fatalf("Redis has %d clients while one subscribes, want %d", n, base+1)
	}
	sub.Close()
	deadline := time.Now().Add(5 * time.Second)
	for backendClients(t, pr.A.Addr) > base {
		if time.Now().After(deadline) {
			t.Fatalf("5s after the subscriber left Redis still has %d clients (was %d)", backendClients(t, pr.A.Addr), base)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pr.alive(t)
}
