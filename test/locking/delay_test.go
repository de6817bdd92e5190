package locking

import (
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestLockDelayAfterExpiry: with --lock-delay, a lease that ran out keeps
// the resource from everyone for the delay; a clean release applies none;
// a waiter is granted once the delay is over.
func TestLockDelayAfterExpiry(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0, Args: []string{"--lock-delay", "800ms"}})
	c := testenv.Dial(t, p.Addr)
	c.SetTimeout(10 * time.Second)

	// Clean release: no delay.
	c.Do("LOCK.ACQUIRE", "clean", "a", "5000")
	c.Do("LOCK.RELEASE", "clean", "a")
	if r := c.Do("LOCK.ACQUIRE", "clean", "b", "5000"); r[0] != ':' {
		t.Fatalf("acquire right after a clean release = %q, want a token", r)
	}

	// Expiry: the lease (200ms) runs out; for the next 800ms nobody gets it.
	first := c.Do("LOCK.ACQUIRE", "crashed", "a", "200")
	time.Sleep(400 * time.Millisecond)
	if r := c.Do("LOCK.ACQUIRE", "crashed", "b", "5000"); !testenv.IsNull(r) {
		t.Fatalf("acquire during the lock-delay = %q, want null", r)
	}
	if r := c.Do("LOCK.RENEW", "crashed", "a", "5000"); !testenv.IsNull(r) {
		t.Fatalf("the lapsed holder's renew = %q, want null (never revived)", r)
	}
	start := time.Now()
	r := c.Do("LOCK.ACQUIRE", "crashed", "b", "5000", "WAIT", "5000")
	waited := time.Since(start)
	a, _ := testenv.ParseInt(first)
	b, ok := testenv.ParseInt(r)
	if !ok || b <= a {
		t.Fatalf("waiting acquire after the delay = %q (first token %d)", r, a)
	}
	if waited < 300*time.Millisecond {
		t.Fatalf("the waiter was granted after %v, before the delay (200ms lease + 800ms) could end", waited)
	}
}
