package recipes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redisson's RFairLock scripts (the same in 3.52.0, 4.0.0, 4.7.0 and 4.8.0).
const (
	shaFairAcq   = "8f6ed299ffd259f0539c20f89253998c0777ea75" // lock(), tryLock(wait, …)
	shaFairOnce  = "d20501c26a30adf6fb0fe9883bbbcc497e6157e2" // tryLock()
	shaFairUnl   = "367f80bd2e300e411fb0936d9b601e5bcb3fd4b6"
	shaFairForce = "71ed11d4e4818119ac560b3d670a7f08256afc46"
	shaFairDeq   = "d1ddef65ad80886b5d36e023c99930044ddd653a"
)

func init() {
	bodyFiles[shaFairAcq] = "fair.acquire.lua"
	bodyFiles[shaFairOnce] = "fair.tryonce.lua"
	bodyFiles[shaFairUnl] = "fair.unlock.lua"
	bodyFiles[shaFairForce] = "fair.forceunlock.lua"
	bodyFiles[shaFairDeq] = "fair.dequeue.lua"
}

// fairClient sends RFairLock's scripts as Redisson does, by go-redis.
type fairClient struct {
	t    *testing.T
	rdb  *redis.Client
	name string
}

func newFairClient(t *testing.T, addr, name string) *fairClient {
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1, ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	return &fairClient{t: t, rdb: rdb, name: name}
}

func (f *fairClient) keys() []string {
	return []string{f.name, "redisson_lock_queue:{" + f.name + "}", "redisson_lock_timeout:{" + f.name + "}"}
}

func now() int64 { return time.Now().UnixMilli() }

// acquire is lock()'s script: KEYS name, queue, timeouts; ARGV lease,
// lockName, wait, now. granted, or the time to wait.
func (f *fairClient) acquire(holder string) (granted bool, wait int64) {
	f.t.Helper()
	return f.result(f.rdb.EvalSha(context.Background(), shaFairAcq, f.keys(), 30000, holder, 5000, now()), "fair.acquire by "+holder)
}

// tryOnce is tryLock()'s: ARGV lease, lockName, now, wait; 1 = false.
func (f *fairClient) tryOnce(holder string) (granted bool, n int64) {
	f.t.Helper()
	return f.result(f.rdb.EvalSha(context.Background(), shaFairOnce, f.keys(), 30000, holder, now(), 5000), "fair.tryonce by "+holder)
}

func (f *fairClient) result(cmd *redis.Cmd, what string) (bool, int64) {
	f.t.Helper()
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return true, 0
	}
	n, ok := v.(int64)
	if err != nil || !ok {
		f.t.Fatalf("%s = %v, %v; want nil or an integer", what, v, err)
	}
	return false, n
}

func (f *fairClient) unlock(holder, req string) int64 {
	f.t.Helper()
	keys := append(f.keys(), "redisson_lock__channel:{"+f.name+"}", "redisson_unlock_latch:{"+f.name+"}:"+req)
	n, err := f.rdb.EvalSha(context.Background(), shaFairUnl, keys, 0, 30000, holder, now(), "PUBLISH", 13500).Int64()
	if err != nil {
		f.t.Fatalf("fair.unlock by %s: %v", holder, err)
	}
	return n
}

// queue is the master's queue and deadlines, as one string.
func queueOf(t *testing.T, rdb *redis.Client, name string) string {
	ctx := context.Background()
	q, err := rdb.LRange(ctx, "redisson_lock_queue:{"+name+"}", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	z, err := rdb.ZRangeWithScores(ctx, "redisson_lock_timeout:{"+name+"}", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("queue %s deadlines %v", strings.Join(q, ","), z)
}

func masterClient(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// With the only replica stopped, a fair lock's grant is not given: A's
// release leaves B at the head of the queue, and B's lock() reads "wait
// n ms" (tryLock(): 1, false); the master holds no lock and the queue and
// every deadline are as before, so B is still first once the replica is
// back; then B is granted, with a token LOCK.TOKEN gives.
func TestRedissonFairGrantRefusedWithoutReplica(t *testing.T) {
	e := newSetup(t)
	const name = "fair-refused"
	f := newFairClient(t, e.p.Addr, name)
	m := masterClient(t, e.master.Addr)
	if ok, n := f.acquire("A:1"); !ok {
		t.Fatalf("A's lock() = wait %d, want granted", n)
	}
	rawA := e.c.Do("LOCK.TOKEN", name, "A:1") // checked at the end
	for _, h := range []string{"B:1", "C:1"} {
		if ok, n := f.acquire(h); ok || n <= 0 {
			t.Fatalf("%s's lock() while A holds = granted %v, %d; want queued with a positive wait", h, ok, n)
		}
	}
	if got := f.unlock("A:1", "r1"); got != 1 {
		t.Fatalf("A's unlock = %d, want 1", got)
	}
	before := queueOf(t, m, name)
	if !strings.HasPrefix(before, "queue B:1,C:1 ") {
		t.Fatalf("before B's try: %s, want B then C", before)
	}

	e.replica.Stop()
	ok, n := f.acquire("B:1")
	okOnce, nOnce := f.tryOnce("B:1")
	after := queueOf(t, m, name)
	held, _ := m.Exists(context.Background(), name).Result()
	e.replica.Cont()
	if ok || n <= 0 {
		t.Fatalf("B's lock() with the replica stopped = granted %v, %d; want not granted, a positive wait", ok, n)
	}
	if okOnce || nOnce != 1 {
		t.Fatalf("B's tryLock() with the replica stopped = granted %v, %d; want 1 (false)", okOnce, nOnce)
	}
	if after != before || held != 0 {
		t.Fatalf("after the refused grants: %s, lock keys %d; want %s and no lock", after, held, before)
	}

	if ok, n := f.acquire("B:1"); !ok {
		t.Fatalf("B's lock() with the replica back = wait %d, want granted", n)
	}
	tokA := mustInt(t, rawA, "LOCK.TOKEN "+name+" A:1 while A held it")
	if tokB := token(t, e.c, name, "B:1"); tokB <= tokA {
		t.Fatalf("B's token %d, want above A's %d", tokB, tokA)
	}
	if got := string(e.r.Do("HGET", name, "B:1")); got != "$1\r\n1\r\n" {
		t.Fatalf("replica's HGET %s B:1 right after the grant = %q, want 1", name, got)
	}
}

// Waiters are granted in the order they queued: with A holding, B then C
// queue; after A's unlock C is refused (B heads the queue) and B granted;
// after B's, C.
func TestRedissonFairOrderThroughProxy(t *testing.T) {
	e := newSetup(t)
	const name = "fair-order"
	f := newFairClient(t, e.p.Addr, name)
	if ok, _ := f.acquire("A:1"); !ok {
		t.Fatal("A's lock() not granted")
	}
	f.acquire("B:1")
	f.acquire("C:1")
	f.unlock("A:1", "r1")
	if ok, _ := f.acquire("C:1"); ok {
		t.Fatal("C was granted the lock while B heads the queue")
	}
	if ok, _ := f.tryOnce("C:1"); ok {
		t.Fatal("C's tryLock() was granted the lock while B heads the queue")
	}
	if ok, n := f.acquire("B:1"); !ok {
		t.Fatalf("B (head of the queue) = wait %d, want granted", n)
	}
	if ok, _ := f.acquire("C:1"); ok {
		t.Fatal("C was granted the lock while B holds it")
	}
	f.unlock("B:1", "r2")
	if ok, n := f.acquire("C:1"); !ok {
		t.Fatalf("C after B's unlock = wait %d, want granted", n)
	}
	if got := queueOf(t, masterClient(t, e.master.Addr), name); got != "queue  deadlines []" {
		t.Fatalf("after C's grant: %s, want an empty queue", got)
	}
	if token(t, e.c, name, "C:1") <= 0 {
		t.Fatal("no token for C")
	}
}
