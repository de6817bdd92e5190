// Package cluster checks fenceproxy in front of a Redis Cluster: the client
// sees one node. Every keyed command reaches the slot's owner, commands whose
// keys span slots are split and merged (MGET, MSET, DEL, UNLINK, EXISTS,
// TOUCH) or refused with Redis Cluster's own -CROSSSLOT, keyless commands
// cover every master, and no -MOVED or -ASK ever reaches a client, also while
// a master fails over or slots migrate. The lock family keeps its guarantees
// across all of that (CONTRACT.md, "The guarantees").
//
// Every test starts its own cluster (testenv.StartCluster) and its own
// fenceproxy, and compares what the proxy answers with what the owning node
// answers when asked directly, byte for byte where Redis fixes the bytes.
package cluster

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// replicaTimeout is --replica-timeout for every proxy that waits for
// replicas: generous, so a loaded machine does not turn a slow
// acknowledgement into -NOREPLICAS outside a failover.
const replicaTimeout = 2 * time.Second

// lockPrefix starts every owner record's key; the resource follows in a hash
// tag (CONTRACT.md via the issue: fenceproxy:lock:{resource}).
const lockPrefix = "fenceproxy:lock:"

// The token authority's keys (internal/authority): the proxy keeps them
// in Redis from its start (its heartbeat writes them again within a second
// of a flush), on the master of their slot. Counts of a client's keys
// leave them out.
var authorityKeys = []string{lockPrefix + "{authority}:bound", lockPrefix + "{authority}:live"}

func isAuthorityKey(k string) bool { return k == authorityKeys[0] || k == authorityKeys[1] }

// clientKeysOn lists the keys on the node at addr (KEYS *) but the token
// authority's.
func clientKeysOn(t *testing.T, addr string) []string {
	t.Helper()
	c := testenv.Dial(t, addr)
	defer c.Close()
	elems, ok := testenv.SplitArray(c.Do("KEYS", "*"))
	if !ok {
		t.Fatalf("KEYS * on %s: not an array", addr)
	}
	var keys []string
	for _, el := range elems {
		if k, _ := testenv.ParseBulk(el); !isAuthorityKey(string(k)) {
			keys = append(keys, string(k))
		}
	}
	return keys
}

// crossSlotError is what Redis Cluster answers a command whose keys hash to
// different slots. Tests read the real text from a node before relying on it
// (crossSlotReference); this is only the fallback for messages.
const crossSlotError = "-CROSSSLOT Keys in request don't hash to the same slot\r\n"

// env is a cluster and a fenceproxy in front of it.
type env struct {
	cl    *testenv.Cluster
	proxy *testenv.Proxy
}

// startEnv starts a cluster of 3 masters with replicasPerMaster replicas each
// (negative: none) and a fenceproxy with --min-replicas minReplicas in front
// of it.
func startEnv(t *testing.T, replicasPerMaster, minReplicas int) *env {
	t.Helper()
	cl := testenv.StartCluster(t, testenv.ClusterOptions{Masters: 3, ReplicasPerMaster: replicasPerMaster})
	if replicasPerMaster > 0 {
		waitReplicaAcks(t, cl)
	}
	opts := testenv.ProxyOptions{Backend: cl.Seeds(), MinReplicas: minReplicas}
	if minReplicas > 0 {
		opts.ReplicaTimeout = replicaTimeout
	}
	return &env{cl: cl, proxy: testenv.StartProxy(t, opts)}
}

// dial opens a raw connection to the proxy.
func (e *env) dial(t *testing.T) *testenv.Conn {
	t.Helper()
	return testenv.Dial(t, e.proxy.Addr)
}

// slotTable is who owns every slot, read from one node's CLUSTER SLOTS.
type slotTable struct {
	owner [testenv.ClusterSlots]*testenv.Redis
}

// readSlots asks a live master for CLUSTER SLOTS and maps every slot to its
// node. testenv has MasterForSlot, one connection per slot; the tests need
// all 16384 at once.
func readSlots(t *testing.T, cl *testenv.Cluster) *slotTable {
	t.Helper()
	byAddr := map[string]*testenv.Redis{}
	for _, n := range cl.Nodes {
		byAddr[n.Addr] = n
	}
	c := testenv.Dial(t, cl.Masters[0].Addr)
	defer c.Close()
	reply := c.Do("CLUSTER", "SLOTS")
	entries, ok := testenv.SplitArray(reply)
	if !ok {
		t.Fatalf("CLUSTER SLOTS on %s: %q", cl.Masters[0].Addr, reply)
	}
	st := &slotTable{}
	for _, e := range entries {
		f, ok := testenv.SplitArray(e)
		if !ok || len(f) < 3 {
			t.Fatalf("CLUSTER SLOTS entry %q", e)
		}
		start, _ := testenv.ParseInt(f[0])
		end, _ := testenv.ParseInt(f[1])
		m, _ := testenv.SplitArray(f[2])
		if len(m) < 2 {
			t.Fatalf("CLUSTER SLOTS entry %q", e)
		}
		ip, _ := testenv.ParseBulk(m[0])
		port, _ := testenv.ParseInt(m[1])
		node := byAddr[fmt.Sprintf("%s:%d", ip, port)]
		if node == nil {
			t.Fatalf("CLUSTER SLOTS names %s:%d, not a node of this cluster", ip, port)
		}
		for s := start; s <= end; s++ {
			st.owner[s] = node
		}
	}
	for s, n := range st.owner {
		if n == nil {
			t.Fatalf("CLUSTER SLOTS leaves slot %d without an owner", s)
		}
	}
	return st
}

// of returns the master that owns key.
func (st *slotTable) of(key string) *testenv.Redis { return st.owner[testenv.KeySlot(key)] }

// keysOn returns n distinct keys "prefix<i>" owned by node, each in its own
// slot where possible.
func (st *slotTable) keysOn(node *testenv.Redis, prefix string, n int) []string {
	var out []string
	seen := map[int]bool{}
	for i := 0; len(out) < n && i < 1_000_000; i++ {
		k := prefix + strconv.Itoa(i)
		s := testenv.KeySlot(k)
		if st.owner[s] == node && !seen[s] {
			seen[s] = true
			out = append(out, k)
		}
	}
	return out
}

// resourcesOn is keysOn for lock resources: the owner record's slot decides.
func (st *slotTable) resourcesOn(node *testenv.Redis, prefix string, n int) []string {
	var out []string
	for i := 0; len(out) < n && i < 1_000_000; i++ {
		r := prefix + strconv.Itoa(i)
		if st.owner[resourceSlot(r)] == node {
			out = append(out, r)
		}
	}
	return out
}

// resourceSlot is the slot of resource's owner record.
func resourceSlot(resource string) int { return testenv.KeySlot(lockPrefix + "{" + resource + "}") }

// keyInSlots returns a key "prefix<i>" whose slot is in slots, for i
// starting at *next (advanced past the key returned).
func keyInSlots(prefix string, slots map[int]bool, next *int) string {
	for ; ; *next++ {
		k := prefix + strconv.Itoa(*next)
		if slots[testenv.KeySlot(k)] {
			*next++
			return k
		}
	}
}

// everySlotKeys returns one key per slot: keys[s] hashes to slot s.
func everySlotKeys(prefix string) []string {
	keys := make([]string, testenv.ClusterSlots)
	left := testenv.ClusterSlots
	for i := 0; left > 0; i++ {
		k := prefix + strconv.Itoa(i)
		if s := testenv.KeySlot(k); keys[s] == "" {
			keys[s] = k
			left--
		}
	}
	return keys
}

// waitReplicaAcks waits (at most 10s per master) until a write on each
// master is acknowledged by one replica: right after a full sync a replica
// may not acknowledge until its first REPLCONF ACK, and a lock write then
// would get -NOREPLICAS for a reason that has nothing to do with the proxy.
func waitReplicaAcks(t *testing.T, cl *testenv.Cluster) {
	t.Helper()
	st := readSlots(t, cl)
	for _, m := range cl.Masters {
		key := st.keysOn(m, "cluster-test:warmup:", 1)[0]
		c := testenv.Dial(t, m.Addr)
		deadline := time.Now().Add(10 * time.Second)
		for {
			if got := c.Do("SET", key, "1"); string(got) != "+OK\r\n" {
				t.Fatalf("SET %s on master %s: %q", key, m.Addr, got)
			}
			got := c.Do("WAIT", "1", "1000")
			if string(got) == ":1\r\n" {
				c.Do("DEL", key)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("WAIT 1 1000 on master %s: %q for 10s", m.Addr, got)
			}
		}
		c.Close()
	}
}

// nodeID is the cluster node id of n (CLUSTER MYID).
func nodeID(t *testing.T, n *testenv.Redis) string {
	t.Helper()
	c := testenv.Dial(t, n.Addr)
	defer c.Close()
	reply := c.Do("CLUSTER", "MYID")
	id, ok := testenv.ParseBulk(reply)
	if !ok || len(id) != 40 {
		t.Fatalf("CLUSTER MYID on %s: %q", n.Addr, reply)
	}
	return string(id)
}

// flushDirect empties every master and its script cache, bypassing the proxy.
func flushDirect(t *testing.T, cl *testenv.Cluster) {
	t.Helper()
	for _, m := range cl.Masters {
		c := testenv.Dial(t, m.Addr)
		for _, cmd := range [][]string{{"FLUSHALL"}, {"SCRIPT", "FLUSH"}} {
			if got := c.Do(cmd...); string(got) != "+OK\r\n" {
				t.Fatalf("%s on %s: %q", testenv.ShowCommand(cmd), m.Addr, got)
			}
		}
		c.Close()
	}
}

// redirect reports whether reply carries a cluster redirection anywhere: as
// the reply itself, or as an element of an array (EXEC, a merged reply).
func redirect(reply []byte) bool {
	for _, code := range []string{"-MOVED ", "-ASK "} {
		if bytes.HasPrefix(reply, []byte(code)) || bytes.Contains(reply, []byte("\r\n"+code)) {
			return true
		}
	}
	return false
}

// noRedirect fails the test if reply is or holds -MOVED or -ASK.
func noRedirect(t *testing.T, what string, reply []byte) {
	t.Helper()
	if redirect(reply) {
		t.Fatalf("%s: the proxy let a cluster redirection through: %s", what, testenv.ShowReply(reply))
	}
}

// lockInfo is a LOCK.INFO reply, field by field.
type lockInfo = testenv.LockInfo

// info runs LOCK.INFO resource on c.
func info(t *testing.T, c *testenv.Conn, resource string) lockInfo {
	t.Helper()
	raw := c.Do("LOCK.INFO", resource)
	noRedirect(t, "LOCK.INFO "+resource, raw)
	li, err := testenv.ParseLockInfo(raw)
	if err != nil {
		t.Fatalf("LOCK.INFO %q: %v", resource, err)
	}
	return li
}

// token sends a LOCK.ACQUIRE and fails unless the reply is a positive
// integer, which it returns.
func token(t *testing.T, c *testenv.Conn, args ...string) int64 {
	t.Helper()
	got := c.Do(args...)
	noRedirect(t, testenv.ShowCommand(args), got)
	n, ok := testenv.ParseInt(got)
	if !ok || n <= 0 {
		t.Fatalf("%s: reply %s, want a positive integer token", testenv.ShowCommand(args), testenv.ShowReply(got))
	}
	return n
}

// held is a lock taken before a disruption and never released.
type held struct {
	resource, owner string
	token           int64
}

// takeHeld acquires each resource for owner "holder:<resource>" with a 60s
// lease.
func takeHeld(t *testing.T, c *testenv.Conn, resources []string) []held {
	t.Helper()
	var out []held
	for _, r := range resources {
		owner := "holder:" + r
		out = append(out, held{r, owner, token(t, c, "LOCK.ACQUIRE", r, owner, "60000")})
	}
	return out
}

// checkHeld fails unless every lock in hs is still its holder's: another
// owner is refused, LOCK.INFO names the holder and its token, and FENCE.CHECK
// says the token is the newest.
func checkHeld(t *testing.T, c *testenv.Conn, hs []held) {
	t.Helper()
	for _, h := range hs {
		args := []string{"LOCK.ACQUIRE", h.resource, "intruder", "60000"}
		if got := c.Do(args...); !testenv.IsNull(got) {
			t.Errorf("%s: %s, want null: the lock granted to %q (token %d) was lost", testenv.ShowCommand(args), testenv.ShowReply(got), h.owner, h.token)
			continue
		}
		li := info(t, c, h.resource)
		if string(li.Owner) != h.owner || li.Token != h.token || li.TTL <= 0 {
			t.Errorf("LOCK.INFO %q = %q, want owner %q, token %d, ttl-ms > 0", h.resource, li.Raw, h.owner, h.token)
		}
		args = []string{"FENCE.CHECK", h.resource, strconv.FormatInt(h.token, 10)}
		if got := c.Do(args...); string(got) != ":1\r\n" {
			t.Errorf("%s: %s, want :1", testenv.ShowCommand(args), testenv.ShowReply(got))
		}
	}
}

// cmd is a command's arguments.
func cmd(args ...string) []string { return args }

// isErr reports whether reply is one error line starting with code.
func isErr(reply []byte, code string) bool {
	return bytes.HasPrefix(reply, []byte(code)) && bytes.Count(reply, []byte("\r\n")) == 1
}

// itoa formats an int64 as a command argument.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// lines joins strings for messages.
func lines(ss []string) string { return strings.Join(ss, "\n") }
