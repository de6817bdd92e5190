package locks

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// rwFixture is a Manager whose grants need one replica, in front of a real
// master and replica.
type rwFixture struct {
	m       *Manager
	replica *testenv.Redis
	redis   *testenv.Conn // the master
}

func newRWFixture(t *testing.T) rwFixture {
	t.Helper()
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	master.WaitReplicas(t, 1)
	store, err := persist.Open(t.TempDir(), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	// A second: under a loaded machine's scheduling a replica's
	// acknowledgement has been seen to take over 300 ms.
	wr := lockwriter.New(lockwriter.Options{Backend: connect(t, master.Addr), MinReplicas: 1, ReplicaTimeout: time.Second})
	m := New(Options{Scripts: wr, Store: PersistStore(store), Metrics: metrics.New(), Logger: quiet, MinReplicas: 1,
		MaxWaiters: 10, SlowWait: -1, SlowHeld: -1})
	return rwFixture{m: m, replica: replica, redis: testenv.Dial(t, master.Addr)}
}

// read and write acquire as Redisson's read and write locks do, for
// thread <id> of client "u".
// rwResult is an RWAcquire's outcome.
type rwResult struct {
	tok  uint64
	pttl int64
	err  error
}

func (f rwFixture) read(t *testing.T, key, id string, lease time.Duration) rwResult {
	t.Helper()
	var r rwResult
	r.tok, r.pttl, r.err = f.m.RWAcquire(context.Background(), RWAcquire{Key: key, Holder: "u:" + id, WriteHolder: "u:" + id + ":write",
		TimeoutPrefix: "{" + key + "}:u:" + id + ":rwlock_timeout", Lease: lease}, "127.0.0.1:9", time.Now())
	return r
}

func (f rwFixture) write(t *testing.T, key, id string, lease time.Duration) rwResult {
	t.Helper()
	var r rwResult
	r.tok, r.pttl, r.err = f.m.RWAcquire(context.Background(), RWAcquire{Key: key, Holder: "u:" + id + ":write", Write: true, Lease: lease},
		"127.0.0.1:9", time.Now())
	return r
}

func (f rwFixture) unlock(t *testing.T, key, holder string, write bool, req string) (int64, bool) {
	t.Helper()
	n, null, err := f.m.RWUnlock(context.Background(), RWUnlock{Key: key, Holder: holder, Write: write, Lease: 30 * time.Second,
		Channel: "redisson_rwlock:{" + key + "}", Publish: "publish", Message: "0", Latch: "redisson_unlock_latch:{" + key + "}:" + req,
		LatchTTL: 13500, TimeoutPrefix: "{" + key + "}:" + holder + ":rwlock_timeout", KeyPrefix: "{" + key + "}"})
	if err != nil {
		t.Fatalf("unlock %s by %s: %v", key, holder, err)
	}
	return n, null
}

func (f rwFixture) hash(key string) string { return string(f.redis.Do("HGETALL", key)) }

func (f rwFixture) expiry(t *testing.T, key string) int64 {
	t.Helper()
	n, ok := testenv.ParseInt(f.redis.Do("PEXPIRETIME", key))
	if !ok {
		t.Fatalf("PEXPIRETIME %s", key)
	}
	return n
}

func mustGrant(t *testing.T, what string, r rwResult) uint64 {
	t.Helper()
	if r.err != nil || r.tok == 0 {
		t.Fatalf("%s = %+v; want a grant", what, r)
	}
	return r.tok
}

func mustBusy(t *testing.T, what string, r rwResult) {
	t.Helper()
	if r.err != ErrBusy || r.pttl <= 0 {
		t.Fatalf("%s = %+v; want busy with the holder's pttl", what, r)
	}
}

// Readers share the lock and its epoch's token; a writer is kept out
// while they hold and gets a newer token after them; the writer may read
// (and keeps its token); re-entries count up and unlocks down, as
// Redisson's scripts do.
func TestRWLockTwins(t *testing.T) {
	f := newRWFixture(t)
	const k = "rw"
	tokA := mustGrant(t, "A's read", f.read(t, k, "1", 30*time.Second))
	tokB := mustGrant(t, "B's read", f.read(t, k, "2", 10*time.Second))
	if tokB != tokA {
		t.Fatalf("B's read token %d, want the epoch's %d (A's)", tokB, tokA)
	}
	// max(pttl, lease): B's shorter lease left the hash's expiry alone.
	if pttl, _ := testenv.ParseInt(f.redis.Do("PTTL", k)); pttl <= 10000 {
		t.Fatalf("hash PTTL after B's shorter read = %d, want A's 30 s kept", pttl)
	}
	for _, h := range []string{"u:1", "u:2"} {
		if tok, ok, err := f.m.HolderToken(context.Background(), k, h); err != nil || !ok || tok != tokA {
			t.Fatalf("HolderToken %s = %d %v %v, want %d", h, tok, ok, err, tokA)
		}
	}
	if _, ok, _ := f.m.HolderToken(context.Background(), k, "mode"); ok {
		t.Fatal("HolderToken of the mode field answered a token")
	}
	mustBusy(t, "C's write while A and B read", f.write(t, k, "3", 30*time.Second))
	mustGrant(t, "A's re-entry", f.read(t, k, "1", 30*time.Second))
	if got := string(f.redis.Do("HGET", k, "u:1")); got != "$1\r\n2\r\n" {
		t.Fatalf("A's count after re-entry = %q, want 2", got)
	}
	if n, _ := testenv.ParseInt(f.redis.Do("EXISTS", "{rw}:u:1:rwlock_timeout:1", "{rw}:u:1:rwlock_timeout:2", "{rw}:u:2:rwlock_timeout:1")); n != 3 {
		t.Fatalf("%d of A's two and B's one timeout keys exist, want 3", n)
	}
	if n, null := f.unlock(t, k, "u:1", false, "a1"); null || n != 0 {
		t.Fatalf("A's first unlock = %d %v, want 0", n, null)
	}
	if n, null := f.unlock(t, k, "u:1", false, "a2"); null || n != 0 {
		t.Fatalf("A's last unlock with B reading = %d %v, want 0 (B holds)", n, null)
	}
	if n, null := f.unlock(t, k, "u:2", false, "b1"); null || n != 1 {
		t.Fatalf("B's unlock = %d %v, want 1 (released)", n, null)
	}
	if n, _ := testenv.ParseInt(f.redis.Do("EXISTS", k, "fenceproxy:lock:{rw}")); n != 0 {
		t.Fatalf("after the last reader's unlock %d of the hash and its side record are left", n)
	}

	tokC := mustGrant(t, "C's write", f.write(t, k, "3", 30*time.Second))
	if tokC <= tokA {
		t.Fatalf("the writer's token %d is not above the readers' %d", tokC, tokA)
	}
	mustBusy(t, "A's read while C writes", f.read(t, k, "1", 30*time.Second))
	mustBusy(t, "D's write while C writes", f.write(t, k, "4", 30*time.Second))
	if tok := mustGrant(t, "C reads while writing", f.read(t, k, "3", 30*time.Second)); tok != tokC {
		t.Fatalf("C's read token %d, want its write's %d", tok, tokC)
	}
	before, _ := testenv.ParseInt(f.redis.Do("PTTL", k))
	mustGrant(t, "C's write re-entry", f.write(t, k, "3", 30*time.Second))
	// The write re-entry adds the lease to the pttl.
	if after, _ := testenv.ParseInt(f.redis.Do("PTTL", k)); after < before+29000 {
		t.Fatalf("hash PTTL after the write re-entry = %d, want about %d + 30000", after, before)
	}
	f.unlock(t, k, "u:3:write", true, "c1")
	if n, null := f.unlock(t, k, "u:3:write", true, "c2"); null || n != 1 {
		t.Fatalf("C's last write unlock = %d %v, want 1", n, null)
	}
	// Its read hold stays: the mode turns read, the epoch's token stays.
	if got := string(f.redis.Do("HGET", k, "mode")); got != "$4\r\nread\r\n" {
		t.Fatalf("mode after the writer's last write unlock with a read hold = %q, want read", got)
	}
	if tok, ok, _ := f.m.HolderToken(context.Background(), k, "u:3"); !ok || tok != tokC {
		t.Fatalf("HolderToken of C's read hold = %d %v, want %d", tok, ok, tokC)
	}
	if tok := mustGrant(t, "A reads beside C's read", f.read(t, k, "1", 30*time.Second)); tok != tokC {
		t.Fatalf("A's read token %d, want the epoch's %d", tok, tokC)
	}
}

// With the replica stopped, every grant is undone exactly: a fresh read
// or write leaves nothing, a reader joining leaves the hash, its expiry,
// the timeout keys and the side record as they were, and a write
// re-entry's count and expiry (to which the grant had added the lease) go
// back.
func TestRWLockUndoneWithoutReplica(t *testing.T) {
	f := newRWFixture(t)
	noReplicas := func(what string, r rwResult) {
		t.Helper()
		var nr *NoReplicasError
		if !errors.As(r.err, &nr) {
			t.Fatalf("%s with the replica stopped: %+v, want a NoReplicasError", what, r)
		}
	}
	tokA := mustGrant(t, "A's read", f.read(t, "shared", "1", 60*time.Second))
	mustGrant(t, "C's write", f.write(t, "excl", "3", 60*time.Second))
	time.Sleep(20 * time.Millisecond) // a re-arm would move the expiries
	type state struct {
		hash          string
		expiry, sexp  int64
		timeouts, rec string
	}
	snap := func(k string) state {
		return state{f.hash(k), f.expiry(t, k), f.expiry(t, "fenceproxy:lock:{"+k+"}"),
			string(f.redis.Do("KEYS", "{"+k+"}:*")), string(f.redis.Do("GET", "fenceproxy:lock:{"+k+"}"))}
	}
	shared, excl := snap("shared"), snap("excl")

	f.replica.Stop()
	noReplicas("a fresh read", f.read(t, "fresh-r", "1", 60*time.Second))
	noReplicas("a fresh write", f.write(t, "fresh-w", "1", 60*time.Second))
	noReplicas("B joining A's read", f.read(t, "shared", "2", 90*time.Second))
	noReplicas("A's read re-entry", f.read(t, "shared", "1", 90*time.Second))
	noReplicas("C's write re-entry", f.write(t, "excl", "3", 60*time.Second))
	noReplicas("C reading while writing", f.read(t, "excl", "3", 60*time.Second))
	f.replica.Cont()

	if n, _ := testenv.ParseInt(f.redis.Do("EXISTS", "fresh-r", "fresh-w", "{fresh-r}:u:1:rwlock_timeout:1",
		"fenceproxy:lock:{fresh-r}", "fenceproxy:lock:{fresh-w}", "fenceproxy:lock:{fresh-r}:fence")); n != 0 {
		t.Fatalf("%d keys of the refused fresh grants are left", n)
	}
	if got := snap("shared"); got != shared {
		t.Fatalf("the read lock after refused joins:\n %+v\nwant\n %+v", got, shared)
	}
	if got := snap("excl"); got != excl {
		t.Fatalf("the write lock after a refused re-entry and read:\n %+v\nwant\n %+v", got, excl)
	}
	if tok, ok, _ := f.m.HolderToken(context.Background(), "shared", "u:1"); !ok || tok != tokA {
		t.Fatalf("A's token after the refused grants = %d %v, want %d", tok, ok, tokA)
	}
	if _, ok, _ := f.m.HolderToken(context.Background(), "shared", "u:2"); ok {
		t.Fatal("B, refused, has a token")
	}
	for _, k := range []string{"fresh-r", "fresh-w"} {
		if n, _ := f.m.opts.Store.Newest(k); n != 0 {
			t.Fatalf("a refused fresh grant of %s left token %d issued", k, n)
		}
	}
}

// A read renewal re-arms the hash and the holds' timeout keys (4.0.0: all
// of them; 4.7.0: the named holders'); short of replicas it restores them.
func TestRWRenew(t *testing.T) {
	f := newRWFixture(t)
	mustGrant(t, "A's read", f.read(t, "r", "1", 20*time.Second))
	mustGrant(t, "B's read", f.read(t, "r", "2", 20*time.Second))
	ctx := context.Background()
	held, err := f.m.RWRenew(ctx, 400, []RWRenewLock{{Key: "r", Prefix: "{r}", Holders: []string{"u:1"}},
		{Key: "gone", Prefix: "{gone}", Holders: []string{"u:1"}}}, nil, 60*time.Second)
	if err != nil || !held[0] || held[1] {
		t.Fatalf("renewal = %v %v, want [true false]", held, err)
	}
	for _, k := range []string{"r", "{r}:u:1:rwlock_timeout:1", "{r}:u:2:rwlock_timeout:1", "fenceproxy:lock:{r}"} {
		if pttl, _ := testenv.ParseInt(f.redis.Do("PTTL", k)); pttl <= 20000 {
			t.Fatalf("PTTL %s after the renewal = %d, want above 20000", k, pttl)
		}
	}
	keys := []string{"r", "{r}:u:1:rwlock_timeout:1", "{r}:u:2:rwlock_timeout:1", "fenceproxy:lock:{r}"}
	before := make([]int64, len(keys))
	for i, k := range keys {
		before[i] = f.expiry(t, k)
	}
	time.Sleep(20 * time.Millisecond)
	f.replica.Stop()
	_, err = f.m.RWRenew(ctx, 470, []RWRenewLock{{Key: "r", Prefix: "{r}", Holders: []string{"u:1", "u:2"}}}, nil, 90*time.Second)
	f.replica.Cont()
	var nr *NoReplicasError
	if !errors.As(err, &nr) {
		t.Fatalf("renewal with the replica stopped: %v, want a NoReplicasError", err)
	}
	for i, k := range keys {
		if got := f.expiry(t, k); got != before[i] {
			t.Fatalf("%s's expiry after the refused renewal = %d, want %d restored", k, got, before[i])
		}
	}
	// 3.52.0's body fails on a count of 2 in a one-lock call: nothing done.
	mustGrant(t, "A's re-entry", f.read(t, "r", "1", 20*time.Second))
	if _, err := f.m.RWRenew(ctx, 352, []RWRenewLock{{Key: "r", Prefix: "{r}", Holders: []string{"u:1"}}},
		[]string{"r", "{r}"}, 90*time.Second); err != ErrScriptFails {
		t.Fatalf("3.52.0's renewal of a count of 2: %v, want ErrScriptFails", err)
	}
	if pttl, _ := testenv.ParseInt(f.redis.Do("PTTL", "r")); pttl > 60000 {
		t.Fatalf("PTTL after the failing 3.52.0 renewal = %d, want it not renewed", pttl)
	}
}
