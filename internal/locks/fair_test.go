package locks

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// fairLock is one RFairLock through a real Manager and Writer on a real
// Redis: its name, queue and timeout set, and the client's clock its
// calls carry.
type fairLock struct {
	t      *testing.T
	m      *Manager
	redis  *testenv.Conn
	name   string
	q      FairQueue
	store  TokenStore
	master *testenv.Redis
}

// newFairLock starts a master (and a replica, with --min-replicas 1, when
// replica is set) and a Manager over it.
func newFairLock(t *testing.T, replica bool) (*fairLock, *testenv.Redis) {
	t.Helper()
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	var rep *testenv.Redis
	min := 0
	if replica {
		rep = testenv.StartReplica(t, master)
		master.WaitReplicas(t, 1)
		min = 1
	}
	ps, err := persist.Open(t.TempDir(), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ps.Close() })
	store := PersistStore(ps)
	// A second: under a loaded machine's scheduling a replica's
	// acknowledgement has been seen to take over 300 ms.
	wr := lockwriter.New(lockwriter.Options{Backend: connect(t, master.Addr), MinReplicas: min, ReplicaTimeout: time.Second})
	m := New(Options{Scripts: wr, Store: store, Metrics: metrics.New(), Logger: quiet, MinReplicas: min,
		MaxWaiters: 10, SlowWait: -1, SlowHeld: -1})
	const name = "fair"
	return &fairLock{t: t, m: m, redis: testenv.Dial(t, master.Addr), name: name, store: store, master: master,
		q: FairQueue{Queue: "redisson_lock_queue:{" + name + "}", Timeouts: "redisson_lock_timeout:{" + name + "}",
			Wait: 5000, ClientNow: time.Now().UnixMilli()}}, rep
}

func (f *fairLock) acquire(holder string, once bool) (uint64, int64, error) {
	q := f.q
	q.Once = once
	return f.m.RecipeFairAcquire(context.Background(), f.name, holder, "127.0.0.1:9", 30*time.Second, q, time.Now())
}

// granted acquires for holder and fails unless it is granted.
func (f *fairLock) granted(holder string) uint64 {
	f.t.Helper()
	tok, n, err := f.acquire(holder, false)
	if err != nil {
		f.t.Fatalf("%s's fair acquire = %d, %v; want granted", holder, n, err)
	}
	return tok
}

// refused acquires for holder and returns the recipe's reply, failing
// unless it is a refusal.
func (f *fairLock) refused(holder string, once bool) int64 {
	f.t.Helper()
	_, n, err := f.acquire(holder, once)
	if err != ErrBusy {
		f.t.Fatalf("%s's fair acquire (once %v) = %d, %v; want refused", holder, once, n, err)
	}
	return n
}

func (f *fairLock) unlock(holder, req string) (int64, bool) {
	f.t.Helper()
	q := f.q
	n, null, err := f.m.RecipeUnlock(context.Background(), RecipeUnlock{Key: f.name, Holder: holder, Lease: 30 * time.Second,
		Channel: "redisson_lock__channel:{" + f.name + "}", Publish: "publish", Message: "0",
		Latch: "redisson_unlock_latch:{" + f.name + "}:" + req, LatchTTL: 13500, Fair: &q})
	if err != nil {
		f.t.Fatalf("%s's fair unlock: %v", holder, err)
	}
	return n, null
}

// queue is the queue's names in order.
func (f *fairLock) queue() string {
	els, _ := testenv.SplitArray(f.redis.Do("LRANGE", f.q.Queue, "0", "-1"))
	var names []string
	for _, e := range els {
		b, _ := testenv.ParseBulk(e)
		names = append(names, string(b))
	}
	return strings.Join(names, ",")
}

// deadline is holder's score in the timeout set (-1 if none).
func (f *fairLock) deadline(holder string) int64 {
	b, ok := testenv.ParseBulk(f.redis.Do("ZSCORE", f.q.Timeouts, holder))
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		f.t.Fatalf("ZSCORE %s = %q", holder, b)
	}
	return n
}

// snapshot is everything a fair lock keeps in Redis, raw.
func (f *fairLock) snapshot() string {
	return string(f.redis.Do("HGETALL", f.name)) + string(f.redis.Do("LRANGE", f.q.Queue, "0", "-1")) +
		string(f.redis.Do("ZRANGE", f.q.Timeouts, "0", "-1", "WITHSCORES")) + string(f.redis.Do("PEXPIRETIME", f.q.Queue)) +
		string(f.redis.Do("PEXPIRETIME", f.q.Timeouts))
}

// The fair twin does what RFairLock's scripts do: a free lock is granted
// (with a token, and a side record), its holder re-enters, others queue up
// in order with deadlines chained by wait on the client's clock, a queued
// caller is told max(0, pttl), tryLock() enqueues nobody and reads 1; the
// last unlock wakes the head on its own channel; the head is granted next
// and every other deadline is lowered by wait; a stale head (its deadline
// passed on the client's clock) is dropped; a dequeue lowers those behind.
func TestFairTwin(t *testing.T) {
	f, _ := newFairLock(t, false)
	now, wait := f.q.ClientNow, f.q.Wait

	tokA := f.granted("A")
	if got := string(f.redis.Do("HGET", f.name, "A")); got != "$1\r\n1\r\n" {
		t.Fatalf("A's count after the grant = %q, want 1", got)
	}
	if tok, ok, err := f.m.HolderToken(context.Background(), f.name, "A"); !ok || err != nil || tok != tokA {
		t.Fatalf("HolderToken(A) = %d %v %v, want A's %d", tok, ok, err, tokA)
	}
	ttlB := f.refused("B", false)
	if ttlB <= 0 || ttlB > 30000 {
		t.Fatalf("B's acquire while A holds = %d, want A's pttl", ttlB)
	}
	if d := f.deadline("B"); d != ttlB+wait+now {
		t.Fatalf("B's deadline %d, want pttl %d + wait + now = %d", d, ttlB, ttlB+wait+now)
	}
	if ttlC := f.refused("C", false); ttlC != f.deadline("B")-now {
		t.Fatalf("C's acquire = %d, want B's deadline - now = %d", ttlC, f.deadline("B")-now)
	}
	if f.deadline("C") != f.deadline("B")+wait || f.queue() != "B,C" {
		t.Fatalf("queue %q, deadlines B %d C %d: want B,C with C's = B's + wait", f.queue(), f.deadline("B"), f.deadline("C"))
	}
	if n := f.refused("B", false); n <= 0 || n > 30000 {
		t.Fatalf("B asking again = %d, want A's pttl", n)
	}
	before := f.snapshot()
	if n := f.refused("D", true); n != 1 || f.snapshot() != before {
		t.Fatalf("D's tryLock() = %d (want 1), state changed: %v", n, f.snapshot() != before)
	}
	if tok := f.granted("A"); tok != tokA || string(f.redis.Do("HGET", f.name, "A")) != "$1\r\n2\r\n" {
		t.Fatalf("A's re-entry: token %d (want %d), count %q", tok, tokA, f.redis.Do("HGET", f.name, "A"))
	}
	if f.queue() != "B,C" {
		t.Fatalf("queue after A's re-entry %q, want B,C untouched", f.queue())
	}

	sub := testenv.Dial(t, f.master.Addr)
	sub.Do("SUBSCRIBE", "redisson_lock__channel:{fair}:B")
	if n, null := f.unlock("A", "r1"); null || n != 0 {
		t.Fatalf("A's first unlock = %d null %v, want 0", n, null)
	}
	if n, null := f.unlock("A", "r2"); null || n != 1 {
		t.Fatalf("A's last unlock = %d null %v, want 1", n, null)
	}
	if msg, err := sub.ReadReply(); err != nil || !strings.Contains(string(msg), "redisson_lock__channel:{fair}:B") {
		t.Fatalf("B's channel carried %q, %v; want the wake-up", msg, err)
	}
	if n, null := f.unlock("A", "r3"); null || n != 1 {
		t.Fatalf("unlock of a lock no longer there = %d null %v, want 1 (as RFairLock's)", n, null)
	}
	// C is queued behind B: the free lock is not C's.
	if n := f.refused("C", false); n != 0 {
		t.Fatalf("C's acquire while B heads the queue of a free lock = %d, want max(0, pttl) = 0", n)
	}
	dC := f.deadline("C")
	tokB := f.granted("B")
	if tokB <= tokA || f.queue() != "C" || f.deadline("B") != -1 || f.deadline("C") != dC-wait {
		t.Fatalf("B's grant: token %d (A's %d), queue %q, B's deadline %d, C's %d (was %d): want C alone, lowered by wait",
			tokB, tokA, f.queue(), f.deadline("B"), f.deadline("C"), dC)
	}

	// A stale head: X's deadline passed on the client's clock.
	f.redis.Do("DEL", f.name)
	f.redis.Do("RPUSH", f.q.Queue, "Y")
	f.redis.Do("LPUSH", f.q.Queue, "X")
	f.redis.Do("ZADD", f.q.Timeouts, strconv.FormatInt(now-1, 10), "X", strconv.FormatInt(now+60000, 10), "Y")
	if n := f.refused("Y", false); n != 0 || f.queue() != "C,Y" {
		t.Fatalf("Y behind C after X's drop = %d, queue %q; want 0, C,Y", n, f.queue())
	}
	f.redis.Do("LREM", f.q.Queue, "0", "C")
	f.redis.Do("ZREM", f.q.Timeouts, "C")
	f.granted("Y")
	if f.queue() != "" {
		t.Fatalf("queue after Y's grant %q, want empty", f.queue())
	}

	// Dequeue: Q leaves, R behind it is lowered by wait, P is not.
	f.redis.Do("RPUSH", f.q.Queue, "P", "Q", "R")
	f.redis.Do("ZADD", f.q.Timeouts, "1000000", "P", "2000000", "Q", "3000000", "R")
	if err := f.m.RecipeFairDequeue(context.Background(), f.name, "Q", f.q); err != nil {
		t.Fatal(err)
	}
	if f.queue() != "P,R" || f.deadline("P") != 1000000 || f.deadline("R") != 3000000-wait || f.deadline("Q") != -1 {
		t.Fatalf("after Q's dequeue: queue %q, P %d, R %d, Q %d", f.queue(), f.deadline("P"), f.deadline("R"), f.deadline("Q"))
	}
}

// A fair grant the replica did not acknowledge is refused and undone
// exactly: no hold, no side record, no token issued, and the queue and
// every deadline as they were, so the caller heads the queue again.
func TestFairGrantUndoneRestoresQueue(t *testing.T) {
	f, replica := newFairLock(t, true)
	tokA := f.granted("A")
	f.refused("B", false)
	f.refused("C", false)
	f.refused("D", false)
	f.redis.Do("PEXPIRE", f.q.Timeouts, "600000") // an expiry on a queue key goes back too
	if n, _ := f.unlock("A", "r1"); n != 1 {
		t.Fatalf("A's unlock = %d", n)
	}
	before := f.snapshot()
	replica.Stop()
	_, _, err := f.acquire("B", false)
	replica.Cont()
	var nr *NoReplicasError
	if !errors.As(err, &nr) {
		t.Fatalf("B's grant with the replica stopped: %v, want a NoReplicasError", err)
	}
	if after := f.snapshot(); after != before {
		t.Fatalf("after the undone grant:\n%s\nwant as before:\n%s", testenv.ShowReply([]byte(after)), testenv.ShowReply([]byte(before)))
	}
	if n, _ := testenv.ParseInt(f.redis.Do("EXISTS", f.name, f.m.recordKey(f.name))); n != 0 {
		t.Fatalf("%d of the lock and its side record left after the undo", n)
	}
	if newest, _ := f.store.Newest(f.name); newest != tokA {
		t.Fatalf("newest token %d after the undone grant, want A's %d (none issued)", newest, tokA)
	}
	// Its next try finds it at the head: granted, C and D lowered once.
	dC := f.deadline("C")
	f.granted("B")
	if f.queue() != "C,D" || f.deadline("C") != dC-f.q.Wait {
		t.Fatalf("B's grant after the replica is back: queue %q, C's deadline %d (was %d)", f.queue(), f.deadline("C"), dC)
	}
}

// A re-entry the replica did not acknowledge steps the count back and
// leaves the queue alone.
func TestFairReentryUndone(t *testing.T) {
	f, replica := newFairLock(t, true)
	f.granted("A")
	f.refused("B", false)
	before := f.snapshot() + string(f.redis.Do("PEXPIRETIME", f.name))
	replica.Stop()
	_, _, err := f.acquire("A", false)
	replica.Cont()
	var nr *NoReplicasError
	if !errors.As(err, &nr) {
		t.Fatalf("A's re-entry with the replica stopped: %v, want a NoReplicasError", err)
	}
	if after := f.snapshot() + string(f.redis.Do("PEXPIRETIME", f.name)); after != before {
		t.Fatalf("after the undone re-entry %q, want %q", after, before)
	}
}

// The fair twins' operation letters are not another operation's: a
// letter given twice (two helpers' twins merged) would run the wrong twin.
func TestOpLettersDistinct(t *testing.T) {
	seen := map[string]string{"a": "core", "l": "core", "h": "core", "r": "core", "u": "core"}
	inline := regexp.MustCompile(`\b([A-Za-z]) = \{(\w+), \d+\}`)
	found := 0
	for _, m := range inline.FindAllStringSubmatch(opsScript, -1) {
		found++
		if prev, ok := seen[m[1]]; ok && prev != m[2] {
			t.Errorf("operation letter %q is both %s and %s", m[1], prev, m[2])
		}
		seen[m[1]] = m[2]
	}
	if found < 15 {
		t.Fatalf("found %d operation letters in opsScript; the pattern no longer reads the table", found)
	}
}

// TestFairTwinsMatchRedissonScripts: the same calls, run through the
// twins on one fair lock and as Redisson's own scripts straight on Redis on
// another, give the same replies and leave the same hash, queue and
// deadlines (pttls and the deadlines made from them within a few ms).
// Needs the bodies: RECIPES_BODIES names a directory with fair.*.lua, as
// the recipes study captured them (not in this repository).
func TestFairTwinsMatchRedissonScripts(t *testing.T) {
	dir := os.Getenv("RECIPES_BODIES")
	if dir == "" {
		t.Skip("set RECIPES_BODIES to a directory with Redisson's fair.*.lua")
	}
	body := func(f string) string {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	f, _ := newFairLock(t, false)
	const real = "real"
	rq, rt := "redisson_lock_queue:{"+real+"}", "redisson_lock_timeout:{"+real+"}"
	now := f.q.ClientNow
	ctx := context.Background()
	type step struct {
		what       string
		real, twin func() string
	}
	acq := func(h string, once bool, clock int64) step {
		return step{what: "acquire " + h, real: func() string {
			sha, a3, a4 := "fair.acquire.lua", "5000", strconv.FormatInt(clock, 10)
			if once {
				sha, a3, a4 = "fair.tryonce.lua", a4, a3
			}
			return testenv.ShowReply(f.redis.Do("EVAL", body(sha), "3", real, rq, rt, "30000", h, a3, a4))
		}, twin: func() string {
			q := f.q
			q.Once, q.ClientNow = once, clock
			_, n, err := f.m.RecipeFairAcquire(ctx, f.name, h, "127.0.0.1:9", 30*time.Second, q, time.Now())
			if err != nil && err != ErrBusy {
				t.Fatalf("twin acquire %s: %v", h, err)
			}
			return testenv.ShowReply([]byte(replyOf(n, err == nil)))
		}}
	}
	unl := func(h, req string, force bool, clock int64) step {
		return step{what: "unlock " + h, real: func() string {
			c := strconv.FormatInt(clock, 10)
			if force {
				return testenv.ShowReply(f.redis.Do("EVAL", body("fair.forceunlock.lua"), "4", real, rq, rt, "redisson_lock__channel:{"+real+"}", "0", c, "PUBLISH"))
			}
			return testenv.ShowReply(f.redis.Do("EVAL", body("fair.unlock.lua"), "5", real, rq, rt, "redisson_lock__channel:{"+real+"}",
				"redisson_unlock_latch:{"+real+"}:"+req, "0", "30000", h, c, "PUBLISH", "13500"))
		}, twin: func() string {
			q := f.q
			q.ClientNow = clock
			n, null, err := f.m.RecipeUnlock(ctx, RecipeUnlock{Key: f.name, Holder: h, Lease: 30 * time.Second,
				Channel: "redisson_lock__channel:{" + f.name + "}", Publish: "publish", Message: "0",
				Latch: "redisson_unlock_latch:{" + f.name + "}:" + req, LatchTTL: 13500, Fair: &q, Force: force})
			if err != nil {
				t.Fatalf("twin unlock %s: %v", h, err)
			}
			return testenv.ShowReply([]byte(replyOf(n, null)))
		}}
	}
	deq := func(h string) step {
		return step{what: "dequeue " + h, real: func() string {
			return testenv.ShowReply(f.redis.Do("EVAL", body("fair.dequeue.lua"), "2", rq, rt, h, "5000"))
		}, twin: func() string {
			if err := f.m.RecipeFairDequeue(ctx, f.name, h, f.q); err != nil {
				t.Fatal(err)
			}
			return testenv.ShowReply([]byte("$-1\r\n"))
		}}
	}
	later := now + 600000 // every deadline made so far has passed on this clock
	steps := []step{
		acq("A", false, now), acq("B", false, now), acq("C", false, now), acq("B", false, now), acq("D", true, now),
		acq("A", false, now), unl("A", "r1", false, now), unl("A", "r2", false, now), unl("A", "r2", false, now),
		acq("C", false, now), acq("B", false, now), acq("E", false, now), deq("C"), acq("C", false, now),
		unl("B", "r3", true, now), unl("B", "r4", false, now), acq("F", true, now), acq("G", false, later),
		acq("E", false, later), unl("X", "r5", false, later),
	}
	f.redis.Do("SCRIPT", "FLUSH")
	for i, s := range steps {
		r, w := s.real(), s.twin()
		if !closeEnough(r, w) {
			t.Fatalf("step %d (%s): Redisson's script replied %s, the twin %s", i, s.what, r, w)
		}
		rs := state(f.redis, real, rq, rt)
		ws := state(f.redis, f.name, f.q.Queue, f.q.Timeouts)
		if !closeEnough(rs, ws) {
			t.Fatalf("step %d (%s): Redisson's script left\n%s\nthe twin\n%s", i, s.what, rs, ws)
		}
	}
}

func replyOf(n int64, null bool) string {
	if null {
		return "$-1\r\n"
	}
	return ":" + strconv.FormatInt(n, 10) + "\r\n"
}

// state is a fair lock's hash, queue and deadlines, shown.
func state(c *testenv.Conn, name, q, t string) string {
	return testenv.ShowReply(c.Do("HGETALL", name)) + " pttl " + testenv.ShowReply(c.Do("PTTL", name)) + " queue " +
		testenv.ShowReply(c.Do("LRANGE", q, "0", "-1")) + " deadlines " + testenv.ShowReply(c.Do("ZRANGE", t, "0", "-1", "WITHSCORES"))
}

var numbers = regexp.MustCompile(`-?\d+`)

// closeEnough: a and b are the same but for numbers within 100 (ms: pttls
// and deadlines read a moment apart).
func closeEnough(a, b string) bool {
	if numbers.ReplaceAllString(a, "#") != numbers.ReplaceAllString(b, "#") {
		return false
	}
	na, nb := numbers.FindAllString(a, -1), numbers.FindAllString(b, -1)
	for i := range na {
		x, _ := strconv.ParseInt(na[i], 10, 64)
		y, _ := strconv.ParseInt(nb[i], 10, 64)
		if x-y > 100 || y-x > 100 {
			return false
		}
	}
	return true
}
