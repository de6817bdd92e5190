package contract

import (
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestFailoverKeepsGrantsAndTokens: grants acknowledged by a replica survive
// the master's death once that replica is promoted, and tokens issued after
// the failover are above every token issued before it (guarantees 1 and 2).
func TestFailoverKeepsGrantsAndTokens(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	before := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1, ReplicaTimeout: 2 * time.Second})
	c := testenv.Dial(t, before.Addr)

	const n = 20
	tokens := make([]int64, n)
	for i := range tokens {
		r := c.Do("LOCK.ACQUIRE", "fo:"+strconv.Itoa(i), "owner-"+strconv.Itoa(i), "60000")
		tok, ok := testenv.ParseInt(r)
		if !ok {
			t.Fatalf("LOCK.ACQUIRE fo:%d before the failover = %q", i, r)
		}
		tokens[i] = tok
	}

	// The master dies; its replica, which acknowledged every grant, takes over.
	master.Kill()
	before.Kill9()
	if r := testenv.Dial(t, replica.Addr).Do("REPLICAOF", "NO", "ONE"); string(r) != "+OK\r\n" {
		t.Fatalf("promoting the replica: %q", r)
	}
	after := testenv.StartProxy(t, testenv.ProxyOptions{Backend: replica.Addr, DataDir: before.DataDir, MinReplicas: 0})
	c = testenv.Dial(t, after.Addr)

	for i, old := range tokens {
		res, owner := "fo:"+strconv.Itoa(i), "owner-"+strconv.Itoa(i)
		if r := c.Do("LOCK.ACQUIRE", res, "intruder", "60000"); !testenv.IsNull(r) {
			t.Fatalf("%s: another owner was granted an acknowledged lock after the failover: %q", res, r)
		}
		if r := c.Do("LOCK.ACQUIRE", res, owner, "60000"); string(r) != ":"+strconv.FormatInt(old, 10)+"\r\n" {
			t.Fatalf("%s: the holder's retry after the failover = %q, want its token %d", res, r, old)
		}
		if r := c.Do("FENCE.CHECK", res, strconv.FormatInt(old, 10)); string(r) != ":1\r\n" {
			t.Fatalf("%s: FENCE.CHECK of the holder's token after the failover = %q", res, r)
		}
		c.Do("LOCK.RELEASE", res, owner)
		r := c.Do("LOCK.ACQUIRE", res, "next", "60000")
		if tok, ok := testenv.ParseInt(r); !ok || tok <= old {
			t.Fatalf("%s: token after the failover = %q, want above %d", res, r, old)
		}
	}
}
