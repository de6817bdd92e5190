package recipes

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// Value locks: SET key value NX [PX|EX] on --lock-keys keys and the lock
// scripts of redis-py's Lock, redsync, redislock and node-redlock (SHA-1s
// and layouts in docs/design/recipes.md, section 2). The real libraries
// run in test/clients (python, go, node).

// The value-lock scripts' SHA-1s.
const (
	shaPyRelease   = "c3f8721cbb97f72bc19e972846bd7aaf91901658"
	shaPyExtend    = "a4e8783852e6b949f9ef3a97212805108459a890"
	shaPyReacquire = "1cac51482acf5858da00f6d685d68f886cd6b6b2"
	shaPyExtend82  = "f335028e570b0f7f958d558097d9857b8dd9b09b"
	shaPyReacq82   = "86adac77e1e4eac7090cbbe12386ad98a2b4124c"
	shaRsDelete    = "e950836ed1e694540c503ef9972b8de518044d3b"
	shaRsTouch     = "d75bb8b5bd13532ddedd17762e772346e39b321e"
	shaRsTouchNX   = "b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79"
	shaRlObtain    = "80a1b5f2cfccec3b7119ba7721d2127682b691a7"
	shaRlRelease   = "cf0e94b2e9ffc7e04395cf88f7583fc309985910"
	shaRlRefresh   = "a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf"
	shaRedlockAcq  = "96da70f7716f27d278a5218544df37fd8b0a5e4c"
	shaRedlockExt  = "aed6f382e410db8ba7926d4e5e9aab410bf2a78a"
	shaRedlockRel  = "e4612211c9f8f51c257e26e056b0a654b3187242"
)

// valueBodyFiles name the bodies (in $RECIPES_BODIES or its parent, as
// the recipes study laid them out; not in this repository).
var valueBodyFiles = map[string]string{
	shaPyRelease: "redis-py-5.2.1-LUA_RELEASE_SCRIPT.lua", shaPyExtend: "redis-py-5.2.1-LUA_EXTEND_SCRIPT.lua",
	shaPyReacquire: "redis-py-5.2.1-LUA_REACQUIRE_SCRIPT.lua",
	shaPyExtend82:  "redis-py-8.2.0-LUA_EXTEND_SCRIPT.lua", shaPyReacq82: "redis-py-8.2.0-LUA_REACQUIRE_SCRIPT.lua",
	shaRsDelete: "redsync-v4.18.1-deleteScript.lua", shaRsTouch: "redsync-v4.18.1-touchScript.lua",
	shaRsTouchNX: "redsync-v4.18.1-touchWithSetNXScript.lua",
	shaRlObtain:  "redislock-v0.9.4-luaObtain.lua", shaRlRelease: "redislock-v0.9.4-luaRelease.lua",
	shaRlRefresh:  "redislock-v0.9.4-luaRefresh.lua",
	shaRedlockAcq: "redlock-5.0.0-beta.2-ACQUIRE_SCRIPT.lua", shaRedlockExt: "redlock-5.0.0-beta.2-EXTEND_SCRIPT.lua",
	shaRedlockRel: "redlock-5.0.0-beta.2-RELEASE_SCRIPT.lua",
}

// valueBody reads a value-lock script's body ("" without $RECIPES_BODIES).
func valueBody(t *testing.T, sha string) string {
	t.Helper()
	dir := os.Getenv(bodiesEnv)
	if dir == "" {
		return ""
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if b, err := os.ReadFile(filepath.Join(d, valueBodyFiles[sha])); err == nil {
			return string(b)
		}
	}
	t.Fatalf("%s: no %s in %s or its parent", bodiesEnv, valueBodyFiles[sha], dir)
	return ""
}

// lockKeys is the --lock-keys the value tests run with.
const lockKeys = "lock:*,{app}:lock:*"

// knowsLockKeys reports whether the proxy binary has --lock-keys. One that
// does not (today's main, FENCEPROXY_BIN) is started without it, so that
// the tests fail on the grants it makes, not on the flag.
func knowsLockKeys(t *testing.T) bool {
	t.Helper()
	out, _ := exec.Command(testenv.BuildProxy(t), "-help").CombinedOutput()
	return strings.Contains(string(out), "-lock-keys")
}

// newValueSetup is newSetup with --lock-keys, and each value-lock body
// loaded through the proxy when $RECIPES_BODIES names them (as the
// libraries load them after a NOSCRIPT).
func newValueSetup(t *testing.T) setup {
	t.Helper()
	var e setup
	e.master = testenv.StartRedis(t, testenv.RedisOptions{})
	e.replica = testenv.StartReplica(t, e.master)
	var args []string
	if knowsLockKeys(t) {
		args = []string{"--lock-keys", lockKeys}
	}
	e.p = testenv.StartProxy(t, testenv.ProxyOptions{Backend: e.master.Addr, MinReplicas: 1,
		ReplicaTimeout: 300 * time.Millisecond, Args: args})
	e.c = testenv.Dial(t, e.p.Addr)
	e.c.SetTimeout(30 * time.Second)
	e.m = testenv.Dial(t, e.master.Addr)
	e.r = testenv.Dial(t, e.replica.Addr)
	for sha := range valueBodyFiles {
		if b := valueBody(t, sha); b != "" {
			if got, _ := testenv.ParseBulk(e.c.Do("SCRIPT", "LOAD", b)); string(got) != sha {
				t.Fatalf("SCRIPT LOAD of %s through the proxy = %q, want %s", valueBodyFiles[sha], got, sha)
			}
		}
	}
	return e
}

// script sends EVALSHA sha with one key and argv.
func script(c *testenv.Conn, sha, key string, argv ...string) []byte {
	return c.Do(append([]string{"EVALSHA", sha, "1", key}, argv...)...)
}

func mustReply(t *testing.T, got []byte, want, what string) {
	t.Helper()
	if string(got) != want {
		t.Fatalf("%s = %q, want %q", what, got, want)
	}
}

// SET NX on a lock key is replied only once the replica has it, and gets a
// fence-store token that LOCK.TOKEN, FENCE.CHECK and LOCK.INFO know by the
// key; another SET NX (go-redis's "set k v ex 8 nx" too) gets nil; the
// library's release frees it for the next holder, whose token is newer.
func TestSetNXGrantThroughProxy(t *testing.T) {
	e := newValueSetup(t)
	const key, a, b = "lock:orders", "token-a", "token-b"
	mustReply(t, e.c.Do("SET", key, a, "NX", "PX", "30000"), "+OK\r\n", "A's SET NX PX")
	mustReply(t, e.r.Do("GET", key), "$7\r\ntoken-a\r\n", "the replica's GET right after the grant")
	tokA := token(t, e.c, key, a)
	mustReply(t, e.c.Do("FENCE.CHECK", key, strconv.FormatInt(tokA, 10)), ":1\r\n", "FENCE.CHECK of A's token")
	mustReply(t, e.c.Do("FENCE.EXEC", key, strconv.FormatInt(tokA, 10), "SET", "orders:data", "a"), "+OK\r\n", "FENCE.EXEC with A's token")
	if li, err := testenv.ParseLockInfo(e.c.Do("LOCK.INFO", key)); err != nil || string(li.Owner) != a || li.Token != tokA {
		t.Fatalf("LOCK.INFO %s = %+v (%v), want owner %s token %d", key, li, err, a, tokA)
	}
	if got := e.c.Do("set", key, b, "ex", "8", "nx"); !testenv.IsNull(got) {
		t.Fatalf("B's set ex 8 nx while A holds = %q, want nil", got)
	}
	if got := e.c.Do("SET", key, a, "NX", "PX", "30000"); !testenv.IsNull(got) {
		t.Fatalf("A's second SET NX = %q, want nil (SET NX never re-enters)", got)
	}
	if got := e.c.Do("LOCK.ACQUIRE", key, "family", "1000"); !testenv.IsNull(got) {
		t.Fatalf("LOCK.ACQUIRE %s while a SET NX lock holds it = %q, want null", key, got)
	}
	mustReply(t, script(e.c, shaPyRelease, key, b), ":0\r\n", "redis-py release by B (not the holder)")
	mustReply(t, script(e.c, shaPyRelease, key, a), ":1\r\n", "redis-py release by A")
	if li, _ := testenv.ParseLockInfo(e.c.Do("LOCK.INFO", key)); li.Owner != nil {
		t.Fatalf("LOCK.INFO after the release shows owner %q", li.Owner)
	}
	mustReply(t, e.c.Do("set", key, b, "ex", "8", "nx"), "+OK\r\n", "B's set ex 8 nx after the release")
	if pttl := mustInt(t, e.m.Do("PTTL", key), "PTTL"); pttl <= 0 || pttl > 8000 {
		t.Fatalf("PTTL after set ex 8 = %d, want up to 8000", pttl)
	}
	if tokB := token(t, e.c, key, b); tokB <= tokA {
		t.Fatalf("B's token %d is not above A's %d", tokB, tokA)
	}
	mustReply(t, e.c.Do("FENCE.CHECK", key, strconv.FormatInt(tokA, 10)), ":0\r\n", "FENCE.CHECK of A's token after B's grant")
	if got := string(e.c.Do("FENCE.EXEC", key, strconv.FormatInt(tokA, 10), "SET", "orders:data", "late")); !strings.HasPrefix(got, "-STALE") {
		t.Fatalf("FENCE.EXEC with A's token after B's grant = %q, want -STALE", got)
	}
	// B's grant raised the key's fence mark inside Redis.
	if mark := string(e.m.Do("GET", "fenceproxy:lock:{"+key+"}:fence")); !strings.Contains(mark, strconv.FormatInt(token(t, e.c, key, b), 10)+" ") {
		t.Fatalf("the fence mark after B's grant = %q, want B's token", mark)
	}
}

// With the only replica stopped, SET NX on a lock key grants nothing: the
// client reads nil ("not acquired"), the master holds neither the key nor
// a record, and no token counts as issued. The same holds for a SET NX
// with no expiry (redis-py's Lock(timeout=None)). Today's main grants.
func TestSetNXRefusedWithoutReplica(t *testing.T) {
	e := newValueSetup(t)
	e.replica.Stop()
	defer e.replica.Cont()
	for _, cmd := range [][]string{
		{"SET", "lock:refused", "v1", "NX", "PX", "30000"},
		{"set", "lock:refused-ex", "v1", "ex", "8", "nx"},
		{"SET", "lock:refused-forever", "v1", "NX"},
		{"SET", "{app}:lock:refused", "v1", "PX", "30000", "NX"},
	} {
		if got := e.c.Do(cmd...); !testenv.IsNull(got) {
			t.Fatalf("%q with the replica stopped = %q, want nil (not acquired)", cmd, got)
		}
		key := cmd[1]
		if n := mustInt(t, e.m.Do("EXISTS", key, "fenceproxy:lock:{"+key+"}", "fenceproxy:lock:{"+key+"}:fence"), "EXISTS"); n != 0 {
			t.Fatalf("after the refused %q, %d of the key, its record and its fence mark are on the master, want none", cmd, n)
		}
		if li, _ := testenv.ParseLockInfo(e.c.Do("LOCK.INFO", key)); li.Owner != nil || li.Token != 0 {
			t.Fatalf("LOCK.INFO %s after the refused grant = %s, want free and no token issued", key, li.Raw)
		}
	}
}

// A SET NX outside --lock-keys, a SET on a lock key that is not a plain
// NX grant, and an unknown script are forwarded as today: with the
// replica stopped they answer at once as Redis does.
func TestSetNXOutsideLockKeysForwarded(t *testing.T) {
	e := newValueSetup(t)
	e.replica.Stop()
	defer e.replica.Cont()
	mustReply(t, e.c.Do("SET", "cache:x", "v", "NX", "PX", "30000"), "+OK\r\n", "SET NX outside --lock-keys")
	mustReply(t, e.c.Do("SET", "lock:plain", "v"), "+OK\r\n", "SET without NX on a lock key")
	mustReply(t, e.c.Do("SET", "lock:plain", "w", "XX", "PX", "30000"), "+OK\r\n", "SET XX on a lock key")
	mustReply(t, e.c.Do("SET", "lock:plain", "z", "NX", "GET"), "$1\r\nw\r\n", "SET NX GET on a lock key")
	mustReply(t, e.c.Do("SET", "lock:bad", "v", "NX", "PX", "-5"), "-ERR invalid expire time in 'set' command\r\n", "SET NX PX -5")
	mustReply(t, e.c.Do("EVAL", "return redis.call('SET', KEYS[1], ARGV[1], 'NX')", "1", "lock:script", "v"), "+OK\r\n", "an unknown script")
	if got := e.c.Do("LOCK.INFO", "lock:plain"); strings.Contains(string(got), "v\r\n") {
		t.Fatalf("LOCK.INFO of a plain SET's key = %q, want no holder", got)
	}
}

// The libraries' extend scripts re-arm only their holder's key, are
// replied after the replica acknowledged, and with the replica stopped
// answer 0 ("not extended") with the previous expiry restored.
func TestValueExtendScripts(t *testing.T) {
	e := newValueSetup(t)
	const key, a = "lock:extend", "token-a"
	mustReply(t, e.c.Do("SET", key, a, "NX", "PX", "20000"), "+OK\r\n", "SET NX")
	for _, s := range []struct {
		what string
		sha  string
		argv []string
	}{
		{"redis-py extend (replace)", shaPyExtend, []string{a, "40000", "1"}},
		{"redis-py reacquire", shaPyReacquire, []string{a, "41000"}},
		{"redis-py 8.2 extend (replace)", shaPyExtend82, []string{a, "40500", "1"}},
		{"redis-py 8.2 reacquire", shaPyReacq82, []string{a, "41500"}},
		{"redsync touch", shaRsTouch, []string{a, "42000"}},
		{"redislock refresh", shaRlRefresh, []string{a, "43000"}},
		{"redlock extend", shaRedlockExt, []string{a, "44000"}},
	} {
		mustReply(t, script(e.c, s.sha, key, s.argv...), ":1\r\n", s.what)
		want, _ := strconv.Atoi(s.argv[1])
		if pttl := mustInt(t, e.r.Do("PTTL", key), "replica's PTTL"); pttl <= int64(want)-5000 || pttl > int64(want) {
			t.Fatalf("replica's PTTL after %s to %d = %d", s.what, want, pttl)
		}
		mustReply(t, script(e.c, s.sha, key, append([]string{"token-b"}, s.argv[1:]...)...), ":0\r\n", s.what+" by another")
	}
	// redis-py's additive extend: the old pttl plus 10 s.
	mustReply(t, script(e.c, shaPyExtend, key, a, "10000", "0"), ":1\r\n", "redis-py extend (add)")
	if pttl := mustInt(t, e.m.Do("PTTL", key), "PTTL"); pttl <= 50000 {
		t.Fatalf("PTTL after the additive extend = %d, want above 50000", pttl)
	}
	tok := token(t, e.c, key, a)
	before := mustInt(t, e.m.Do("PEXPIRETIME", key), "PEXPIRETIME")
	sideBefore := mustInt(t, e.m.Do("PEXPIRETIME", "fenceproxy:lock:{"+key+"}"), "the record's PEXPIRETIME")
	e.replica.Stop()
	for _, s := range []struct {
		what string
		sha  string
		argv []string
	}{
		{"redis-py extend", shaPyExtend, []string{a, "90000", "1"}},
		{"redsync touch", shaRsTouch, []string{a, "90000"}},
		{"redlock extend", shaRedlockExt, []string{a, "90000"}},
	} {
		mustReply(t, script(e.c, s.sha, key, s.argv...), ":0\r\n", s.what+" with the replica stopped")
		if after := mustInt(t, e.m.Do("PEXPIRETIME", key), "PEXPIRETIME"); after != before {
			t.Fatalf("expiry after the refused %s = %d, want %d restored", s.what, after, before)
		}
		if after := mustInt(t, e.m.Do("PEXPIRETIME", "fenceproxy:lock:{"+key+"}"), "the record's PEXPIRETIME"); after != sideBefore {
			t.Fatalf("the record's expiry after the refused %s = %d, want %d restored", s.what, after, sideBefore)
		}
	}
	// redsync's touchWithSetNX grants a free key: refused, nothing is left.
	mustReply(t, script(e.c, shaRsTouchNX, "lock:touchnx", a, "30000"), ":0\r\n", "touchWithSetNX of a free key with the replica stopped")
	e.replica.Cont()
	if n := mustInt(t, e.m.Do("EXISTS", "lock:touchnx"), "EXISTS"); n != 0 {
		t.Fatal("the refused touchWithSetNX left its key")
	}
	if again := token(t, e.c, key, a); again != tok {
		t.Fatalf("LOCK.TOKEN after the extends = %d, want the grant's %d", again, tok)
	}
}

// The libraries' acquire and release scripts: redlock's acquire (one
// key) answers 1 or 0 and gets a token; redislock's obtain answers OK or
// nil and re-obtains its own key; the releases answer each library's
// shape (redsync: -1 for a key that is gone).
func TestValueAcquireReleaseScripts(t *testing.T) {
	e := newValueSetup(t)
	mustReply(t, script(e.c, shaRedlockAcq, "res:redlock", "v1", "30000"), ":1\r\n", "redlock acquire")
	token(t, e.c, "res:redlock", "v1")
	mustReply(t, script(e.c, shaRedlockAcq, "res:redlock", "v2", "30000"), ":0\r\n", "redlock acquire while held")
	mustReply(t, script(e.c, shaRedlockRel, "res:redlock", "v2"), ":0\r\n", "redlock release by another")
	mustReply(t, script(e.c, shaRedlockRel, "res:redlock", "v1"), ":1\r\n", "redlock release")

	const rl = "res:redislock"
	mustReply(t, script(e.c, shaRlObtain, rl, "tokentokentokentokenAAmeta", "22", "30000"), "+OK\r\n", "redislock obtain")
	tok := token(t, e.c, rl, "tokentokentokentokenAAmeta")
	if got := script(e.c, shaRlObtain, rl, "othertokenothertokenBBmeta", "22", "30000"); !testenv.IsNull(got) {
		t.Fatalf("redislock obtain by another = %q, want nil", got)
	}
	mustReply(t, script(e.c, shaRlObtain, rl, "tokentokentokentokenAAmeta", "22", "50000"), "+OK\r\n", "redislock re-obtain")
	if again := token(t, e.c, rl, "tokentokentokentokenAAmeta"); again != tok {
		t.Fatalf("token after the re-obtain = %d, want %d", again, tok)
	}
	mustReply(t, script(e.c, shaRlRelease, rl, "tokentokentokentokenAAmeta"), ":1\r\n", "redislock release")

	mustReply(t, e.c.Do("SET", "lock:redsync", "rs", "PX", "30000", "NX"), "+OK\r\n", "redsync's SET NX")
	mustReply(t, script(e.c, shaRsDelete, "lock:redsync", "other"), ":0\r\n", "redsync delete by another")
	mustReply(t, script(e.c, shaRsDelete, "lock:redsync", "rs"), ":1\r\n", "redsync delete")
	mustReply(t, script(e.c, shaRsDelete, "lock:redsync", "rs"), ":-1\r\n", "redsync delete of a key that is gone")

	// With the replica stopped, neither acquire grants.
	e.replica.Stop()
	mustReply(t, script(e.c, shaRedlockAcq, "res:redlock2", "v1", "30000"), ":0\r\n", "redlock acquire with the replica stopped")
	if got := script(e.c, shaRlObtain, "res:redislock2", "tokentokentokentokenAAmeta", "22", "30000"); !testenv.IsNull(got) {
		t.Fatalf("redislock obtain with the replica stopped = %q, want nil", got)
	}
	e.replica.Cont()
	if n := mustInt(t, e.m.Do("EXISTS", "res:redlock2", "res:redislock2"), "EXISTS"); n != 0 {
		t.Fatalf("%d keys of the refused acquires are left", n)
	}
}

// A grant pipelined between forwarded commands is answered in its place.
func TestSetNXPipelined(t *testing.T) {
	e := newValueSetup(t)
	e.c.Send("SET", "plain", "1")
	e.c.Send("SET", "lock:piped", "v", "NX", "PX", "30000")
	e.c.Send("GET", "plain")
	e.c.Send("SET", "lock:piped", "w", "NX", "PX", "30000")
	e.c.Send("EVALSHA", shaPyRelease, "1", "lock:piped", "v")
	e.c.Send("INCR", "plain")
	e.c.Flush()
	for i, want := range []string{"+OK\r\n", "+OK\r\n", "$1\r\n1\r\n", "$-1\r\n", ":1\r\n", ":2\r\n"} {
		got, err := e.c.ReadReply()
		if err != nil || string(got) != want {
			t.Fatalf("pipelined reply %d = %q (%v), want %q", i, got, err, want)
		}
	}
}

// SET NX with no expiry (redis-py's default) is a grant with no lease: a
// token, no expiry on the key or its record; released by the library.
func TestSetNXWithoutExpiry(t *testing.T) {
	e := newValueSetup(t)
	const key = "lock:forever"
	mustReply(t, e.c.Do("SET", key, "v", "NX"), "+OK\r\n", "SET NX")
	token(t, e.c, key, "v")
	mustReply(t, e.m.Do("PTTL", key), ":-1\r\n", "PTTL of the key")
	mustReply(t, script(e.c, shaPyExtend, key, "v", "1000", "0"), ":0\r\n", "redis-py extend of a lock with no expiry")
	mustReply(t, script(e.c, shaPyRelease, key, "v"), ":1\r\n", "redis-py release")
	mustReply(t, e.m.Do("EXISTS", key, "fenceproxy:lock:{"+key+"}"), ":0\r\n", "EXISTS after the release")
}

// A grant whose lease would be over, or nearly, by the time it is
// replied (a 2 ms lease never leaves the safety margin) is undone and
// answered nil.
func TestSetNXLateGrantUndone(t *testing.T) {
	e := newValueSetup(t)
	if got := e.c.Do("SET", "lock:late", "v", "NX", "PX", "2"); !testenv.IsNull(got) {
		t.Fatalf("SET NX PX 2 = %q, want nil (not acquired)", got)
	}
	mustReply(t, e.m.Do("EXISTS", "lock:late", "fenceproxy:lock:{lock:late}"), ":0\r\n", "EXISTS after the late grant")
}

// The value twins have the effect of the libraries' own scripts: the same
// sequence of calls, run through the proxy on one key and with the
// library's body straight on the master on another, gives the same
// replies and leaves the same value and expiry (within a few ms). Needs
// the bodies ($RECIPES_BODIES).
func TestValueTwinsMatchLibraryScripts(t *testing.T) {
	if os.Getenv(bodiesEnv) == "" {
		t.Skip("set " + bodiesEnv + " to the recipes study's redisson directory (its parent holds the other bodies)")
	}
	e := newValueSetup(t)
	const a, b = "tokentokentokentokenAAmeta", "othertokenothertokenBBmeta"
	steps := []struct {
		sha  string // "" for SET key value NX PX argv[1]
		argv []string
	}{
		{"", []string{a, "30000"}},
		{"", []string{b, "30000"}},                // held
		{shaPyRelease, []string{b}},               // not the holder
		{shaPyExtend, []string{a, "40000", "1"}},  // replace
		{shaPyExtend, []string{a, "5000", "0"}},   // add
		{shaPyExtend, []string{b, "5000", "0"}},   // not the holder
		{shaPyReacquire, []string{a, "20000"}},    //
		{shaPyExtend82, []string{a, "3000", "0"}}, // 8.2, add
		{shaPyReacq82, []string{a, "19000"}},      // 8.2
		{shaPyReacq82, []string{b, "19000"}},      // 8.2, not the holder
		{shaRsTouch, []string{a, "21000"}},        //
		{shaRsTouch, []string{b, "21000"}},        // not the holder
		{shaRsTouchNX, []string{b, "22000"}},      // another's
		{shaRlRefresh, []string{a, "23000"}},      //
		{shaRedlockExt, []string{a, "24000"}},     //
		{shaRedlockExt, []string{b, "24000"}},     // not the holder
		{shaRlObtain, []string{a, "22", "25000"}}, // re-obtain
		{shaRlObtain, []string{b, "22", "25000"}}, // another's
		{shaRedlockAcq, []string{b, "25000"}},     // held
		{shaRsDelete, []string{b}},                // another's
		{shaRsDelete, []string{a}},                // released
		{shaRsDelete, []string{a}},                // gone: -1
		{shaRsTouchNX, []string{b, "26000"}},      // a free key: granted
		{shaRlRelease, []string{a}},               // not the holder
		{shaRlRelease, []string{b}},               //
		{shaRlObtain, []string{a, "22", "27000"}}, // a free key
		{shaRedlockRel, []string{a}},              //
		{shaRedlockAcq, []string{b, "28000"}},     //
		{shaPyRelease, []string{b}},               //
		{shaPyExtend, []string{b, "5000", "1"}},   // gone
	}
	for i, s := range steps {
		run := func(c *testenv.Conn, key string) string {
			if s.sha == "" {
				return string(c.Do("SET", key, s.argv[0], "NX", "PX", s.argv[1]))
			}
			return string(script(c, s.sha, key, s.argv...))
		}
		want, got := run(e.m, "lock:real"), run(e.c, "lock:twin")
		if got != want {
			t.Fatalf("step %d (%s %q): the proxy's reply %q, the library's %q", i, s.sha, s.argv, got, want)
		}
		vw, vg := string(e.m.Do("GET", "lock:real")), string(e.m.Do("GET", "lock:twin"))
		if vw != vg {
			t.Fatalf("step %d: the twin left %q, the library's script %q", i, vg, vw)
		}
		pw, pg := mustInt(t, e.m.Do("PTTL", "lock:real"), "PTTL"), mustInt(t, e.m.Do("PTTL", "lock:twin"), "PTTL")
		if d := pw - pg; d < -50 || d > 50 {
			t.Fatalf("step %d: the twin's PTTL %d, the library's script's %d", i, pg, pw)
		}
	}
	// redlock with several keys, one of them taken by another at step 4.
	multi := []struct {
		sha  string // "" for SET key[1] "other" PX 30000
		argv []string
	}{
		{shaRedlockAcq, []string{a, "30000"}},
		{shaRedlockAcq, []string{b, "30000"}},
		{shaRedlockExt, []string{a, "40000"}},
		{shaRedlockRel, []string{a}},
		{"", nil},
		{shaRedlockAcq, []string{a, "30000"}},
		{shaRedlockRel, []string{"other"}},
		{shaRedlockAcq, []string{a, "30000"}},
		{shaRedlockExt, []string{b, "30000"}},
		{shaRedlockRel, []string{a}},
	}
	for i, s := range multi {
		keys := func(tag string) []string { return []string{"{" + tag + "}1", "{" + tag + "}2", "{" + tag + "}3"} }
		run := func(c *testenv.Conn, tag string) string {
			ks := keys(tag)
			if s.sha == "" {
				return string(c.Do("SET", ks[1], "other", "PX", "30000"))
			}
			return string(c.Do(append(append([]string{"EVALSHA", s.sha, "3"}, ks...), s.argv...)...))
		}
		want, got := run(e.m, "real"), run(e.c, "twin")
		if got != want {
			t.Fatalf("several keys, step %d (%s %q): the proxy's reply %q, the library's %q", i, s.sha, s.argv, got, want)
		}
		for j := range 3 {
			kw, kg := keys("real")[j], keys("twin")[j]
			if vw, vg := string(e.m.Do("GET", kw)), string(e.m.Do("GET", kg)); vw != vg {
				t.Fatalf("several keys, step %d: the twin left %q at %s, the library's script %q", i, vg, kg, vw)
			}
			pw, pg := mustInt(t, e.m.Do("PTTL", kw), "PTTL"), mustInt(t, e.m.Do("PTTL", kg), "PTTL")
			if d := pw - pg; d < -50 || d > 50 {
				t.Fatalf("several keys, step %d: the twin's PTTL %d at %s, the library's script's %d", i, pg, kg, pw)
			}
		}
	}
}

// redlock's scripts with several keys (a lock over several resources):
// all of them or none, each key a resource with its own token; with the
// replica stopped neither the acquire nor the extend stands.
func TestRedlockSeveralKeys(t *testing.T) {
	e := newValueSetup(t)
	keys := []string{"res:{m}:a", "res:{m}:b", "res:{m}:c"}
	do := func(sha string, argv ...string) []byte {
		return e.c.Do(append(append([]string{"EVALSHA", sha, strconv.Itoa(len(keys))}, keys...), argv...)...)
	}
	e.replica.Stop()
	mustReply(t, do(shaRedlockAcq, "v0", "30000"), ":0\r\n", "redlock acquire with the replica stopped")
	e.replica.Cont()
	if n := mustInt(t, e.m.Do("EXISTS", keys[0], keys[1], keys[2], "fenceproxy:lock:{res:{m}:a}"), "EXISTS"); n != 0 {
		t.Fatalf("after the refused acquire %d keys are left", n)
	}
	mustReply(t, do(shaRedlockAcq, "v1", "30000"), ":3\r\n", "redlock acquire of three keys")
	for _, k := range keys {
		token(t, e.c, k, "v1")
		mustReply(t, e.r.Do("GET", k), "$2\r\nv1\r\n", "the replica's GET "+k+" right after the grant")
	}
	mustReply(t, do(shaRedlockAcq, "v2", "30000"), ":0\r\n", "redlock acquire while held")
	mustReply(t, do(shaRedlockExt, "v1", "60000"), ":3\r\n", "redlock extend")
	mustReply(t, do(shaRedlockExt, "v2", "60000"), ":0\r\n", "redlock extend by another")
	before := mustInt(t, e.m.Do("PEXPIRETIME", keys[2]), "PEXPIRETIME")
	e.replica.Stop()
	mustReply(t, do(shaRedlockExt, "v1", "90000"), ":0\r\n", "redlock extend with the replica stopped")
	e.replica.Cont()
	if after := mustInt(t, e.m.Do("PEXPIRETIME", keys[2]), "PEXPIRETIME"); after != before {
		t.Fatalf("expiry after the refused extend = %d, want %d restored", after, before)
	}
	// One key taken by another: the acquire takes none.
	mustReply(t, do(shaRedlockRel, "v1"), ":3\r\n", "redlock release of three keys")
	mustReply(t, e.c.Do("SET", "res:{m}:b", "other", "PX", "30000"), "+OK\r\n", "SET of one key")
	mustReply(t, do(shaRedlockAcq, "v3", "30000"), ":0\r\n", "redlock acquire with one key taken")
	mustReply(t, e.m.Do("EXISTS", keys[0], keys[2]), ":0\r\n", "EXISTS of the other keys")
	e.c.Do("DEL", "res:{m}:b")
}

// An owner record that no fence store could have issued (written straight
// into Redis, past the proxy, with a token near 2^53) is not adopted
// through a recipe's grant either: that lock is refused with an error, and
// every other lock keeps its ordinary tokens. (The recipes' grants adopted
// it, raising the fence store's floor for every resource: the token space
// ran out for all of them, issue 22's item 4 through another door.)
func TestSetNXForeignRecordNotAdopted(t *testing.T) {
	e := newValueSetup(t)
	const foreign = "9007199254740990"
	// A recipe's record (its client-addr ends with " (recipe)") whose key
	// is gone: the twin replaces such a record, after judging its token.
	mustReply(t, e.m.Do("SET", "fenceproxy:lock:{lock:foreign}", foreign+" 0 1 1 9  (recipe)intruder", "PX", "600000"), "+OK\r\n", "a foreign record written straight into Redis")
	if got := string(e.c.Do("SET", "lock:foreign", "v1", "NX", "PX", "30000")); !strings.HasPrefix(got, "-ERR fenceproxy: ") ||
		!strings.Contains(got, foreign) || !strings.Contains(got, "delete key 'fenceproxy:lock:{lock:foreign}'") {
		t.Fatalf("SET NX of a lock whose record carries a foreign token = %q, want an error naming the token and the key to delete", got)
	}
	for _, k := range []string{"lock:a", "lock:b"} {
		mustReply(t, e.c.Do("SET", k, "v1", "NX", "PX", "30000"), "+OK\r\n", "SET NX of "+k)
		if tok := token(t, e.c, k, "v1"); tok >= 1<<40 {
			t.Fatalf("LOCK.TOKEN %s = %d: the foreign token was adopted", k, tok)
		}
	}
}
