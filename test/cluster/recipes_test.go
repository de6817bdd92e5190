package cluster

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// Redisson's RLock scripts (docs/design/recipes.md), as Redisson sends them.
const (
	redissonAcquire = "149c5a8bf18676fd99e9e6e24923bd64d9b62f94"
	redissonRenew   = "6a3d31570dc6f4b0bd32bcdc8e75667747c6f635"
	redissonUnlock  = "6866459238a13a701d42f4971f12d9f3a50e2442"
)

// TestRedissonLocksAcrossMasters: in front of a Redis Cluster, Redisson's
// RLock acquire, its watchdog's one renewal of locks in several slots, and
// unlock run as fenceproxy's twins on each lock's master: each grant is
// replied once that master's replica has it, and has a token (LOCK.TOKEN)
// its FENCE.CHECK knows; the renewal answers per lock. A lock whose name
// carries a hash tag of its own (its slot is not its owner record's) is
// forwarded as before (here: NOSCRIPT, since nothing loaded the script).
func TestRedissonLocksAcrossMasters(t *testing.T) {
	e := startEnv(t, 1, 1)
	st := readSlots(t, e.cl)
	c := e.dial(t)
	var names []string
	for i, m := range e.cl.Masters {
		names = append(names, st.resourcesOn(m, "rlock"+itoa(int64(i))+":", 1)[0])
	}
	for _, n := range names {
		if got := c.Do("EVALSHA", redissonAcquire, "1", n, "30000", "uuid:1"); !testenv.IsNull(got) {
			t.Fatalf("acquire of %s = %s, want nil (acquired)", n, testenv.ShowReply(got))
		}
		master := st.of(n)
		replicas := e.cl.ReplicasOf(master)
		if len(replicas) == 0 {
			t.Fatalf("master %s of %s has no replica", master.Addr, n)
		}
		r := testenv.Dial(t, replicas[0].Addr)
		r.Do("READONLY")
		if got := string(r.Do("HGET", n, "uuid:1")); got != "$1\r\n1\r\n" {
			t.Fatalf("replica of %s's master: HGET %s uuid:1 right after the grant = %q, want 1", n, n, got)
		}
		tok := token(t, c, "LOCK.TOKEN", n, "uuid:1")
		if got := string(c.Do("FENCE.CHECK", n, itoa(tok))); got != ":1\r\n" {
			t.Fatalf("FENCE.CHECK %s %d = %q, want 1", n, tok, got)
		}
	}
	renew := append([]string{"EVALSHA", redissonRenew, "4"}, names...)
	renew = append(renew, "notheld", "60000", "uuid:1", "uuid:1", "uuid:1", "uuid:1")
	if got := string(c.Do(renew...)); got != "*4\r\n:1\r\n:1\r\n:1\r\n:0\r\n" {
		t.Fatalf("renewal of %v and an unheld lock = %s, want [1 1 1 0]", names, testenv.ShowReply([]byte(got)))
	}
	for _, n := range names {
		got := c.Do("EVALSHA", redissonUnlock, "3", n, "redisson_lock__channel:{"+n+"}", "redisson_unlock_latch:{"+n+"}:r",
			"0", "30000", "uuid:1", "PUBLISH", "13500")
		if string(got) != ":1\r\n" {
			t.Fatalf("unlock of %s = %s, want 1 (released)", n, testenv.ShowReply(got))
		}
	}
	if got := string(c.Do("EVALSHA", redissonAcquire, "1", "{tagged}:lock", "30000", "uuid:1")); !strings.HasPrefix(got, "-NOSCRIPT") {
		t.Fatalf("acquire of a lock with a hash tag of its own = %q, want it forwarded (NOSCRIPT)", got)
	}
}
