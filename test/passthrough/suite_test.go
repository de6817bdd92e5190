package passthrough

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// These tests come from Redis 7.0.15's own Tcl suite (scripts/redis-suite.sh
// runs it through fenceproxy): each is a case where a unit hung or broke
// through the proxy while Redis answered.

// backendConns is the ids of the clients Redis A has (the proxy's
// connections to it): a shared connection that broke and was dialled again
// has a new id.
func backendConns(t *testing.T, a *testenv.Redis) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	list := string(testenv.Dial(t, a.Addr).Do("CLIENT", "LIST"))
	for _, line := range strings.Split(list, "\n") {
		if id, ok := strings.CutPrefix(line, "id="); ok {
			id, _, _ = strings.Cut(id, " ")
			ids[id] = true
		}
	}
	return ids
}

// TestDeeplyNestedReply: a Lua table that holds itself, returned by EVAL,
// makes Redis nest the reply until Lua's stack runs out (thousands of
// levels) and end it with an error (unit/scripting "Script return recursive
// object"). The proxy relays it byte for byte, and the shared connection it
// came on stays up: before, the reader gave up past 64 levels, the client
// got "lost the connection to Redis" and every request on that shared
// connection with it.
func TestDeeplyNestedReply(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	before := backendConns(t, pr.A)
	script := "local a = {}; local b = {a}; a[1] = b; return a"
	got := same(t, proxy, direct, "EVAL", script, "0")
	if depth := bytes.Count(got, []byte("*1\r\n")); depth < 100 {
		t.Fatalf("the reply nests %d levels; the test needs Redis to nest it deeply", depth)
	}
	if !bytes.HasSuffix(got, []byte("-ERR reached lua stack limit\r\n")) {
		t.Errorf("the reply ends %q, want Redis's stack-limit error", got[max(0, len(got)-40):])
	}
	same(t, proxy, direct, "SET", "after", "1")
	same(t, proxy, direct, "GET", "after")
	for id := range before {
		if !backendConns(t, pr.A)[id] {
			t.Errorf("the proxy's connection id=%s to Redis is gone: the nested reply broke it", id)
		}
	}
	pr.alive(t)
}

// busyWait bounds the wait for Redis to report a script busy; it only ends
// a hang.
const busyWait = 10 * time.Second

// sharedConns is the busy tests' --backend-conns: clients whose CLIENT ID
// is the same modulo it share a backend connection.
const sharedConns = 2

// startBusy makes Redis A busy: lua-time-limit 10 ms, then the request
// (a script that loops for ever) sent on a client of the proxy's and not
// read, until a direct PING to Redis gets -BUSY. It returns that client
// and its CLIENT ID.
func startBusy(t *testing.T, pr *pair, args ...string) (*testenv.Conn, int64) {
	t.Helper()
	if got := testenv.Dial(t, pr.A.Addr).Do("CONFIG", "SET", "lua-time-limit", "10"); string(got) != "+OK\r\n" {
		t.Fatalf("CONFIG SET lua-time-limit: %q", got)
	}
	busy := testenv.Dial(t, pr.Proxy.Addr)
	id, _ := testenv.ParseInt(busy.Do("CLIENT", "ID"))
	busy.Send(args...)
	busy.Flush()
	direct := testenv.Dial(t, pr.A.Addr)
	for deadline := time.Now().Add(busyWait); ; {
		if got := direct.Do("PING"); bytes.HasPrefix(got, []byte("-BUSY")) {
			return busy, id
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis did not report %s busy", testenv.ShowCommand(args))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clients dials n clients of the proxy, those that share busyID's backend
// connection first.
func clients(t *testing.T, pr *pair, n int, busyID int64) []*testenv.Conn {
	t.Helper()
	var sharing, others []*testenv.Conn
	for range n {
		c := testenv.Dial(t, pr.Proxy.Addr)
		if id, _ := testenv.ParseInt(c.Do("CLIENT", "ID")); id%sharedConns == busyID%sharedConns {
			sharing = append(sharing, c)
		} else {
			others = append(others, c)
		}
	}
	if len(sharing) == 0 {
		t.Fatalf("no client shares the busy client's backend connection")
	}
	return append(sharing, others...)
}

// TestBusyScript: while a script loops, every client's PING gets -BUSY as
// from Redis, those that share the script's backend connection too, and
// SCRIPT KILL (unit/multi "MULTI-EXEC body and script timeout",
// unit/scripting "Timedout read-only scripts can be killed by SCRIPT KILL")
// reaches Redis from any client and ends it. Before, the proxy answered
// PING itself (+PONG) and a SCRIPT KILL on the script's shared connection
// waited behind the script for ever.
func TestBusyScript(t *testing.T) {
	pr := startPairWith(t, "--backend-conns", strconv.Itoa(sharedConns))
	busy, id := startBusy(t, pr, "EVAL", "while true do end", "0")
	cs := clients(t, pr, 8, id)
	for i, c := range cs {
		got, err := c.TryDo("PING")
		if err != nil || !bytes.HasPrefix(got, []byte("-BUSY ")) {
			t.Fatalf("client %d: PING while a script is busy: %q, %v; want -BUSY as from Redis", i, got, err)
		}
	}
	// A kill from every client, those sharing the script's backend
	// connection first: the first ends the script, the later ones find
	// none running. None waits behind it.
	killed := 0
	for i, c := range cs {
		got, err := c.TryDo("SCRIPT", "KILL")
		switch {
		case err != nil:
			t.Fatalf("client %d: SCRIPT KILL: %v (it waited behind the script it is to end)", i, err)
		case string(got) == "+OK\r\n":
			killed++
		case !bytes.HasPrefix(got, []byte("-NOTBUSY ")):
			t.Errorf("client %d: SCRIPT KILL: %q", i, got)
		}
	}
	// Redis answers OK to every kill that comes while the script is still
	// ending.
	if killed == 0 {
		t.Errorf("no SCRIPT KILL answered OK")
	}
	if got, err := busy.ReadReply(); err != nil || !bytes.Contains(got, []byte("killed by user")) {
		t.Errorf("the killed script's reply: %q, %v", got, err)
	}
	for i, c := range cs {
		if got := c.Do("PING", "again"); string(got) != "$5\r\nagain\r\n" {
			t.Errorf("client %d: PING after the kill: %q", i, got)
		}
	}
	pr.alive(t)
}

// TestBusyFunction: FUNCTION STATS names the function while it loops, and
// FUNCTION KILL, like SCRIPT KILL, reaches Redis and ends it, from every
// client, those that share the function's backend connection first
// (unit/functions "test function kill"; STATS waited behind the function
// on a shared connection before).
func TestBusyFunction(t *testing.T) {
	pr := startPairWith(t, "--backend-conns", strconv.Itoa(sharedConns))
	lib := "#!lua name=spinlib\nredis.register_function{function_name='spin', callback=function() while true do end end, flags={'no-writes'}}"
	if got := testenv.Dial(t, pr.Proxy.Addr).Do("FUNCTION", "LOAD", lib); string(got) != "$7\r\nspinlib\r\n" {
		t.Fatalf("FUNCTION LOAD: %q", got)
	}
	busy, id := startBusy(t, pr, "FCALL", "spin", "0")
	cs := clients(t, pr, 8, id)
	for i, c := range cs {
		if got, err := c.TryDo("PING"); err != nil || !bytes.HasPrefix(got, []byte("-BUSY ")) {
			t.Fatalf("client %d: PING while a function is busy: %q, %v; want -BUSY", i, got, err)
		}
		got, err := c.TryDo("FUNCTION", "STATS")
		if err != nil {
			t.Fatalf("client %d: FUNCTION STATS while a function is busy: %v (it waited behind the function)", i, err)
		}
		if !bytes.Contains(got, []byte("running_script")) || !bytes.Contains(got, []byte("spin")) {
			t.Fatalf("client %d: FUNCTION STATS while a function is busy: %q; want the running function", i, got)
		}
	}
	// The kill from the clients that share the function's connection
	// first: the first ends it.
	for i := range cs {
		got, err := cs[i].TryDo("FUNCTION", "KILL")
		if err != nil {
			t.Fatalf("client %d: FUNCTION KILL: %v", i, err)
		}
		if string(got) == "+OK\r\n" {
			break
		}
		if !bytes.HasPrefix(got, []byte("-NOTBUSY ")) {
			t.Fatalf("client %d: FUNCTION KILL: %q", i, got)
		}
	}
	if got, err := busy.ReadReply(); err != nil || !bytes.Contains(got, []byte("killed by user")) {
		t.Errorf("the killed function's reply: %q, %v", got, err)
	}
	pr.alive(t)
}

// TestPingAfterOwnScript: a client's own PING pipelined after its own busy
// script waits for it, as on Redis (unit/scripting "Timedout scripts and
// unblocked command"): it is answered +PONG after the script's reply, not
// -BUSY before it.
func TestPingAfterOwnScript(t *testing.T) {
	pr := startPair(t)
	busy, _ := startBusy(t, pr, "EVAL", "while true do end", "0")
	busy.Send("PING")
	busy.Flush()
	if got := testenv.Dial(t, pr.Proxy.Addr).Do("SCRIPT", "KILL"); string(got) != "+OK\r\n" {
		t.Fatalf("SCRIPT KILL: %q", got)
	}
	if got, err := busy.ReadReply(); err != nil || !bytes.Contains(got, []byte("killed by user")) {
		t.Fatalf("the script's reply: %q, %v", got, err)
	}
	if got, err := busy.ReadReply(); err != nil || string(got) != "+PONG\r\n" {
		t.Fatalf("the PING after it: %q, %v; want +PONG", got, err)
	}
	// Pipelined PINGs stay in order with what is between them.
	for range 3 {
		busy.Send("PING", "a")
		busy.Send("SET", "k", "v")
		busy.Send("PING", "b")
		busy.Send("PING")
	}
	busy.Flush()
	for range 3 {
		for _, want := range []string{"$1\r\na\r\n", "+OK\r\n", "$1\r\nb\r\n", "+PONG\r\n"} {
			if got, err := busy.ReadReply(); err != nil || string(got) != want {
				t.Fatalf("pipelined: %q, %v; want %q", got, err, want)
			}
		}
	}
}

// TestClientReply: CLIENT REPLY OFF ... ON around a batch (Redisson's
// RBatch with skipResult()) and SKIP are the client's own: its commands
// run, their replies are dropped, exactly as Redis drops them, and other
// clients' replies are not. Before, the proxy refused CLIENT REPLY, so the
// batch's writes were applied and the caller was told they failed.
func TestClientReply(t *testing.T) {
	pr := startPair(t)
	var raw []byte
	for _, cmd := range [][]string{
		c("CLIENT", "REPLY", "OFF"), c("SET", "batch:1", "a"), c("INCR", "batch:n"), c("GET", "batch:1"),
		c("PING"), c("ECHO", "x"), c("INCR", "batch:1"), c("NOSUCH"), c("CLIENT", "REPLY", "SKIP"),
		c("CLIENT", "REPLY", "ON"),
		c("GET", "batch:1"), c("GET", "batch:n"),
		c("CLIENT", "REPLY", "SKIP"), c("INCR", "batch:n"), c("GET", "batch:n"),
		c("CLIENT", "REPLY", "SKIP"), c("CLIENT", "REPLY", "SKIP"), c("INCR", "batch:n"), c("GET", "batch:n"),
		c("CLIENT", "REPLY", "MAYBE"), c("CLIENT", "REPLY"),
		c("PING"),
	} {
		raw = testenv.AppendCommand(raw, cmd...)
	}
	// Another client meanwhile on the same shared connections: its replies
	// all arrive.
	other := testenv.Dial(t, pr.Proxy.Addr)
	got := untilPong(t, pr.Proxy.Addr, raw)
	want := untilPong(t, pr.B.Addr, raw)
	if !bytes.Equal(got, want) {
		t.Errorf("CLIENT REPLY pipeline:\n proxy %s\n redis %s", testenv.ShowReply(got), testenv.ShowReply(want))
	}
	if got := other.Do("GET", "batch:n"); string(got) != "$1\r\n3\r\n" {
		t.Errorf("another client's GET: %q, want the batch's writes applied", got)
	}

	// Inside MULTI it is refused and EXEC aborts: queued, it turned the
	// replies off on the transaction's connection in Redis, and the client
	// never heard from the proxy again (EXEC, then everything after it).
	tx := testenv.Dial(t, pr.Proxy.Addr)
	tx.SetTimeout(busyWait)
	for _, ex := range []struct {
		cmd  []string
		want string
	}{
		{c("MULTI"), "+OK\r\n"},
		{c("SET", "tx:reply", "1"), "+QUEUED\r\n"},
		{c("CLIENT", "REPLY", "OFF"), "-ERR fenceproxy: CLIENT REPLY cannot be part of a transaction; send it before MULTI or after EXEC\r\n"},
		{c("EXEC"), "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{c("GET", "tx:reply"), "$-1\r\n"},
		{c("MULTI"), "+OK\r\n"},
		{c("SET", "tx:reply", "2"), "+QUEUED\r\n"},
		{c("EXEC"), "*1\r\n+OK\r\n"},
	} {
		if got := tx.Do(ex.cmd...); string(got) != ex.want {
			t.Errorf("%s in a transaction: %q, want %q", testenv.ShowCommand(ex.cmd), got, ex.want)
		}
	}
	pr.alive(t)
}

// TestClientUnblock: CLIENT UNBLOCK with a proxy client's CLIENT ID ends
// that client's blocking command (unit/type/list, unit/type/stream), with
// TIMEOUT (the command's timeout reply) or ERROR (-UNBLOCKED), and answers
// :0 for a client that waits on nothing, as Redis. Before, the proxy
// refused CLIENT UNBLOCK.
func TestClientUnblock(t *testing.T) {
	pr := startPair(t)
	ctl := testenv.Dial(t, pr.Proxy.Addr)
	for _, tc := range []struct{ mode, want string }{
		{"", "*-1\r\n"}, {"TIMEOUT", "*-1\r\n"}, {"ERROR", "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"},
	} {
		blocked := testenv.Dial(t, pr.Proxy.Addr)
		id := string(bytes.Trim(blocked.Do("CLIENT", "ID"), ":\r\n"))
		blocked.SetTimeout(busyWait)
		blocked.Send("BLPOP", "unblock:list", "0")
		blocked.Flush()
		args := []string{"CLIENT", "UNBLOCK", id}
		if tc.mode != "" {
			args = append(args, tc.mode)
		}
		// The BLPOP reaches Redis at some point after Flush: until then
		// there is nothing to unblock (:0).
		for deadline := time.Now().Add(busyWait); ; {
			got := ctl.Do(args...)
			if string(got) == ":1\r\n" {
				break
			}
			if string(got) != ":0\r\n" || time.Now().After(deadline) {
				t.Fatalf("%s: %q", testenv.ShowCommand(args), got)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got, err := blocked.ReadReply(); err != nil || string(got) != tc.want {
			t.Fatalf("BLPOP unblocked with %q: %q, %v; want %q", tc.mode, got, err, tc.want)
		}
		if got := blocked.Do("PING"); string(got) != "+PONG\r\n" {
			t.Fatalf("PING after the unblock: %q", got)
		}
		if got := ctl.Do(args...); string(got) != ":0\r\n" {
			t.Errorf("%s again: %q, want :0 (nothing waits)", testenv.ShowCommand(args), got)
		}
	}
	proxy, direct := pr.conns(t)
	for _, cmd := range [][]string{
		c("CLIENT", "UNBLOCK", "999999"), c("CLIENT", "UNBLOCK", "x"), c("CLIENT", "UNBLOCK", "1", "MAYBE"),
		c("CLIENT", "UNBLOCK"), c("CLIENT", "UNBLOCK", "1", "ERROR", "x"),
	} {
		same(t, proxy, direct, cmd...)
	}
	pr.alive(t)
}

// TestAttributeReply: a RESP3 attribute (DEBUG PROTOCOL attrib, unit/protocol
// "RESP3 attributes") is relayed byte for byte with the reply it annotates,
// and the reply after it is the next request's. A guard: it passes on the
// code before the fidelity work too, where the issue saw unit/protocol
// hang at this test.
func TestAttributeReply(t *testing.T) {
	pr := startPair(t)
	for _, addr := range []string{pr.A.Addr, pr.B.Addr} {
		if got := testenv.Dial(t, addr).Do("CONFIG", "GET", "enable-debug-command"); !bytes.Contains(got, []byte("local")) && !bytes.Contains(got, []byte("yes")) {
			t.Fatalf("DEBUG is not enabled on %s (%q): testenv starts redis-server with --enable-debug-command local, which this test needs", addr, got)
		}
	}
	proxy, direct := pr.conns(t)
	// HELLO's map differs in the connection id only.
	proxy.Do("HELLO", "3")
	direct.Do("HELLO", "3")
	for range 2 {
		same(t, proxy, direct, "DEBUG", "PROTOCOL", "attrib")
		same(t, proxy, direct, "PING")
	}
	proxy.Do("HELLO", "2")
	direct.Do("HELLO", "2")
	same(t, proxy, direct, "DEBUG", "PROTOCOL", "attrib")
}
