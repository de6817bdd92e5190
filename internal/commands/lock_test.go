package commands

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fenceproxy/fenceproxy/internal/lockcmd"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestLockArgumentErrors: every malformed lock request gets its own
// Redis-style error and changes nothing.
func TestLockArgumentErrors(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{}, false)
	c := p.dial(t)
	long := strings.Repeat("r", lockcmd.MaxResourceLen+1)
	ttlErr := "-ERR ttl-ms must be an integer from 1 to " + strconv.FormatInt(lockcmd.MaxTTL.Milliseconds(), 10) + " (milliseconds)\r\n"
	run(t, c, []exchange{
		{[]string{"LOCK.ACQUIRE", "r", "o"}, "-ERR wrong number of arguments for 'lock.acquire' command\r\n"},
		{[]string{"LOCK.ACQUIRE", "r", "o", "1000", "WAIT"}, "-ERR wrong number of arguments for 'lock.acquire' command\r\n"},
		{[]string{"LOCK.ACQUIRE", "r", "o", "1000", "WAIT", "1", "x"}, "-ERR wrong number of arguments for 'lock.acquire' command\r\n"},
		{[]string{"LOCK.ACQUIRE", "", "o", "1000"}, "-ERR resource must be 1 to " + strconv.Itoa(lockcmd.MaxResourceLen) + " bytes\r\n"},
		{[]string{"LOCK.ACQUIRE", long, "o", "1000"}, "-ERR resource must be 1 to " + strconv.Itoa(lockcmd.MaxResourceLen) + " bytes\r\n"},
		{[]string{"LOCK.ACQUIRE", "r", "", "1000"}, "-ERR owner must be 1 to " + strconv.Itoa(lockcmd.MaxOwnerLen) + " bytes\r\n"},
		{[]string{"LOCK.ACQUIRE", "r", strings.Repeat("o", lockcmd.MaxOwnerLen+1), "1000"}, "-ERR owner must be 1 to " + strconv.Itoa(lockcmd.MaxOwnerLen) + " bytes\r\n"},
		{[]string{"LOCK.ACQUIRE", "r", "o", "0"}, ttlErr},
		{[]string{"LOCK.ACQUIRE", "r", "o", "-5"}, ttlErr},
		{[]string{"LOCK.ACQUIRE", "r", "o", "1e3"}, ttlErr},
		{[]string{"LOCK.ACQUIRE", "r", "o", strconv.FormatInt(lockcmd.MaxTTL.Milliseconds()+1, 10)}, ttlErr},
		{[]string{"LOCK.ACQUIRE", "r", "o", "1000", "LATER", "5"}, "-ERR syntax error: expected WAIT timeout-ms after ttl-ms\r\n"},
		{[]string{"LOCK.ACQUIRE", "r", "o", "1000", "WAIT", "-1"}, "-ERR WAIT timeout-ms must be an integer from 0 to " + strconv.FormatInt(lockcmd.MaxWait.Milliseconds(), 10) + " (milliseconds)\r\n"},
		{[]string{"LOCK.RENEW", "r", "o"}, "-ERR wrong number of arguments for 'lock.renew' command\r\n"},
		{[]string{"LOCK.RENEW", "r", "o", "x"}, ttlErr},
		{[]string{"LOCK.RELEASE", "r"}, "-ERR wrong number of arguments for 'lock.release' command\r\n"},
		{[]string{"LOCK.RELEASE", "", "o"}, "-ERR resource must be 1 to " + strconv.Itoa(lockcmd.MaxResourceLen) + " bytes\r\n"},
		{[]string{"FENCE.CHECK", "r", "0"}, "-ERR token must be a positive integer\r\n"},
		{[]string{"FENCE.CHECK", "r", "abc"}, "-ERR token must be a positive integer\r\n"},
		{[]string{"FENCE.CHECK", "", "1"}, "-ERR resource must be 1 to " + strconv.Itoa(lockcmd.MaxResourceLen) + " bytes\r\n"},
		{[]string{"FENCE.EXEC", "r", "-1", "SET", "k", "v"}, "-ERR token must be a positive integer\r\n"},
		{[]string{"FENCE.EXEC", "", "1", "SET", "k", "v"}, "-ERR resource must be 1 to " + strconv.Itoa(lockcmd.MaxResourceLen) + " bytes\r\n"},
		{[]string{"FENCE.EXEC", "r", "1"}, "-ERR wrong number of arguments for 'fence.exec' command\r\n"},
		{[]string{"LOCK.INFO", ""}, "-ERR resource must be 1 to " + strconv.Itoa(lockcmd.MaxResourceLen) + " bytes\r\n"},
		{[]string{"LOCK.TOP", "0"}, "-ERR count must be an integer from 1 to 1024\r\n"},
		{[]string{"LOCK.TOP", "1025"}, "-ERR count must be an integer from 1 to 1024\r\n"},
		{[]string{"LOCK.TOP", "1", "2"}, "-ERR wrong number of arguments for 'lock.top' command\r\n"},
		{[]string{"LOCK.SLOWLOG"}, "-ERR wrong number of arguments for 'lock.slowlog' command\r\n"},
		{[]string{"LOCK.SLOWLOG", "GET", "x"}, "-ERR value is not an integer or out of range\r\n"},
		{[]string{"LOCK.SLOWLOG", "GET", "-2"}, "-ERR count should be greater than or equal to -1\r\n"},
		{[]string{"LOCK.SLOWLOG", "LEN", "1"}, "-ERR wrong number of arguments for 'lock.slowlog|len' command\r\n"},
		{[]string{"LOCK.SLOWLOG", "BOGUS"}, "-ERR unknown subcommand 'BOGUS'. Try LOCK.SLOWLOG HELP.\r\n"},
		// Nothing above took or recorded anything.
		{[]string{"LOCK.INFO", "r"}, "*14\r\n$5\r\nowner\r\n$-1\r\n$5\r\ntoken\r\n:0\r\n$6\r\nttl-ms\r\n:-2\r\n$7\r\nwaiters\r\n:0\r\n$11\r\nacquired-at\r\n:-1\r\n$10\r\nrenewed-at\r\n:-1\r\n$11\r\nclient-addr\r\n$-1\r\n"},
		{[]string{"LOCK.SLOWLOG", "LEN"}, ":0\r\n"},
	})
	if help := string(c.Do("LOCK.SLOWLOG", "HELP")); !strings.HasPrefix(help, "*11\r\n$") { // its 11 lines
		t.Errorf("LOCK.SLOWLOG HELP: %q", help)
	}
}

// TestLockFamily: a lease's life through the wire, and what each command
// answers on the way.
func TestLockFamily(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{}, false)
	a, b := p.dial(t), p.dial(t)
	tok := wantInt(t, a, "LOCK.ACQUIRE", "orders", "worker-a", "10000")
	ts := strconv.FormatInt(tok, 10)
	run(t, a, []exchange{
		{[]string{"LOCK.ACQUIRE", "orders", "worker-a", "10000"}, ":" + ts + "\r\n"}, // its own grant, re-armed
		{[]string{"LOCK.RENEW", "orders", "worker-a", "20000"}, ":" + ts + "\r\n"},
		{[]string{"LOCK.RENEW", "orders", "worker-b", "20000"}, "$-1\r\n"},
		{[]string{"FENCE.CHECK", "orders", ts}, ":1\r\n"},
		{[]string{"FENCE.CHECK", "orders", strconv.FormatInt(tok+1000, 10)}, "-ERR token " + strconv.FormatInt(tok+1000, 10) + " was never issued for this resource\r\n"},
		{[]string{"FENCE.EXEC", "orders", ts, "SET", "orders:total", "7"}, "+OK\r\n"},
		{[]string{"GET", "orders:total"}, "$1\r\n7\r\n"},
		{[]string{"LOCK.RELEASE", "orders", "worker-b"}, ":0\r\n"},
	})
	run(t, b, []exchange{
		{[]string{"LOCK.ACQUIRE", "orders", "worker-b", "10000"}, "$-1\r\n"},
	})
	info := string(b.Do("LOCK.INFO", "orders"))
	if !strings.HasPrefix(info, "*14\r\n$5\r\nowner\r\n$8\r\nworker-a\r\n$5\r\ntoken\r\n:"+ts+"\r\n$6\r\nttl-ms\r\n:") ||
		!strings.Contains(info, "$11\r\nclient-addr\r\n$") {
		t.Errorf("LOCK.INFO while held: %q", info)
	}
	// A wait in line is granted by the release.
	b.Send("LOCK.ACQUIRE", "orders", "worker-b", "10000", "WAIT", "5000")
	b.Flush()
	waitFor(t, func() bool { return strings.Contains(string(a.Do("LOCK.INFO", "orders")), "waiters\r\n:1\r\n") })
	run(t, a, []exchange{{[]string{"LOCK.RELEASE", "orders", "worker-a"}, ":1\r\n"}})
	next, err := b.ReadReply()
	if err != nil {
		t.Fatal(err)
	}
	nt, ok := testenv.ParseInt(next)
	if !ok || nt <= tok {
		t.Fatalf("the waiter's grant: %q, want a token above %d", next, tok)
	}
	run(t, a, []exchange{
		{[]string{"FENCE.CHECK", "orders", ts}, ":0\r\n"},
		{[]string{"FENCE.EXEC", "orders", ts, "SET", "orders:total", "8"}, "-STALE token " + ts + " is older than the newest issued for this resource; the command was not run\r\n"},
		{[]string{"FENCE.EXEC", "orders", strconv.FormatInt(nt+5000, 10), "SET", "orders:total", "8"}, "-ERR token " + strconv.FormatInt(nt+5000, 10) + " was never issued for this resource\r\n"},
		{[]string{"GET", "orders:total"}, "$1\r\n7\r\n"},
		{[]string{"LOCK.ACQUIRE", "orders", "worker-a", "10000", "WAIT", "0"}, "$-1\r\n"}, // WAIT 0: no waiting
	})
	// LOCK.TOP counts the acquires that found the resource held.
	top := string(a.Do("LOCK.TOP", "5"))
	if !strings.HasPrefix(top, "*1\r\n*3\r\n$6\r\norders\r\n:") {
		t.Errorf("LOCK.TOP: %q", top)
	}
	// Every wait and hold is slow here (thresholds 0): the log has them.
	if n := wantInt(t, a, "LOCK.SLOWLOG", "LEN"); n < 2 {
		t.Errorf("LOCK.SLOWLOG LEN: %d, want the wait and the hold", n)
	}
	got := string(a.Do("LOCK.SLOWLOG", "GET", "1"))
	if !strings.HasPrefix(got, "*1\r\n*7\r\n:") || !strings.Contains(got, "$6\r\norders\r\n") {
		t.Errorf("LOCK.SLOWLOG GET 1: %q", got)
	}
	run(t, a, []exchange{
		{[]string{"LOCK.SLOWLOG", "RESET"}, "+OK\r\n"},
		{[]string{"LOCK.SLOWLOG", "GET"}, "*0\r\n"},
		{[]string{"LOCK.RELEASE", "orders", "worker-b"}, ":1\r\n"},
		{[]string{"LOCK.RELEASE", "orders", "worker-b"}, ":0\r\n"},
	})
	if !strings.Contains(string(a.Do("LOCK.SLOWLOG", "GET", "-1")), "$4\r\nheld\r\n") {
		t.Errorf("a release logs a held entry (threshold 0)")
	}
}

// TestLockPipelined: a pipeline of lock requests for one resource runs in
// the order sent, and FENCE.CHECK behind an ACQUIRE judges its token.
func TestLockPipelined(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{}, false)
	c := p.dial(t)
	const n = 20
	for range n {
		c.Send("LOCK.ACQUIRE", "pipe", "o", "10000")
		c.Send("FENCE.CHECK", "pipe", "1")
		c.Send("LOCK.RELEASE", "pipe", "o")
	}
	c.Flush()
	for i := range n {
		acq, _ := c.ReadReply()
		check, _ := c.ReadReply()
		rel, _ := c.ReadReply()
		tok, ok := testenv.ParseInt(acq)
		if !ok || string(rel) != ":1\r\n" {
			t.Fatalf("round %d: ACQUIRE %q, RELEASE %q", i, acq, rel)
		}
		want := ":0\r\n"
		if tok == 1 {
			want = ":1\r\n"
		}
		if string(check) != want {
			t.Fatalf("round %d: FENCE.CHECK of token 1 behind the grant of %d: %q, want %q", i, tok, check, want)
		}
	}
}

// TestLockWaitQueueAndClientGone: the line for a resource is bounded
// (MaxWaiters 2 here), and a waiter whose client goes away leaves it,
// served by a goroutine per client and on the serve loop (which watches a
// waiting client).
func TestLockWaitQueueAndClientGone(t *testing.T) {
	for _, loop := range []bool{false, true} {
		t.Run(fmt.Sprintf("loop=%v", loop), func(t *testing.T) { testLockWaitQueueAndClientGone(t, loop) })
	}
}

func testLockWaitQueueAndClientGone(t *testing.T, loop bool) {
	p, _ := startStandalone(t, proxyOptions{loop: loop}, false)
	holder := p.dial(t)
	wantInt(t, holder, "LOCK.ACQUIRE", "line", "holder", "60000")
	w1, w2 := p.dial(t), p.dial(t)
	for _, w := range []*testenv.Conn{w1, w2} {
		w.Send("LOCK.ACQUIRE", "line", "waiter", "10000", "WAIT", "60000")
		w.Flush()
	}
	waitFor(t, func() bool { return strings.Contains(string(holder.Do("LOCK.INFO", "line")), "waiters\r\n:2\r\n") })
	run(t, holder, []exchange{
		{[]string{"LOCK.ACQUIRE", "line", "third", "10000", "WAIT", "60000"}, "-QUEUEFULL fenceproxy: 2 clients already wait for this resource (--max-waiters); retry later or raise the limit\r\n"},
	})
	w1.Close()
	w2.Close()
	waitFor(t, func() bool { return strings.Contains(string(holder.Do("LOCK.INFO", "line")), "waiters\r\n:0\r\n") })
	if info := bulk(t, holder.Do("INFO", "locks")); !strings.Contains(info, "lock_acquires_queue_full:1\r\n") || !strings.Contains(info, "lock_waiters:0\r\n") {
		t.Errorf("INFO locks: %q", info)
	}
}

// TestLockNoReplicas: with --min-replicas 1 and no replica, a grant is
// refused with NOREPLICAS and leaves nothing held.
func TestLockNoReplicas(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{minReplicas: 1}, false)
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"LOCK.ACQUIRE", "nr", "o", "10000"}, "-NOREPLICAS 0 of 1 required replicas acknowledged the lock in time; nothing was granted\r\n"},
		{[]string{"LOCK.RENEW", "nr", "o", "10000"}, "$-1\r\n"},
	})
	if info := string(c.Do("LOCK.INFO", "nr")); !strings.Contains(info, "$5\r\nowner\r\n$-1\r\n") {
		t.Errorf("LOCK.INFO after a refused grant: %q", info)
	}
}

// TestLockWithReplica: with a replica the same grant is acknowledged.
func TestLockWithReplica(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{minReplicas: 1}, true)
	c := p.dial(t)
	tok := wantInt(t, c, "LOCK.ACQUIRE", "rep", "o", "10000")
	run(t, c, []exchange{
		{[]string{"LOCK.RENEW", "rep", "o", "10000"}, ":" + strconv.FormatInt(tok, 10) + "\r\n"},
		{[]string{"LOCK.RELEASE", "rep", "o"}, ":1\r\n"},
	})
}

// TestLockErrors: what Redis refuses and what the proxy cannot do become
// Redis-style errors that say what to do, never Go error text.
func TestLockErrors(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--maxmemory-policy", "allkeys-lru"}})
	p := startProxy(t, proxyOptions{seeds: []string{master.Addr}})
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"LOCK.ACQUIRE", "ev", "o", "10000"}, "-ERR fenceproxy: the Redis master's maxmemory-policy is allkeys-lru, which can evict lock records; nothing was granted. Set it to noeviction or start fenceproxy with --allow-evictable-locks\r\n"},
		{[]string{"LOCK.RENEW", "ev", "o", "10000"}, "-ERR fenceproxy: the Redis master's maxmemory-policy is allkeys-lru, which can evict lock records; the lease was not extended. Set it to noeviction or start fenceproxy with --allow-evictable-locks\r\n"},
	})
	redis := testenv.Dial(t, master.Addr)
	redis.Do("CONFIG", "SET", "maxmemory-policy", "noeviction")
	// The policy is read again now and then; until then grants stay refused.
	waitFor(t, func() bool { return bytes.HasPrefix(c.Do("LOCK.ACQUIRE", "ev", "o", "10000"), []byte(":")) })

	// A client that wrote over an owner record's key gets Redis's own
	// error for the lock script.
	redis.Do("RPUSH", "fenceproxy:lock:{clobbered}", "x")
	wantPrefix(t, c, "-WRONGTYPE ", "LOCK.ACQUIRE", "clobbered", "o", "10000")
	wantPrefix(t, c, "-WRONGTYPE ", "LOCK.RELEASE", "clobbered", "o")
	wantPrefix(t, c, "-WRONGTYPE ", "LOCK.INFO", "clobbered")
	if strings.Contains(p.Log(), "internal error") {
		t.Errorf("an error reached the log as internal: %s", p.Log())
	}

	// Redis stopped: the lock commands answer that it cannot be reached.
	master.Stop()
	defer master.Cont()
	c.SetTimeout(30 * time.Second)
	got := c.Do("LOCK.ACQUIRE", "down", "o", "10000")
	if !bytes.HasPrefix(got, []byte("-")) || bytes.Contains(got, []byte("127.0.0.1")) {
		t.Errorf("LOCK.ACQUIRE with Redis stopped: %q, want an error naming no address", got)
	}
	t.Logf("LOCK.ACQUIRE with Redis stopped: %q", got)
}

// waitFor polls cond for up to 30 s (only to end a hang: cond normally
// holds within milliseconds, or a second for what the proxy rereads every
// second).
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 30s")
}

// TestLockCyclesOnTheLoop: LOCK.ACQUIRE (without WAIT), LOCK.RENEW and
// LOCK.RELEASE are served on the serve loop, sent one at a time or
// pipelined with other requests, and their replies come in order: a lock
// client keeps the loop's cheaper path through its cycles. A LOCK.ACQUIRE
// ... WAIT, which blocks, is the loop's only first in its batch.
func TestLockCyclesOnTheLoop(t *testing.T) {
	po := proxyOptions{}
	w := watchLoop(&po)
	p, _ := startStandalone(t, po, false)
	c := p.dial(t)
	first := string(c.Do("LOCK.ACQUIRE", "r", "o", "10000"))
	if !strings.HasPrefix(first, ":") {
		t.Fatalf("LOCK.ACQUIRE: %q", first)
	}
	run(t, c, []exchange{
		{[]string{"LOCK.RENEW", "r", "o", "10000"}, first},
		{[]string{"LOCK.RELEASE", "r", "o"}, ":1\r\n"},
	})
	pipelineTokens(t, c, [][]string{{"SET", "k", "v"}, {"LOCK.ACQUIRE", "r2", "o", "10000"}, {"GET", "k"}, {"LOCK.RELEASE", "r2", "o"}, {"LOCK.RELEASE", "r2", "o"}},
		[]string{"+OK\r\n", ":", "$1\r\nv\r\n", ":1\r\n", ":0\r\n"})
	const want = "LOCK.ACQUIRE:loop LOCK.RENEW:loop LOCK.RELEASE:loop SET:loop LOCK.ACQUIRE:loop GET:loop LOCK.RELEASE:loop LOCK.RELEASE:loop"
	w.expect(t, want)
}

// TestFencingOnTheLoop: the lock family's other commands (FENCE.CHECK,
// FENCE.EXEC, LOCK.INFO, LOCK.TOKEN, LOCK.TOP, LOCK.SLOWLOG) are served on
// the serve loop too, alone and pipelined behind a grant of the same
// resource (which they follow: FENCE.CHECK's token is the grant's), with
// their replies in order. FENCE.CHECK answers from the store's cache on
// the loop, and a lock worker answers one whose resource is not cached
// (here: never granted). Mutation: without their onLoop entries each went
// on a goroutine detour (":goroutine").
func TestFencingOnTheLoop(t *testing.T) {
	po := proxyOptions{}
	w := watchLoop(&po)
	p, _ := startStandalone(t, po, false)
	c := p.dial(t)
	first := string(c.Do("LOCK.ACQUIRE", "f", "o", "10000"))
	tok := strings.TrimSuffix(strings.TrimPrefix(first, ":"), "\r\n")
	if _, err := strconv.ParseUint(tok, 10, 64); err != nil {
		t.Fatalf("LOCK.ACQUIRE: %q", first)
	}
	run(t, c, []exchange{
		{[]string{"FENCE.CHECK", "f", tok}, ":1\r\n"},
		{[]string{"FENCE.CHECK", "never-granted", "1"}, "-ERR token 1 was never issued for this resource\r\n"},
		{[]string{"FENCE.EXEC", "f", tok, "SET", "guarded", "1"}, "+OK\r\n"},
		{[]string{"LOCK.TOKEN", "f", "o"}, first},
		{[]string{"LOCK.TOP", "1"}, "*0\r\n"},
		{[]string{"LOCK.SLOWLOG", "LEN"}, ":0\r\n"},
		{[]string{"LOCK.RELEASE", "f", "o"}, ":1\r\n"},
	})
	if info := string(c.Do("LOCK.INFO", "f")); !strings.Contains(info, "token\r\n"+first) {
		t.Fatalf("LOCK.INFO: %q", info)
	}
	// Pipelined behind the grant of the same resource: checked after it.
	got := pipelineTokens(t, c, [][]string{{"LOCK.ACQUIRE", "f", "o", "10000"}, {"FENCE.CHECK", "f", tok}, {"GET", "guarded"}, {"LOCK.RELEASE", "f", "o"}},
		[]string{":", ":0\r\n", "$1\r\n1\r\n", ":1\r\n"})
	if got[0] == first {
		t.Fatalf("the second grant's token %q is the first's", got[0])
	}
	const want = "LOCK.ACQUIRE:loop FENCE.CHECK:loop FENCE.CHECK:loop FENCE.EXEC:loop LOCK.TOKEN:loop LOCK.TOP:loop LOCK.SLOWLOG:loop LOCK.RELEASE:loop LOCK.INFO:loop " +
		"LOCK.ACQUIRE:loop FENCE.CHECK:loop GET:loop LOCK.RELEASE:loop"
	w.expect(t, want)
}

// TestRecipesOnTheLoop: a recognised lock recipe (Redisson's RLock
// acquire and unlock, by EVALSHA) is served on the serve loop as the lock
// family is, alone or pipelined with other requests, with the recipe's own
// replies in order; an unknown script is forwarded there as before.
// Mutation: with EvalOnLoop refusing recognised scripts, each went on a
// goroutine detour (":goroutine").
func TestRecipesOnTheLoop(t *testing.T) {
	const (
		acquireSHA = "149c5a8bf18676fd99e9e6e24923bd64d9b62f94"
		unlockSHA  = "6866459238a13a701d42f4971f12d9f3a50e2442"
	)
	po := proxyOptions{}
	w := watchLoop(&po)
	p, _ := startStandalone(t, po, false)
	c := p.dial(t)
	acquire := []string{"EVALSHA", acquireSHA, "1", "orders", "30000", "uuid:1"}
	unlock := []string{"EVALSHA", unlockSHA, "3", "orders", "redisson_lock__channel:{orders}",
		"redisson_unlock_latch:{orders}:r", "0", "30000", "uuid:1", "PUBLISH", "13500"}
	run(t, c, []exchange{
		{acquire, "$-1\r\n"}, // granted: nil, as Redisson's script answers
		{unlock, ":1\r\n"},
	})
	reqs := [][]string{{"SET", "k", "v"}, acquire, {"GET", "k"}, unlock, {"EVAL", "return 7", "0"}}
	for _, r := range reqs {
		c.Send(r...)
	}
	c.Flush()
	for i, want := range []string{"+OK\r\n", "$-1\r\n", "$1\r\nv\r\n", ":1\r\n", ":7\r\n"} {
		if got, err := c.ReadReply(); err != nil || string(got) != want {
			t.Fatalf("reply %d (%q): %q, %v; want %q", i, reqs[i][0], got, err, want)
		}
	}
	const want = "EVALSHA:loop EVALSHA:loop SET:loop EVALSHA:loop GET:loop EVALSHA:loop EVAL:loop"
	w.expect(t, want)
	// Run as callbacks (locks/now.go), but the pipelined unlock, queued
	// behind the acquire of its lock.
	if got := courses(t, p); got != "callbacks=3 worker=1" {
		t.Errorf("the recipes' requests ran %s, want callbacks=3 worker=1", got)
	}
}

// TestValueLocksOnTheLoop: a SET NX PX of a --lock-keys key (redis-py's,
// redsync's lock grant) and redis-py's release script run as callbacks on
// the serve loop as the lock family does, answered in their shapes:
// granted, then busy (nil); a release by another, then by the holder;
// granted again. Mutation: RecipeValueWriteNow or RecipeValueReleaseNow
// refusing every request sends each to a worker.
func TestValueLocksOnTheLoop(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{loop: true, minReplicas: 1, lockKeys: "lock:*"}, true)
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"SET", "lock:a", "v1", "NX", "PX", "10000"}, "+OK\r\n"},
		{[]string{"SET", "lock:a", "v2", "NX", "PX", "10000"}, "$-1\r\n"},
		{[]string{"SET", "other", "x", "NX", "PX", "10000"}, "+OK\r\n"}, // not a lock key: forwarded
		{[]string{"EVALSHA", pyRelease, "1", "lock:a", "v2"}, ":0\r\n"}, // not the holder's
		{[]string{"EVALSHA", pyRelease, "1", "lock:a", "v1"}, ":1\r\n"},
		{[]string{"SET", "lock:a", "v2", "NX", "PX", "10000"}, "+OK\r\n"},
	})
	if got := courses(t, p); got != "callbacks=5 worker=0" {
		t.Errorf("the value locks' grants and releases ran %s, want callbacks=5 worker=0", got)
	}
}

// pyRelease is redis-py's Lock release script's SHA-1.
const pyRelease = "c3f8721cbb97f72bc19e972846bd7aaf91901658"

// courses is how the proxy's lock requests ran so far
// (LockRequestCourses).
func courses(t *testing.T, p *testProxy) string {
	t.Helper()
	value := func(course string) float64 {
		var m dto.Metric
		if err := p.Metrics.LockRequestCourses.WithLabelValues(course).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	return fmt.Sprintf("callbacks=%v worker=%v", value("callbacks"), value("worker"))
}

// TestLockRequestsRunAsCallbacks: on the serve loop, a LOCK.ACQUIRE
// without WAIT, a LOCK.RENEW and a LOCK.RELEASE (also one that hands the
// lock to an acquire waiting in line) run as callbacks
// (locks/now.go), with no
// lock worker, and their replies are the usual ones; a request queued
// behind the connection's previous one for its resource (pipelined), and
// an acquire with WAIT, run on a worker as before.
func TestLockRequestsRunAsCallbacks(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{loop: true, minReplicas: 1}, true)
	counted := func(want string) {
		t.Helper()
		if got := courses(t, p); got != want {
			t.Errorf("lock requests ran %s, want %s", got, want)
		}
	}
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"LOCK.ACQUIRE", "r", "o", "10000"}, ":1\r\n"},
		{[]string{"LOCK.ACQUIRE", "r", "other", "10000"}, "$-1\r\n"}, // busy
		{[]string{"LOCK.RENEW", "r", "o", "10000"}, ":1\r\n"},
		{[]string{"LOCK.RENEW", "r", "other", "10000"}, "$-1\r\n"}, // not held
		{[]string{"LOCK.RELEASE", "r", "other"}, ":0\r\n"},
		{[]string{"LOCK.RELEASE", "r", "o"}, ":1\r\n"},
	})
	counted("callbacks=6 worker=0")
	// Pipelined for one resource: the release waits for the acquire.
	c.Send("LOCK.ACQUIRE", "q", "o", "10000")
	c.Send("LOCK.RELEASE", "q", "o")
	c.Flush()
	for i, want := range []string{":3\r\n", ":1\r\n"} { // 2 went to the busy attempt: tokens need not be consecutive
		if got, err := c.ReadReply(); err != nil || string(got) != want {
			t.Fatalf("pipelined reply %d: %q, %v; want %q", i, got, err, want)
		}
	}
	counted("callbacks=7 worker=1")
	run(t, c, []exchange{{[]string{"LOCK.ACQUIRE", "w", "o", "10000", "WAIT", "100"}, ":4\r\n"}})
	counted("callbacks=7 worker=2")
	// A release with an acquire waiting in line hands it the lock, as
	// callbacks too; the waiting acquire is a waiters' worker's.
	other := p.dial(t)
	other.Send("LOCK.ACQUIRE", "w", "o2", "10000", "WAIT", "10000")
	other.Flush()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(string(c.Do("LOCK.INFO", "w")), "waiters\r\n:1\r\n") {
		if time.Now().After(deadline) {
			t.Fatalf("o2 not in w's line within 10s: %q", c.Do("LOCK.INFO", "w"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := courses(t, p) // LOCK.INFO's reads took workers too
	run(t, c, []exchange{{[]string{"LOCK.RELEASE", "w", "o"}, ":1\r\n"}})
	if got, err := other.ReadReply(); err != nil || !strings.HasPrefix(string(got), ":") || string(got) == ":0\r\n" {
		t.Fatalf("o2's acquire after the handoff: %q, %v; want its token", got, err)
	}
	if got, want := courses(t, p), strings.Replace(before, "callbacks=7", "callbacks=8", 1); got != want {
		t.Errorf("after the handoff, lock requests ran %s, want %s (the release as callbacks)", got, want)
	}
}

// TestLeaseCountsFromArrival: a request that waited in the kernel while the
// serve loop was busy (a function of 300 ms posted to it stands for a
// stalled or just-started proxy) counts its lease from when it arrived, not
// from when it was read: a 200 ms grant mostly used up before the read is
// refused -TRYAGAIN, on a connection the loop already served and on one
// made during the stall (not yet accepted). Without the stall it is
// granted.
func TestLeaseCountsFromArrival(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{loop: true}, false)
	old := p.dial(t)
	run(t, old, []exchange{{[]string{"LOCK.ACQUIRE", "free", "o", "200"}, ":1\r\n"}})
	const late = "-TRYAGAIN fenceproxy: the lock could not be granted with enough of its lease left; nothing was granted (a lease this owner already held stands as it was), retry\r\n"
	for _, conn := range []string{"served before", "made during the stall"} {
		stalled := make(chan struct{})
		p.Loop.Post(func() {
			close(stalled)
			time.Sleep(300 * time.Millisecond)
		})
		<-stalled
		c := old
		if conn == "made during the stall" {
			c = p.dial(t)
		}
		c.Send("LOCK.ACQUIRE", "r-"+conn, "o", "200")
		c.Flush()
		if got, err := c.ReadReply(); err != nil || string(got) != late {
			t.Errorf("a 200 ms grant read 300 ms after it arrived, on a connection %s: %q, %v; want %q", conn, got, err, late)
		}
	}
}

// TestRedissonRenewalOnTheLoop: the watchdog's batched renewal of
// Redisson's locks runs as callbacks (locks.RecipeRenewNow), answered as
// RecipeRenew answers it: 1 for each lock held (re-armed on the replica
// too), 0 for one held by another; a batch naming a lock never granted
// (its newest token not cached) goes to a worker, with the same answer;
// with the replica stopped, -NOREPLICAS for the batch and the old expiry
// restored. Mutation: RecipeRenewNow refusing every batch sends each to a
// worker.
func TestRedissonRenewalOnTheLoop(t *testing.T) {
	const (
		acquireSHA = "149c5a8bf18676fd99e9e6e24923bd64d9b62f94"
		renewSHA   = "6a3d31570dc6f4b0bd32bcdc8e75667747c6f635"
	)
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	p := startProxy(t, proxyOptions{seeds: []string{master.Addr}, loop: true, minReplicas: 1})
	c := p.dial(t)
	c.SetTimeout(30 * time.Second)
	run(t, c, []exchange{
		{[]string{"EVALSHA", acquireSHA, "1", "k1", "20000", "h:1"}, "$-1\r\n"},
		{[]string{"EVALSHA", acquireSHA, "1", "k2", "20000", "h:2"}, "$-1\r\n"},
		{[]string{"EVALSHA", acquireSHA, "1", "k3", "20000", "h:9"}, "$-1\r\n"},
		{[]string{"EVALSHA", renewSHA, "3", "k1", "k2", "k3", "60000", "h:1", "h:2", "h:3"}, "*3\r\n:1\r\n:1\r\n:0\r\n"},
	})
	r := testenv.Dial(t, replica.Addr)
	for _, k := range []string{"k1", "k2"} {
		if pttl, _ := testenv.ParseInt(r.Do("PTTL", k)); pttl <= 20000 {
			t.Fatalf("the replica's PTTL of %s after the renewal = %d, want above the old 20000", k, pttl)
		}
	}
	if got := courses(t, p); got != "callbacks=4 worker=0" {
		t.Errorf("the grants and the renewal ran %s, want callbacks=4 worker=0", got)
	}
	run(t, c, []exchange{
		{[]string{"EVALSHA", renewSHA, "2", "k1", "never", "60000", "h:1", "h:1"}, "*2\r\n:1\r\n:0\r\n"},
	})
	if got := courses(t, p); got != "callbacks=4 worker=1" {
		t.Errorf("a renewal naming a lock never granted ran %s, want callbacks=4 worker=1", got)
	}
	m := testenv.Dial(t, master.Addr)
	before := string(m.Do("PEXPIRETIME", "k1"))
	replica.Stop()
	got := string(c.Do("EVALSHA", renewSHA, "1", "k1", "90000", "h:1"))
	replica.Cont()
	if !strings.HasPrefix(got, "-NOREPLICAS") {
		t.Fatalf("the renewal with the replica stopped = %q, want -NOREPLICAS", got)
	}
	if after := string(m.Do("PEXPIRETIME", "k1")); after != before {
		t.Fatalf("k1's expiry after the refused renewal = %q, want %q restored", after, before)
	}
	if got := courses(t, p); got != "callbacks=5 worker=1" {
		t.Errorf("after the refused renewal the requests ran %s, want callbacks=5 worker=1", got)
	}
}
