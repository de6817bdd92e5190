package locking

import (
	"strconv"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestOwnRecordJudgedAfterRestart: an acquire does not read the fence store
// for a resource it has not cached (a new grant's token is above all
// anyway), so a proxy with an empty cache meets an owner's own record
// without knowing the newest token. It must then read it and judge the
// record as before: the owner's current grant is re-armed with its token,
// and a stale record of the same owner (resurrected, below the newest token)
// is never handed out again.
func TestOwnRecordJudgedAfterRestart(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	acquire := func(resource, owner string) int64 {
		t.Helper()
		c := testenv.Dial(t, p.Addr)
		defer c.Close()
		n, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", resource, owner, "60000"))
		if !ok || n <= 0 {
			t.Fatalf("LOCK.ACQUIRE %s %s: no token", resource, owner)
		}
		return n
	}

	// The owner's current grant, after a restart: the same token.
	held := acquire("own/held", "alice")
	p.Restart(t)
	if got := acquire("own/held", "alice"); got != held {
		t.Fatalf("alice's re-acquire after a restart: token %d, want her grant's %d", got, held)
	}

	// A stale record of alice's, below the newest token: a new grant.
	old := acquire("own/stale", "alice")
	c := testenv.Dial(t, p.Addr)
	c.Do("LOCK.RELEASE", "own/stale", "alice")
	newest := acquire("own/stale", "bob")
	c.Do("LOCK.RELEASE", "own/stale", "bob")
	r := testenv.Dial(t, master.Addr)
	r.Do("HSET", "fenceproxy:lock:{own/stale}", "owner", "alice", "token", strconv.FormatInt(old, 10))
	r.Do("PEXPIRE", "fenceproxy:lock:{own/stale}", "60000")
	p.Restart(t)
	if got := acquire("own/stale", "alice"); got <= newest {
		t.Fatalf("alice's acquire over her stale record (token %d; newest %d) after a restart: token %d, want a new one above %d",
			old, newest, got, newest)
	}
}
