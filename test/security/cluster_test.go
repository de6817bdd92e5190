package security_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestInFrontOfCluster: the same checks in front of a Redis Cluster, where
// requests are split per slot and a lock's record lives in another slot
// than the keys FENCE.EXEC writes: a bad key anywhere in a split request
// refuses all of it; the lock is still its user's.
func TestInFrontOfCluster(t *testing.T) {
	cl := testenv.StartCluster(t, testenv.ClusterOptions{Masters: 3, ReplicasPerMaster: -1})
	t.Setenv("FENCEPROXY_REQUIREPASS", defaultPass)
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{
		Backend:     cl.Seeds(),
		MinReplicas: 0,
		Args:        []string{"--aclfile", writeACL(t, users...)},
	})
	dial := func(user, pass string) *testenv.Conn {
		c := testenv.Dial(t, proxy.Addr)
		expect(t, c, "+OK\r\n", "AUTH", user, pass)
		return c
	}
	a, b := dial("alice", alicePass), dial("bob", bobPass)
	expect(t, a, "+OK\r\n", "MSET", "tenant-a:1", "v1", "tenant-a:2", "v2", "tenant-a:3", "v3") // split over masters
	expect(t, a, replyNoPermKey, "MSET", "tenant-a:1", "x", "tenant-b:1", "x")
	expect(t, a, replyNoPermKey, "MGET", "tenant-a:1", "tenant-a:2", "x")
	expect(t, a, "*3\r\n$2\r\nv1\r\n$2\r\nv2\r\n$2\r\nv3\r\n", "MGET", "tenant-a:1", "tenant-a:2", "tenant-a:3")
	expect(t, b, "$2\r\nv1\r\n", "GET", "tenant-a:1")
	expect(t, b, "+OK\r\n", "SET", "tenant-a:1", "x") // not a lock: bob may write tenant-a:*

	tok, ok := testenv.ParseInt(a.Do("LOCK.ACQUIRE", "tenant-a:job", "w", "60000"))
	if !ok || tok <= 0 {
		t.Fatal("alice cannot lock tenant-a:job")
	}
	token := strconv.FormatInt(tok, 10)
	if testenv.KeySlot("fenceproxy:lock:{tenant-a:job}") == testenv.KeySlot("tenant-a:data") {
		t.Fatal("the test wants the record and the data in different slots")
	}
	expect(t, b, "-NOPERM fenceproxy: this resource's lock is held by another user; the command was not run\r\n",
		"FENCE.EXEC", "tenant-a:job", token, "SET", "tenant-a:data", "bob")
	expect(t, b, replyNull, "LOCK.RENEW", "tenant-a:job", "w", "60000")
	expect(t, b, ":0\r\n", "LOCK.RELEASE", "tenant-a:job", "w")
	info, err := testenv.ParseLockInfo(b.Do("LOCK.INFO", "tenant-a:job"))
	if err != nil || string(info.Owner) != "(held by another user)" {
		t.Fatalf("bob's LOCK.INFO: %+v %v", info, err)
	}
	expect(t, a, "+OK\r\n", "FENCE.EXEC", "tenant-a:job", token, "SET", "tenant-a:data", "alice")
	expect(t, b, "$5\r\nalice\r\n", "GET", "tenant-a:data")
	expect(t, a, ":1\r\n", "LOCK.RELEASE", "tenant-a:job", "w")
	if got := string(a.Do("LOCK.ACQUIRE", "tenant-b:job", "w", "1000")); !strings.HasPrefix(got, "-NOPERM") {
		t.Fatalf("alice locks tenant-b:job: %q", got)
	}
}
