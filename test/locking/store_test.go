package locking

import (
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestRefusedGrantLeavesNoToken: a grant refused with -NOREPLICAS leaves
// nothing behind while the proxy lives: nobody holds the resource, and its
// token does not count (LOCK.INFO still shows the previous holder's as the
// newest). The clients' own lock recipes cannot tell such a refusal from
// "held", so a refused token that counted would call a holder stale that
// nothing visible had displaced (the fault suite's checker caught it when
// a grant was written as one record, counted at once).
func TestRefusedGrantLeavesNoToken(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1, ReplicaTimeout: 300 * time.Millisecond})
	c := testenv.Dial(t, p.Addr)
	var tokA int64
	waitFor(t, 20*time.Second, "a grant acknowledged by the replica", func() bool {
		n, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", "res", "a", "60000"))
		tokA = n
		return ok
	})
	if r := c.Do("LOCK.RELEASE", "res", "a"); string(r) != ":1\r\n" {
		t.Fatalf("A's release = %q, want :1", r)
	}

	replica.Stop()
	r := c.Do("LOCK.ACQUIRE", "res", "b", "60000")
	replica.Cont()
	if !strings.HasPrefix(string(r), "-NOREPLICAS") {
		t.Fatalf("B's acquire with the replica stopped = %q, want -NOREPLICAS", r)
	}
	li := lockInfo(t, c, "res")
	if li.Owner != nil {
		t.Fatalf("LOCK.INFO after the refused grant = %q: someone holds it", li.Raw)
	}
	if li.Token != tokA {
		t.Fatalf("LOCK.INFO token after the refused grant = %d, want A's %d (a refused token does not count)", li.Token, tokA)
	}
	var tokC int64
	waitFor(t, 20*time.Second, "C's grant acknowledged by the replica", func() bool {
		n, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", "res", "c", "60000"))
		tokC = n
		return ok
	})
	if tokC <= tokA {
		t.Fatalf("C's token %d, not above A's %d", tokC, tokA)
	}
}
