package clients_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// Clients' own lock recipes through fenceproxy: go-redsync/redsync v4 and
// bsm/redislock, unchanged, on keys that the proxy's --lock-keys names
// (run.sh starts it with --lock-keys 'recipelock:*' and sets
// FENCEPROXY_RECIPE_LOCKS=1). Their grants are replied only once the
// replica has them and carry a fence-store token (LOCK.TOKEN); with the
// only replica detached they are not granted.

// recipeKey is a recipe lock's key: one --lock-keys matches.
func recipeKey(client, name string) string {
	return "recipelock:go:{" + runID + ":" + client + "}:" + name
}

// recipesOrSkip skips a case where run.sh did not start the proxy with
// --lock-keys (a given FENCEPROXY_ADDR, or --cluster, where recipes are
// forwarded).
func recipesOrSkip(t *testing.T, name string) bool {
	if os.Getenv("FENCEPROXY_RECIPE_LOCKS") != "1" {
		fmt.Printf("SKIP go: %s/%s: needs the proxy run.sh starts with --lock-keys in front of a master and replica (FENCEPROXY_RECIPE_LOCKS=1: not with --cluster or a given FENCEPROXY_ADDR)\n", t.Name(), name)
		return false
	}
	return true
}

// lockToken is LOCK.TOKEN key holder, through the proxy.
func lockToken(ctx context.Context, c *redis.Client, key, holder string) (int64, error) {
	return c.Do(ctx, "LOCK.TOKEN", key, holder).Int64()
}

// detachReplica makes the only replica a master of its own (REPLICAOF NO
// ONE) until the returned func re-attaches it; both wait (bounded) for the
// master to see the change.
func detachReplica(t *testing.T) (reattach func()) {
	t.Helper()
	maddr, raddr := os.Getenv("FENCEPROXY_MASTER_ADDR"), os.Getenv("FENCEPROXY_REPLICA_ADDR")
	if maddr == "" || raddr == "" {
		t.Skip("needs FENCEPROXY_MASTER_ADDR and FENCEPROXY_REPLICA_ADDR (run.sh, master + replica)")
	}
	ctx := context.Background()
	m := redis.NewClient(&redis.Options{Addr: maddr, Protocol: 2})
	r := redis.NewClient(&redis.Options{Addr: raddr, Protocol: 2})
	if err := r.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE on the replica: %v", err)
	}
	waitOnlineReplicas(t, m, 0)
	return func() {
		host, port, _ := net.SplitHostPort(maddr)
		if err := r.ReplicaOf(ctx, host, port).Err(); err != nil {
			t.Errorf("REPLICAOF %s on the replica: %v", maddr, err)
		}
		waitOnlineReplicas(t, m, 1)
		m.Close()
		r.Close()
	}
}

func waitOnlineReplicas(t *testing.T, m *redis.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	info := ""
	for time.Now().Before(deadline) {
		info, _ = m.Info(context.Background(), "replication").Result()
		// For n > 0, also until they acknowledge a write: a replica re-attached
		// by a full sync is "online" before the master streams it writes (Redis
		// 7 starts on its first REPLCONF ACK, up to a second later), and until
		// then every grant waits out the proxy's replica timeout.
		if strings.Contains(info, fmt.Sprintf("connected_slaves:%d\r", n)) && strings.Count(info, "state=online") == n &&
			(n == 0 || acknowledged(m, n)) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the master's INFO replication never showed %d online replicas acknowledging writes: %q", n, info)
}

// acknowledged reports whether n replicas acknowledge a write on the master
// within 200 ms.
func acknowledged(m *redis.Client, n int) bool {
	ctx := context.Background()
	if err := m.Set(ctx, recipeKey("replica", "probe"), "1", 5*time.Second).Err(); err != nil {
		return false
	}
	acked, err := m.Do(ctx, "WAIT", n, 200).Int()
	return err == nil && acked >= n
}

func TestRedsync(t *testing.T) {
	const cl = "redsync v4.18.1 (go-redis v9 pool)"
	c := goRedis(0)
	defer c.Close()
	rs := redsync.New(goredis.NewPool(c))
	name := "Mutex: Lock (SET NX EX 8), LOCK.TOKEN, TryLock by another fails, Extend, Unlock"
	if recipesOrSkip(t, name) {
		run(t, name, func(t *testing.T) {
			ctx := ctxT(t)
			k := recipeKey("redsync", "mutex")
			m := rs.NewMutex(k)
			if err := m.LockContext(ctx); err != nil {
				fail(t, cl, "Mutex.Lock", err, "nil")
			}
			tok, err := lockToken(ctx, c, k, m.Value())
			if err != nil || tok <= 0 {
				fail(t, cl, "LOCK.TOKEN "+k+" <value>", orErr(tok, err), "a token")
			}
			other := rs.NewMutex(k, redsync.WithTries(1))
			if err := other.TryLockContext(ctx); err == nil {
				fail(t, cl, "another Mutex.TryLock while held", err, "an error")
			}
			if ok, err := m.ExtendContext(ctx); !ok || err != nil {
				fail(t, cl, "Mutex.Extend", orErr(ok, err), true)
			}
			if ok, err := m.UnlockContext(ctx); !ok || err != nil {
				fail(t, cl, "Mutex.Unlock", orErr(ok, err), true)
			}
			if err := other.TryLockContext(ctx); err != nil {
				fail(t, cl, "another Mutex.TryLock after the unlock", err, "nil")
			}
			tok2, err := lockToken(ctx, c, k, other.Value())
			if err != nil || tok2 <= tok {
				fail(t, cl, "LOCK.TOKEN of the next holder", orErr(tok2, err), fmt.Sprintf("above %d", tok))
			}
			if _, err := other.UnlockContext(ctx); err != nil {
				fail(t, cl, "Mutex.Unlock (next holder)", err, "nil")
			}
		})
	}
	name = "Mutex with the only replica detached: TryLock fails, nothing is left"
	if recipesOrSkip(t, name) {
		run(t, name, func(t *testing.T) {
			ctx := ctxT(t)
			k := recipeKey("redsync", "noreplica")
			reattach := detachReplica(t)
			m := rs.NewMutex(k, redsync.WithTries(1))
			err := m.TryLockContext(ctx)
			n, _ := c.Exists(ctx, k).Result()
			reattach()
			if err == nil {
				fail(t, cl, "Mutex.TryLock with the replica detached", err, "an error (not acquired)")
			}
			if n != 0 {
				fail(t, cl, "EXISTS "+k+" after the refused grant", n, 0)
			}
			if err := m.TryLockContext(ctx); err != nil {
				fail(t, cl, "Mutex.TryLock once the replica is back", err, "nil")
			}
			m.UnlockContext(ctx)
		})
	}
}

func TestRedislock(t *testing.T) {
	const cl = "bsm/redislock v0.9.4 (go-redis v9)"
	c := goRedis(0)
	defer c.Close()
	locker := redislock.New(c)
	name := "Obtain (Lua), LOCK.TOKEN, Obtain by another fails, Refresh, TTL, Release"
	if recipesOrSkip(t, name) {
		run(t, name, func(t *testing.T) {
			ctx := ctxT(t)
			k := recipeKey("redislock", "lock")
			l, err := locker.Obtain(ctx, k, 10*time.Second, nil)
			if err != nil {
				fail(t, cl, "Obtain", err, "nil")
			}
			tok, err := lockToken(ctx, c, k, l.Token())
			if err != nil || tok <= 0 {
				fail(t, cl, "LOCK.TOKEN "+k+" <token>", orErr(tok, err), "a token")
			}
			if _, err := locker.Obtain(ctx, k, 10*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
				fail(t, cl, "Obtain by another while held", err, redislock.ErrNotObtained)
			}
			if err := l.Refresh(ctx, 30*time.Second, nil); err != nil {
				fail(t, cl, "Refresh(30s)", err, "nil")
			}
			if ttl, err := l.TTL(ctx); err != nil || ttl <= 10*time.Second {
				fail(t, cl, "TTL after Refresh(30s)", orErr(ttl, err), "above 10s")
			}
			if err := l.Release(ctx); err != nil {
				fail(t, cl, "Release", err, "nil")
			}
			if err := l.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
				fail(t, cl, "Release again", err, redislock.ErrLockNotHeld)
			}
		})
	}
	name = "Obtain with the only replica detached: ErrNotObtained, nothing is left"
	if recipesOrSkip(t, name) {
		run(t, name, func(t *testing.T) {
			ctx := ctxT(t)
			k := recipeKey("redislock", "noreplica")
			reattach := detachReplica(t)
			_, err := locker.Obtain(ctx, k, 10*time.Second, nil)
			n, _ := c.Exists(ctx, k).Result()
			reattach()
			if !errors.Is(err, redislock.ErrNotObtained) {
				fail(t, cl, "Obtain with the replica detached", err, redislock.ErrNotObtained)
			}
			if n != 0 {
				fail(t, cl, "EXISTS "+k+" after the refused grant", n, 0)
			}
			l, err := locker.Obtain(ctx, k, 10*time.Second, nil)
			if err != nil {
				fail(t, cl, "Obtain once the replica is back", err, "nil")
			}
			l.Release(ctx)
		})
	}
}
