package tier

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// Redisson's RLock acquire (docs/design/recipes.md): EVALSHA sha 1 name
// leaseMs lockName; nil is "acquired", an integer "held, retry in n ms".
const shaRLockAcquire = "149c5a8bf18676fd99e9e6e24923bd64d9b62f94"

// loadRLockBody loads Redisson's acquire body into the master when
// $RECIPES_BODIES has it (scripts/recipe-bodies.sh), as Redisson does
// after a NOSCRIPT: a node that forwards the script then runs Redisson's
// own, and the test fails on what the tier must add, not on NOSCRIPT.
func loadRLockBody(t *testing.T, master string) {
	t.Helper()
	dir := os.Getenv("RECIPES_BODIES")
	if dir == "" {
		return
	}
	b, err := os.ReadFile(filepath.Join(dir, "lock.acquire.lua"))
	if err != nil {
		t.Fatalf("RECIPES_BODIES: %v", err)
	}
	c := testenv.Dial(t, master)
	if got, _ := testenv.ParseBulk(c.Do("SCRIPT", "LOAD", string(b))); string(got) != shaRLockAcquire {
		t.Fatalf("SCRIPT LOAD of lock.acquire.lua = %q, want %s", got, shaRLockAcquire)
	}
}

func rlockAcquire(t *testing.T, addr, name, holder string) []byte {
	t.Helper()
	return retry(t, addr, "EVALSHA", shaRLockAcquire, "1", name, "30000", holder)
}

// A Redisson RLock taken through a tier node is hardened as on a single
// node, whichever node the client uses: through a follower (relayed to the
// leader) and through the leader, the grant gets a token from the tier's
// authority (LOCK.TOKEN through any node), a second holder is told to
// retry, and with the only replica stopped nothing is granted.
func TestRecipeLockThroughTier(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	tr := testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr, MinReplicas: 1})
	loadRLockBody(t, master.Addr)
	l := tr.Leader(t)
	f := followers(tr, l)
	follower, leader := tr.Nodes[f[0]].Addr, tr.Nodes[l].Addr
	retry(t, follower, "LOCK.ACQUIRE", "warm-up", "w", "30000") // the relay link is up

	for _, tc := range []struct{ via, addr, name string }{
		{"a follower", follower, "orders"},
		{"the leader", leader, "invoices"},
	} {
		const a, b = "uuid-a:1", "uuid-b:7"
		if r := rlockAcquire(t, tc.addr, tc.name, a); !testenv.IsNull(r) {
			t.Fatalf("RLock acquire of %s via %s = %s, want nil (acquired)", tc.name, tc.via, testenv.ShowReply(r))
		}
		for _, n := range tr.Nodes {
			r := retry(t, n.Addr, "LOCK.TOKEN", tc.name, a)
			if tok, ok := testenv.ParseInt(r); !ok || tok <= 0 {
				t.Fatalf("LOCK.TOKEN %s %s via %s after the grant via %s = %s, want the grant's token",
					tc.name, a, n.Addr, tc.via, testenv.ShowReply(r))
			}
		}
		for _, addr := range []string{follower, leader} {
			r := rlockAcquire(t, addr, tc.name, b)
			if n, ok := testenv.ParseInt(r); !ok || n <= 0 {
				t.Fatalf("a second holder's acquire of %s via %s = %s, want a positive pttl (held)", tc.name, addr, testenv.ShowReply(r))
			}
		}
	}

	replica.Stop()
	defer replica.Cont()
	m := testenv.Dial(t, master.Addr)
	for _, addr := range []string{follower, leader} {
		r := rlockAcquire(t, addr, "refused", "uuid-c:1")
		if n, ok := testenv.ParseInt(r); !ok || n <= 0 {
			t.Fatalf("RLock acquire via %s with the only replica stopped = %s, want a positive retry time (not acquired)", addr, testenv.ShowReply(r))
		}
		if got := string(m.Do("EXISTS", "refused")); got != ":0\r\n" {
			t.Fatalf("after the refused grant via %s the master holds the lock (EXISTS = %q)", addr, got)
		}
	}
}

// With no leader in reach (the other two nodes killed), a follower cannot
// relay an RLock acquire: it answers Redisson's "held, retry in n ms",
// which lock() waits on, as a single node that may not grant right now
// does, not an error (Redisson sends acquires without retry, so an error
// would reach the application).
func TestRecipeAcquireWithoutLeaderIsHeld(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	tr := testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr, MinReplicas: 1})
	loadRLockBody(t, master.Addr)
	l := tr.Leader(t)
	f := followers(tr, l)
	follower := tr.Nodes[f[0]].Addr
	retry(t, follower, "LOCK.ACQUIRE", "warm-up", "w", "30000") // the leader grants
	if r := rlockAcquire(t, follower, "orders", "uuid-a:1"); !testenv.IsNull(r) {
		t.Fatalf("RLock acquire via a follower = %s, want nil (acquired)", testenv.ShowReply(r))
	}
	tr.Nodes[l].Kill9()
	tr.Nodes[f[1]].Kill9()
	c := testenv.Dial(t, follower)
	c.SetTimeout(30 * time.Second)
	r := c.Do("EVALSHA", shaRLockAcquire, "1", "invoices", "30000", "uuid-b:1")
	if n, ok := testenv.ParseInt(r); !ok || n <= 0 {
		t.Fatalf("RLock acquire via the follower with no leader in reach = %s, want a positive retry time (held, retry)", testenv.ShowReply(r))
	}
}

// A relayed RLock grant is judged again when the leader's reply reaches
// the follower, as LOCK.ACQUIRE's is: one held up on the link back until
// less than the safety margin of its lease is left is answered "held,
// retry" (not acquired), not nil.
func TestRelayedLateRecipeGrantRefused(t *testing.T) {
	tr, master, l, f := relayTier(t, "--lease-safety-margin", "0.9")
	loadRLockBody(t, master.Addr)
	u, r := lateRelayedGrant(t, tr, l, f, "uuid-a:1", func(resource string) []string {
		return []string{"EVALSHA", shaRLockAcquire, "1", resource, "20000", "uuid-a:1"}
	})
	if n, ok := testenv.ParseInt(r); !ok || n <= 0 {
		t.Fatalf("an RLock grant of %s that reached the follower with under the margin left = %s, want a positive retry time (not acquired)",
			u, testenv.ShowReply(r))
	}
}

// A value lock (SET NX on a --lock-keys key) and its release script
// (redis-py's), through a follower and through the leader: granted once,
// released by its holder, and never answered with the proxy's internal
// error (the fault suite's tier mode saw every relayed release end in it).
func TestValueLockThroughTier(t *testing.T) {
	const shaPyRelease = "c3f8721cbb97f72bc19e972846bd7aaf91901658"
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	tr := testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr, MinReplicas: 1, Args: []string{"--lock-keys", "nxlock:*"}})
	l := tr.Leader(t)
	f := followers(tr, l)
	follower, leader := tr.Nodes[f[0]].Addr, tr.Nodes[l].Addr
	retry(t, follower, "LOCK.ACQUIRE", "warm-up", "w", "30000") // the relay link is up
	for _, tc := range []struct{ via, addr, key string }{
		{"a follower", follower, "nxlock:f"},
		{"the leader", leader, "nxlock:l"},
	} {
		if r := retry(t, tc.addr, "SET", tc.key, "mine", "NX", "PX", "30000"); string(r) != "+OK\r\n" {
			t.Fatalf("SET %s NX via %s = %s, want +OK", tc.key, tc.via, testenv.ShowReply(r))
		}
		if r := retry(t, tc.addr, "SET", tc.key, "other", "NX", "PX", "30000"); !testenv.IsNull(r) {
			t.Fatalf("a second SET %s NX via %s = %s, want nil (held)", tc.key, tc.via, testenv.ShowReply(r))
		}
		for _, holder := range []string{"other", "mine"} {
			want := map[string]string{"other": ":0\r\n", "mine": ":1\r\n"}[holder]
			if r := retry(t, tc.addr, "EVALSHA", shaPyRelease, "1", tc.key, holder); string(r) != want {
				t.Fatalf("redis-py's release of %s by %s via %s = %s, want %q", tc.key, holder, tc.via, testenv.ShowReply(r), want)
			}
		}
	}
}
