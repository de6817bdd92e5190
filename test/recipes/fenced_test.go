package recipes

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// Redisson's RFencedLock through fenceproxy: its token comes from the
// fence store, not from the INCR of redisson_lock_token:{name} in Redis,
// so it never goes back when Redis loses its data (a FLUSHALL, a failover
// to a replica the last grants had not reached); the token key is raised
// to it, so a client that reads the key past the proxy reads no lower
// value. And Redisson's RLock across a failover: no second holder.

// tokenKey is RFencedLock's token key for lock name.
func tokenKey(name string) string { return "redisson_lock_token:{" + name + "}" }

// fencedArgs is RFencedLock's lockAndGetToken acquire as Redisson sends
// it: EVALSHA sha 2 name tokenKey leaseMs lockName. It answers [-1,
// token] granted, [pttl, -1] held.
func fencedArgs(name string, lease int, holder string) []string {
	return []string{"EVALSHA", shaFenTok, "2", name, tokenKey(name), strconv.Itoa(lease), holder}
}

func fencedAcquire(c *testenv.Conn, name string, lease int, holder string) []byte {
	return c.Do(fencedArgs(name, lease, holder)...)
}

// acquireArgs is RLock's acquire (acquire, redisson_test.go).
func acquireArgs(name string, lease int, holder string) []string {
	return []string{"EVALSHA", shaAcquire, "1", name, strconv.Itoa(lease), holder}
}

// pair reads a reply of two integers.
func pair(reply []byte) (a, b int64, ok bool) {
	parts := strings.Split(string(reply), "\r\n")
	if len(parts) != 4 || parts[0] != "*2" || !strings.HasPrefix(parts[1], ":") || !strings.HasPrefix(parts[2], ":") {
		return 0, 0, false
	}
	a, err1 := strconv.ParseInt(parts[1][1:], 10, 64)
	b, err2 := strconv.ParseInt(parts[2][1:], 10, 64)
	return a, b, err1 == nil && err2 == nil
}

// retryUntil sends send on *c until done accepts its reply, as Redisson
// does: a NOSCRIPT has the bodies loaded again (a promoted replica has no
// script cache; only where the proxy forwards the scripts), a
// connection cut by a failover is dialled again, and "held, retry" is
// retried. Bounded: 30 s of tries, then the test fails.
func retryUntil(t *testing.T, addr string, c **testenv.Conn, what string, args []string, done func([]byte) bool) []byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		reply, err := (*c).TryDo(args...)
		switch {
		case err != nil:
			*c = testenv.Dial(t, addr) // cut with the old master's connections
			(*c).SetTimeout(30 * time.Second)
		case strings.HasPrefix(string(reply), "-NOSCRIPT"):
			loadBodies(t, *c)
		case done(reply):
			return reply
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never done; last reply %q (%v)", what, reply, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// grantToken takes name for holder by lockAndGetToken, retrying while it
// is held or refused, and returns the token the client reads.
func grantToken(t *testing.T, addr string, c **testenv.Conn, name, holder string) int64 {
	t.Helper()
	reply := retryUntil(t, addr, c, "lockAndGetToken of "+name+" by "+holder,
		fencedArgs(name, 30000, holder),
		func(r []byte) bool { a, _, ok := pair(r); return ok && a == -1 })
	_, tok, _ := pair(reply)
	return tok
}

// tokenKeyValue reads the token key on a Redis server.
func tokenKeyValue(t *testing.T, c *testenv.Conn, name string) int64 {
	t.Helper()
	b, ok := testenv.ParseBulk(c.Do("GET", tokenKey(name)))
	n, err := strconv.ParseInt(string(b), 10, 64)
	if !ok || err != nil {
		t.Fatalf("GET %s = %q, want a number", tokenKey(name), b)
	}
	return n
}

// An RFencedLock token after a FLUSHALL of the master is above every
// token handed out before it (straight at Redis, and through today's
// main, the INCR starts again at 1); the token key in Redis is raised to
// the token, and never lowered; a re-entry reads its grant's token;
// RFencedLock's lock() raises the key as lockAndGetToken does.
func TestRedissonFencedTokenAfterFlush(t *testing.T) {
	e := newSetup(t)
	const name = "fenced"
	t1 := grantToken(t, e.p.Addr, &e.c, name, "a:1")
	e.m.Do("FLUSHALL")
	t2 := grantToken(t, e.p.Addr, &e.c, name, "b:1")
	if t2 <= t1 {
		t.Fatalf("token after a FLUSHALL of the master = %d, not above the %d handed out before it", t2, t1)
	}
	if got := tokenKeyValue(t, e.m, name); got != t2 {
		t.Fatalf("token key after the grant of %d = %d, want it raised to %d", t2, got, t2)
	}
	if got := tokenKeyValue(t, e.r, name); got != t2 {
		t.Fatalf("replica's token key after the grant of %d = %d, want %d (replied after the replica had it)", t2, got, t2)
	}
	if got := token(t, e.c, name, "b:1"); got != t2 {
		t.Fatalf("LOCK.TOKEN %s b:1 = %d, want the token the client read, %d", name, got, t2)
	}
	// Re-entry: the grant's token again (Redisson's INCR would hand out
	// a new one; the fence store's token is the grant's).
	if again := grantToken(t, e.p.Addr, &e.c, name, "b:1"); again != t2 {
		t.Fatalf("re-entry's token = %d, want the grant's %d", again, t2)
	}
	if got := string(e.m.Do("HGET", name, "b:1")); got != "$1\r\n2\r\n" {
		t.Fatalf("count after the re-entry = %q, want 2", got)
	}
	// Another holder is told the pttl, with -1 for a token.
	if pttl, tok, ok := pair(fencedAcquire(e.c, name, 30000, "c:1")); !ok || pttl <= 0 || tok != -1 {
		t.Fatalf("lockAndGetToken while b:1 holds = [%d %d] (%v), want [pttl, -1]", pttl, tok, ok)
	}

	// A token key some client raised past the proxy is not lowered.
	e.m.Do("FLUSHALL")
	e.m.Do("SET", tokenKey(name), "1000000")
	t3 := grantToken(t, e.p.Addr, &e.c, name, "c:1")
	if t3 <= t2 {
		t.Fatalf("token after the second FLUSHALL = %d, not above %d", t3, t2)
	}
	if got := tokenKeyValue(t, e.m, name); got != 1000000 {
		t.Fatalf("token key set to 1000000 past the proxy = %d after a grant of %d, want it kept", got, t3)
	}

	// RFencedLock's lock() (nil = acquired) raises the key too.
	e.m.Do("FLUSHALL")
	retryUntil(t, e.p.Addr, &e.c, "RFencedLock lock()",
		[]string{"EVALSHA", shaFenAcq, "2", name, tokenKey(name), "30000", "d:1"}, testenv.IsNull)
	t4 := token(t, e.c, name, "d:1")
	if t4 <= t3 {
		t.Fatalf("lock()'s token after a third FLUSHALL = %d, not above %d", t4, t3)
	}
	if got := tokenKeyValue(t, e.m, name); got != t4 {
		t.Fatalf("token key after lock() = %d, want %d", got, t4)
	}
}

// An RFencedLock token after the master was killed and Sentinel promoted
// a replica that had not received the last grant is above every token
// handed out before: straight at Redis (and through today's main) the
// promoted replica's INCR hands out the last token again.
func TestRedissonFencedTokenAfterFailover(t *testing.T) {
	const name = "fencedfo"
	f := newFailoverPair(t)
	p := testenv.StartProxy(t, testenv.ProxyOptions{Sentinels: f.sentinels, MinReplicas: 1,
		ReplicaTimeout: 300 * time.Millisecond})
	c := testenv.Dial(t, p.Addr)
	c.SetTimeout(30 * time.Second)
	loadBodies(t, c)

	highest := grantToken(t, p.Addr, &c, name, "a:1")
	if got := mustInt(t, unlock(c, name, "a:1", "r1"), "a:1's unlock"); got != 1 {
		t.Fatalf("a:1's unlock = %d, want 1", got)
	}
	m := testenv.Dial(t, f.master.Addr)
	m.Do("WAIT", "1", "10000") // the unlock is on the replica: the lock is free after the failover

	f.cutReplica(t) // b:1's grant does not reach it before the master dies
	reply := fencedAcquire(c, name, 30000, "b:1")
	if a, tok, ok := pair(reply); ok && a == -1 {
		highest = max(highest, tok) // handed out (today's main)
	} else if !ok || a <= 0 || tok != -1 {
		t.Fatalf("b:1's lockAndGetToken with the replica cut off = %q, want [-1, token] or [retry ms, -1]", reply)
	}
	f.master.Kill()
	f.replica.Cont()
	f.failover(t)
	// The old master comes back empty as the new one's replica, so grants
	// can be acknowledged again.
	f.master.Restart(t)
	f.master.Follow(t, f.replica)

	after := grantToken(t, p.Addr, &c, name, "c:1")
	if after <= highest {
		t.Fatalf("token after the failover = %d, not above the %d handed out before it", after, highest)
	}
	if got := tokenKeyValue(t, testenv.Dial(t, f.replica.Addr), name); got < after {
		t.Fatalf("promoted master's token key = %d after a grant of %d, want at least it", got, after)
	}
}

// Redisson's RLock granted while the grant had not reached the replica,
// then the master killed and the replica promoted by Sentinel: straight
// at Redis a second client is granted the same lock (the double grant
// this test must be able to show; it needs Redisson's body,
// $RECIPES_BODIES, and is skipped without it); through fenceproxy the
// first grant is never replied (a retry time: not acquired), so the lock
// has one holder at most.
func TestRedissonLockNoSecondHolderAfterFailover(t *testing.T) {
	const name = "rlock:failover"

	// Straight at Redis: the hazard.
	if b := body(t, shaAcquire); b == "" {
		t.Log("straight-at-Redis half skipped: set " + bodiesEnv + " to a directory with Redisson's script bodies")
	} else {
		d := newFailoverPair(t)
		m := testenv.Dial(t, d.master.Addr)
		m.Do("SCRIPT", "LOAD", b)
		d.cutReplica(t)
		first := acquire(m, name, 60000, "A:1")
		d.master.Kill()
		d.replica.Cont()
		d.failover(t)
		r := testenv.Dial(t, d.replica.Addr)
		r.Do("SCRIPT", "LOAD", b) // a replica has no script cache of its master's
		second := acquire(r, name, 60000, "B:1")
		if !testenv.IsNull(first) || !testenv.IsNull(second) {
			t.Fatalf("straight at Redis: A's acquire = %q, B's after the failover = %q; want both nil (the double grant this test guards against): inconclusive", first, second)
		}
	}

	// Through fenceproxy: the same steps.
	f := newFailoverPair(t)
	p := testenv.StartProxy(t, testenv.ProxyOptions{Sentinels: f.sentinels, MinReplicas: 1,
		ReplicaTimeout: 300 * time.Millisecond})
	c := testenv.Dial(t, p.Addr)
	c.SetTimeout(30 * time.Second)
	loadBodies(t, c) // so that a proxy forwarding the script (today's main) runs Redisson's
	f.cutReplica(t)
	first := acquire(c, name, 60000, "A:1")
	f.master.Kill()
	f.replica.Cont()
	f.failover(t)
	// The old master comes back empty as the new one's replica, so grants
	// can be acknowledged again; until then they are refused.
	f.master.Restart(t)
	f.master.Follow(t, f.replica)
	second := retryUntil(t, p.Addr, &c, "B's acquire after the failover", acquireArgs(name, 60000, "B:1"), testenv.IsNull)
	if testenv.IsNull(first) && testenv.IsNull(second) {
		t.Fatalf("through fenceproxy, A's acquire = %q and B's after the failover = %q: two holders of %s", first, second, name)
	}
	if n, ok := testenv.ParseInt(first); !ok || n <= 0 {
		t.Fatalf("through fenceproxy, A's acquire with the replica cut off = %q, want a positive retry time (not acquired)", first)
	}
}

// RFencedLock's twins have the effect of Redisson's own scripts on the
// lock: the same calls, through the proxy on one lock and with Redisson's
// bodies straight on the master on another, leave the same hash and
// expiry and answer in the same shapes ([-1, token] granted, [pttl, -1]
// held; nil or pttl for lock()). The tokens differ by design: the
// proxy's come from the fence store. Needs the bodies ($RECIPES_BODIES).
func TestFencedTwinsMatchRedissonScripts(t *testing.T) {
	if os.Getenv(bodiesEnv) == "" {
		t.Skip("set " + bodiesEnv + " to a directory with Redisson's script bodies")
	}
	e := newSetup(t)
	steps := []struct {
		sha           string
		lease, holder string
	}{
		{shaFenTok, "30000", "h:1"}, // granted
		{shaFenTok, "40000", "h:1"}, // re-entry
		{shaFenTok, "30000", "h:2"}, // held
		{shaFenAcq, "50000", "h:1"}, // lock()'s re-entry
		{shaFenAcq, "30000", "h:2"}, // lock() held
	}
	for i, s := range steps {
		cmd := func(n string) []string { return []string{"EVALSHA", s.sha, "2", n, tokenKey(n), s.lease, s.holder} }
		want := e.m.Do(cmd("real")...)
		got := e.c.Do(cmd("twin")...)
		if s.sha == shaFenTok {
			wa, wb, ok1 := pair(want)
			ga, gb, ok2 := pair(got)
			sameShape := ok1 && ok2 && (wa == -1) == (ga == -1) && (wb == -1) == (gb == -1) && (wa != -1 || gb > 0)
			if !sameShape || (wa != -1 && !samePTTL(":"+strconv.FormatInt(wa, 10)+"\r\n", ":"+strconv.FormatInt(ga, 10)+"\r\n")) {
				t.Fatalf("step %d: the proxy's reply %q, Redisson's script's %q", i, got, want)
			}
		} else if string(got) != string(want) && !samePTTL(string(got), string(want)) {
			t.Fatalf("step %d: the proxy's reply %q, Redisson's script's %q", i, got, want)
		}
		if hw, hg := string(e.m.Do("HGETALL", "real")), string(e.m.Do("HGETALL", "twin")); hw != hg {
			t.Fatalf("step %d: the twin left %q, Redisson's script %q", i, hg, hw)
		}
		pw, pg := mustInt(t, e.m.Do("PTTL", "real"), "PTTL"), mustInt(t, e.m.Do("PTTL", "twin"), "PTTL")
		if d := pw - pg; d < -50 || d > 50 {
			t.Fatalf("step %d: the twin's PTTL %d, Redisson's script's %d", i, pg, pw)
		}
	}
	if pttl := mustInt(t, e.m.Do("PTTL", tokenKey("twin")), "PTTL of the token key"); pttl != -1 {
		t.Fatalf("the twin's token key has PTTL %d, want -1 (no expiry, as Redisson's)", pttl)
	}
}
