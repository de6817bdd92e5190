// Package recipes tests clients' own lock recipes through fenceproxy
// (issue #23): the requests a real client library sends, byte for byte
// (EVALSHA with the library's SHA-1 and argument layout; see
// docs/design/recipes.md), against a real master and replica. The library
// itself runs in test/clients (the Java suite runs Redisson's RLock).
package recipes

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) {
	if upstream := os.Getenv(relayUpstreamEnv); upstream != "" {
		serveRelay(upstream) // TestRedissonBench's relay, in a process of its own
		return
	}
	testenv.Main(m)
}

// Redisson's scripts (3.52.0, 4.0.0, 4.7.0 and 4.8.0 send the same bodies).
const (
	shaAcquire = "149c5a8bf18676fd99e9e6e24923bd64d9b62f94"
	shaRenew   = "6a3d31570dc6f4b0bd32bcdc8e75667747c6f635"
	shaUnlock  = "6866459238a13a701d42f4971f12d9f3a50e2442"
	shaSpinAcq = "dad0f8d619e548e04f21fb48d50be5034df3adae"
	shaSpinUnl = "73ac2729af29ea9a975f95e8097f7ee9a74cce3d"
	shaForce   = "605e338249a7a1d40df83b04f7658354f883b41b"
	shaFenTok  = "49babb5a1e6a0c5f188c2ae62b93b51cdfd63e45" // RFencedLock lockAndGetToken
	shaFenAcq  = "46b5551ba403d6152a7a6eca122e08728d6c8c66" // RFencedLock lock()
)

// setup is a master with one replica, a proxy with --min-replicas 1, and
// connections to the proxy (c), the master (m) and the replica (r).
type setup struct {
	master, replica *testenv.Redis
	p               *testenv.Proxy
	c, m, r         *testenv.Conn
}

func newSetup(t *testing.T) setup {
	t.Helper()
	var e setup
	e.master = testenv.StartRedis(t, testenv.RedisOptions{})
	e.replica = testenv.StartReplica(t, e.master)
	e.p = testenv.StartProxy(t, testenv.ProxyOptions{Backend: e.master.Addr, MinReplicas: 1, ReplicaTimeout: 300 * time.Millisecond})
	e.c = testenv.Dial(t, e.p.Addr)
	e.c.SetTimeout(30 * time.Second)
	e.m = testenv.Dial(t, e.master.Addr)
	e.r = testenv.Dial(t, e.replica.Addr)
	loadBodies(t, e.c)
	return e
}

// bodiesEnv names a directory with Redisson's script bodies
// (lock.acquire.lua and so on; not in this repository):
// scripts/recipe-bodies.sh fetches them from the packages, and
// scripts/test.sh sets it. With it, each test first loads them through the proxy with
// SCRIPT LOAD, as Redisson does after a NOSCRIPT: a proxy that forwards
// the scripts (today's main) then runs Redisson's own, and each test fails
// on what the proxy must add, not on NOSCRIPT.
const bodiesEnv = "RECIPES_BODIES"

// bodyFiles are the bodies the tests send, by SHA-1.
var bodyFiles = map[string]string{
	shaAcquire: "lock.acquire.lua", shaRenew: "lock.renew-batch.lua",
	shaUnlock: "lock.unlock.lua", shaSpinAcq: "spin.acquire.lua",
	shaSpinUnl: "spin.unlock.lua", shaForce: "lock.forceunlock.lua",
	shaFenTok: "fenced.acquire-token.lua", shaFenAcq: "fenced.acquire.lua",
}

// body reads the body of sha from $RECIPES_BODIES ("" without it).
func body(t *testing.T, sha string) string {
	t.Helper()
	dir := os.Getenv(bodiesEnv)
	if dir == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, bodyFiles[sha]))
	if err != nil {
		t.Fatalf("%s: %v", bodiesEnv, err)
	}
	return string(b)
}

func loadBodies(t *testing.T, c *testenv.Conn) {
	t.Helper()
	for sha := range bodyFiles {
		if b := body(t, sha); b != "" {
			if got, _ := testenv.ParseBulk(c.Do("SCRIPT", "LOAD", b)); string(got) != sha {
				t.Fatalf("SCRIPT LOAD of %s through the proxy = %q, want %s", bodyFiles[sha], got, sha)
			}
		}
	}
}

// acquire sends RLock's acquire as Redisson does: EVALSHA sha 1 name
// leaseMs lockName.
func acquire(c *testenv.Conn, name string, lease int, holder string) []byte {
	return c.Do("EVALSHA", shaAcquire, "1", name, strconv.Itoa(lease), holder)
}

// unlock sends RLock's unlock as Redisson does, with latch request id req.
func unlock(c *testenv.Conn, name, holder, req string) []byte {
	return c.Do("EVALSHA", shaUnlock, "3", name, "redisson_lock__channel:{"+name+"}",
		"redisson_unlock_latch:{"+name+"}:"+req, "0", "30000", holder, "PUBLISH", "13500")
}

func mustNull(t *testing.T, got []byte, what string) {
	t.Helper()
	if !testenv.IsNull(got) {
		t.Fatalf("%s = %q, want nil (Redisson: acquired)", what, got)
	}
}

func mustInt(t *testing.T, got []byte, what string) int64 {
	t.Helper()
	n, ok := testenv.ParseInt(got)
	if !ok {
		t.Fatalf("%s = %q, want an integer", what, got)
	}
	return n
}

func token(t *testing.T, c *testenv.Conn, name, holder string) int64 {
	t.Helper()
	return mustInt(t, c.Do("LOCK.TOKEN", name, holder), "LOCK.TOKEN "+name+" "+holder)
}

// A grant is replied only once the replica has it; it gets a fence-store
// token, which FENCE.CHECK, LOCK.INFO and LOCK.TOKEN know by the lock key;
// another holder is told the pttl; re-entry keeps the token; the last
// unlock publishes the wake-up and frees the lock for the next holder,
// whose token is newer.
func TestRedissonLockThroughProxy(t *testing.T) {
	e := newSetup(t)
	const name, a, b = "orders", "uuid-a:1", "uuid-b:7"

	mustNull(t, acquire(e.c, name, 30000, a), "A's acquire")
	// Replied after the replica acknowledged: the replica has it now.
	if got := string(e.r.Do("HGET", name, a)); got != "$1\r\n1\r\n" {
		t.Fatalf("replica's HGET %s %s right after the grant = %q, want 1", name, a, got)
	}
	tokA := token(t, e.c, name, a)
	if got := string(e.c.Do("FENCE.CHECK", name, strconv.FormatInt(tokA, 10))); got != ":1\r\n" {
		t.Fatalf("FENCE.CHECK %s %d = %q, want 1", name, tokA, got)
	}
	// The grant raised the resource's fence mark, against which a delayed
	// FENCE.EXEC is checked inside Redis.
	if got, _ := testenv.ParseBulk(e.m.Do("GET", "fenceproxy:lock:{"+name+"}:fence")); string(got) != strconv.FormatInt(tokA, 10)+" 0" {
		t.Fatalf("fence mark after A's grant = %q, want %d 0", got, tokA)
	}
	li, err := testenv.ParseLockInfo(e.c.Do("LOCK.INFO", name))
	if err != nil || string(li.Owner) != a || li.Token != tokA {
		t.Fatalf("LOCK.INFO %s = %+v (%v), want owner %s token %d", name, li, err, a, tokA)
	}
	if got := string(e.c.Do("FENCE.EXEC", name, strconv.FormatInt(tokA, 10), "SET", "orders:data", "a")); got != "+OK\r\n" {
		t.Fatalf("FENCE.EXEC %s %d SET = %q, want +OK", name, tokA, got)
	}
	if got := e.c.Do("LOCK.TOKEN", name, b); !testenv.IsNull(got) {
		t.Fatalf("LOCK.TOKEN %s %s (not the holder) = %q, want null", name, b, got)
	}
	if pttl := mustInt(t, acquire(e.c, name, 30000, b), "B's acquire while A holds"); pttl <= 0 || pttl > 30000 {
		t.Fatalf("B's acquire while A holds = %d, want A's pttl", pttl)
	}
	// Also against the lock family: the resource is held.
	if got := e.c.Do("LOCK.ACQUIRE", name, "family", "1000"); !testenv.IsNull(got) {
		t.Fatalf("LOCK.ACQUIRE %s while Redisson's A holds it = %q, want null", name, got)
	}

	mustNull(t, acquire(e.c, name, 30000, a), "A's re-entry")
	if got := string(e.m.Do("HGET", name, a)); got != "$1\r\n2\r\n" {
		t.Fatalf("count after re-entry = %q, want 2", got)
	}
	if again := token(t, e.c, name, a); again != tokA {
		t.Fatalf("LOCK.TOKEN after re-entry = %d, want A's %d", again, tokA)
	}

	// The wake-up: a subscriber on the channel hears the last unlock.
	sub, err := net.Dial("tcp", e.p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sub.Write(testenv.AppendCommand(nil, "SUBSCRIBE", "redisson_lock__channel:{"+name+"}"))
	rd := bufio.NewReader(sub)
	sub.SetReadDeadline(time.Now().Add(10 * time.Second))
	readLines(t, rd, 6) // the subscribe confirmation

	if got := mustInt(t, unlock(e.c, name, a, "r1"), "A's first unlock"); got != 0 {
		t.Fatalf("A's first unlock = %d, want 0 (still held once)", got)
	}
	if got := mustInt(t, unlock(e.c, name, a, "r1"), "A's first unlock retried"); got != 0 {
		t.Fatalf("A's first unlock retried with the same latch = %d, want 0 again", got)
	}
	if got := mustInt(t, unlock(e.c, name, a, "r2"), "A's last unlock"); got != 1 {
		t.Fatalf("A's last unlock = %d, want 1 (released)", got)
	}
	msg := readLines(t, rd, 7)
	if !strings.Contains(msg, "message") || !strings.HasSuffix(msg, "0\r\n") {
		t.Fatalf("the channel carried %q, want the unlock message 0", msg)
	}
	if got := unlock(e.c, name, a, "r3"); !testenv.IsNull(got) {
		t.Fatalf("unlock by a non-holder = %q, want nil", got)
	}
	if li, _ := testenv.ParseLockInfo(e.c.Do("LOCK.INFO", name)); li.Owner != nil {
		t.Fatalf("LOCK.INFO after the release shows owner %q", li.Owner)
	}

	mustNull(t, acquire(e.c, name, 30000, b), "B's acquire after the release")
	tokB := token(t, e.c, name, b)
	if tokB <= tokA {
		t.Fatalf("B's token %d is not above A's %d", tokB, tokA)
	}
	if got := string(e.c.Do("FENCE.CHECK", name, strconv.FormatInt(tokA, 10))); got != ":0\r\n" {
		t.Fatalf("FENCE.CHECK of A's token after B's grant = %q, want 0 (stale)", got)
	}
	if got := string(e.c.Do("FENCE.EXEC", name, strconv.FormatInt(tokA, 10), "SET", "orders:data", "a")); !strings.HasPrefix(got, "-STALE") {
		t.Fatalf("FENCE.EXEC with A's token after B's grant = %q, want -STALE", got)
	}
	// RSpinLock's acquire is the same lock: B re-enters by it.
	if got := e.c.Do("EVALSHA", shaSpinAcq, "1", name, "30000", b); !testenv.IsNull(got) {
		t.Fatalf("B's re-entry by RSpinLock's acquire = %q, want nil", got)
	}
}

// readLines reads n CRLF lines (a small pub/sub reply) and returns them.
func readLines(t *testing.T, rd *bufio.Reader, n int) string {
	t.Helper()
	var b strings.Builder
	for range n {
		l, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the channel: %v (so far %q)", err, b.String())
		}
		b.WriteString(l)
	}
	return b.String()
}

// With the only replica stopped, a fresh grant is undone and answered
// with a positive retry time (Redisson: "held, try again"): the master
// holds no lock and no record, and no token counts as issued.
func TestRedissonGrantRefusedWithoutReplica(t *testing.T) {
	e := newSetup(t)
	const name, a = "refused", "uuid-a:1"
	e.replica.Stop()
	defer e.replica.Cont()

	if got := mustInt(t, acquire(e.c, name, 30000, a), "acquire with the replica stopped"); got <= 0 {
		t.Fatalf("acquire with the replica stopped = %d, want a positive retry time (not acquired)", got)
	}
	if n := mustInt(t, e.m.Do("EXISTS", name, "fenceproxy:lock:{"+name+"}", "fenceproxy:lock:{"+name+"}:fence"), "EXISTS"); n != 0 {
		t.Fatalf("after the refused grant %d of the lock, its record and its fence mark are left on the master, want none", n)
	}
	if li, _ := testenv.ParseLockInfo(e.c.Do("LOCK.INFO", name)); li.Owner != nil || li.Token != 0 {
		t.Fatalf("LOCK.INFO after the refused grant = %s, want free and no token issued", li.Raw)
	}
}

// With the replica stopped, a re-entry is undone exactly: the count is
// stepped back and the lock's expiry is what it was.
func TestRedissonReentryUndoneWithoutReplica(t *testing.T) {
	e := newSetup(t)
	const name, a = "reentry", "uuid-a:1"
	mustNull(t, acquire(e.c, name, 60000, a), "A's acquire")
	tokA := string(e.c.Do("LOCK.TOKEN", name, a)) // checked at the end
	before := mustInt(t, e.m.Do("PEXPIRETIME", name), "PEXPIRETIME before")
	time.Sleep(20 * time.Millisecond) // a re-arm would move the expiry

	e.replica.Stop()
	if got := mustInt(t, acquire(e.c, name, 60000, a), "A's re-entry with the replica stopped"); got <= 0 {
		t.Fatalf("re-entry with the replica stopped = %d, want a positive retry time", got)
	}
	e.replica.Cont()
	if got := string(e.m.Do("HGET", name, a)); got != "$1\r\n1\r\n" {
		t.Fatalf("count after the refused re-entry = %q, want 1", got)
	}
	if after := mustInt(t, e.m.Do("PEXPIRETIME", name), "PEXPIRETIME after"); after != before {
		t.Fatalf("expiry after the refused re-entry = %d, want %d restored", after, before)
	}
	if got := string(e.c.Do("LOCK.TOKEN", name, a)); got != tokA || !strings.HasPrefix(got, ":") {
		t.Fatalf("LOCK.TOKEN after the refused re-entry = %q, want %q (the grant's token)", got, tokA)
	}
}

// The watchdog's batched renewal re-arms every lock its holder holds (1)
// and reports the others (0); with the replica stopped it answers
// NOREPLICAS (Redisson retries the batch) and restores the old expiries.
func TestRedissonRenewBatch(t *testing.T) {
	e := newSetup(t)
	mustNull(t, acquire(e.c, "k1", 20000, "h:1"), "k1")
	mustNull(t, acquire(e.c, "k2", 20000, "h:2"), "k2")
	got := string(e.c.Do("EVALSHA", shaRenew, "3", "k1", "k2", "k3", "60000", "h:1", "h:2", "h:3"))
	if got != "*3\r\n:1\r\n:1\r\n:0\r\n" {
		t.Fatalf("renewal of k1 k2 (held) and k3 (not) = %q, want [1 1 0]", got)
	}
	for _, k := range []string{"k1", "k2"} {
		if pttl := mustInt(t, e.r.Do("PTTL", k), "replica's PTTL "+k); pttl <= 20000 {
			t.Fatalf("replica's PTTL %s after the renewal = %d, want above the old 20000", k, pttl)
		}
	}
	before := mustInt(t, e.m.Do("PEXPIRETIME", "k1"), "PEXPIRETIME k1")
	if pttl := mustInt(t, e.r.Do("PTTL", "fenceproxy:lock:{k1}"), "replica's PTTL of k1's record"); pttl <= 20000 {
		t.Fatalf("replica's PTTL of k1's owner record after the renewal = %d, want above the old 20000", pttl)
	}
	e.replica.Stop()
	got = string(e.c.Do("EVALSHA", shaRenew, "1", "k1", "90000", "h:1"))
	e.replica.Cont()
	if !strings.HasPrefix(got, "-NOREPLICAS") {
		t.Fatalf("renewal with the replica stopped = %q, want -NOREPLICAS", got)
	}
	if after := mustInt(t, e.m.Do("PEXPIRETIME", "k1"), "PEXPIRETIME k1 after"); after != before {
		t.Fatalf("k1's expiry after the refused renewal = %d, want %d restored", after, before)
	}
}

// EVAL with the body (Redisson's useScriptCache off) is recognised as
// EVALSHA is: the grant waits for the replica and has a token. Needs the
// bodies ($RECIPES_BODIES); skipped without them.
func TestRedissonEvalBody(t *testing.T) {
	if os.Getenv(bodiesEnv) == "" {
		t.Skip("set " + bodiesEnv + " to a directory with Redisson's script bodies")
	}
	e := newSetup(t)
	e.c.Do("SCRIPT", "FLUSH") // EVAL must not depend on a cached body
	const name, a = "evalbody", "uuid-a:1"
	if got := e.c.Do("EVAL", body(t, shaAcquire), "1", name, "30000", a); !testenv.IsNull(got) {
		t.Fatalf("EVAL acquire = %q, want nil", got)
	}
	tok := token(t, e.c, name, a)
	e.replica.Stop()
	got := e.c.Do("EVAL", body(t, shaAcquire), "1", "evalbody2", "30000", a)
	e.replica.Cont()
	if n, ok := testenv.ParseInt(got); !ok || n <= 0 {
		t.Fatalf("EVAL acquire with the replica stopped = %q, want a positive retry time", got)
	}
	if got := e.c.Do("EVAL", body(t, shaUnlock), "3", name, "redisson_lock__channel:{"+name+"}",
		"redisson_unlock_latch:{"+name+"}:r", "0", "30000", a, "PUBLISH", "13500"); string(got) != ":1\r\n" {
		t.Fatalf("EVAL unlock = %q, want 1", got)
	}
	if got := e.c.Do("FENCE.CHECK", name, strconv.FormatInt(tok, 10)); string(got) != ":1\r\n" {
		t.Fatalf("FENCE.CHECK after the unlock = %q, want 1 (no newer grant)", got)
	}
}

// A lock whose hash was deleted where the proxy did not run the unlock
// (Redisson's RTransaction unlocks inside MULTI; an application may DEL
// it) leaves a stale record beside it, which must not keep the next
// holder out.
func TestRedissonUnlockElsewhereFreesTheLock(t *testing.T) {
	e := newSetup(t)
	const name, a, b = "elsewhere", "uuid-a:1", "uuid-b:1"
	mustNull(t, acquire(e.c, name, 30000, a), "A's acquire")
	tokA := string(e.c.Do("LOCK.TOKEN", name, a))
	e.c.Do("DEL", name)
	mustNull(t, acquire(e.c, name, 30000, b), "B's acquire after A's lock was deleted")
	tokB := token(t, e.c, name, b)
	if n, ok := testenv.ParseInt([]byte(tokA)); !ok || tokB <= n {
		t.Fatalf("B's token %d after A's %q, want above it", tokB, tokA)
	}
	// A lock-family grant of the same name is not a recipe's: it keeps
	// Redisson's acquire out.
	if got := e.c.Do("LOCK.ACQUIRE", "family", "owner", "30000"); testenv.IsNull(got) {
		t.Fatalf("LOCK.ACQUIRE family = %q, want a token", got)
	}
	if pttl := mustInt(t, acquire(e.c, "family", 30000, a), "Redisson's acquire of a lock-family resource"); pttl <= 0 {
		t.Fatalf("Redisson's acquire of a resource the lock family holds = %d, want its pttl", pttl)
	}
}

// A recipe's unlock never ends a lock-family grant of the same name: a
// hash written at the resource's name and force-unlocked as Redisson does
// leaves the family's holder holding (its token still the newest), where
// the twins used to drop whatever record the name had.
func TestRecipeForceUnlockLeavesFamilyGrant(t *testing.T) {
	e := newSetup(t)
	const name = "shared-name"
	tok := mustInt(t, e.c.Do("LOCK.ACQUIRE", name, "owner", "30000"), "LOCK.ACQUIRE")
	e.c.Do("HSET", name, "uuid-x:1", "1")
	if n := mustInt(t, e.c.Do("EVALSHA", shaForce, "2", name, "redisson_lock__channel:{"+name+"}", "0", "PUBLISH"), "forceUnlock"); n != 1 {
		t.Fatalf("forceUnlock of the hash = %d, want 1 (it deleted the hash)", n)
	}
	if got := e.c.Do("LOCK.RENEW", name, "owner", "30000"); testenv.IsNull(got) || mustInt(t, got, "LOCK.RENEW") != tok {
		t.Fatalf("LOCK.RENEW by the family holder after a recipe's forceUnlock = %q, want its token %d: its record was dropped", got, tok)
	}
}

// A grant whose lease would be over, or nearly, by the time it is replied
// (the late-reply rule: here a 2 ms lease, which can never leave the
// safety margin) is undone and answered "held, retry": nothing is left.
func TestRedissonLateGrantUndone(t *testing.T) {
	e := newSetup(t)
	const name, a = "late", "uuid-a:1"
	if got := mustInt(t, acquire(e.c, name, 2, a), "acquire with a 2 ms lease"); got <= 0 {
		t.Fatalf("acquire with a 2 ms lease = %d, want a positive retry time (not acquired)", got)
	}
	if n := mustInt(t, e.m.Do("EXISTS", name, "fenceproxy:lock:{"+name+"}"), "EXISTS"); n != 0 {
		t.Fatalf("after the late grant %d of the lock and its record are left, want none", n)
	}
}

// The twins have the effect of Redisson's own scripts: the same sequence
// of calls, run through the proxy on one lock and with Redisson's bodies
// straight on the master on another, leaves the same hash, the same
// replies and expiries within a few ms, and the same latch. Needs the
// bodies ($RECIPES_BODIES).
func TestTwinsMatchRedissonScripts(t *testing.T) {
	if os.Getenv(bodiesEnv) == "" {
		t.Skip("set " + bodiesEnv + " to a directory with Redisson's script bodies")
	}
	e := newSetup(t)
	steps := []struct {
		sha  string
		keys func(n string) []string
		argv []string
	}{
		{shaAcquire, func(n string) []string { return []string{n} }, []string{"30000", "h:1"}},
		{shaAcquire, func(n string) []string { return []string{n} }, []string{"40000", "h:1"}}, // re-entry
		{shaAcquire, func(n string) []string { return []string{n} }, []string{"30000", "h:2"}}, // busy
		{shaRenew, func(n string) []string { return []string{n, n + "x"} }, []string{"50000", "h:1", "h:1"}},
		{shaUnlock, func(n string) []string { return unlockKeys(n, "r1") }, []string{"0", "20000", "h:2", "PUBLISH", "13500"}}, // not holder
		{shaUnlock, func(n string) []string { return unlockKeys(n, "r2") }, []string{"0", "20000", "h:1", "PUBLISH", "13500"}}, // count 1 left
		{shaUnlock, func(n string) []string { return unlockKeys(n, "r2") }, []string{"0", "20000", "h:1", "PUBLISH", "13500"}}, // latch
		{shaUnlock, func(n string) []string { return unlockKeys(n, "r3") }, []string{"0", "20000", "h:1", "PUBLISH", "13500"}}, // released
		{shaSpinAcq, func(n string) []string { return []string{n} }, []string{"30000", "h:2"}},
		{shaSpinAcq, func(n string) []string { return []string{n} }, []string{"30000", "h:2"}},
		{shaSpinUnl, func(n string) []string { return []string{n, "redisson_unlock_latch:{" + n + "}:s1"} }, []string{"25000", "h:2", "13500"}},
		{shaSpinUnl, func(n string) []string { return []string{n, "redisson_unlock_latch:{" + n + "}:s2"} }, []string{"25000", "h:2", "13500"}},
		{shaSpinAcq, func(n string) []string { return []string{n} }, []string{"30000", "h:3"}},
		{shaForce, func(n string) []string { return []string{n, "redisson_lock__channel:{" + n + "}"} }, []string{"0", "PUBLISH"}},
		{shaForce, func(n string) []string { return []string{n, "redisson_lock__channel:{" + n + "}"} }, []string{"0", "PUBLISH"}},
		{shaAcquire, func(n string) []string { return []string{n} }, []string{"30000", "h:4"}},
	}
	for i, s := range steps {
		real, twin := "real", "twin"
		cmd := func(n string) []string {
			ks := s.keys(n)
			return append(append([]string{"EVALSHA", s.sha, strconv.Itoa(len(ks))}, ks...), s.argv...)
		}
		want := string(e.m.Do(cmd(real)...))
		got := string(e.c.Do(cmd(twin)...))
		if got != want && !samePTTL(got, want) {
			t.Fatalf("step %d: the proxy's reply %q, Redisson's script's %q", i, got, want)
		}
		hw, hg := string(e.m.Do("HGETALL", real)), string(e.m.Do("HGETALL", twin))
		if hw != hg {
			t.Fatalf("step %d: the twin left %q, Redisson's script %q", i, hg, hw)
		}
		pw, pg := mustInt(t, e.m.Do("PTTL", real), "PTTL"), mustInt(t, e.m.Do("PTTL", twin), "PTTL")
		if d := pw - pg; d < -50 || d > 50 {
			t.Fatalf("step %d: the twin's PTTL %d, Redisson's script's %d", i, pg, pw)
		}
	}
	for _, req := range []string{"r1", "r2", "r3", "s1", "s2"} {
		lw := string(e.m.Do("GET", "redisson_unlock_latch:{real}:"+req))
		lg := string(e.m.Do("GET", "redisson_unlock_latch:{twin}:"+req))
		if lw != lg {
			t.Fatalf("latch %s: the twin's %q, Redisson's script's %q", req, lg, lw)
		}
	}
}

// samePTTL: two replies that are a busy lock's pttl, read a few ms apart.
func samePTTL(a, b string) bool {
	x, ok1 := testenv.ParseInt([]byte(a))
	y, ok2 := testenv.ParseInt([]byte(b))
	return ok1 && ok2 && x > 100 && y > 100 && x-y < 50 && y-x < 50
}

func unlockKeys(n, req string) []string {
	return []string{n, "redisson_lock__channel:{" + n + "}", "redisson_unlock_latch:{" + n + "}:" + req}
}
