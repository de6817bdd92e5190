package fault

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// The tier modes of the suite (issue 14, contract guarantee 7): three
// fenceproxy nodes of one Raft tier in front of the same Redis master,
// replica and Sentinels as TestFault (TestFaultTier), or in front of the
// Redis Cluster of TestFaultCluster (TestFaultTierCluster), the lock and
// data clients spread over all nodes, and faults of the nodes and of the
// network between them beside the backend's. It is
// written against the contract's flags (--node-id, --raft-listen, --peers)
// and INFO's "# Tier" fields (tier_role, tier_term, tier_leader_id,
// tier_leader_addr), and fails (requireTier) if the binary lacks a flag.
//
// Every Raft connection from node i to node j goes through a Link of its
// own (links[i][j]): node i's --peers names j at that Link, and itself at
// its real --raft-listen. So the tier must dial each peer at the address
// its own --peers gives for that peer's id (hashicorp/raft's
// ServerAddressProvider), not at the address in the replicated
// configuration, which would bypass the Links. The forwarding link from a
// follower to the leader does not go through them: a partition here cuts
// Raft only.

const tierNodes = 3

// Tier fault kinds, as scheduled. Each is recorded in the history under
// the kind whose checker semantics it shares (see tierRecordedAs).
const (
	TierLeaderKill   FaultKind = "tier-leader-kill"   // kill -9 of the leader, restarted on its data dir
	TierFollowerKill FaultKind = "tier-follower-kill" // kill -9 of a follower, restarted on its data dir
	TierLeaderStop   FaultKind = "tier-leader-stop"   // SIGSTOP of the leader until another node leads, then SIGCONT: the stale leader wakes
	TierDataDirWipe  FaultKind = "tier-data-dir-wipe" // kill -9 of a node, its data dir emptied, restarted: it must rejoin and catch up
	TierIsolate      FaultKind = "tier-isolate"       // one node's Raft traffic cut both ways (held or dropped), longer than an election
	TierOneWay       FaultKind = "tier-one-way"       // one node's Raft traffic cut one way: it cannot send, or cannot receive
	// TierEmptyDiskRejoin is issue 22's attack on an empty disk's vote:
	// follower A's Raft traffic dropped while grants commit on B (the
	// leader) and C; B and C kill -9'd; C restarted on an empty data dir;
	// A healed; a while with A and C alone (C must not vote A in: A lacks
	// what B and C committed); then B restarted on its data dir.
	TierEmptyDiskRejoin FaultKind = "tier-empty-disk-rejoin"
)

// tierNodeFaults are the faults of the tier's nodes and of the network
// between them, in both tier modes.
var tierNodeFaults = []FaultKind{TierLeaderKill, TierFollowerKill, TierLeaderStop, TierDataDirWipe, TierIsolate, TierOneWay, TierEmptyDiskRejoin}

// TierFaults is TestFaultTier's schedule, every kind once per round; a
// redis-partition cuts every node off from the master at once.
var TierFaults = slices.Concat(tierNodeFaults, []FaultKind{RedisPartition, DelayedWrite})

// TierClusterFaults is TestFaultTierCluster's: the nodes' faults, the
// cluster's own (a master killed and failed over, CLUSTER FAILOVER, a
// slot migrated under load) and those of one master (replica-stop,
// lock-conn-kill), as in TestFaultCluster. The cluster has no Links in
// front of its nodes, so no redis-partition.
var TierClusterFaults = slices.Concat(tierNodeFaults, []FaultKind{MasterKillFailover, ClusterFailover, SlotMigration, ReplicaStop, LockConnKill})

// tierRecordedAs is the kind a tier fault is recorded under. A node's kill
// -9 is a proxy kill for the checker (a grant refused just before it may
// have left a reservation the next leader counts as issued); a wiped node
// is not a lost fence store, since a majority keeps its disks (guarantee
// 7): the checker must hold tokens to the full rule across it. A stopped
// leader is a proxy stop: the requests its clients wrote meanwhile waited
// in the kernel, so their leases began when it woke.
func tierRecordedAs(k FaultKind) FaultKind {
	switch k {
	case TierLeaderKill, TierFollowerKill, TierDataDirWipe, TierEmptyDiskRejoin:
		return ProxyKill
	case TierLeaderStop:
		return ProxyStop
	}
	return k
}

// tierWait bounds every wait for the tier to elect a leader or a node to
// rejoin. It only ends a hang.
const tierWait = 30 * time.Second

// tier is the nodes under test and the Links between their Raft ports.
type tier struct {
	nodes    []*testenv.Proxy
	ids      []string
	raftAddr []string          // each node's real --raft-listen
	links    [][]*testenv.Link // links[i][j]: node i's connections to node j (nil for i == j)
}

// clientAddr is where client id connects: the proxy, or with a tier the
// node its id picks, so the clients are spread over every node.
func (e *env) clientAddr(id int) string {
	if e.tier == nil {
		return e.proxyAddr()
	}
	return e.tier.nodes[id%len(e.tier.nodes)].Addr
}

// tierFlags are the flags startTier gives each node.
var tierFlags = []string{"--node-id", "--raft-listen", "--peers"}

// requireTier fails t unless the fenceproxy binary's --help names every
// flag of tierFlags. It used to skip instead, so a renamed flag would have
// switched the tier suites off without a sound.
func requireTier(t *testing.T) {
	t.Helper()
	bin := testenv.BuildProxy(t)
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	var missing []string
	for _, flag := range tierFlags {
		if !strings.Contains(string(out), flag[1:]) { // the flag package prints "-peers"
			missing = append(missing, flag)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s --help names no %s: the tier suites start nodes with %s; rename them here (tierFlags, startTier) to follow the binary", bin, strings.Join(missing, ", "), strings.Join(tierFlags, " "))
	}
}

// startTier starts tierNodes nodes in front of the suite's Sentinels, each
// with its own data dir and Links to the others' Raft ports, and waits
// until they agree on a leader.
func (e *env) startTier() *tier {
	t := e.t
	tr := &tier{links: make([][]*testenv.Link, tierNodes)}
	for i := range tierNodes {
		tr.ids = append(tr.ids, "n"+strconv.Itoa(i+1))
		tr.raftAddr = append(tr.raftAddr, fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
	}
	for i := range tierNodes {
		tr.links[i] = make([]*testenv.Link, tierNodes)
		var peers []string
		for j := range tierNodes {
			addr := tr.raftAddr[j]
			if j != i {
				tr.links[i][j] = testenv.StartLink(t, tr.raftAddr[j])
				addr = tr.links[i][j].Addr
			}
			peers = append(peers, tr.ids[j]+"="+addr)
		}
		opts := e.proxyOptions()
		opts.DataDir = filepath.Join(t.TempDir(), "data-"+tr.ids[i])
		opts.Args = append(opts.Args, "--node-id", tr.ids[i], "--raft-listen", tr.raftAddr[i], "--peers", strings.Join(peers, ","))
		tr.nodes = append(tr.nodes, testenv.StartProxy(t, opts))
	}
	tr.waitFormed(t, 0, 1, 2)
	return tr
}

// tierInfo is a node's "# Tier" section of INFO.
type tierInfo struct {
	role, leaderID, leaderAddr string
	term                       int64
	fields                     map[string]string
}

// info reads node i's tier fields; ok is false if it did not answer.
func (tr *tier) info(i int) (tierInfo, bool) {
	c, err := testenv.TryDial(tr.nodes[i].Addr, 2*time.Second)
	if err != nil {
		return tierInfo{}, false
	}
	defer c.Close()
	reply, err := c.TryDo("INFO")
	body, ok := testenv.ParseBulk(reply)
	if err != nil || !ok {
		return tierInfo{}, false
	}
	ti := tierInfo{fields: map[string]string{}}
	for _, line := range strings.Split(string(body), "\n") {
		k, v, found := strings.Cut(strings.TrimSpace(line), ":")
		if found && strings.HasPrefix(k, "tier_") {
			ti.fields[k] = v
		}
	}
	ti.role, ti.leaderID, ti.leaderAddr = ti.fields["tier_role"], ti.fields["tier_leader_id"], ti.fields["tier_leader_addr"]
	ti.term, _ = strconv.ParseInt(ti.fields["tier_term"], 10, 64)
	return ti, ti.role != ""
}

// leader returns the index of the node but skip that says it leads with
// the highest term, and that term; -1 if none does.
func (tr *tier) leader(skip int) (int, int64) {
	best, term := -1, int64(-1)
	for i := range tr.nodes {
		if i == skip {
			continue
		}
		if ti, ok := tr.info(i); ok && ti.role == "leader" && ti.term > term {
			best, term = i, ti.term
		}
	}
	return best, term
}

// waitLeader waits until every node but skip that answers names one and
// the same leader, which says it leads, and is not skip; it returns it.
func (tr *tier) waitLeader(t *testing.T, skip int) int {
	t.Helper()
	deadline := time.Now().Add(tierWait)
	var last string
	for {
		if l, term := tr.leader(skip); l >= 0 {
			agreed := true
			for i := range tr.nodes {
				if i == skip {
					continue
				}
				ti, ok := tr.info(i)
				if ok && (ti.leaderID != tr.ids[l] || ti.term != term) {
					agreed = false
					last = fmt.Sprintf("%s says leader %q term %d, %s leads in term %d", tr.ids[i], ti.leaderID, ti.term, tr.ids[l], term)
				}
			}
			if agreed {
				return l
			}
		} else {
			last = "no node says it leads"
		}
		if time.Now().After(deadline) {
			t.Fatalf("fault: the tier agreed on no leader (other than %s) within %v: %s\n%s", tr.name(skip), tierWait, last, tr.describe())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (tr *tier) name(i int) string {
	if i < 0 || i >= len(tr.ids) {
		return "none"
	}
	return tr.ids[i]
}

// describe is every node's tier fields, for a failure message.
func (tr *tier) describe() string {
	var b strings.Builder
	for i := range tr.nodes {
		ti, ok := tr.info(i)
		fmt.Fprintf(&b, "\t%s (answered %v): role=%s term=%d leader=%s commit=%s applied=%s last=%s peers=%s\n", tr.ids[i], ok,
			ti.role, ti.term, ti.leaderID, ti.fields["tier_commit_index"], ti.fields["tier_applied_index"], ti.fields["tier_last_index"], ti.fields["tier_peers"])
	}
	return b.String()
}

// waitFormed waits until each node of which follows the current leader,
// counts every node in its configuration (tier_peers, where INFO has it)
// and has applied what the leader had committed when the wait began
// (tier_commit_index, tier_applied_index, where INFO has them), and, where
// INFO has tier_rejoining and tier_voters, votes again and is a voter on
// the leader: the tier is whole before the next fault, and a wiped node
// has caught up before another disk may go.
func (tr *tier) waitFormed(t *testing.T, which ...int) {
	t.Helper()
	l := tr.waitLeader(t, -1)
	var target int64
	if li, ok := tr.info(l); ok {
		target, _ = strconv.ParseInt(li.fields["tier_commit_index"], 10, 64)
	}
	deadline := time.Now().Add(tierWait)
	for _, i := range which {
		for {
			ti, ok := tr.info(i)
			applied, _ := strconv.ParseInt(ti.fields["tier_applied_index"], 10, 64)
			members, known := ti.fields["tier_peers"]
			// A node that lost its Raft state votes again, and is a voter
			// again, once caught up (where INFO has the fields).
			voting := ti.fields["tier_rejoining"] != "1"
			if lv, ok := tr.info(l); ok && lv.fields["tier_voters"] != "" && lv.fields["tier_voters"] != strconv.Itoa(tierNodes) {
				voting = false
			}
			if ok && (i == l || ti.leaderID == tr.ids[l]) && applied >= target && (!known || members == strconv.Itoa(tierNodes)) && voting {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("fault: node %s not caught up within %v (INFO tier: %v; leader %s commit index %d)", tr.ids[i], tierWait, ti.fields, tr.ids[l], target)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// cutNode cuts node i's Raft traffic: both ways, or only what it sends
// (sendOnly), or only what it receives. Its own connections to j carry its
// requests upstream; j's connections to it carry its replies downstream.
func (tr *tier) cutNode(t *testing.T, i int, how string, drop bool) {
	cut := func(l *testenv.Link, d testenv.Direction) {
		if drop {
			l.Drop(t, d)
		} else {
			l.Cut(t, d)
		}
	}
	for j := range tr.nodes {
		if j == i {
			continue
		}
		switch how {
		case "both":
			cut(tr.links[i][j], testenv.BothWays)
			cut(tr.links[j][i], testenv.BothWays)
		case "send":
			cut(tr.links[i][j], testenv.Upstream)
			cut(tr.links[j][i], testenv.Downstream)
		case "receive":
			cut(tr.links[i][j], testenv.Downstream)
			cut(tr.links[j][i], testenv.Upstream)
		}
	}
}

func (tr *tier) heal(t *testing.T) {
	for _, row := range tr.links {
		for _, l := range row {
			if l != nil {
				l.Heal(t)
			}
		}
	}
}

// planTier draws a tier mode's schedule from the seed, as planFaults does
// for one proxy: every kind once per round, rounds shuffled, 2-4s apart
// (an election and a rejoin take longer than a proxy's restart).
func planTier(seed uint64, d time.Duration, kinds []FaultKind) []planned {
	return drawPlan(rand.New(rand.NewPCG(seed, 0x7e12)), kinds, 3*time.Second, d-5*time.Second, 2*time.Second)
}

// injectTier runs one of the tier's own faults, fault n of the plan, from
// the test goroutine (see inject).
func (e *env) injectTier(n int, p planned) {
	t, tr := e.t, e.tier
	f := Fault{Kind: tierRecordedAs(p.Kind), At: p.At}
	leader := tr.waitLeader(t, -1)
	victim := leader
	switch p.Kind {
	case TierFollowerKill:
		victim = (leader + 1 + p.N%(tierNodes-1)) % tierNodes
	case TierDataDirWipe, TierIsolate, TierOneWay:
		victim = p.N % tierNodes // any node, the leader too
	}
	node := tr.nodes[victim]
	role := "follower"
	if victim == leader {
		role = "leader"
	}
	switch p.Kind {
	case TierLeaderKill, TierFollowerKill:
		f.Start = e.h.Now()
		node.Kill9()
		time.Sleep(p.D)
		node.Restart(t)
		f.End = e.h.Now()
		f.Note = fmt.Sprintf("%s: %s %s down %v", p.Kind, role, tr.ids[victim], p.D)
	case TierDataDirWipe:
		f.Start = e.h.Now()
		node.Kill9()
		if err := os.RemoveAll(node.DataDir); err != nil {
			t.Fatalf("fault: %v", err)
		}
		time.Sleep(p.D)
		node.Restart(t)
		tr.waitFormed(t, victim)
		f.End = e.h.Now()
		f.Note = fmt.Sprintf("%s: %s %s wiped, down %v, rejoined", p.Kind, role, tr.ids[victim], p.D)
	case TierEmptyDiskRejoin:
		a := (leader + 1 + p.N%(tierNodes-1)) % tierNodes
		b, c := leader, 3-leader-a
		f.Start = e.h.Now()
		tr.cutNode(t, a, "both", true)
		probe := e.newRejoinProbe(n, b, a)
		time.Sleep(p.D) // grants commit on b and c only
		tr.nodes[b].Kill9()
		tr.nodes[c].Kill9()
		if err := os.RemoveAll(tr.nodes[c].DataDir); err != nil {
			t.Fatalf("fault: %v", err)
		}
		tr.nodes[c].Restart(t)
		tr.heal(t)
		time.Sleep(p.D) // a and c alone: no leader may come of them
		alone := "nobody led"
		if l, _ := tr.leader(b); l >= 0 {
			alone = tr.ids[l] + " LED"
		}
		tr.nodes[b].Restart(t)
		tr.waitFormed(t, 0, 1, 2)
		f.End = e.h.Now()
		f.Note = fmt.Sprintf("%s: follower %s cut, leader %s and %s killed, %s wiped and back, %s healed; %s with %s and %s alone for %v; %s back, rejoined; %s",
			p.Kind, tr.ids[a], tr.ids[b], tr.ids[c], tr.ids[c], tr.ids[a], alone, tr.ids[a], tr.ids[c], p.D, tr.ids[b], probe.check())
	case TierLeaderStop:
		probe := e.newStaleProbe(n, victim)
		f.Start = e.h.Now()
		node.Stop() // returns once it is stopped: it reads nothing more
		f.ReadBefore = e.readByStopped(node.Addr)
		next := tr.waitLeader(t, victim) // longer than the election timeout, whatever it is
		time.Sleep(p.D)                  // the new leader grants meanwhile
		probe.ask()
		f.End = e.h.Now()
		node.Cont()
		probe.answers()
		f.Note = fmt.Sprintf("%s: leader %s stopped until %s led, then %v more; %d requests in flight read before; %s", p.Kind, tr.ids[victim], tr.ids[next], p.D, len(f.ReadBefore), probe)
	case TierIsolate, TierOneWay:
		how, drop := "both", p.N/3%2 == 1
		if p.Kind == TierOneWay {
			how = []string{"send", "receive"}[p.N/6%2]
		}
		tr.cutNode(t, victim, how, drop)
		f.Start = e.h.Now()
		next := ""
		if how == "both" && victim == leader {
			// The majority must elect a new leader; a tier whose Raft
			// traffic bypasses the Links would keep the old one.
			next = " (" + tr.ids[tr.waitLeader(t, victim)] + " led meanwhile)"
		}
		if d := time.Duration(f.Start + int64(p.D) - e.h.Now()); d > 0 {
			time.Sleep(d)
		}
		f.End = e.h.Now()
		tr.heal(t)
		f.Note = fmt.Sprintf("%s: %s %s cut (%s, drop=%v) for %v%s", p.Kind, role, tr.ids[victim], how, drop, time.Duration(f.End-f.Start), next)
	}
	e.h.AddFault(f)
}

// staleProbe asks a leader stopped past an election (tier-leader-stop)
// what only a stale leader would answer. The workload's own requests to
// the stopped node were nearly all written before the new leader granted
// anything, so whatever the node answers when it wakes fits some order of
// events: they cannot show a stale answer. The probe's can. Before the
// stop, owner a takes resource r through a live node (token t0, which the
// leader then holds as r's newest) and releases it. While the leader is
// stopped, after a new one leads, owner b takes r (t1 > t0) through the
// live node; then a connection to the stopped node pipelines FENCE.CHECK r
// t0, FENCE.CHECK r t1 and LOCK.ACQUIRE of r by owner c, which the kernel
// holds for it until SIGCONT. Those ops start after t1 was replied, so
// the checker judges what the woken leader answers: t0 accepted is
// stale-check, t1 called never issued is unissued-token, c granted while
// b holds r is lease-overlap.
type staleProbe struct {
	e            *env
	n            int
	r            string
	at           string  // the stopped node's address
	live         *client // on another node
	t0, t1       int64
	conn         *testenv.Conn // to the stopped node
	ops          []*Op
	skipped, got string
}

// newStaleProbe takes and releases r before node victim, the leader, is
// stopped.
func (e *env) newStaleProbe(n, victim int) *staleProbe {
	tr := e.tier
	live := (victim + 1) % len(tr.nodes)
	// clientAddr sends client id to node id%len(nodes).
	id := 300000 + 10*n
	id += live - id%len(tr.nodes)
	pr := &staleProbe{e: e, n: n, r: "stale:" + strconv.Itoa(n), at: tr.nodes[victim].Addr, live: &client{e: e, id: id}}
	a := "stale-a-" + strconv.Itoa(n)
	op := pr.live.acquireWithin(pr.r, a, 5000)
	if op == nil {
		pr.skipped = "not granted before the stop"
		return pr
	}
	pr.t0 = op.Result
	pr.live.do(Release, pr.r, a, 0, 0, "LOCK.RELEASE", pr.r, a)
	return pr
}

// ask takes r anew from the new leader, then queues the stale requests at
// the stopped node.
func (pr *staleProbe) ask() {
	if pr.skipped != "" {
		return
	}
	e, b := pr.e, "stale-b-"+strconv.Itoa(pr.n)
	op := pr.live.acquireWithin(pr.r, b, acrossTTL)
	if op == nil {
		pr.skipped = "the new leader granted nothing"
		return
	}
	pr.t1 = op.Result
	conn, err := testenv.TryDial(pr.at, opTimeout)
	if err != nil {
		pr.skipped = "the stopped node took no connection: " + err.Error()
		return
	}
	pr.conn = conn
	id, c := pr.live.id+len(e.tier.nodes), "stale-c-"+strconv.Itoa(pr.n)
	pr.ops = []*Op{
		e.h.Begin(id, Check, pr.r, "", pr.t0, 0, []string{"FENCE.CHECK", pr.r, i64(pr.t0)}),
		e.h.Begin(id, Check, pr.r, "", pr.t1, 0, []string{"FENCE.CHECK", pr.r, i64(pr.t1)}),
		e.h.Begin(id, Acquire, pr.r, c, 0, 1000, []string{"LOCK.ACQUIRE", pr.r, c, "1000"}),
	}
	var buf []byte
	for _, op := range pr.ops {
		buf = testenv.AppendCommand(buf, op.Args...)
	}
	nc := conn.NetConn()
	nc.SetWriteDeadline(time.Now().Add(opTimeout))
	if _, err := nc.Write(buf); err != nil {
		for _, op := range pr.ops {
			e.h.Finish(op, nil, err)
		}
		pr.ops = nil
	}
}

// answers reads what the woken node answered, and releases r.
func (pr *staleProbe) answers() {
	e := pr.e
	defer pr.live.close()
	if pr.conn != nil {
		var got []string
		for i, op := range pr.ops {
			reply, err := pr.conn.ReadReply()
			e.h.Finish(op, reply, err)
			got = append(got, string(op.Outcome))
			if err != nil {
				for _, rest := range pr.ops[i+1:] {
					e.h.Finish(rest, nil, err)
				}
				break
			}
		}
		pr.conn.Close()
		pr.got = strings.Join(got, ",")
	}
	for _, op := range pr.ops {
		if op.Kind == Acquire && op.Outcome == OK {
			pr.live.do(Release, pr.r, op.Owner, 0, 0, "LOCK.RELEASE", pr.r, op.Owner)
		}
	}
	if pr.t1 != 0 {
		b := "stale-b-" + strconv.Itoa(pr.n)
		pr.live.do(Release, pr.r, b, 0, 0, "LOCK.RELEASE", pr.r, b)
	}
}

func (pr *staleProbe) String() string {
	if pr.skipped != "" {
		return "stale probe skipped: " + pr.skipped
	}
	return fmt.Sprintf("stale probe on %s (t0=%d t1=%d): %s", pr.r, pr.t0, pr.t1, pr.got)
}

// TestFaultTier runs the workload over a tier in front of the standalone
// backend of TestFault, under a seeded schedule of the tier's faults and a
// Redis partition, and checks the history as TestFault does.
func TestFaultTier(t *testing.T) {
	requireTier(t)
	runFault(t, "tier")
}

// TestFaultTierCluster runs the workload over a tier in front of the Redis
// Cluster of TestFaultCluster (as docker-compose.yml and scripts/demo.sh
// --tier do), the tier's faults mixed with the cluster's and those of one
// master (TierClusterFaults), and checks the history as TestFaultCluster
// does.
func TestFaultTierCluster(t *testing.T) {
	requireTier(t)
	runFault(t, "tier-cluster")
}

// TestTierLinksCarryRaft proves the harness's premise: the Links are on
// every Raft path of the tier. Three times, the leader's Raft traffic is
// cut both ways: the other two must elect a new leader (bounded wait), and
// after the heal all three agree on one. A tier that dials the addresses
// of its replicated configuration (one node's --peers, the bootstrapper's)
// instead of its own --peers bypasses some Links: the first leader can be
// cut off, a later one cannot, and this test fails.
func TestTierLinksCarryRaft(t *testing.T) {
	requireTier(t)
	e := &env{t: t, h: NewHistory(1), newest: map[string]int64{}, inFlight: map[int]flight{}}
	e.startStandalone()
	e.tier = e.startTier()
	tr := e.tier
	for range 3 {
		old := tr.waitLeader(t, -1)
		tr.cutNode(t, old, "both", false)
		next := tr.waitLeader(t, old)
		var peers []string
		if ti, ok := tr.info(next); ok {
			for k, v := range ti.fields {
				if strings.HasPrefix(k, "tier_peer_") {
					peers = append(peers, k+"="+v)
				}
			}
		}
		t.Logf("leader %s cut off; %s leads; its view: %v", tr.ids[old], tr.ids[next], peers)
		tr.heal(t)
		tr.waitFormed(t, 0, 1, 2)
	}
}

// rejoinProbe is tier-empty-disk-rejoin's witness: a token granted by the
// leader while the follower it will be checked on is cut off (so only the
// leader and the node about to be wiped have it), checked with
// FENCE.CHECK through that follower once the tier has formed again. Had
// the empty disk voted the follower in, the tier would have lost the
// grant, and the check would answer "never issued" (the checker's
// unissued-token).
type rejoinProbe struct {
	r        string
	granted  *Op
	at, from *client
}

// newRejoinProbe takes a resource of its own through node leader, to be
// checked later through node other.
func (e *env) newRejoinProbe(n, leader, other int) *rejoinProbe {
	on := func(node int) *client {
		id := 400000 + 10*n
		id += node - id%len(e.tier.nodes)
		return &client{e: e, id: id}
	}
	pr := &rejoinProbe{r: "rejoin:" + strconv.Itoa(n), at: on(leader), from: on(other)}
	pr.granted = pr.at.acquireWithin(pr.r, "rejoin-"+strconv.Itoa(n), acrossTTL)
	pr.at.close()
	return pr
}

// check asks FENCE.CHECK of the granted token; the checker judges it.
func (pr *rejoinProbe) check() string {
	if pr.granted == nil {
		return "probe: not granted before the kills"
	}
	defer pr.from.close()
	tok := pr.granted.Result
	for deadline := time.Now().Add(probeWait); time.Now().Before(deadline); {
		op := pr.from.do(Check, pr.r, "", tok, 0, "FENCE.CHECK", pr.r, i64(tok))
		if op != nil && op.Outcome != NotRun && op.Outcome != Unknown {
			return fmt.Sprintf("probe: FENCE.CHECK %s %d (granted while cut off) = %s", pr.r, tok, op.Outcome)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "probe: FENCE.CHECK never answered"
}
