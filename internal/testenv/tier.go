package testenv

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TierOptions configures StartTier.
type TierOptions struct {
	Nodes          int // 3 if zero
	Backend        string
	MinReplicas    int
	ReplicaTimeout time.Duration
	Args           []string // extra flags for every node
	// RelayLinks puts a Link in front of each node's client port and makes
	// it the node's --tier-advertise: a follower relays lock commands to
	// the leader through the leader's Link (Tier.RelayLinks).
	RelayLinks bool
	// RaftLinks puts a Link on every Raft connection from one node to
	// another (Tier.RaftLinks): each node's --peers names every other
	// node at a Link of its own, so IsolateRaft can cut one node off.
	RaftLinks bool
}

// Tier is a tier of fenceproxy nodes (--node-id, --raft-listen, --peers)
// in front of one backend.
type Tier struct {
	Nodes []*Proxy
	IDs   []string // Nodes[i]'s --node-id
	Raft  []string // Nodes[i]'s --raft-listen
	// RelayLinks[i] relays to Nodes[i]'s client port: the other nodes
	// relay lock commands through it while Nodes[i] leads (with
	// TierOptions.RelayLinks; else nil).
	RelayLinks []*Link
	// RaftLinks[i][j] carries node i's Raft connections to node j (nil
	// for i == j; with TierOptions.RaftLinks, else nil).
	RaftLinks [][]*Link
}

// StartTier starts opts.Nodes fenceproxy processes as one tier, each with
// its own data dir, and waits (bounded) until one of them leads.
func StartTier(t testing.TB, opts TierOptions) *Tier {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	tr := &Tier{}
	var peers []string
	for i := 0; i < opts.Nodes; i++ {
		tr.IDs = append(tr.IDs, fmt.Sprintf("n%d", i+1))
		tr.Raft = append(tr.Raft, fmt.Sprintf("127.0.0.1:%d", FreePort(t)))
		peers = append(peers, tr.IDs[i]+"="+tr.Raft[i])
	}
	bin := BuildProxy(t)
	if opts.RaftLinks {
		tr.RaftLinks = make([][]*Link, opts.Nodes)
		for i := range opts.Nodes {
			tr.RaftLinks[i] = make([]*Link, opts.Nodes)
			for j := range opts.Nodes {
				if j != i {
					tr.RaftLinks[i][j] = StartLink(t, tr.Raft[j])
				}
			}
		}
	}
	for i := 0; i < opts.Nodes; i++ {
		nodePeers := peers
		if opts.RaftLinks {
			nodePeers = nil
			for j := range opts.Nodes {
				addr := tr.Raft[j]
				if j != i {
					addr = tr.RaftLinks[i][j].Addr
				}
				nodePeers = append(nodePeers, tr.IDs[j]+"="+addr)
			}
		}
		args := append([]string{"--node-id", tr.IDs[i], "--raft-listen", tr.Raft[i], "--peers", strings.Join(nodePeers, ",")}, opts.Args...)
		listen := ""
		if opts.RelayLinks {
			listen = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
			l := StartLink(t, listen)
			tr.RelayLinks = append(tr.RelayLinks, l)
			args = append(args, "--tier-advertise", l.Addr)
		}
		tr.Nodes = append(tr.Nodes, startProxy(t, bin, ProxyOptions{
			Backend: opts.Backend, MinReplicas: opts.MinReplicas, ReplicaTimeout: opts.ReplicaTimeout, Args: args, Listen: listen,
		}))
	}
	tr.Leader(t)
	return tr
}

// TierInfo is a node's INFO tier section as field -> value; nil if the node
// does not answer.
func TierInfo(addr string) map[string]string {
	c, err := dialConn(addr, 2*time.Second)
	if err != nil {
		return nil
	}
	defer c.Close()
	reply, err := c.TryDo("INFO", "tier")
	if err != nil {
		return nil
	}
	body, ok := ParseBulk(reply)
	if !ok {
		return nil
	}
	fields := map[string]string{}
	for _, line := range bytes.Split(body, []byte("\r\n")) {
		if k, v, ok := bytes.Cut(line, []byte(":")); ok {
			fields[string(k)] = string(v)
		}
	}
	return fields
}

// Leader waits (up to 60s, only to end a hang) until a running node is the
// tier's ready leader and returns its index.
func (tr *Tier) Leader(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for i, n := range tr.Nodes {
			if n.proc() == nil || n.proc().exited() {
				continue
			}
			if f := TierInfo(n.Addr); f["tier_role"] == "leader" && f["tier_ready"] == "1" {
				return i
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("testenv: no tier node became the ready leader within 60s")
	return -1
}

// IsolateRaft drops every Raft byte to and from node i (Link.Drop both
// ways on its Links to and from each other node) until HealRaft. Needs
// TierOptions.RaftLinks.
func (tr *Tier) IsolateRaft(t testing.TB, i int) {
	t.Helper()
	for j := range tr.Nodes {
		if j != i {
			tr.RaftLinks[i][j].Drop(t, BothWays)
			tr.RaftLinks[j][i].Drop(t, BothWays)
		}
	}
}

// HealRaft ends every fault on the Raft Links.
func (tr *Tier) HealRaft(t testing.TB) {
	t.Helper()
	for _, row := range tr.RaftLinks {
		for _, l := range row {
			if l != nil {
				l.Heal(t)
			}
		}
	}
}
