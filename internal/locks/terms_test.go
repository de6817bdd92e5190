package locks

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// termManagers are Managers of terms 5, 4 and 0 (none) on one real Redis,
// sharing one fence store as the nodes of a tier share its log.
func termManagers(t *testing.T, lockDelay time.Duration) (m5, m4, m0 *Manager, redis *testenv.Conn) {
	t.Helper()
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	store, err := persist.Open(t.TempDir(), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	wr := lockwriter.New(lockwriter.Options{Backend: connect(t, master.Addr), ReplicaTimeout: time.Second})
	manager := func(term func() uint64) *Manager {
		return New(Options{Scripts: wr, Store: PersistStore(store), Metrics: metrics.New(), Logger: quiet,
			LockDelay: lockDelay, MaxWaiters: 10, SlowWait: -1, SlowHeld: -1, Term: term})
	}
	return manager(func() uint64 { return 5 }), manager(func() uint64 { return 4 }), manager(nil), testenv.Dial(t, master.Addr)
}

func wantDeposed(t *testing.T, op string, err error) {
	t.Helper()
	var coded resp.CodedError
	if !errors.Is(err, ErrDeposed) || !errors.As(err, &coded) {
		t.Errorf("%s by an older term: %v, want ErrDeposed", op, err)
		return
	}
	if code, _ := coded.RESPError(); code != "TRYAGAIN" {
		t.Errorf("%s by an older term answers -%s, want -TRYAGAIN", op, code)
	}
}

// wantTerm checks the term the record at key was written in.
func wantTerm(t *testing.T, redis *testenv.Conn, key, want string) {
	t.Helper()
	if rec, ok := testenv.ReadLockRecord(t, redis, key); !ok || rec.Term != want {
		t.Fatalf("record %s: %+v (there: %v), want term %s", key, rec, ok, want)
	}
}

func wantReply(t *testing.T, redis *testenv.Conn, want string, args ...string) {
	t.Helper()
	if got := string(redis.Do(args...)); got != want {
		t.Fatalf("%v = %q, want %q", args, got, want)
	}
}

// TestOlderTermCannotTouchNewerRecord: once a term-5 leader granted a
// lease, a term-4 leader (deposed, not knowing it) can neither grant it
// (to its owner or another), renew, release nor undo it, and neither can
// a single node (term 0); the record stands as term 5 wrote it. Once term
// 5 released it, term 4 may grant it again, and term 5 takes a term-4
// record over (renews it, stamping term 5), after which term 4 cannot
// touch it.
func TestOlderTermCannotTouchNewerRecord(t *testing.T) {
	m5, m4, m0, redis := termManagers(t, 0)
	ctx := context.Background()
	const key = "fenceproxy:lock:{r}"
	token, err := m5.Acquire(ctx, "r", "a", addr, ttl, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wantTerm(t, redis, key, "5")

	_, err = m4.Acquire(ctx, "r", "a", addr, ttl, 0, time.Now())
	wantDeposed(t, "a re-arm of the owner's grant", err)
	_, err = m4.Acquire(ctx, "r", "b", addr, ttl, 0, time.Now())
	wantDeposed(t, "an acquire by another owner", err)
	_, err = m4.Renew(ctx, "r", "a", ttl, time.Now())
	wantDeposed(t, "a renewal", err)
	_, err = m4.Release(ctx, "r", "a")
	wantDeposed(t, "a release", err)
	_, err = m0.Release(ctx, "r", "a")
	wantDeposed(t, "a single node's release", err)
	prev := m4.opts.Scripts.Start(ctx, key, lockwriter.ScriptCall{Source: "return 1"}, false)
	if _, err := prev.Reply(); err != nil {
		t.Fatal(err)
	}
	if gone := m4.undo(ctx, &attempt{call: lockwriter.ScriptCall{Keys: m4.keys("r")}, write: prev}, "r", "a", token); gone {
		t.Fatalf("an undo by an older term reports the grant gone")
	}
	rec, held, err := m5.readRecord(ctx, "r")
	if err != nil || !held || rec.Owner != "a" || rec.Token != strconv.FormatUint(token, 10) || rec.LeaseLeft <= 0 {
		t.Fatalf("the term-5 record after the older terms' attempts: %+v held %v, %v", rec, held, err)
	}
	wantTerm(t, redis, key, "5")

	if ok, err := m5.Release(ctx, "r", "a"); !ok || err != nil {
		t.Fatalf("release by the record's own term: %v, %v", ok, err)
	}
	if _, err := m4.Acquire(ctx, "r", "c", addr, ttl, 0, time.Now()); err != nil {
		t.Fatalf("term 4 on a resource term 5 released: %v", err)
	}
	wantTerm(t, redis, key, "4")
	if _, err := m5.Renew(ctx, "r", "c", ttl, time.Now()); err != nil {
		t.Fatalf("term 5 renewing a term-4 record: %v", err)
	}
	wantTerm(t, redis, key, "5")
	_, err = m4.Release(ctx, "r", "c")
	wantDeposed(t, "a release after the newer term renewed", err)
	if ok, err := m5.Release(ctx, "r", "c"); !ok || err != nil {
		t.Fatalf("release by the newer term: %v, %v", ok, err)
	}
}

// TestOlderTermCannotPassNewerGuard: a term-5 lease that ran out
// unreleased leaves its lock-delay guard, marked with term 5; a term-4
// leader is refused by it as a deposed leader (not merely busy). A single
// node's records carry term 0 and its guards "1", as before terms were
// kept.
func TestOlderTermCannotPassNewerGuard(t *testing.T) {
	m5, m4, m0, redis := termManagers(t, time.Minute)
	ctx := context.Background()
	const key = "fenceproxy:lock:{d}"
	if _, err := m5.Acquire(ctx, "d", "a", addr, 300*time.Millisecond, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	wantReply(t, redis, "$1\r\n6\r\n", "GET", key+":delay") // term 5, plus one
	for deadline := time.Now().Add(testenv.DefaultTimeout); string(redis.Do("EXISTS", key)) != ":0\r\n"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the 300ms lease never ran out")
		}
	}
	_, err := m4.Acquire(ctx, "d", "b", addr, ttl, 0, time.Now())
	wantDeposed(t, "an acquire past a newer term's guard", err)
	wantReply(t, redis, ":0\r\n", "EXISTS", key)

	if _, err := m0.Acquire(ctx, "s", "a", addr, ttl, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	wantTerm(t, redis, "fenceproxy:lock:{s}", "0")
	wantReply(t, redis, "$1\r\n1\r\n", "GET", "fenceproxy:lock:{s}:delay")
	if ok, err := m0.Release(ctx, "s", "a"); !ok || err != nil {
		t.Fatalf("a single node's release: %v, %v", ok, err)
	}
}

// TestOlderTermCannotPassNewerGuardWithoutDelay: a node without a
// lock-delay still reads the guard in a tier, before the SET NX of its
// common case: a newer term's guard, left by a lease of a node with a
// lock-delay that ran out, refuses an older term's acquire of the free
// resource.
func TestOlderTermCannotPassNewerGuardWithoutDelay(t *testing.T) {
	_, m4, _, redis := termManagers(t, 0)
	ctx := context.Background()
	const key = "fenceproxy:lock:{d}"
	redis.Do("SET", key+":delay", "6", "PX", "60000") // term 5's, plus one
	_, err := m4.Acquire(ctx, "d", "b", addr, ttl, 0, time.Now())
	wantDeposed(t, "an acquire of a free resource past a newer term's guard", err)
	wantReply(t, redis, ":0\r\n", "EXISTS", key)
}
