package cluster

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestFenceExecFollowsItsSlot: FENCE.EXEC's command goes to the master of
// its key's slot now, as every lock write does, even when the slot moved
// behind the proxy's back (before its next read of the slot map): after a
// slot migration, and after CLUSTER FAILOVER turned the master the proxy
// knew into a replica. Redis's "non local key" and -READONLY, which a
// wrong node's script answers, never reach the client, and the write lands
// once. (The fault suite found the -READONLY: test/fault's
// cluster-failover.)
func TestFenceExecFollowsItsSlot(t *testing.T) {
	e := startEnv(t, 1, 0)
	st := readSlots(t, e.cl)
	from, to := e.cl.Masters[0], e.cl.Masters[1]
	r := st.resourcesOn(from, "exec:", 1)[0]
	data := "data:{" + r + "}"
	c := e.dial(t)
	tok := itoa(token(t, c, "LOCK.ACQUIRE", r, "A", "60000"))
	wrote := 0
	exec := func(when string) {
		t.Helper()
		wrote++
		got := c.Do("FENCE.EXEC", r, tok, "RPUSH", data, strconv.Itoa(wrote))
		if string(got) != ":"+strconv.Itoa(wrote)+"\r\n" {
			t.Fatalf("FENCE.EXEC %s = %s, want :%d (the write run once, on the slot's master)", when, testenv.ShowReply(got), wrote)
		}
	}
	exec("before any move")

	// Moved and back, twice: each FENCE.EXEC goes right after a move, well
	// within the proxy's slot-map refresh period.
	slot := resourceSlot(r)
	for i := range 2 {
		migrateSlot(t, e.cl, slot, from, to)
		exec("right after its slot moved to another master (round " + strconv.Itoa(i) + ")")
		migrateSlot(t, e.cl, slot, to, from)
		exec("right after its slot moved back (round " + strconv.Itoa(i) + ")")
	}

	waitReplicaAcks(t, e.cl) // the replica has every write: CLUSTER FAILOVER goes at once
	replica := e.cl.ReplicasOf(from)
	if len(replica) == 0 {
		t.Fatalf("no replica of %s", from.Addr)
	}
	if got := testenv.Dial(t, replica[0].Addr).Do("CLUSTER", "FAILOVER"); string(got) != "+OK\r\n" {
		t.Fatalf("CLUSTER FAILOVER on %s: %s", replica[0].Addr, testenv.ShowReply(got))
	}
	deadline := time.Now().Add(20 * time.Second)
	for from.Role() != "slave" {
		if time.Now().After(deadline) {
			t.Fatalf("CLUSTER FAILOVER: after 20s %s is %q", from.Addr, from.Role())
		}
		time.Sleep(5 * time.Millisecond)
	}
	exec("right after its master became a replica (CLUSTER FAILOVER)")
}

// TestFenceExecFindsItsKeys: FENCE.EXEC routes its command by the
// command's own keys (Redis's key specs, as every forwarded command is),
// not by its first argument: OBJECT ENCODING k reaches k's master although
// "ENCODING" hashes elsewhere, and a command over keys in two slots gets
// Redis Cluster's own -CROSSSLOT rather than running on one of them.
func TestFenceExecFindsItsKeys(t *testing.T) {
	e := startEnv(t, 1, 0)
	st := readSlots(t, e.cl)
	c := e.dial(t)
	const r = "exec:keys"
	tok := itoa(token(t, c, "LOCK.ACQUIRE", r, "A", "60000"))

	// A key whose master is not the one "ENCODING" hashes to.
	var key string
	for _, k := range st.keysOn(e.cl.Masters[0], "obj:", 16) {
		if st.of(k) != st.of("ENCODING") {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("no key found on another master than ENCODING's")
	}
	if got := c.Do("SET", key, "12345"); string(got) != "+OK\r\n" {
		t.Fatalf("SET %s = %s", key, testenv.ShowReply(got))
	}
	if got := c.Do("FENCE.EXEC", r, tok, "OBJECT", "ENCODING", key); string(got) != "$3\r\nint\r\n" {
		t.Fatalf("FENCE.EXEC OBJECT ENCODING %s = %s, want int (the command run on its key's master)", key, testenv.ShowReply(got))
	}

	a, b := st.keysOn(e.cl.Masters[0], "x:", 1)[0], st.keysOn(e.cl.Masters[1], "y:", 1)[0]
	if got := c.Do("FENCE.EXEC", r, tok, "MSET", a, "1", b, "2"); !strings.HasPrefix(string(got), "-CROSSSLOT") {
		t.Fatalf("FENCE.EXEC MSET over two slots = %s, want -CROSSSLOT", testenv.ShowReply(got))
	}
	if got := c.Do("EXISTS", a, b); string(got) != ":0\r\n" {
		t.Fatalf("after the refused MSET, EXISTS = %s, want :0 (nothing written)", testenv.ShowReply(got))
	}
}
