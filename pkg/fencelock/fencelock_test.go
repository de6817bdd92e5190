package fencelock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/pkg/fencelock"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func setup(t *testing.T) (*fencelock.Client, *testenv.Redis) {
	t.Helper()
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: r.Addr, MinReplicas: 0})
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	return fencelock.New(rdb), r
}

// TestRenewalKeepsLease: a lock held for three times its lease stays held,
// and others are refused meanwhile.
func TestRenewalKeepsLease(t *testing.T) {
	c, _ := setup(t)
	ctx := context.Background()
	l, err := c.Lock(ctx, "job", 300*time.Millisecond, time.Second)
	if err != nil || l.Token <= 0 {
		t.Fatalf("Lock = %+v, %v", l, err)
	}
	time.Sleep(900 * time.Millisecond)
	if _, err := c.TryLock(ctx, "job", time.Second); !errors.Is(err, fencelock.ErrNotAcquired) {
		t.Fatalf("TryLock by another while renewed = %v, want ErrNotAcquired", err)
	}
	if err := l.Context().Err(); err != nil {
		t.Fatalf("lease context ended while renewed: %v", context.Cause(l.Context()))
	}
	if ok, err := l.Check(ctx); !ok || err != nil {
		t.Fatalf("Check = %v, %v", ok, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l.Context().Err() == nil {
		t.Fatal("lease context not cancelled after Unlock")
	}
	if l2, err := c.TryLock(ctx, "job", time.Second); err != nil {
		t.Fatalf("TryLock after Unlock = %v", err)
	} else if l2.Token <= l.Token {
		t.Fatalf("next token %d not above %d", l2.Token, l.Token)
	}
}

// TestLostLeaseCancelsContext: when the lease is lost (its record gone, as
// after Redis lost its data) and another owner takes the resource, the old
// holder's context is cancelled with ErrLost, and its fenced writes are
// refused.
func TestLostLeaseCancelsContext(t *testing.T) {
	c, r := setup(t)
	ctx := context.Background()
	old, err := c.Lock(ctx, "order:9", 600*time.Millisecond, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	direct := testenv.Dial(t, r.Addr)
	direct.Do("DEL", "fenceproxy:lock:{order:9}")
	next, err := c.TryLock(ctx, "order:9", 5*time.Second)
	if err != nil {
		t.Fatalf("TryLock after the lease was lost = %v", err)
	}
	select {
	case <-old.Context().Done():
		if !errors.Is(context.Cause(old.Context()), fencelock.ErrLost) {
			t.Fatalf("cause = %v, want ErrLost", context.Cause(old.Context()))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the old holder's context was not cancelled within 3s of losing its lease")
	}
	if ok, _ := old.Check(ctx); ok {
		t.Fatal("Check says the old token is current")
	}
	if err := old.FencedExec(ctx, "SET", "order:9:state", "late").Err(); err == nil || !strings.HasPrefix(err.Error(), "STALE") {
		t.Fatalf("old FencedExec = %v, want STALE", err)
	}
	if err := next.FencedExec(ctx, "SET", "order:9:state", "ok").Err(); err != nil {
		t.Fatalf("new FencedExec = %v", err)
	}
	if err := old.Unlock(ctx); !errors.Is(err, fencelock.ErrLost) {
		t.Fatalf("old Unlock = %v, want ErrLost", err)
	}
	next.Unlock(ctx)
}
