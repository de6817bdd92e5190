package fault

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestFaultCluster is TestFault in front of a Redis Cluster of three
// masters with one replica each: the hot resources sit two on each
// master, and the schedule has the cluster's own faults (a master killed
// and failed over, CLUSTER FAILOVER, a slot holding owner records migrated
// under load) beside the proxy's and those of one master at a time
// (replica-stop, lock-conn-kill). The same checks judge the history; a
// fault on one master excuses nothing on the others (Fault.Scope).
func TestFaultCluster(t *testing.T) { runFault(t, "cluster") }

const (
	// lockPrefix is the proxy's default --key-prefix: an owner record is
	// lockPrefix{resource}.
	lockPrefix = "fenceproxy:lock:"
	// migratePause is the pause after each key a slot migration moves,
	// so that requests meet the half-moved slot (-ASK, -TRYAGAIN).
	migratePause = 10 * time.Millisecond
)

// recordSlot is the hash slot of r's owner record (and of dataKey(r)).
func recordSlot(r string) int { return testenv.KeySlot(lockPrefix + "{" + r + "}") }

// startCluster starts the cluster and picks the resources: nResources hot
// ones spread evenly over the masters, and a probe resource on each.
// Slots whose master is lost (during a failover) do not stop the others
// (cluster-require-full-coverage no), so grants on the other masters go on
// and are checked meanwhile.
func (e *env) startCluster() {
	t := e.t
	e.cl = testenv.StartCluster(t, testenv.ClusterOptions{Args: []string{"--cluster-require-full-coverage", "no"}})
	owners := e.cl.Owners(t)
	per := map[*testenv.Redis]int{}
	perMaster := nResources / len(e.cl.Masters)
	for i := 0; len(e.resources) < nResources; i++ {
		r := "hot:" + strconv.Itoa(i)
		if m := owners[recordSlot(r)]; per[m] < perMaster {
			e.resources = append(e.resources, r)
			per[m]++
		}
	}
	for _, m := range e.cl.Masters {
		for i := 0; ; i++ {
			if r := "probe:" + strconv.Itoa(i); owners[recordSlot(r)] == m {
				e.probes = append(e.probes, r)
				break
			}
		}
		// The proxy's first token-bound round needs each master's replica
		// to acknowledge at once.
		e.cl.WaitReplicated(t, m)
	}
}

// clusterSeeds is every node, for --backend: a proxy restarted while a
// master is down still finds the cluster.
func (e *env) clusterSeeds() string {
	addrs := make([]string, len(e.cl.Nodes))
	for i, n := range e.cl.Nodes {
		addrs[i] = n.Addr
	}
	return strings.Join(addrs, ",")
}

// scopeOf names what lives on master m now: the resources and probes whose
// owner records, and the counters, are in its slots.
func (e *env) scopeOf(m *testenv.Redis) []string { return e.namesWhere(e.onMaster(m)) }

// namesWhere lists the resources, probes and counters whose slot in picks.
func (e *env) namesWhere(in func(slot int) bool) []string {
	var out []string
	for _, r := range append(e.allResources(), e.probes...) {
		if in(recordSlot(r)) {
			out = append(out, r)
		}
	}
	for i := range dataClients {
		if c := counterName(500 + i); in(testenv.KeySlot(c)) {
			out = append(out, c)
		}
	}
	return out
}

// onMaster is the slots of m now.
func (e *env) onMaster(m *testenv.Redis) func(slot int) bool {
	owners := e.cl.Owners(e.t)
	return func(slot int) bool { return owners[slot] == m }
}

// nameWhere returns the first resource prefix<k> whose owner record's
// slot in picks.
func (e *env) nameWhere(prefix string, in func(slot int) bool) string {
	for k := 0; k < 10_000_000; k++ {
		if r := prefix + strconv.Itoa(k); in(recordSlot(r)) {
			return r
		}
	}
	e.t.Fatalf("fault: no resource %s<k> in the slots wanted", prefix)
	return ""
}

// injectCluster runs the cluster's own faults (see inject).
func (e *env) injectCluster(n int, p planned, f *Fault) {
	t := e.t
	switch p.Kind {
	case MasterKillFailover:
		// The cluster promotes the replica (cluster-node-timeout 1s);
		// the proxy follows without a restart. The old master, back
		// empty D later with its nodes.conf, learns it lost its slots and
		// becomes the new master's replica by itself.
		victim := e.cl.Masters[p.N%len(e.cl.Masters)]
		replicas := e.cl.ReplicasOf(victim)
		if len(replicas) == 0 {
			t.Fatalf("fault: master %s has no replica to promote", victim.Addr)
		}
		promoted := replicas[0]
		across := e.holdAcross(n, e.nameWhere("across:"+strconv.Itoa(n)+":", e.onMaster(victim)))
		f.Scope = append(e.scopeOf(victim), across.resource()...)
		e.snapshotData("before " + string(p.Kind))
		f.Start = e.h.Now()
		victim.Kill()
		e.cl.WaitHealthy(t) // its slots have a live master again: the promoted replica
		if !slices.Contains(e.cl.Masters, promoted) {
			t.Fatalf("fault: after %s was killed the cluster promoted another node than its replica %s", victim.Addr, promoted.Addr)
		}
		promotedAt := time.Duration(e.h.Now() - f.Start)
		time.Sleep(p.D)
		victim.Restart(t)
		e.cl.WaitHealthy(t) // the old master is the new one's replica, its link up
		e.cl.WaitReplicated(t, promoted)
		e.probeMaster(n, promoted)
		f.End = e.h.Now()
		f.Note = fmt.Sprintf("%s killed, %s promoted after %v, the old master back empty %v later", victim.Addr, promoted.Addr, promotedAt.Round(time.Millisecond), p.D)
		across.verify()
	case ClusterFailover:
		master := e.cl.Masters[p.N%len(e.cl.Masters)]
		replicas := e.cl.ReplicasOf(master)
		if len(replicas) == 0 {
			t.Fatalf("fault: master %s has no replica", master.Addr)
		}
		across := e.holdAcross(n, e.nameWhere("across:"+strconv.Itoa(n)+":", e.onMaster(master)))
		f.Scope = append(e.scopeOf(master), across.resource()...)
		f.Start = e.h.Now()
		e.cl.Failover(t, replicas[0])
		e.cl.WaitReplicated(t, replicas[0])
		e.probeMaster(n, replicas[0])
		f.End = e.h.Now()
		f.Note = fmt.Sprintf("%s took over from %s", replicas[0].Addr, master.Addr)
		across.verify()
	case SlotMigration:
		r := e.resources[p.N%len(e.resources)]
		slot := recordSlot(r)
		from := e.cl.Owners(t)[slot]
		var others []*testenv.Redis
		for _, m := range e.cl.Masters {
			if m != from {
				others = append(others, m)
			}
		}
		to := others[(p.N/len(e.resources))%len(others)]
		inSlot := func(s int) bool { return s == slot }
		// A long lease in the moving slot beside r's record, whose own
		// leases are short.
		across := e.holdAcross(n, e.nameWhere("across:"+strconv.Itoa(n)+":", inSlot))
		f.Scope = append(e.namesWhere(inSlot), across.resource()...)
		f.Start = e.h.Now()
		e.cl.MigrateSlot(t, slot, from, to, migratePause)
		// Its replica holds what MIGRATE restored before anything else
		// happens to that master.
		e.cl.WaitReplicated(t, to)
		time.Sleep(p.D)
		e.cl.MigrateSlot(t, slot, to, from, migratePause)
		e.cl.WaitReplicated(t, from)
		f.End = e.h.Now()
		f.Note = fmt.Sprintf("slot %d (%s) moved from %s to %s, back %v later", slot, r, from.Addr, to.Addr, p.D)
		across.verify()
	}
}

// probeMaster shows that the proxy, not a restart, follows a failover:
// through the running proxy a lock on the new master m's slots is granted
// (and released) within probeWait. Its ops are part of the history.
func (e *env) probeMaster(n int, m *testenv.Redis) {
	owners := e.cl.Owners(e.t)
	r := ""
	for _, p := range e.probes {
		if owners[recordSlot(p)] == m {
			r = p
		}
	}
	if r == "" {
		e.t.Fatalf("fault: no probe resource on %s", m.Addr)
	}
	c := &client{e: e, id: 100000 + n}
	defer c.close()
	owner := "probe-" + strconv.Itoa(n)
	deadline := time.Now().Add(probeWait)
	for {
		op := c.do(Acquire, r, owner, 0, 5000, "LOCK.ACQUIRE", r, owner, "5000")
		if op != nil && op.Outcome == OK {
			c.do(Release, r, owner, 0, 0, "LOCK.RELEASE", r, owner)
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("fault: the proxy granted no lock on %s's slots within %v of the failover (last: %v)", m.Addr, probeWait, op)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
