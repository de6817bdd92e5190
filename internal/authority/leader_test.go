package authority

import (
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/internal/tier"
)

// leaderSetup is a Leader whose leaderships are those of a real one-node
// tier, over a real Redis.
type leaderSetup struct {
	*setup
	node    *tier.Node
	leader  *Leader
	serving atomic.Pointer[Authority]
	served  chan *Authority
	lead    atomic.Pointer[tier.Leadership] // the last leadership begun
}

func newLeaderSetup(t *testing.T) *leaderSetup {
	t.Helper()
	ls := &leaderSetup{setup: newSetup(t), served: make(chan *Authority, 4)}
	ls.leader = NewLeader(LeaderOptions{Serving: &ls.serving, OnServing: func(a *Authority) { ls.served <- a }})
	t.Cleanup(ls.leader.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ls.node, err = tier.Open(tier.Options{
		NodeID: "n1", RaftListen: addr, Peers: []tier.Peer{{ID: "n1", Addr: addr}},
		Dir: filepath.Join(t.TempDir(), "raft"), ClientAddr: "client-of-n1", Shared: true,
		HeartbeatTimeout: time.Second, ElectionTimeout: time.Second, LeaderLeaseTimeout: 500 * time.Millisecond,
		BootstrapWait: 100 * time.Millisecond,
		OnLeading: func(l *tier.Leadership) {
			ls.lead.Store(l)
			ls.leader.Lead(l)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.node.Close() })
	waitFor(t, "the node leading", ls.node.Ready)
	return ls
}

func (ls *leaderSetup) start() {
	ls.leader.Start(Options{Backend: ls.be, Writer: ls.writer, ReplicaTimeout: 200 * time.Millisecond, Interval: interval})
}

// firstServing waits (bounded, against a hang) for the Authority that
// serves first.
func (ls *leaderSetup) firstServing(t *testing.T) *Authority {
	t.Helper()
	select {
	case a := <-ls.served:
		return a
	case <-time.After(30 * time.Second):
		t.Fatal("no authority served within 30s of the node leading")
		return nil
	}
}

// liveMembers is the live set's members in Redis (ZRANGE's bulk strings).
func liveMembers(c *testenv.Conn, liveKey string) []string {
	var members []string
	for _, line := range strings.Split(string(c.Do("ZRANGE", liveKey, "0", "-1")), "\r\n") {
		if line != "" && line[0] != '*' && line[0] != '$' {
			members = append(members, line)
		}
	}
	return members
}

// TestLeaderRunsTheAuthorityWhileTheNodeLeads: a node that leads runs no
// authority before Start (the backend is not up), then one under the
// tier's id whose member beats in Redis and which admits lock commands;
// when the leadership ends (the node stops), it is unpublished and its
// member leaves Redis.
func TestLeaderRunsTheAuthorityWhileTheNodeLeads(t *testing.T) {
	ls := newLeaderSetup(t)
	if a := ls.serving.Load(); a != nil {
		t.Fatal("an authority serves before the Leader started")
	}
	ls.start()
	a := ls.firstServing(t)
	if ls.serving.Load() != a {
		t.Fatal("the serving authority is not published")
	}
	if got, want := a.Stats().AuthorityID, ls.node.TierID(); got != want {
		t.Fatalf("authority id %q, want the tier's id %q", got, want)
	}
	waitFor(t, "the authority admitting lock commands", func() bool { return a.Admit() == nil })
	c := ls.keysConn(t)
	members := liveMembers(c, a.liveKey)
	if len(members) != 1 || !strings.HasPrefix(members[0], "n1@") {
		t.Fatalf("live members %q, want the node's own (n1@<run>/...)", members)
	}

	ls.node.Close()
	waitFor(t, "the authority unpublished once the leadership ended", func() bool { return ls.serving.Load() == nil })
	waitFor(t, "the member gone from Redis", func() bool { return len(liveMembers(c, a.liveKey)) == 0 })
	if err := a.Admit(); err == nil {
		t.Fatal("the stopped authority still admits lock commands")
	}
}

// TestLeaderClosedStopsTheAuthority: closing the Leader (the process
// stops) ends the authority of a leadership that goes on, and a later
// leadership runs none.
func TestLeaderClosedStopsTheAuthority(t *testing.T) {
	ls := newLeaderSetup(t)
	ls.start()
	a := ls.firstServing(t)
	c := ls.keysConn(t)
	ls.leader.Close()
	if ls.serving.Load() != nil {
		t.Fatal("Close returned with the authority still published")
	}
	if members := liveMembers(c, a.liveKey); len(members) != 0 {
		t.Fatalf("Close returned with members %q live in Redis", members)
	}
	if !ls.node.Ready() {
		t.Fatal("the node stopped leading: the test no longer shows that Close alone ends the authority")
	}
	// A closed Leader runs nothing, for a leadership that starts later too.
	done := make(chan struct{})
	go func() { ls.leader.Lead(ls.lead.Load()); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Lead on a closed Leader did not return")
	}
	if ls.serving.Load() != nil {
		t.Fatal("a closed Leader published an authority")
	}
}
