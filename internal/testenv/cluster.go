package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterWait bounds StartCluster (creating the cluster and waiting for it to
// become healthy) and each WaitHealthy. Generous for the same reason as
// proxyWait: on a crowded machine a node can miss the 1 s node timeout at
// start, be marked failed, and take a while to be seen again.
const clusterWait = 45 * time.Second

// ClusterSlots is the number of hash slots of Redis Cluster.
const ClusterSlots = 16384

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	// Masters is the number of masters; 0 means 3. redis-cli --cluster
	// create needs at least 3.
	Masters int
	// ReplicasPerMaster is the number of replicas of each master; 0 means 1,
	// a negative number means none.
	ReplicasPerMaster int
	// Args are extra redis-server arguments for every node, appended after
	// testenv's own.
	Args []string
}

// Cluster is a Redis Cluster of redis-server processes on 127.0.0.1, each a
// *Redis as StartRedis returns (its own dir, log, t.Cleanup kill).
//
// Masters and Replicas are the roles the cluster reports, not the roles the
// nodes were started with: StartCluster and WaitHealthy set them from the
// live nodes, so after a failover WaitHealthy lists the promoted replica
// among Masters and drops the dead master. Read and change them only from the
// test goroutine.
type Cluster struct {
	// Masters are the live masters that own slots, ordered by their first slot.
	Masters []*Redis
	// Replicas are the live replicas, ordered by their master's position in
	// Masters, then by port.
	Replicas []*Redis
	// Nodes is every node StartCluster started, in start order, dead or alive.
	Nodes []*Redis

	replicasPerMaster int
}

// StartCluster starts Masters*(1+ReplicasPerMaster) redis-server processes
// with --cluster-enabled yes, nodes.conf in each node's dir, a cluster bus on
// a second free port (--cluster-port), --cluster-node-timeout 1000 (failover
// within a few seconds) and no persistence; creates the cluster with
// redis-cli --cluster create ... --cluster-replicas N --cluster-yes; and waits
// until every node reports cluster_state:ok, every node's CLUSTER SLOTS
// agrees, every master has its replicas and every replica's link is up. The
// whole of it is bounded by 20s.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	masters, rpm := opts.Masters, opts.ReplicasPerMaster
	if masters == 0 {
		masters = 3
	}
	if rpm == 0 {
		rpm = 1
	} else if rpm < 0 {
		rpm = 0
	}
	if masters < 3 {
		t.Fatalf("testenv: StartCluster: %d masters; redis-cli --cluster create needs at least 3", masters)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found: apt-get install -y redis-tools")
	}
	c := &Cluster{replicasPerMaster: rpm}
	extraFor := func(int) []string {
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", // relative to --dir
			"--cluster-node-timeout", "1000",
			"--cluster-port", strconv.Itoa(FreePort(t)),
		}
		return append(args, opts.Args...)
	}
	for range masters * (1 + rpm) {
		c.Nodes = append(c.Nodes, startRedisWith(t, extraFor, nil))
	}

	deadline := time.Now().Add(clusterWait)
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(rpm), "--cluster-yes")
	logPath := filepath.Join(t.TempDir(), "cluster-create.log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("testenv: StartCluster: %v", err)
	}
	p, err := startProc(cli, args, filepath.Dir(logPath), out)
	out.Close()
	if err != nil {
		t.Fatalf("testenv: StartCluster: starting redis-cli: %v", err)
	}
	if !p.wait(time.Until(deadline)) {
		_ = p.kill()
		t.Fatalf("testenv: StartCluster: redis-cli --cluster create did not finish within %v\n--- output ---\n%s",
			clusterWait, tail(logPath, 30))
	}
	if code := p.exitCode(); code != 0 {
		t.Fatalf("testenv: StartCluster: redis-cli --cluster create exited %d\n--- output ---\n%s",
			code, tail(logPath, 30))
	}
	c.waitHealthy(t, deadline, true)
	return c
}

// Seeds is the comma-separated addresses of the masters, for --backend.
func (c *Cluster) Seeds() string {
	addrs := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		addrs[i] = m.Addr
	}
	return strings.Join(addrs, ",")
}

// MasterForSlot asks a live node for CLUSTER SLOTS and returns the node that
// owns slot.
func (c *Cluster) MasterForSlot(t testing.TB, slot int) *Redis {
	t.Helper()
	if slot < 0 || slot >= ClusterSlots {
		t.Fatalf("testenv: MasterForSlot: slot %d out of range", slot)
	}
	ranges, from, err := c.liveSlots()
	if err != nil {
		t.Fatalf("testenv: MasterForSlot: %v", err)
	}
	for _, r := range ranges {
		if slot >= r.start && slot <= r.end {
			if m := c.node(r.master); m != nil {
				return m
			}
			t.Fatalf("testenv: MasterForSlot: %s says slot %d is on %s, not a node of this cluster", from, slot, r.master)
		}
	}
	t.Fatalf("testenv: MasterForSlot: %s says no node owns slot %d", from, slot)
	return nil
}

// liveSlots reads CLUSTER SLOTS from the first live master (or node) that
// answers, and names the node that answered.
func (c *Cluster) liveSlots() (ranges []slotRange, from string, err error) {
	var lastErr error
	for _, n := range append(append([]*Redis(nil), c.Masters...), c.Nodes...) {
		if !n.alive() {
			continue
		}
		ranges, err := clusterSlots(n.Addr)
		if err != nil {
			lastErr = err
			continue
		}
		return ranges, n.Addr, nil
	}
	return nil, "", fmt.Errorf("no live node answered CLUSTER SLOTS (last error: %v)", lastErr)
}

// WaitHealthy waits (deadline 20s) until every live node reports
// cluster_state:ok, all live nodes' CLUSTER SLOTS agree, every slot's owner
// is a live node, and every live replica's link to its master is up; then it
// sets Masters and Replicas from what the cluster reports. Use it after a
// Kill, a Restart, or a CLUSTER FAILOVER.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	c.waitHealthy(t, time.Now().Add(clusterWait), false)
}

func (c *Cluster) waitHealthy(t testing.TB, deadline time.Time, initial bool) {
	t.Helper()
	for {
		masters, replicas, err := c.health(initial)
		if err == nil {
			c.Masters, c.Replicas = masters, replicas
			return
		}
		if time.Now().After(deadline) {
			var nodes string
			for _, n := range c.Nodes {
				if n.alive() {
					if reply, err := clusterText(n.Addr, "CLUSTER", "NODES"); err == nil {
						nodes = fmt.Sprintf("--- CLUSTER NODES at %s ---\n%s", n.Addr, reply)
						break
					}
				}
			}
			t.Fatalf("testenv: cluster not healthy by the deadline (%v): %v\n%s", clusterWait, err, nodes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// health checks the cluster once and returns its masters and replicas, or
// what is wrong. initial also requires every node alive and every master to
// have exactly replicasPerMaster replicas.
func (c *Cluster) health(initial bool) (masters, replicas []*Redis, err error) {
	var view string
	var ranges []slotRange
	var live []*Redis
	for _, n := range c.Nodes {
		if !n.alive() {
			if initial {
				return nil, nil, fmt.Errorf("node %s has exited", n.Addr)
			}
			continue
		}
		live = append(live, n)
		info, err := clusterText(n.Addr, "CLUSTER", "INFO")
		if err != nil {
			return nil, nil, fmt.Errorf("%s: CLUSTER INFO: %v", n.Addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok\n") {
			return nil, nil, fmt.Errorf("%s: cluster_state is not ok", n.Addr)
		}
		r, err := clusterSlots(n.Addr)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: CLUSTER SLOTS: %v", n.Addr, err)
		}
		v := fmt.Sprint(r)
		if view != "" && v != view {
			return nil, nil, fmt.Errorf("nodes disagree on CLUSTER SLOTS:\n%s\n%s", view, v)
		}
		view, ranges = v, r
	}
	covered := 0
	var owners []*Redis
	firstSlot := map[*Redis]int{}
	for _, r := range ranges {
		m := c.node(r.master)
		if m == nil || !m.alive() {
			return nil, nil, fmt.Errorf("slots %d-%d are on %s, which is not a live node", r.start, r.end, r.master)
		}
		covered += r.end - r.start + 1
		if _, ok := firstSlot[m]; !ok { // ranges are sorted by start
			firstSlot[m] = r.start
			owners = append(owners, m)
		}
	}
	if covered != ClusterSlots {
		return nil, nil, fmt.Errorf("CLUSTER SLOTS covers %d of %d slots", covered, ClusterSlots)
	}
	sort.Slice(owners, func(i, j int) bool { return firstSlot[owners[i]] < firstSlot[owners[j]] })
	index := map[*Redis]int{}
	for i, m := range owners {
		index[m] = i
	}

	perMaster := map[*Redis]int{}
	for _, n := range live {
		if _, ok := index[n]; ok {
			continue
		}
		repl, err := infoReplication(n.Addr)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: INFO replication: %v", n.Addr, err)
		}
		if !strings.Contains(repl, "role:slave\n") {
			return nil, nil, fmt.Errorf("%s is a master that owns no slots", n.Addr)
		}
		host := infoField(repl, "master_host")
		port := infoField(repl, "master_port")
		m := c.node(host + ":" + port)
		if _, ok := index[m]; !ok {
			return nil, nil, fmt.Errorf("replica %s replicates %s:%s, which owns no slots", n.Addr, host, port)
		}
		if infoField(repl, "master_link_status") != "up" {
			return nil, nil, fmt.Errorf("replica %s: link to %s is not up", n.Addr, m.Addr)
		}
		mrepl, err := infoReplication(m.Addr)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: INFO replication: %v", m.Addr, err)
		}
		online := regexp.MustCompile(`(?m)^slave\d+:ip=127\.0\.0\.1,port=` + strconv.Itoa(n.Port) + `,state=online,`)
		if !online.MatchString(mrepl) {
			return nil, nil, fmt.Errorf("master %s does not list replica %s as online", m.Addr, n.Addr)
		}
		perMaster[m]++
		replicas = append(replicas, n)
	}
	if initial {
		for _, m := range owners {
			if perMaster[m] != c.replicasPerMaster {
				return nil, nil, fmt.Errorf("master %s has %d replicas, want %d", m.Addr, perMaster[m], c.replicasPerMaster)
			}
		}
	}
	sort.Slice(replicas, func(i, j int) bool {
		mi, mj := replicaMasterIndex(replicas[i], c, index), replicaMasterIndex(replicas[j], c, index)
		if mi != mj {
			return mi < mj
		}
		return replicas[i].Port < replicas[j].Port
	})
	return owners, replicas, nil
}

func replicaMasterIndex(r *Redis, c *Cluster, index map[*Redis]int) int {
	repl, err := infoReplication(r.Addr)
	if err != nil {
		return len(index)
	}
	if i, ok := index[c.node(infoField(repl, "master_host")+":"+infoField(repl, "master_port"))]; ok {
		return i
	}
	return len(index)
}

// node returns the node of c at addr, or nil.
func (c *Cluster) node(addr string) *Redis {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// alive reports whether r's process is running.
func (r *Redis) alive() bool {
	p := r.proc()
	return p != nil && !p.exited()
}

// slotRange is one entry of CLUSTER SLOTS: slots start..end on master.
type slotRange struct {
	start, end int
	master     string // "ip:port"
}

func (r slotRange) String() string { return fmt.Sprintf("%d-%d@%s", r.start, r.end, r.master) }

// clusterSlots asks addr for CLUSTER SLOTS, sorted by start slot.
func clusterSlots(addr string) ([]slotRange, error) {
	c, err := dialConn(addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	reply, err := c.TryDo("CLUSTER", "SLOTS")
	if err != nil {
		return nil, err
	}
	entries, ok := SplitArray(reply)
	if !ok {
		return nil, fmt.Errorf("CLUSTER SLOTS replied %q", reply)
	}
	var out []slotRange
	for _, e := range entries {
		f, ok := SplitArray(e)
		if !ok || len(f) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS entry %q", e)
		}
		start, ok1 := ParseInt(f[0])
		end, ok2 := ParseInt(f[1])
		m, ok3 := SplitArray(f[2])
		if !ok1 || !ok2 || !ok3 || len(m) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS entry %q", e)
		}
		ip, ok1 := ParseBulk(m[0])
		port, ok2 := ParseInt(m[1])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("CLUSTER SLOTS entry %q", e)
		}
		out = append(out, slotRange{int(start), int(end), fmt.Sprintf("%s:%d", ip, port)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out, nil
}

// clusterText sends one command to addr whose reply is a bulk string of
// CRLF-separated lines (CLUSTER INFO, CLUSTER NODES) and returns it with LF
// line ends.
func clusterText(addr string, args ...string) (string, error) {
	c, err := dialConn(addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	reply, err := c.TryDo(args...)
	if err != nil {
		return "", err
	}
	body, ok := ParseBulk(reply)
	if !ok {
		return "", fmt.Errorf("%s replied %q", ShowCommand(args), reply)
	}
	return strings.ReplaceAll(string(body), "\r\n", "\n"), nil
}

// infoField returns the value of "name:value" in INFO text with LF line ends.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

// KeySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) mod 16384 of
// the key, or of its hash tag, the part between the first '{' and the first
// '}' after it, when that part is not empty.
func KeySlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return int(crc16(key)) & (ClusterSlots - 1)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), as Redis
// Cluster uses.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
