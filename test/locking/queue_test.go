package locking

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// waitFor polls cond every 5ms for at most d (a bound against hangs, not a
// timing assertion) and fails with what if it never holds.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lockInfo runs LOCK.INFO and decodes it.
func lockInfo(t *testing.T, c *testenv.Conn, resource string) testenv.LockInfo {
	t.Helper()
	li, err := testenv.ParseLockInfo(c.Do("LOCK.INFO", resource))
	if err != nil {
		t.Fatalf("LOCK.INFO %s: %v", resource, err)
	}
	return li
}

type reply struct {
	who   int
	reply []byte
	err   error
}

// queue starts n waiting acquires of resource, each on its own connection,
// one after another in line (each shows in LOCK.INFO before the next is
// sent); their replies arrive on the returned channel.
func queue(t *testing.T, addr string, admin *testenv.Conn, resource string, n int) ([]*testenv.Conn, chan reply) {
	t.Helper()
	before := lockInfo(t, admin, resource).Waiters
	conns := make([]*testenv.Conn, n)
	replies := make(chan reply, n)
	for i := range conns {
		conns[i] = testenv.Dial(t, addr)
		conns[i].SetTimeout(60 * time.Second)
		go func(i int) {
			r, err := conns[i].TryDo("LOCK.ACQUIRE", resource, "waiter-"+strconv.Itoa(i), "60000", "WAIT", "60000")
			replies <- reply{i, r, err}
		}(i)
		waitFor(t, 10*time.Second, "waiter "+strconv.Itoa(i)+" in line", func() bool {
			return lockInfo(t, admin, resource).Waiters == before+int64(i)+1
		})
	}
	return conns, replies
}

// scriptCalls is how many scripts the Redis at addr has run (EVAL and
// EVALSHA): every lock attempt runs one.
func scriptCalls(t *testing.T, addr string) int64 {
	t.Helper()
	c := testenv.Dial(t, addr)
	defer c.Close()
	text, _ := testenv.ParseBulk(c.Do("INFO", "commandstats"))
	var total int64
	for _, line := range strings.Split(string(text), "\r\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, rest, _ := strings.Cut(line, "calls=")
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		total += n
	}
	return total
}

// TestOneWakeUpPerRelease: with several acquires waiting, a release serves
// exactly one of them. The one at the head is granted; the others stay in
// line and do not even try: Redis runs one lock script, the release that
// hands the lock to the head (or two, the release and the head's own
// acquire, if the head's token was not yet reserved); a herd would run
// one per waiter.
func TestOneWakeUpPerRelease(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	admin := testenv.Dial(t, p.Addr)
	// Load the scripts into Redis first (the first EVALSHA of each meets
	// NOSCRIPT and is sent again as EVAL: two calls).
	admin.Do("LOCK.ACQUIRE", "warm", "w", "60000")
	admin.Do("LOCK.RELEASE", "warm", "w")
	if r := admin.Do("LOCK.ACQUIRE", "herd", "holder", "60000"); r[0] != ':' {
		t.Fatalf("holder's acquire = %q", r)
	}
	const n = 5
	conns, replies := queue(t, p.Addr, admin, "herd", n)

	for round := 0; round < 2; round++ {
		releaser, owner := admin, "holder"
		if round > 0 {
			releaser, owner = conns[round-1], "waiter-"+strconv.Itoa(round-1)
		}
		before := scriptCalls(t, master.Addr)
		if r := releaser.Do("LOCK.RELEASE", "herd", owner); string(r) != ":1\r\n" {
			t.Fatalf("round %d: %s's release = %q", round, owner, r)
		}
		got := <-replies
		if got.err != nil || got.reply[0] != ':' || got.who != round {
			t.Fatalf("round %d: first reply after the release from waiter %d: %q, %v; want a token for waiter %d (head of the line)",
				round, got.who, got.reply, got.err, round)
		}
		// Read the count before LOCK.INFO, which runs a script of its own.
		if d := scriptCalls(t, master.Addr) - before; d != 1 && d != 2 {
			t.Fatalf("round %d: Redis ran %d lock scripts for one release and one grant, want 1 (the release handing the lock to the head) or 2 (the release, then the head's acquire): other waiters were woken too", round, d)
		}
		li := lockInfo(t, admin, "herd")
		if want := int64(n - round - 1); li.Waiters != want || string(li.Owner) != "waiter-"+strconv.Itoa(round) {
			t.Fatalf("round %d: LOCK.INFO = %q, want owner waiter-%d and %d still waiting", round, li.Raw, round, want)
		}
		select {
		case r := <-replies:
			t.Fatalf("round %d: waiter %d also replied %q, %v after one release", round, r.who, r.reply, r.err)
		default:
		}
	}
}

// TestDisconnectedWaiterLeavesLine: a waiting client that hangs up leaves
// the line at once (the count drops), and the next release goes to the
// next live waiter, not to the one gone.
func TestDisconnectedWaiterLeavesLine(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	admin := testenv.Dial(t, p.Addr)
	admin.Do("LOCK.ACQUIRE", "gone", "holder", "60000")
	conns, replies := queue(t, p.Addr, admin, "gone", 3)

	conns[0].Close() // the head hangs up
	waitFor(t, 10*time.Second, "the disconnected waiter out of LOCK.INFO's count", func() bool {
		return lockInfo(t, admin, "gone").Waiters == 2
	})
	if r := <-replies; r.who != 0 || r.err == nil {
		t.Fatalf("first reply %q, %v from waiter %d; want waiter 0's read to fail (closed)", r.reply, r.err, r.who)
	}
	if r := admin.Do("LOCK.RELEASE", "gone", "holder"); string(r) != ":1\r\n" {
		t.Fatalf("release = %q", r)
	}
	got := <-replies
	if got.who != 1 || got.err != nil || got.reply[0] != ':' {
		t.Fatalf("after the release waiter %d got %q, %v; want a token for waiter 1", got.who, got.reply, got.err)
	}
	li := lockInfo(t, admin, "gone")
	if string(li.Owner) != "waiter-1" || li.Waiters != 1 {
		t.Fatalf("LOCK.INFO = %q, want owner waiter-1 (not the gone waiter-0) and 1 waiting", li.Raw)
	}
}

// scrape returns the proxy's /metrics text.
func scrape(t *testing.T, p *testenv.Proxy) string {
	t.Helper()
	_, body := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/metrics")
	return body
}

// infoField returns field's value from an INFO reply ("" if absent).
func infoField(info []byte, field string) string {
	text, _ := testenv.ParseBulk(info)
	for _, line := range strings.Split(string(text), "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// TestQueueFull: with --max-waiters 2, a third WAIT gets -QUEUEFULL at once
// (long before its 10-minute wait could end), while the two in line keep
// waiting and an acquire without WAIT still gets null; the refusal is
// counted. --max-waiters 0 refuses every wait on a held resource.
func TestQueueFull(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0, Args: []string{"--max-waiters", "2"}})
	admin := testenv.Dial(t, p.Addr)
	admin.Do("LOCK.ACQUIRE", "full", "holder", "60000")
	_, replies := queue(t, p.Addr, admin, "full", 2)

	c := testenv.Dial(t, p.Addr)
	c.SetTimeout(30 * time.Second) // far below the 600000ms wait asked for
	r, err := c.TryDo("LOCK.ACQUIRE", "full", "third", "60000", "WAIT", "600000")
	want := "-QUEUEFULL fenceproxy: 2 clients already wait for this resource (--max-waiters); retry later or raise the limit\r\n"
	if err != nil || string(r) != want {
		t.Fatalf("third waiter: %q, %v; want %q at once", r, err, want)
	}
	if r := c.Do("LOCK.ACQUIRE", "full", "nowait", "60000"); !testenv.IsNull(r) {
		t.Fatalf("acquire without WAIT on a full line = %q, want null", r)
	}
	if li := lockInfo(t, admin, "full"); li.Waiters != 2 {
		t.Fatalf("LOCK.INFO after the refusal = %q, want the 2 waiters still in line", li.Raw)
	}
	select {
	case r := <-replies:
		t.Fatalf("waiter %d replied %q, %v while the holder still holds", r.who, r.reply, r.err)
	default:
	}
	// Another resource has a line of its own.
	admin.Do("LOCK.ACQUIRE", "other", "holder", "200")
	if r := c.Do("LOCK.ACQUIRE", "other", "w", "1000", "WAIT", "30000"); r[0] != ':' {
		t.Fatalf("a waiter on another resource = %q, want a token once the 200ms lease ran out", r)
	}
	if !strings.Contains(scrape(t, p), `fenceproxy_lock_acquires_total{result="queuefull"} 1`) {
		t.Fatalf("/metrics has no fenceproxy_lock_acquires_total{result=\"queuefull\"} 1")
	}
	info := admin.Do("INFO", "locks")
	if v := infoField(info, "lock_acquires_queue_full"); v != "1" {
		t.Fatalf("INFO locks lock_acquires_queue_full = %q, want 1", v)
	}
	if v := infoField(info, "max_waiters"); v != "2" {
		t.Fatalf("INFO locks max_waiters = %q, want 2", v)
	}
	// The queue still works: a release grants the head.
	admin.Do("LOCK.RELEASE", "full", "holder")
	if got := <-replies; got.who != 0 || got.reply[0] != ':' {
		t.Fatalf("after the release waiter %d got %q, want a token for waiter 0", got.who, got.reply)
	}

	// On a Redis of its own: a second fenceproxy with another fence store
	// refuses lock commands while the first is live on the same backend.
	master0 := testenv.StartRedis(t, testenv.RedisOptions{})
	p0 := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master0.Addr, MinReplicas: 0, Args: []string{"--max-waiters", "0"}})
	c0 := testenv.Dial(t, p0.Addr)
	if r := c0.Do("LOCK.ACQUIRE", "zero", "a", "60000", "WAIT", "1000"); r[0] != ':' {
		t.Fatalf("--max-waiters 0: a WAIT acquire of a free resource = %q, want a token", r)
	}
	want0 := "-QUEUEFULL fenceproxy: waiting for a lock is disabled (--max-waiters 0); retry later without WAIT or raise the limit\r\n"
	if r := c0.Do("LOCK.ACQUIRE", "zero", "b", "60000", "WAIT", "600000"); string(r) != want0 {
		t.Fatalf("--max-waiters 0: a WAIT acquire of a held resource = %q, want %q", r, want0)
	}
}

// commandCalls is how many times the Redis at addr ran cmd (lower case).
func commandCalls(t *testing.T, addr, cmd string) int64 {
	t.Helper()
	c := testenv.Dial(t, addr)
	defer c.Close()
	text, _ := testenv.ParseBulk(c.Do("INFO", "commandstats"))
	for _, line := range strings.Split(string(text), "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// TestNewcomerToALineSendsNoWait: while someone waits in line, a newcomer's
// LOCK.ACQUIRE can only be told busy (or be the holder's own re-arm), so it
// asks Redis without a WAIT: a WAIT there would hold up the next grant on
// the same connection, once per handoff of a hot lock. The holder's re-arm
// still waits for its replica: with the replica stopped it is refused.
func TestNewcomerToALineSendsNoWait(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1, ReplicaTimeout: 300 * time.Millisecond})
	admin := testenv.Dial(t, p.Addr)
	var held []byte
	waitFor(t, 20*time.Second, "a grant acknowledged by the replica", func() bool {
		held = admin.Do("LOCK.ACQUIRE", "line", "holder", "60000")
		return held[0] == ':'
	})
	queue(t, p.Addr, admin, "line", 1)

	before := commandCalls(t, master.Addr, "wait")
	if r := admin.Do("LOCK.ACQUIRE", "line", "newcomer", "60000"); string(r) != "$-1\r\n" && string(r) != "_\r\n" {
		t.Fatalf("newcomer's LOCK.ACQUIRE = %q, want a null reply (busy)", r)
	}
	if d := commandCalls(t, master.Addr, "wait") - before; d != 0 {
		t.Errorf("a newcomer told busy sent %d WAITs to Redis, want 0", d)
	}

	before = commandCalls(t, master.Addr, "wait")
	if r := admin.Do("LOCK.ACQUIRE", "line", "holder", "60000"); string(r) != string(held) {
		t.Fatalf("holder's re-arm while someone waits = %q, want its token %q (CONTRACT: the same token again)", r, held)
	}
	if d := commandCalls(t, master.Addr, "wait") - before; d < 1 {
		t.Errorf("the holder's re-arm sent %d WAITs, want at least 1: it must be acknowledged", d)
	}

	replica.Stop()
	t.Cleanup(replica.Cont)
	if r := admin.Do("LOCK.ACQUIRE", "line", "holder", "60000"); !strings.HasPrefix(string(r), "-NOREPLICAS") {
		t.Fatalf("holder's re-arm with the replica stopped = %q, want -NOREPLICAS", r)
	}
}
