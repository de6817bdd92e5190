package locking

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestRefusedGrantTokenStaysIssued: a grant is one fence-store record,
// written while Redis waits for the replicas, so a grant refused with
// -NOREPLICAS leaves its token issued: nobody holds the resource, LOCK.INFO
// shows the refused token as the newest, FENCE.CHECK calls the previous
// holder's token (its lease over) stale, and the next grant is above it.
// (Before, the token was written as a reservation that reads ignored until
// the replicas had answered: a refused grant never showed.)
func TestRefusedGrantTokenStaysIssued(t *testing.T) {
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
	if li.Token <= tokA {
		t.Fatalf("LOCK.INFO token after the refused grant = %d, want above A's %d (the refused token stays issued)", li.Token, tokA)
	}
	if r := c.Do("FENCE.CHECK", "res", strconv.FormatInt(tokA, 10)); string(r) != ":0\r\n" {
		t.Fatalf("FENCE.CHECK of A's token after the refused grant = %q, want :0 (stale)", r)
	}
	var tokC int64
	waitFor(t, 20*time.Second, "C's grant acknowledged by the replica", func() bool {
		n, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", "res", "c", "60000"))
		tokC = n
		return ok
	})
	if tokC <= li.Token {
		t.Fatalf("C's token %d, not above the refused %d", tokC, li.Token)
	}
}
