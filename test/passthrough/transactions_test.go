package passthrough

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestTransactionsLikeRedis: MULTI/EXEC/DISCARD/WATCH sequences, their
// errors included, answer byte for byte as Redis does.
func TestTransactionsLikeRedis(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	for _, cmd := range [][]string{
		c("EXEC"), c("DISCARD"), c("UNWATCH"),
		c("MULTI"), c("SET", "tx", "1"), c("INCR", "tx"), c("GET", "tx"), c("EXEC"),
		c("MULTI"), c("MULTI"), c("WATCH", "tx"), c("DISCARD"),
		c("MULTI"), c("SET", "tx", "2"), c("INCR"), c("EXEC"), // a queuing error aborts EXEC
		c("MULTI"), c("SET", "s", "x"), c("INCR", "s"), c("GET", "s"), c("EXEC"), // an exec error is an element
		c("MULTI"), c("PING"), c("ECHO", "e"), c("EXEC"),
		c("WATCH", "w"), c("MULTI"), c("SET", "w", "1"), c("EXEC"),
		c("WATCH", "w"), c("UNWATCH"), c("MULTI"), c("GET", "w"), c("EXEC"),
		c("MULTI"), c("EXEC"),
	} {
		same(t, proxy, direct, cmd...)
	}
	pr.alive(t)
}

// TestWatchConflictAborts: a write by another client to a watched key makes
// EXEC return a null array, as on Redis.
func TestWatchConflictAborts(t *testing.T) {
	pr := startPair(t)
	a := testenv.Dial(t, pr.Proxy.Addr)
	b := testenv.Dial(t, pr.Proxy.Addr)
	a.Do("SET", "balance", "10")
	a.Do("WATCH", "balance")
	b.Do("SET", "balance", "20") // another client, another connection
	a.Do("MULTI")
	a.Do("SET", "balance", "30")
	if got := a.Do("EXEC"); string(got) != "*-1\r\n" {
		t.Fatalf("EXEC after a conflicting write = %q, want *-1 (aborted)", got)
	}
	if got := a.Do("GET", "balance"); string(got) != "$2\r\n20\r\n" {
		t.Fatalf("balance = %q, want the other client's 20", got)
	}
	// Without a conflict the same transaction commits.
	a.Do("WATCH", "balance")
	a.Do("MULTI")
	a.Do("SET", "balance", "30")
	if got := a.Do("EXEC"); string(got) != "*1\r\n+OK\r\n" {
		t.Fatalf("EXEC without conflict = %q", got)
	}
}

// TestPipelinedTransactionKeepsOrder: a pipeline that writes, then runs a
// transaction reading that write, then reads again, sees every step in order
// although the transaction runs on another backend connection.
func TestPipelinedTransactionKeepsOrder(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	cmds := [][]string{
		c("SET", "o", "1"), c("MULTI"), c("INCR", "o"), c("INCR", "o"), c("EXEC"), c("INCR", "o"), c("GET", "o"),
	}
	for _, conn := range []*testenv.Conn{proxy, direct} {
		for _, cmd := range cmds {
			conn.Send(cmd...)
		}
		conn.Flush()
	}
	for _, cmd := range cmds {
		got, err1 := proxy.ReadReply()
		want, err2 := direct.ReadReply()
		if err1 != nil || err2 != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: proxy %q (%v), redis %q (%v)", testenv.ShowCommand(cmd), got, err1, want, err2)
		}
	}
}

// TestBlockingCommands: a blocking pop waits without stalling other clients
// and gets the value pushed by another client; a timeout gives Redis's null.
func TestBlockingCommands(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	same(t, proxy, direct, "BLPOP", "empty", "0.1")
	same(t, proxy, direct, "BZPOPMIN", "emptyz", "0.1")
	same(t, proxy, direct, "XREAD", "BLOCK", "100", "STREAMS", "nostream", "$")

	blocked := testenv.Dial(t, pr.Proxy.Addr)
	blocked.Send("BRPOP", "jobs", "5")
	blocked.Flush()
	other := testenv.Dial(t, pr.Proxy.Addr)
	start := time.Now()
	for i := 0; i < 100; i++ { // others are served while it blocks
		if got := other.Do("PING"); string(got) != "+PONG\r\n" {
			t.Fatalf("PING while another client blocks = %q", got)
		}
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("100 PINGs took %v while another client blocked", d)
	}
	other.Do("LPUSH", "jobs", "job-1")
	got, err := blocked.ReadReply()
	if err != nil || string(got) != "*2\r\n$4\r\njobs\r\n$5\r\njob-1\r\n" {
		t.Fatalf("BRPOP after LPUSH = %q, %v", got, err)
	}
	// WAIT on a proxy without replicas behind it: 0 replicas, as Redis says.
	if got := proxy.Do("WAIT", "0", "100"); string(got) != ":0\r\n" {
		t.Fatalf("WAIT 0 100 = %q", got)
	}
}

// backendClientList is Redis A's CLIENT LIST, one line a client, the
// asking connection's included.
func backendClientList(t *testing.T, addr string) []string {
	t.Helper()
	conn := testenv.Dial(t, addr)
	defer conn.Close()
	list, ok := testenv.ParseBulk(conn.Do("CLIENT", "LIST"))
	if !ok {
		t.Fatal("CLIENT LIST: no bulk reply")
	}
	return strings.Split(strings.TrimSuffix(string(list), "\n"), "\n")
}

// backendClients counts the clients Redis A has.
func backendClients(t *testing.T, addr string) int {
	t.Helper()
	return len(backendClientList(t, addr)) - 1 // not the asking connection
}

// backendClientsRunning lists the ids of the clients Redis A has whose
// last command was cmd (CLIENT LIST's cmd=).
func backendClientsRunning(t *testing.T, addr, cmd string) []string {
	t.Helper()
	var ids []string
	for _, line := range backendClientList(t, addr) {
		fields := strings.Fields(line)
		if len(fields) > 0 && slices.Contains(fields, "cmd="+cmd) {
			ids = append(ids, strings.TrimPrefix(fields[0], "id="))
		}
	}
	return ids
}

// TestDisconnectLeavesNothingPinned: a client that disconnects while
// blocked, inside MULTI, or while watching leaves no backend connection
// behind: the connection that carried its command is closed (the node
// keeps a spare idle one for the next client's, which is not it).
func TestDisconnectLeavesNothingPinned(t *testing.T) {
	pr := startPair(t)
	warm := testenv.Dial(t, pr.Proxy.Addr)
	warm.Do("PING")

	for _, tc := range []struct {
		name string
		cmds [][]string
		last string // CLIENT LIST's cmd= of the pinned connection
	}{
		{"blocked in BLPOP", [][]string{c("BLPOP", "never", "0")}, "blpop"},
		{"inside MULTI", [][]string{c("MULTI"), c("SET", "x", "1")}, "set"},
		{"watching", [][]string{c("WATCH", "x")}, "watch"},
		{"blocked in XREAD", [][]string{c("XREAD", "BLOCK", "0", "STREAMS", "nostream", "$")}, "xread"},
	} {
		before := backendClientsRunning(t, pr.A.Addr, tc.last)
		cl := testenv.Dial(t, pr.Proxy.Addr)
		for _, cmd := range tc.cmds {
			cl.Send(cmd...)
		}
		cl.Flush()
		var pinned []string
		deadline := time.Now().Add(5 * time.Second)
		for len(pinned) == 0 {
			for _, id := range backendClientsRunning(t, pr.A.Addr, tc.last) {
				if !slices.Contains(before, id) {
					pinned = append(pinned, id)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no connection of Redis's ran %s: the command did not reach it on its own connection", tc.name, tc.last)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cl.Close()
		deadline = time.Now().Add(5 * time.Second)
		for { // abandoned connections are closed, not kept for reuse
			left := backendClientsRunning(t, pr.A.Addr, tc.last)
			if !slices.ContainsFunc(pinned, func(id string) bool { return slices.Contains(left, id) }) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: 5s after the client left, Redis still has its connection (ids %v among %v)", tc.name, pinned, left)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A MULTI left behind must not leak into the next client's requests.
	if got := warm.Do("GET", "x"); string(got) != "$-1\r\n" {
		t.Fatalf("GET x after an abandoned MULTI = %q, want null", got)
	}
	pr.alive(t)
}

// TestWaitingAcquireLeavesLineOnDisconnect: a client that disconnects while
// waiting for a lock leaves the line at once.
func TestWaitingAcquireLeavesLineOnDisconnect(t *testing.T) {
	pr := startPair(t)
	holder := testenv.Dial(t, pr.Proxy.Addr)
	holder.Do("LOCK.ACQUIRE", "line", "holder", "30000")
	w := testenv.Dial(t, pr.Proxy.Addr)
	w.Send("LOCK.ACQUIRE", "line", "waiter", "30000", "WAIT", "20000")
	w.Flush()
	waiters := func() string {
		parts, _ := testenv.SplitArray(holder.Do("LOCK.INFO", "line"))
		return string(parts[7])
	}
	deadline := time.Now().Add(5 * time.Second)
	for waiters() != ":1\r\n" {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never showed in LOCK.INFO")
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.Close()
	deadline = time.Now().Add(5 * time.Second)
	for waiters() != ":0\r\n" {
		if time.Now().After(deadline) {
			t.Fatal("5s after the waiter disconnected it is still in line")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// And it is not granted the lock when the holder releases.
	holder.Do("LOCK.RELEASE", "line", "holder")
	parts, _ := testenv.SplitArray(holder.Do("LOCK.INFO", "line"))
	if string(parts[1]) != "$-1\r\n" {
		t.Fatalf("after release the lock went to %q, want nobody", parts[1])
	}
}

// TestRESP3LikeRedis: after HELLO 3 a client gets Redis's own RESP3 replies
// (maps, doubles, nulls, booleans) byte for byte, transactions and blocking
// commands included, and HELLO 2 switches back.
func TestRESP3LikeRedis(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	hp := proxy.Do("HELLO", "3")
	hd := direct.Do("HELLO", "3")
	if !bytes.HasPrefix(hp, []byte("%7\r\n")) || !bytes.HasPrefix(hd, []byte("%7\r\n")) {
		t.Fatalf("HELLO 3: proxy %q, redis %q; want a 7-field map", hp, hd)
	}
	for _, cmd := range [][]string{
		c("HSET", "h", "a", "1", "b", "2"), c("HGETALL", "h"), c("HGETALL", "none"),
		c("ZADD", "z", "1.5", "m"), c("ZSCORE", "z", "m"), c("ZRANGE", "z", "0", "-1", "WITHSCORES"),
		c("GET", "none"), c("SADD", "s", "x"), c("SMEMBERS", "s"), c("SISMEMBER", "s", "x"),
		c("EVAL", "return {1, 'two', {3.5}}", "0"), c("EVAL", "return redis.setresp(3) or true", "0"),
		c("CONFIG", "GET", "maxmemory"),
		c("MULTI"), c("HGETALL", "h"), c("ZSCORE", "z", "m"), c("EXEC"),
		c("BLPOP", "nolist", "0.05"),
	} {
		same(t, proxy, direct, cmd...)
	}
	// Back to RESP2 (the client ids in HELLO's reply differ, so compare the shape).
	if got, want := proxy.Do("HELLO", "2"), direct.Do("HELLO", "2"); !bytes.HasPrefix(got, []byte("*14\r\n")) || !bytes.HasPrefix(want, []byte("*14\r\n")) {
		t.Fatalf("HELLO 2 after HELLO 3: proxy %q, redis %q", got, want)
	}
	same(t, proxy, direct, "HGETALL", "h")
	same(t, proxy, direct, "ZSCORE", "z", "m")
	// The lock family speaks RESP3 nulls to a RESP3 client.
	proxy.Do("HELLO", "3")
	proxy.Do("LOCK.ACQUIRE", "r3", "a", "10000")
	if got := proxy.Do("LOCK.ACQUIRE", "r3", "b", "10000"); string(got) != "_\r\n" {
		t.Fatalf("busy LOCK.ACQUIRE over RESP3 = %q, want _", got)
	}
}

// TestConnectionCommands: INFO carries Redis's sections and the proxy's;
// CLIENT INFO/LIST describe the proxy's clients; RESET, inside MULTI too,
// ends MULTI and RESP3.
func TestConnectionCommands(t *testing.T) {
	pr := startPair(t)
	proxy := testenv.Dial(t, pr.Proxy.Addr)
	info, _ := testenv.ParseBulk(proxy.Do("INFO"))
	for _, want := range []string{"# Server\r\n", "redis_version:", "# fenceproxy\r\n", "token_bound:", "fence_store_healthy:1"} {
		if !strings.Contains(string(info), want) {
			t.Errorf("INFO lacks %q", want)
		}
	}
	only, _ := testenv.ParseBulk(proxy.Do("INFO", "fenceproxy"))
	if !strings.HasPrefix(string(only), "# fenceproxy\r\n") || strings.Contains(string(only), "redis_version") {
		t.Errorf("INFO fenceproxy = %q", only)
	}
	proxy.Do("CLIENT", "SETNAME", "me")
	ci, _ := testenv.ParseBulk(proxy.Do("CLIENT", "INFO"))
	if !strings.Contains(string(ci), " name=me ") {
		t.Errorf("CLIENT INFO = %q, want name=me", ci)
	}
	other := testenv.Dial(t, pr.Proxy.Addr)
	other.Do("PING")
	cl, _ := testenv.ParseBulk(proxy.Do("CLIENT", "LIST"))
	if n := strings.Count(string(cl), "\n"); n < 2 || !strings.Contains(string(cl), " name=me ") {
		t.Errorf("CLIENT LIST = %q, want this client (name=me) and the other", cl)
	}
	other.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		after, _ := testenv.ParseBulk(proxy.Do("CLIENT", "LIST"))
		if strings.Count(string(after), "\n") == strings.Count(string(cl), "\n")-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CLIENT LIST still shows a closed client: %q", after)
		}
		time.Sleep(10 * time.Millisecond)
	}
	id := proxy.Do("CLIENT", "ID")
	proxy.Do("HELLO", "3")
	proxy.Do("MULTI")
	proxy.Do("SET", "r", "1")
	if got := proxy.Do("RESET"); string(got) != "+RESET\r\n" {
		t.Fatalf("RESET = %q", got)
	}
	if got := proxy.Do("GET", "r"); string(got) != "$-1\r\n" {
		t.Fatalf("GET after RESET (RESP2, transaction discarded) = %q", got)
	}
	if got := proxy.Do("CLIENT", "GETNAME"); string(got) != "$-1\r\n" {
		t.Fatalf("CLIENT GETNAME after RESET = %q", got)
	}
	// The proxy's own state is reset too: it answers CLIENT itself again,
	// out of the transaction, in RESP2.
	if got := proxy.Do("CLIENT", "ID"); string(got) != string(id) {
		t.Fatalf("CLIENT ID after RESET = %q, want the proxy's %q", got, id)
	}
	ci, _ = testenv.ParseBulk(proxy.Do("CLIENT", "INFO"))
	if !strings.Contains(string(ci), " multi=-1 ") || !strings.Contains(string(ci), " resp=2 ") {
		t.Fatalf("CLIENT INFO after RESET = %q, want multi=-1 and resp=2", ci)
	}
}

// TestBackendDiesMidTransaction: when the connection a transaction runs on
// dies, the client gets an error for the rest of it and EXEC aborts; nothing
// of it is applied, and nothing is replayed over a new connection.
func TestBackendDiesMidTransaction(t *testing.T) {
	pr := startPair(t)
	cl := testenv.Dial(t, pr.Proxy.Addr)
	cl.Do("MULTI")
	if got := cl.Do("SET", "half", "1"); string(got) != "+QUEUED\r\n" {
		t.Fatalf("SET in MULTI = %q", got)
	}
	admin := testenv.Dial(t, pr.A.Addr)
	list, _ := testenv.ParseBulk(admin.Do("CLIENT", "LIST"))
	var id string
	for _, line := range strings.Split(string(list), "\n") {
		if strings.Contains(line, " multi=1 ") {
			for _, f := range strings.Fields(line) {
				if v, ok := strings.CutPrefix(f, "id="); ok {
					id = v
				}
			}
		}
	}
	if id == "" {
		t.Fatalf("no backend connection in MULTI in CLIENT LIST:\n%s", list)
	}
	if got := admin.Do("CLIENT", "KILL", "ID", id); string(got) != ":1\r\n" {
		t.Fatalf("CLIENT KILL ID %s = %q", id, got)
	}
	time.Sleep(100 * time.Millisecond)
	if got := cl.Do("SET", "half", "2"); !strings.HasPrefix(string(got), "-ERR fenceproxy: lost the connection to Redis") {
		t.Errorf("SET after the transaction's connection died = %q, want a lost-transaction error", got)
	}
	if got := cl.Do("EXEC"); !strings.HasPrefix(string(got), "-EXECABORT") {
		t.Errorf("EXEC after the transaction's connection died = %q, want -EXECABORT", got)
	}
	if got := cl.Do("GET", "half"); string(got) != "$-1\r\n" {
		t.Fatalf("GET half = %q: part of a lost transaction was applied", got)
	}
	pr.alive(t)
}
