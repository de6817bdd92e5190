package security_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestResourceConfinedToPatterns: a user's lock resources must match its
// key patterns, for every lock command that names one; LOCK.TOP lists only
// resources the user may read.
func TestResourceConfinedToPatterns(t *testing.T) {
	e := startEnv(t, "--min-replicas", "0")
	a := e.as(t, "alice", alicePass)
	for _, args := range [][]string{
		{"LOCK.ACQUIRE", "tenant-b:job", "o", "10000"},
		{"LOCK.ACQUIRE", "tenant-b:job", "o", "10000", "WAIT", "10"},
		{"LOCK.RENEW", "tenant-b:job", "o", "10000"},
		{"LOCK.RELEASE", "tenant-b:job", "o"},
		{"LOCK.INFO", "tenant-b:job"},
		{"FENCE.CHECK", "tenant-b:job", "1"},
		{"FENCE.EXEC", "tenant-b:job", "1", "SET", "tenant-a:k", "v"},
		{"LOCK.ACQUIRE", "shared:job", "o", "10000"}, // %R~ only: a lock is a write
	} {
		expect(t, a, replyNoPermKey, args...)
	}
	tok, ok := testenv.ParseInt(a.Do("LOCK.ACQUIRE", "tenant-a:job", "o", "10000"))
	if !ok || tok <= 0 {
		t.Fatal("alice cannot lock tenant-a:job")
	}
	expect(t, a, ":1\r\n", "FENCE.CHECK", "tenant-a:job", strconv.FormatInt(tok, 10))
	if info := a.Do("LOCK.INFO", "shared:job"); info[0] != '*' { // %R~: LOCK.INFO reads
		t.Fatalf("alice's LOCK.INFO shared:job: %q", info)
	}
	// FENCE.EXEC's command is checked as if alice sent it.
	expect(t, a, replyNoPermKey, "FENCE.EXEC", "tenant-a:job", strconv.FormatInt(tok, 10), "SET", "x", "v")
	expect(t, a, noPerm("flushall"), "FENCE.EXEC", "tenant-a:job", strconv.FormatInt(tok, 10), "FLUSHALL")
	expect(t, a, "+OK\r\n", "FENCE.EXEC", "tenant-a:job", strconv.FormatInt(tok, 10), "SET", "tenant-a:k", "v")
	m := testenv.Dial(t, e.master.Addr)
	expect(t, m, replyNull, "GET", "x")

	// Commands: carol may run GET and PING only.
	c := e.as(t, "carol", carolPass)
	expect(t, c, noPerm("lock.acquire"), "LOCK.ACQUIRE", "any", "o", "1000")

	// LOCK.TOP: bob makes tenant-b:hot contended; alice does not see it.
	b := e.as(t, "bob", bobPass)
	b.Do("LOCK.ACQUIRE", "tenant-b:hot", "o1", "10000")
	b.Do("LOCK.ACQUIRE", "tenant-b:hot", "o2", "10000")
	a.Do("LOCK.ACQUIRE", "tenant-a:hot", "o2", "10000")
	e.as(t, "bob", bobPass).Do("LOCK.ACQUIRE", "tenant-a:hot", "o3", "10000")
	top, _ := testenv.SplitArray(b.Do("LOCK.TOP"))
	if len(top) != 2 {
		t.Fatalf("bob's LOCK.TOP: %d entries, want tenant-a:hot and tenant-b:hot", len(top))
	}
	top, _ = testenv.SplitArray(a.Do("LOCK.TOP"))
	if len(top) != 1 || !bytesContains(top[0], "tenant-a:hot") {
		t.Fatalf("alice's LOCK.TOP: %q, want tenant-a:hot alone", top)
	}

	// LOCK.SLOWLOG, like LOCK.TOP, shows a user only resources it may read:
	// a lease that runs out is always logged; bob sees both, alice hers.
	// carol may not run it at all (it is @admin @dangerous, as SLOWLOG).
	b.Do("LOCK.ACQUIRE", "tenant-b:brief", "o", "50")
	a.Do("LOCK.ACQUIRE", "tenant-a:brief", "o", "50")
	expired := func(cl *testenv.Conn) (n int, all string) {
		entries, _ := testenv.SplitArray(cl.Do("LOCK.SLOWLOG", "GET", "-1"))
		for _, en := range entries {
			all += string(en)
			if bytesContains(en, ":brief") {
				n++
			}
		}
		return n, all
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n, _ := expired(b); n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("bob's LOCK.SLOWLOG never showed both expired leases")
		}
	}
	if n, all := expired(a); n != 1 || !strings.Contains(all, "tenant-a:brief") {
		t.Fatalf("alice's LOCK.SLOWLOG: %q, want tenant-a:brief alone", all)
	}
	expect(t, c, noPerm("lock.slowlog"), "LOCK.SLOWLOG", "GET")
}

func bytesContains(b []byte, s string) bool { return strings.Contains(string(b), s) }

// TestLockBoundToUser: alice and bob may both lock tenant-a:*, but a lock
// alice holds is hers: bob, even with her owner string and token, cannot
// take, renew or release it, nor write with FENCE.EXEC under it, and
// LOCK.INFO shows him a placeholder instead of her owner string (which
// would be a credential with auth off). In Redis the record's owner is
// "alice\x00<owner>".
func TestLockBoundToUser(t *testing.T) {
	e := startEnv(t, "--min-replicas", "0")
	a, b := e.as(t, "alice", alicePass), e.as(t, "bob", bobPass)
	tok, ok := testenv.ParseInt(a.Do("LOCK.ACQUIRE", "tenant-a:job", "worker-1", "60000"))
	if !ok || tok <= 0 {
		t.Fatal("alice cannot lock tenant-a:job")
	}
	token := strconv.FormatInt(tok, 10)

	expect(t, b, replyNull, "LOCK.ACQUIRE", "tenant-a:job", "worker-1", "60000")
	expect(t, b, replyNull, "LOCK.RENEW", "tenant-a:job", "worker-1", "60000")
	expect(t, b, ":0\r\n", "LOCK.RELEASE", "tenant-a:job", "worker-1")
	expect(t, b, "-NOPERM fenceproxy: this resource's lock is held by another user; the command was not run\r\n",
		"FENCE.EXEC", "tenant-a:job", token, "SET", "tenant-a:data", "bob")
	info, err := testenv.ParseLockInfo(b.Do("LOCK.INFO", "tenant-a:job"))
	if err != nil || string(info.Owner) != "(held by another user)" || info.Token != tok || info.TTL <= 0 {
		t.Fatalf("bob's LOCK.INFO: %+v %v, want the placeholder owner, token %d and a lease", info, err, tok)
	}
	info, err = testenv.ParseLockInfo(a.Do("LOCK.INFO", "tenant-a:job"))
	if err != nil || string(info.Owner) != "worker-1" {
		t.Fatalf("alice's LOCK.INFO: %+v %v, want owner worker-1", info, err)
	}
	m := testenv.Dial(t, e.master.Addr)
	if rec, _ := testenv.ReadLockRecord(t, m, "fenceproxy:lock:{tenant-a:job}"); rec.Owner != "alice\x00worker-1" {
		t.Fatalf("the owner record's owner = %q, want alice's user and her owner name", rec.Owner)
	}
	expect(t, m, replyNull, "GET", "tenant-a:data")

	// Alice's own lock works as always.
	expect(t, a, "+OK\r\n", "FENCE.EXEC", "tenant-a:job", token, "SET", "tenant-a:data", "alice")
	expect(t, a, ":"+token+"\r\n", "LOCK.RENEW", "tenant-a:job", "worker-1", "60000")
	expect(t, a, ":"+token+"\r\n", "LOCK.ACQUIRE", "tenant-a:job", "worker-1", "60000")
	expect(t, a, ":1\r\n", "LOCK.RELEASE", "tenant-a:job", "worker-1")
	expect(t, m, "$5\r\nalice\r\n", "GET", "tenant-a:data")

	// After the release nobody holds the token: FENCE.EXEC with it is
	// refused for everyone, alice included, and runs nothing.
	for _, c := range []*testenv.Conn{a, b} {
		got := string(c.Do("FENCE.EXEC", "tenant-a:job", token, "SET", "tenant-a:data", "late"))
		if !strings.HasPrefix(got, "-ERR fenceproxy: token "+token+" has no current lease") {
			t.Fatalf("FENCE.EXEC after release: %q", got)
		}
	}
	expect(t, m, "$5\r\nalice\r\n", "GET", "tenant-a:data")

	// Bob takes it now, under the same owner string: his, not hers.
	tok2, ok := testenv.ParseInt(b.Do("LOCK.ACQUIRE", "tenant-a:job", "worker-1", "60000"))
	if !ok || tok2 <= tok {
		t.Fatalf("bob's LOCK.ACQUIRE after the release: %d, want a token above %d", tok2, tok)
	}
	expect(t, a, replyNull, "LOCK.RENEW", "tenant-a:job", "worker-1", "60000")
	expect(t, a, ":0\r\n", "LOCK.RELEASE", "tenant-a:job", "worker-1")
	expect(t, b, ":1\r\n", "LOCK.RELEASE", "tenant-a:job", "worker-1")
}
