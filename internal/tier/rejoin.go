package tier

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// A node that lost its Raft state must not vote as if it had not
// (invariant 9). hashicorp/raft grants a vote to any candidate whose log is
// at least as long as the voter's own, and, with no configuration at all,
// to any candidate (requestVote: "the cluster is very likely trying to
// bootstrap"): an empty node votes for whoever asks, so a follower that
// missed entries a majority committed could be elected with the empty
// node's vote and never know of them. Raft's own answer is that a lost
// disk is a new server; here the same id may come back on a new disk (the
// docs/operating.md, "Replacing a node"), so the node itself refuses to vote until it
// has caught up:
//
//   - A node opened without Raft state (an empty data dir, or one whose
//     Raft log and stable store are gone) is rejoining. It writes
//     Options.Dir/rejoining (synced) before raft starts, and keeps
//     rejoining across restarts while that file is there.
//   - While rejoining, its transport (gatedTransport) answers every
//     RequestVote and RequestPreVote "not granted" without raft seeing it,
//     refuses TimeoutNow (a leadership transfer to it), and sends no
//     RequestVote of its own (it may still ask for pre-votes, which change
//     nothing, so that the others see how long its log is). Entries and
//     snapshots from a leader reach raft as usual: it is caught up.
//   - It stops rejoining when its applied index reaches a target that a
//     ready leader gave it after a VerifyLeader round that began after the
//     node asked (TIER.APPLIED ... REJOINING, answered with the leader's
//     commit index): that leader held every entry committed before the
//     node restarted, at or below its commit index, so the node now holds
//     them too, and from then on it acknowledges and votes like any node
//     that kept its disk.
//   - Or, a new tier: when every other node named by --peers has asked it
//     for a vote with a log no longer than the bootstrap entry (index 1),
//     nothing beyond the bootstrap was ever committed (a committed entry is
//     on a majority, and this node alone is not one), so there is nothing
//     to lose. One node with a longer log seen (tierSeen) rules this out
//     for the rest of the run, and the node then does not bootstrap.
//
// The leader's side: a voter that reports it is rejoining, behind its
// target, is demoted to a non-voter (DemoteVoter) when the other voters
// are enough for a quorum without it, so its acknowledgements no longer
// count either; it is promoted back (AddVoter) once a report shows its
// applied index at the leader's commit index of when the leader first saw
// it. A node reports at once when it stops rejoining. Between its catch-up
// and its promotion the tier has one voter fewer: take no other node down
// before the leader's TIER.INFO shows it voter=1. TIER.ADD adds a new node
// as a non-voter; it is promoted the same way.

// rejoinFile, in Options.Dir, marks a node that lost its Raft state and
// has not yet caught up.
const rejoinFile = "rejoining"

// errRejoining refuses what a rejoining node must not do (a TimeoutNow, a
// RequestVote of its own).
var errRejoining = errors.New("tier: this node lost its raft state and has not caught up; it does not vote")

// gate is a node's rejoin state.
type gate struct {
	n       *Node
	closed  atomic.Bool   // rejoining: votes refused
	refused atomic.Uint64 // vote and pre-vote requests refused while rejoining
	mu      sync.Mutex
	fresh   map[string]bool // peers seen asking for a vote with a log of at most the bootstrap entry
	seen    bool            // a peer with a longer log was seen: the tier exists
	target  uint64          // a verified leader's commit index (0: none yet)
	markerP string
}

func (g *gate) init(n *Node) {
	g.n, g.fresh = n, map[string]bool{}
	g.markerP = filepath.Join(n.opts.Dir, rejoinFile)
}

// start closes the gate if the node has no Raft state or was still
// rejoining when it stopped; it writes the marker first (synced), so a
// crash while catching up leaves the node rejoining.
func (g *gate) start(hasState bool) error {
	_, err := os.Stat(g.markerP)
	marked := err == nil
	if hasState && !marked {
		return nil
	}
	if !marked {
		if err := writeSynced(g.markerP); err != nil {
			return fmt.Errorf("tier: marking the node as rejoining: %v", err)
		}
	}
	g.closed.Store(true)
	g.n.logger.Warn("tier: this node has no raft state of its own (a new or wiped data dir): it does not vote until a leader has caught it up, or every other node is as new")
	return nil
}

func writeSynced(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.WriteString("this node lost its raft state and has not caught up yet; it does not vote\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// open ends rejoining: the node votes from now on.
func (g *gate) open(why string) {
	if !g.closed.Load() {
		return
	}
	if err := os.Remove(g.markerP); err != nil && !os.IsNotExist(err) {
		g.n.logger.Error("tier: cannot remove the rejoining mark; the node keeps refusing votes", "err", err)
		return
	}
	if err := syncDir(filepath.Dir(g.markerP)); err != nil {
		g.n.logger.Warn("tier: syncing the data dir after the rejoining mark went", "err", err)
	}
	g.closed.Store(false)
	g.n.logger.Info("tier: this node votes again: " + why)
}

// observe notes a peer's log length from its vote request, and opens the
// gate when every other node is as new as this one (a new tier).
func (g *gate) observe(id []byte, lastIndex uint64) {
	if !g.closed.Load() {
		return
	}
	g.mu.Lock()
	if lastIndex > 1 {
		g.seen = true
	} else {
		g.fresh[string(id)] = true
	}
	all := !g.seen
	for _, p := range g.n.opts.Peers {
		if p.ID != g.n.opts.NodeID && !g.fresh[p.ID] {
			all = false
		}
	}
	g.mu.Unlock()
	if all {
		g.open("every other node named by --peers has no more than the bootstrap entry (a new tier)")
	}
}

// tierSeen reports whether a peer with more than the bootstrap entry asked
// this node for a vote while it was rejoining.
func (g *gate) tierSeen() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seen
}

// setTarget records a verified leader's commit index (the first one).
func (g *gate) setTarget(t uint64) {
	g.mu.Lock()
	if g.target == 0 {
		g.target = t
	}
	g.mu.Unlock()
}

// caughtUp opens the gate once the applied index reaches the target.
func (g *gate) caughtUp(applied uint64) {
	if !g.closed.Load() {
		return
	}
	g.mu.Lock()
	t := g.target
	g.mu.Unlock()
	if t > 0 && applied >= t {
		g.open(fmt.Sprintf("caught up (applied index %d, the leader's commit index was %d)", applied, t))
	}
}

// Rejoining reports whether this node lost its Raft state and has not yet
// caught up (it refuses to vote).
func (n *Node) Rejoining() bool { return n.gate.closed.Load() }

// RejoinTarget records the commit index a leader answered a rejoining
// report with.
func (n *Node) RejoinTarget(t uint64) { n.gate.setTarget(t) }

// gatedTransport is raft's transport with the gate in front of what would
// count this node's vote.
type gatedTransport struct {
	*raft.NetworkTransport
	g   *gate
	out chan raft.RPC
}

func newGatedTransport(t *raft.NetworkTransport, g *gate) *gatedTransport {
	return &gatedTransport{NetworkTransport: t, g: g, out: make(chan raft.RPC)}
}

// Consumer is what raft reads its RPCs from: the transport's, less the
// vote requests the gate answered.
func (t *gatedTransport) Consumer() <-chan raft.RPC { return t.out }

// RequestVote sends no vote request while rejoining: this node cannot be
// elected on an empty log.
func (t *gatedTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if t.g.closed.Load() {
		return errRejoining
	}
	return t.NetworkTransport.RequestVote(id, target, args, resp)
}

// forward passes RPCs to raft until closing, answering the ones the gate
// refuses.
func (t *gatedTransport) forward(closing <-chan struct{}) {
	in := t.NetworkTransport.Consumer()
	for {
		select {
		case <-closing:
			return
		case rpc := <-in:
			if t.screen(rpc) {
				continue
			}
			select {
			case t.out <- rpc:
			case <-closing:
				return
			}
		}
	}
}

// screen answers rpc itself if the gate refuses it, and reports whether
// it did.
func (t *gatedTransport) screen(rpc raft.RPC) bool {
	g := t.g
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		g.observe(req.ID, req.LastLogIndex)
		if g.closed.Load() {
			g.refused.Add(1)
			rpc.Respond(&raft.RequestVoteResponse{RPCHeader: t.header(), Term: req.Term}, nil)
			return true
		}
	case *raft.RequestPreVoteRequest:
		g.observe(req.ID, req.LastLogIndex)
		if g.closed.Load() {
			g.refused.Add(1)
			rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: t.header(), Term: req.Term}, nil)
			return true
		}
	case *raft.TimeoutNowRequest:
		if g.closed.Load() {
			rpc.Respond(nil, errRejoining)
			return true
		}
	}
	return false
}

func (t *gatedTransport) header() raft.RPCHeader {
	id := raft.ServerID(t.g.n.opts.NodeID)
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: t.EncodePeer(id, t.LocalAddr())}
}

// watchMembership follows this node's own standing: whether it has caught
// up (rejoining), and whether it was removed from the tier.
func (n *Node) watchMembership() {
	defer n.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-n.closing:
			return
		case <-t.C:
		}
		n.gate.caughtUp(n.raft.AppliedIndex())
		n.checkRemoved()
	}
}

// ErrRemoved refuses lock commands on a node that is no longer in the
// tier's configuration.
var ErrRemoved = resp.Error{Code: "ERR", Msg: "fenceproxy: this node was removed from the tier (TIER.REMOVE); " +
	"it serves passthrough only: use another node, or add it back with TIER.ADD on the leader"}

// checkRemoved notes whether this node was removed: its raft stopped by
// itself (a leader that removed itself shuts down), or the newest
// configuration it has does not name it.
func (n *Node) checkRemoved() {
	removed := false
	if n.raft.State() == raft.Shutdown {
		removed = true
	} else if cf := n.raft.GetConfiguration(); cf.Error() == nil {
		servers := cf.Configuration().Servers
		removed = len(servers) > 0 && !inServers(servers, n.opts.NodeID)
	}
	if removed != n.removed.Swap(removed) {
		if removed {
			n.logger.Error("tier: this node was removed from the tier's configuration; lock commands answer an error until TIER.ADD on the leader adds it back")
		} else {
			n.logger.Info("tier: this node is in the tier's configuration again")
		}
	}
}

func inServers(servers []raft.Server, id string) bool {
	for _, s := range servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// Removed reports whether this node was removed from the tier.
func (n *Node) Removed() bool { return n.removed.Load() }

// leaderTargets is the leader's memory of the nodes catching up: the
// commit index each must reach before it is promoted.
type leaderTargets struct {
	mu      sync.Mutex
	target  map[string]uint64
	running map[string]bool // a membership change in flight, by node
}

func (l *leaderTargets) init() { l.target, l.running = map[string]uint64{}, map[string]bool{} }

// forget drops every target (a leadership begins).
func (l *leaderTargets) forget() {
	l.mu.Lock()
	clear(l.target)
	l.mu.Unlock()
}

// Report is one follower's TIER.APPLIED, on the leader: its applied index
// (the lag figures), and for a rejoining node the target it must reach,
// answered after a VerifyLeader round: this leader's commit index, which
// covers every entry committed before the round began. The leader also
// demotes a rejoining voter that is behind its target, and promotes a
// non-voter whose applied index has reached it.
func (n *Node) Report(id string, applied uint64, rejoining bool) (uint64, error) {
	n.ReportApplied(id, applied)
	if !rejoining {
		n.promoteIfCaughtUp(id, applied)
		return 0, nil
	}
	if err := n.verify.wait(); err != nil {
		return 0, err
	}
	target := n.targetOf(id, n.raft.CommitIndex())
	if applied < target {
		n.demoteRejoining(id)
		n.nudge()
	} else {
		n.promoteIfCaughtUp(id, applied)
	}
	return target, nil
}

// targetOf is the commit index id must reach before it is promoted: the
// leader's commit index when this leader first saw it (now's, if not yet).
func (n *Node) targetOf(id string, now uint64) uint64 {
	n.targets.mu.Lock()
	defer n.targets.mu.Unlock()
	t, ok := n.targets.target[id]
	if !ok {
		t = now
		n.targets.target[id] = t
	}
	return t
}

// configuration is the leader's newest configuration.
func (n *Node) configuration() ([]raft.Server, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, n.fromRaft(err)
	}
	return cf.Configuration().Servers, nil
}

func suffrageOf(servers []raft.Server, id string) (raft.ServerSuffrage, bool) {
	for _, s := range servers {
		if string(s.ID) == id {
			return s.Suffrage, true
		}
	}
	return 0, false
}

// demoteRejoining makes a rejoining voter a non-voter, if the other
// voters the leader hears from are a quorum without it (otherwise
// demoting it would stop every commit until another came back; it keeps
// refusing to vote meanwhile).
func (n *Node) demoteRejoining(id string) {
	servers, err := n.configuration()
	if err != nil {
		return
	}
	if s, ok := suffrageOf(servers, id); !ok || s != raft.Voter {
		return
	}
	others, healthy := 0, 0
	for _, s := range servers {
		if s.Suffrage != raft.Voter || string(s.ID) == id {
			continue
		}
		others++
		if string(s.ID) == n.opts.NodeID || n.health.healthy(string(s.ID)) {
			healthy++
		}
	}
	if healthy < others/2+1 {
		n.logger.Warn("tier: a rejoining node stays a voter (it refuses to vote until caught up): the others are too few for a quorum without it",
			"node", id, "other_voters", others, "healthy", healthy)
		return
	}
	n.changeMembership(id, "demoted to a non-voter until it has caught up", func() raft.IndexFuture {
		return n.raft.DemoteVoter(raft.ServerID(id), 0, applyTimeout)
	})
}

// promoteIfCaughtUp makes a non-voter a voter once its applied index has
// reached the leader's commit index of when it was first seen (now, if
// this leader has not seen it before). A node still rejoining then stops
// rejoining by itself (its target is at most the leader's): the two happen
// about together, and a voter that does not vote yet is only as if it
// were down for that moment.
func (n *Node) promoteIfCaughtUp(id string, applied uint64) {
	if !n.Ready() {
		return
	}
	servers, err := n.configuration()
	if err != nil {
		return
	}
	s, ok := suffrageOf(servers, id)
	if !ok || s != raft.Nonvoter {
		return
	}
	target := n.targetOf(id, n.raft.CommitIndex())
	if applied < target {
		return
	}
	var addr raft.ServerAddress
	for _, srv := range servers {
		if string(srv.ID) == id {
			addr = srv.Address
		}
	}
	n.changeMembership(id, fmt.Sprintf("promoted to a voter (caught up: applied index %d, target %d)", applied, target), func() raft.IndexFuture {
		return n.raft.AddVoter(raft.ServerID(id), addr, 0, applyTimeout)
	})
}

// nudge appends a barrier, at most one at a time, so that a follower
// one entry short of its target learns that entry is committed (see
// changeMembership).
func (n *Node) nudge() {
	if !n.nudging.CompareAndSwap(false, true) {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.nudging.Store(false)
		n.raft.Barrier(applyTimeout).Error()
	}()
}

// changeMembership runs one configuration change for id at a time, on
// its own goroutine (a report is not held up by a commit).
func (n *Node) changeMembership(id, what string, change func() raft.IndexFuture) {
	n.targets.mu.Lock()
	if n.targets.running[id] {
		n.targets.mu.Unlock()
		return
	}
	n.targets.running[id] = true
	n.targets.mu.Unlock()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() {
			n.targets.mu.Lock()
			delete(n.targets.running, id)
			n.targets.mu.Unlock()
		}()
		if err := change().Error(); err != nil {
			n.logger.Warn("tier: membership change failed; tried again at the node's next report", "node", id, "change", what, "err", err)
			return
		}
		n.logger.Info("tier: node "+what, "node", id)
		// A follower learns that an entry is committed only from the
		// next entry it is sent (hashicorp/raft's heartbeats carry no
		// commit index), and a node catching up must apply the change
		// just made to reach its target: in a quiet tier no next entry
		// would come. A barrier is that entry.
		if err := n.raft.Barrier(applyTimeout).Error(); err != nil {
			n.logger.Debug("tier: barrier after a membership change", "node", id, "err", err)
		}
	}()
}

// probeRaft checks that something listens at a node's --raft-listen.
func probeRaft(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// memberIDs is the configuration's ids, sorted, for an error message.
func memberIDs(servers []raft.Server) string {
	ids := make([]string, 0, len(servers))
	for _, s := range servers {
		ids = append(ids, string(s.ID))
	}
	sort.Strings(ids)
	return strings.Join(ids, ", ")
}
