package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestMultiExec: MULTI/EXEC (and WATCH) on keys of one slot run on the
// slot's master with the same replies as there directly.
func TestMultiExec(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	for _, m := range e.cl.Masters {
		tag := st.keysOn(m, "tx", 1)[0]
		k := func(n string) string { return "{" + tag + "}:" + n }
		script := [][]string{
			cmd("MULTI"),
			cmd("SET", k("a"), "1"),
			cmd("INCR", k("a")),
			cmd("LPUSH", k("a"), "x"), // WRONGTYPE inside EXEC
			cmd("RPUSH", k("l"), "p", "q"),
			cmd("MGET", k("a"), k("missing"), k("l")),
			cmd("RENAME", k("l"), k("l2")),
			cmd("EXEC"),
			cmd("MULTI"),
			cmd("INCR", k("a")),
			cmd("DISCARD"),
			cmd("WATCH", k("a")),
			cmd("GET", k("a")),
			cmd("MULTI"),
			cmd("INCR", k("a")),
			cmd("EXEC"),
			cmd("MULTI"),
			cmd("NOSUCHCOMMAND"),
			cmd("EXEC"),
		}
		sameAsMaster(t, e, m, script)
	}
}

// sameAsMaster runs script on one proxy connection, then (after a flush)
// on one connection to m, whose slots its keys are in, and compares every
// reply.
func sameAsMaster(t *testing.T, e *env, m *testenv.Redis, script [][]string) {
	t.Helper()
	run := func(c *testenv.Conn) []string {
		var out []string
		for _, args := range script {
			out = append(out, string(c.Do(args...)))
		}
		return out
	}
	got := run(e.dial(t))
	flushDirect(t, e.cl)
	want := run(testenv.Dial(t, m.Addr))
	for i := range script {
		noRedirect(t, testenv.ShowCommand(script[i]), []byte(got[i]))
		if got[i] != want[i] {
			t.Errorf("%s on %s's slot:\n proxy  %q\n redis  %q", testenv.ShowCommand(script[i]), m.Addr, got[i], want[i])
		}
	}
}

// TestMultiMisuse: a MULTI inside MULTI and a WATCH inside MULTI get
// Redis's own errors, before and after the transaction's first command
// (in front of a cluster MULTI reaches a master only with that command),
// and the transaction carries on as on the master directly; RESET ends a
// transaction whose MULTI was not sent yet.
func TestMultiMisuse(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	m := e.cl.Masters[1]
	k := "{" + st.keysOn(m, "tx", 1)[0] + "}:a"
	script := [][]string{
		cmd("MULTI"),
		cmd("MULTI"),
		cmd("WATCH", k),
		cmd("SET", k, "1"),
		cmd("MULTI"),
		cmd("WATCH", k),
		cmd("EXEC"),
		cmd("MULTI"),
		cmd("WATCH", k),
		cmd("EXEC"),
		cmd("MULTI"), // RESET ends it, MULTI not yet sent
		cmd("RESET"),
		cmd("WATCH", k),
		cmd("MULTI"),
		cmd("INCR", k),
		cmd("EXEC"),
		cmd("PING"),
	}
	sameAsMaster(t, e, m, script)
}

// TestBlockingPop: BLPOP through the proxy blocks on the key's master and is
// woken by an LPUSH sent through another proxy connection.
func TestBlockingPop(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	for _, m := range e.cl.Masters {
		key := st.keysOn(m, "queue:", 1)[0]
		other := st.keysOn(m, "queue:", 2)[1] // another slot: nothing arrives there
		blocked := e.dial(t)
		blocked.SetTimeout(15 * time.Second)
		blocked.Send("BLPOP", key, "10")
		blocked.Flush()
		waitBlocked(t, m, 1)

		pusher := e.dial(t)
		if got := pusher.Do("LPUSH", other, "not-me"); string(got) != ":1\r\n" {
			t.Fatalf("LPUSH %s: %q", other, got)
		}
		if got := pusher.Do("LPUSH", key, "job"); string(got) != ":1\r\n" {
			t.Fatalf("LPUSH %s: %q", key, got)
		}
		got, err := blocked.ReadReply()
		want := fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$3\r\njob\r\n", len(key), key)
		if err != nil || string(got) != want {
			t.Fatalf("BLPOP %s 10 woken by LPUSH: %q, %v; want %q", key, got, err, want)
		}
		// The connection is usable after the blocking command.
		if got := blocked.Do("LLEN", key); string(got) != ":0\r\n" {
			t.Fatalf("LLEN %s after BLPOP: %q", key, got)
		}
		// A BLPOP that times out answers null, as Redis does.
		if got := blocked.Do("BLPOP", key, "0.2"); string(got) != "*-1\r\n" {
			t.Fatalf("BLPOP %s 0.2 with nothing pushed: %q, want *-1", key, got)
		}
	}
}

// waitBlocked waits (at most 10s) until master m reports n blocked clients.
func waitBlocked(t *testing.T, m *testenv.Redis, n int) {
	t.Helper()
	c := testenv.Dial(t, m.Addr)
	defer c.Close()
	want := fmt.Sprintf("blocked_clients:%d\r\n", n)
	deadline := time.Now().Add(10 * time.Second)
	for {
		body, _ := testenv.ParseBulk(c.Do("INFO", "clients"))
		if strings.Contains(string(body), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("master %s: no %q within 10s; INFO clients:\n%s", m.Addr, strings.TrimSpace(want), body)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pushOf is the RESP2 pub/sub message array of kind (message, smessage) on
// channel with payload.
func pushOf(kind, channel, payload string) string {
	return fmt.Sprintf("*3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n",
		len(kind), kind, len(channel), channel, len(payload), payload)
}

// TestPubSub: SUBSCRIBE through the proxy gets messages PUBLISHed through
// another proxy connection and PUBLISHed directly on any master.
func TestPubSub(t *testing.T) {
	e := startEnv(t, -1, 0)
	sub := e.dial(t)
	if got := sub.Do("SUBSCRIBE", "news"); string(got) != "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n" {
		t.Fatalf("SUBSCRIBE news: %q", got)
	}
	if got := sub.Do("PSUBSCRIBE", "ne*"); string(got) != "*3\r\n$10\r\npsubscribe\r\n$3\r\nne*\r\n:2\r\n" {
		t.Fatalf("PSUBSCRIBE ne*: %q", got)
	}
	pub := e.dial(t)
	expectMessages := func(via, payload string) {
		t.Helper()
		for _, want := range []string{
			pushOf("message", "news", payload),
			fmt.Sprintf("*4\r\n$8\r\npmessage\r\n$3\r\nne*\r\n$4\r\nnews\r\n$%d\r\n%s\r\n", len(payload), payload),
		} {
			got, err := sub.ReadReply()
			if err != nil || string(got) != want {
				t.Fatalf("after PUBLISH news %q %s: %q, %v; want %q", payload, via, got, err, want)
			}
		}
	}
	if got := pub.Do("PUBLISH", "news", "via-proxy"); got[0] != ':' {
		t.Fatalf("PUBLISH via proxy: %q", got)
	}
	expectMessages("through another proxy connection", "via-proxy")
	for _, m := range e.cl.Masters {
		payload := "on-" + m.Addr
		if got := testenv.Dial(t, m.Addr).Do("PUBLISH", "news", payload); got[0] != ':' {
			t.Fatalf("PUBLISH on %s: %q", m.Addr, got)
		}
		expectMessages("directly on master "+m.Addr, payload)
	}
	// PING while subscribed, then UNSUBSCRIBE.
	if got := sub.Do("PING"); string(got) != "*2\r\n$4\r\npong\r\n$0\r\n\r\n" {
		t.Fatalf("PING while subscribed: %q", got)
	}
	if got := sub.Do("UNSUBSCRIBE", "news"); string(got) != "*3\r\n$11\r\nunsubscribe\r\n$4\r\nnews\r\n:1\r\n" {
		t.Fatalf("UNSUBSCRIBE news: %q", got)
	}
	// A RESP3 subscriber's CLIENT ID is the id it had before subscribing,
	// not its tunnel's Redis connection's (Redisson's TrackingListener
	// redirects to it).
	r3 := e.dial(t)
	r3.Do("HELLO", "3")
	before := r3.Do("CLIENT", "ID")
	r3.Do("SUBSCRIBE", "news")
	if got := r3.Do("CLIENT", "ID"); string(got) != string(before) {
		t.Fatalf("CLIENT ID of a RESP3 subscriber = %q, before it subscribed %q", got, before)
	}
}

// TestShardedPubSub: SSUBSCRIBE through the proxy, to a shard channel on
// each master, gets what SPUBLISH sends through another proxy connection.
func TestShardedPubSub(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	pub := e.dial(t)
	for _, m := range e.cl.Masters {
		ch := st.keysOn(m, "shard:", 1)[0]
		sub := e.dial(t)
		want := fmt.Sprintf("*3\r\n$10\r\nssubscribe\r\n$%d\r\n%s\r\n:1\r\n", len(ch), ch)
		if got := sub.Do("SSUBSCRIBE", ch); string(got) != want {
			t.Fatalf("SSUBSCRIBE %s: %q, want %q", ch, got, want)
		}
		if got := pub.Do("SPUBLISH", ch, "hello"); string(got) != ":1\r\n" {
			t.Fatalf("SPUBLISH %s via proxy: %q, want :1 (one subscriber on the shard)", ch, got)
		}
		if got, err := sub.ReadReply(); err != nil || string(got) != pushOf("smessage", ch, "hello") {
			t.Fatalf("after SPUBLISH %s: %q, %v; want %q", ch, got, err, pushOf("smessage", ch, "hello"))
		}
		// SPUBLISH directly on the shard's master reaches it too.
		if got := testenv.Dial(t, m.Addr).Do("SPUBLISH", ch, "direct"); string(got) != ":1\r\n" {
			t.Fatalf("SPUBLISH %s on %s: %q", ch, m.Addr, got)
		}
		if got, err := sub.ReadReply(); err != nil || string(got) != pushOf("smessage", ch, "direct") {
			t.Fatalf("after SPUBLISH %s on its master: %q, %v", ch, got, err)
		}
	}
}
