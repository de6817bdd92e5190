package security_test

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

const (
	appPass   = "app-Pa55-41be"
	otherPass = "other-Pa55-9d07"
)

// A client that authenticates as an ACL user gets its Redisson lock
// hardened as an unauthenticated one does: app, allowed only ~app:* keys
// and the commands its lock sends, is granted only once the replica has
// the grant (with the only replica stopped: "held, retry", nothing left on
// the master), with a token LOCK.TOKEN reads; other, not allowed the key,
// gets Redis's own NOPERM and no grant.
func TestRecipeLockAsACLUser(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	t.Setenv("FENCEPROXY_REQUIREPASS", defaultPass)
	acl := writeACL(t,
		"user app on >"+appPass+" ~app:* -@all +evalsha +lock.token",
		"user other on >"+otherPass+" ~other:* -@all +evalsha +lock.token")
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1,
		ReplicaTimeout: 300 * time.Millisecond, Args: []string{"--aclfile", acl}})
	loadRLockBody(t, master.Addr)
	e := &env{master: master, proxy: proxy}
	app, other := e.as(t, "app", appPass), e.as(t, "other", otherPass)
	app.SetTimeout(30 * time.Second)
	m := testenv.Dial(t, master.Addr)
	const holder = "uuid-a:1"

	if r := app.Do("EVALSHA", shaRLockAcquire, "1", "app:orders", "30000", holder); !testenv.IsNull(r) {
		t.Fatalf("app's RLock acquire of app:orders = %s, want nil (acquired)", testenv.ShowReply(r))
	}
	if r := app.Do("LOCK.TOKEN", "app:orders", holder); !isPositive(r) {
		t.Fatalf("app's LOCK.TOKEN app:orders %s after the grant = %s, want its token", holder, testenv.ShowReply(r))
	}
	expect(t, other, replyNoPermKey, "EVALSHA", shaRLockAcquire, "1", "app:orders", "30000", "uuid-b:1")
	expect(t, other, replyNoPermKey, "EVALSHA", shaRLockAcquire, "1", "app:free", "30000", "uuid-b:1")
	expect(t, m, ":0\r\n", "EXISTS", "app:free")

	replica.Stop()
	defer replica.Cont()
	if r := app.Do("EVALSHA", shaRLockAcquire, "1", "app:refused", "30000", holder); !isPositive(r) {
		t.Fatalf("app's RLock acquire with the only replica stopped = %s, want a positive retry time (not acquired)", testenv.ShowReply(r))
	}
	expect(t, m, ":0\r\n", "EXISTS", "app:refused")
}

func isPositive(r []byte) bool {
	n, ok := testenv.ParseInt(r)
	return ok && n > 0
}

// loadRLockBody loads Redisson's acquire body into the master when
// $RECIPES_BODIES has it (scripts/recipe-bodies.sh), as Redisson does
// after a NOSCRIPT: a proxy that forwards the script then runs Redisson's
// own, and the test fails on what the proxy must add, not on NOSCRIPT.
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
