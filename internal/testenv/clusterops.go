package testenv

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An operator's moves on a running Cluster (a manual failover, a slot
// migration) and what a test reads to aim them (slot owners, node ids,
// replicas). Like the rest of Cluster, call them from the test goroutine.

// NodeID returns n's cluster node id (CLUSTER MYID).
func (c *Cluster) NodeID(t testing.TB, n *Redis) string {
	t.Helper()
	reply, err := tryDo(n.Addr, "CLUSTER", "MYID")
	id, ok := ParseBulk(reply)
	if err != nil || !ok || len(id) == 0 {
		t.Fatalf("testenv: CLUSTER MYID on %s = %q (err %v)", n.Addr, reply, err)
	}
	return string(id)
}

// Owners reads CLUSTER SLOTS once, from the first live master (or node)
// that answers, and returns the master of every slot, ClusterSlots long
// (nil for a slot no node of c owns).
func (c *Cluster) Owners(t testing.TB) []*Redis {
	t.Helper()
	ranges, _, err := c.liveSlots()
	if err != nil {
		t.Fatalf("testenv: Owners: %v", err)
	}
	owners := make([]*Redis, ClusterSlots)
	for _, r := range ranges {
		m := c.node(r.master)
		for s := r.start; s <= r.end && s < ClusterSlots; s++ {
			owners[s] = m
		}
	}
	return owners
}

// ReplicasOf returns the live nodes that report themselves replicas of m
// (INFO replication), in port order.
func (c *Cluster) ReplicasOf(m *Redis) []*Redis {
	var out []*Redis
	for _, n := range c.Nodes {
		if n == m || !n.alive() {
			continue
		}
		repl, err := infoReplication(n.Addr)
		if err == nil && strings.Contains(repl, "role:slave\n") && infoField(repl, "master_port") == strconv.Itoa(m.Port) {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *Redis) int { return a.Port - b.Port })
	return out
}

// Role is "master" or "slave", as n's INFO replication reports it ("" if
// it does not answer).
func (n *Redis) Role() string {
	repl, err := infoReplication(n.Addr)
	if err != nil {
		return ""
	}
	return infoField(repl, "role")
}

// Failover sends CLUSTER FAILOVER to replica r (a manual failover: its
// master stops taking writes, r catches up, then takes over), waits
// (deadline 30s) until r is a master and its old master r's replica, then
// WaitHealthy. Redis gives a manual failover 5 s (CLUSTER_MF_TIMEOUT) and
// then drops it without a word, which a loaded machine can make happen
// (CI: "after 20s ... is slave"): while r is still a replica once that
// time is past, the request is sent again.
func (c *Cluster) Failover(t testing.TB, r *Redis) {
	t.Helper()
	repl, err := infoReplication(r.Addr)
	if err != nil || !strings.Contains(repl, "role:slave\n") {
		t.Fatalf("testenv: Failover: %s is not a replica (err %v)", r.Addr, err)
	}
	old := c.node("127.0.0.1:" + infoField(repl, "master_port"))
	const mfTimeout = 5 * time.Second
	deadline := time.Now().Add(30 * time.Second)
	var sent time.Time
	for r.Role() != "master" || (old != nil && old.Role() != "slave") {
		if time.Now().After(deadline) {
			t.Fatalf("testenv: CLUSTER FAILOVER: after 30s %s is %q", r.Addr, r.Role())
		}
		if r.Role() == "slave" && time.Since(sent) > mfTimeout+time.Second {
			if !sent.IsZero() {
				t.Logf("testenv: CLUSTER FAILOVER on %s not done after %v (Redis drops a manual failover after 5 s): again", r.Addr, time.Since(sent).Round(time.Second))
			}
			if reply, err := tryDo(r.Addr, "CLUSTER", "FAILOVER"); err != nil || string(reply) != "+OK\r\n" {
				t.Fatalf("testenv: CLUSTER FAILOVER on %s = %q (err %v)", r.Addr, reply, err)
			}
			sent = time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.WaitHealthy(t)
}

// MigrateSlot moves slot and its keys from master from to master to as
// redis-cli --cluster reshard does: SETSLOT IMPORTING on to, MIGRATING on
// from, MIGRATE of each key with pause after it (keys one at a time, so
// the slot stays half-moved for a while: requests meet -ASK and
// -TRYAGAIN), then SETSLOT NODE on to, from and every other master.
func (c *Cluster) MigrateSlot(t testing.TB, slot int, from, to *Redis, pause time.Duration) {
	t.Helper()
	s := strconv.Itoa(slot)
	fromID, toID := c.NodeID(t, from), c.NodeID(t, to)
	mustOK := func(addr string, args ...string) {
		t.Helper()
		if reply, err := tryDo(addr, args...); err != nil || string(reply) != "+OK\r\n" {
			t.Fatalf("testenv: MigrateSlot: %s on %s = %q (err %v)", ShowCommand(args), addr, reply, err)
		}
	}
	mustOK(to.Addr, "CLUSTER", "SETSLOT", s, "IMPORTING", fromID)
	mustOK(from.Addr, "CLUSTER", "SETSLOT", s, "MIGRATING", toID)
	src, err := dialConn(from.Addr, redisWait)
	if err != nil {
		t.Fatalf("testenv: MigrateSlot: %v", err)
	}
	defer src.Close()
	for moved := 0; ; moved++ {
		reply, err := src.TryDo("CLUSTER", "GETKEYSINSLOT", s, "1")
		keys, ok := SplitArray(reply)
		if err != nil || !ok {
			t.Fatalf("testenv: MigrateSlot: CLUSTER GETKEYSINSLOT %s on %s = %q (err %v)", s, from.Addr, reply, err)
		}
		if len(keys) == 0 {
			break
		}
		if moved > 100000 {
			t.Fatalf("testenv: MigrateSlot: slot %d still has keys after %d MIGRATEs", slot, moved)
		}
		key, _ := ParseBulk(keys[0])
		args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(to.Port), "", "0", "5000", "KEYS", string(key)}
		if reply, err := src.TryDo(args...); err != nil || (string(reply) != "+OK\r\n" && string(reply) != "+NOKEY\r\n") {
			t.Fatalf("testenv: MigrateSlot: %s = %q (err %v)", ShowCommand(args), reply, err)
		}
		time.Sleep(pause)
	}
	mustOK(to.Addr, "CLUSTER", "SETSLOT", s, "NODE", toID)
	mustOK(from.Addr, "CLUSTER", "SETSLOT", s, "NODE", toID)
	for _, m := range c.Masters {
		if m != from && m != to && m.alive() {
			mustOK(m.Addr, "CLUSTER", "SETSLOT", s, "NODE", toID)
		}
	}
}

// WaitReplicated waits (deadline 10s) until every live replica of master m
// has acknowledged everything m had written when it was called: it writes
// a key of m's own slots and WAITs for the replicas on that connection,
// whose offset covers every earlier write of m (a MIGRATE's RESTORE
// included).
func (c *Cluster) WaitReplicated(t testing.TB, m *Redis) {
	t.Helper()
	n := len(c.ReplicasOf(m))
	if n == 0 {
		return
	}
	owners := c.Owners(t)
	key := ""
	for i := 0; i < 100000 && key == ""; i++ {
		if k := "testenv:replicated:" + strconv.Itoa(i); owners[KeySlot(k)] == m {
			key = k
		}
	}
	if key == "" {
		t.Fatalf("testenv: WaitReplicated: %s owns no slot", m.Addr)
	}
	waitReplicated(t, m.Addr, key, n)
}
