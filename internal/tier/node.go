package tier

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// logCacheEntries is how many of the newest log entries each node keeps in
// memory (raft.LogCache). Enough for what the leader sends and every node
// applies right after it was written (one Batch in flight; a follower
// further behind reads from the log store). 1024 kept about 10 MB of
// Batches live on every node under load (20 MiB of RSS with Go's GC
// headroom; docs/performance.md); 256 of at most maxBatchBytes each is
// 16 MiB at the very most.
const logCacheEntries = 256

// Peer is one node of the tier as --peers names it.
type Peer struct {
	ID   string
	Addr string // its --raft-listen
}

// ParsePeers reads --peers: ID=ADDR[,ID=ADDR...].
func ParsePeers(s string) ([]Peer, error) {
	var peers []Peer
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("%q is not ID=HOST:PORT", item)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%q: %v", item, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("node id %q is named twice", id)
		}
		seen[id] = true
		peers = append(peers, Peer{ID: id, Addr: addr})
	}
	return peers, nil
}

// Options configure a Node.
type Options struct {
	// NodeID is this node's id (--node-id), RaftListen where it serves
	// Raft (--raft-listen; also the address its peers reach it at).
	NodeID, RaftListen string
	// Peers is the tier at its first start (--peers); this node is added
	// if it is missing. Ignored once the node has state.
	Peers []Peer
	// Dir holds the Raft log, stable store and snapshots, and the state
	// machine's Pebble (Dir/state) (--data-dir/raft).
	Dir string
	// CacheEntries bounds the state's newest-token cache (--token-cache;
	// 262144 if zero).
	CacheEntries int
	// LogStore is where the Raft log and stable store live: "pebble"
	// (pebblelog.go, the default) or "bolt" (raft-boltdb). Pebble measured
	// about 1.5x bolt's lock cycles through the leader (one fsync per log
	// write, not two).
	LogStore string
	// ClientAddr is where this node serves clients: followers forward
	// lock commands there while it leads.
	ClientAddr string
	// Timeouts; raft's defaults (1s, 1s, 500ms) if zero.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	// BootstrapWait is how long a node without state waits to be contacted
	// by a leader before it bootstraps the tier from Peers (3 election
	// timeouts if zero): a node whose disk was wiped is caught up by the
	// leader instead of starting a tier of its own.
	BootstrapWait time.Duration
	// OnLeadershipLost is called (on its own goroutine) each time this
	// node stops being the ready leader: lock commands in flight and
	// waiters must end.
	OnLeadershipLost func()
	// OnLeading is called (on its own goroutine) each time this node
	// becomes the ready leader, with the leadership: fenceproxy runs the
	// token authority's heartbeat on it while it lasts.
	OnLeading func(*Leadership)
	// Shared: the leader issues no token before Leadership.Join, and
	// writes every window's bound to the backend before issuing from it
	// (leadership.go).
	Shared bool
	Logger *slog.Logger

	// trailingLogs: log entries kept after a snapshot (raft's default if
	// zero); tests make it small to force catch-up by snapshot.
	trailingLogs uint64
}

// Node is this process as one node of a tier: a Raft group whose state
// machine is the token state (fsm.go). Safe for concurrent use.
type Node struct {
	opts    Options
	raft    *raft.Raft
	fsm     *fsm
	logs    *countingLogStore
	bolt    *raftboltdb.BoltStore
	pebble  *pebbleStore
	trans   *raft.NetworkTransport
	logger  *slog.Logger
	verify  verifier
	prop    proposer
	closing chan struct{}
	wg      sync.WaitGroup

	run string // this process's run id (Leadership.Run)

	// The leader's side, under mu (never held across I/O): valid while
	// ready, for the leadership numbered epoch.
	mu      sync.Mutex
	epoch   uint64
	ready   bool
	term    uint64 // the term this node leads in (its LeaderStart's)
	last    uint64 // the last token handed out
	limit   uint64 // the window's end: last <= limit
	lead    *Leadership
	share   func(uint64) (uint64, error) // Join's (Options.Shared)
	joined  bool                         // Join returned nil in this leadership
	readyAt atomic.Bool
	// windowMu serializes what commits a window or an Adopt and moves the
	// counter after it (NextToken past a window's end, Adopt, Join): held
	// across the commit and the share, then mu for the counter.
	windowMu sync.Mutex
	// ledTerm is the term of this node's last LeaderStart (0 if it never
	// led): what owner records it writes carry.
	ledTerm atomic.Uint64

	// overlay: Confirms this leader has made that the state may not have
	// applied yet (they are not awaited). Under overlayMu.
	overlayMu sync.Mutex
	overlay   map[string]uint64

	health peerHealth

	// gate refuses this node's vote while it rejoins (rejoin.go);
	// targets are the leader's catch-up targets for rejoining nodes;
	// removed: this node is no longer in the tier's configuration.
	gate    gate
	targets leaderTargets
	removed atomic.Bool
	// nudging: a barrier of nudge is in flight.
	nudging atomic.Bool
}

// Open starts the node: its Raft log and snapshots under opts.Dir, its
// transport on opts.RaftListen. A node without state waits BootstrapWait
// for a leader and then bootstraps the tier from opts.Peers.
func Open(opts Options) (*Node, error) {
	if opts.NodeID == "" || opts.RaftListen == "" {
		return nil, errors.New("tier: a node needs --node-id and --raft-listen")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	if opts.CacheEntries <= 0 {
		opts.CacheEntries = 1 << 18
	}
	n := &Node{opts: opts, logger: opts.Logger, closing: make(chan struct{}), overlay: map[string]uint64{}, run: newTierID()}
	n.verify.node = n
	n.prop.n, n.prop.depth = n, proposeDepth
	n.health.init()
	n.gate.init(n)
	n.targets.init()

	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(opts.NodeID)
	if opts.HeartbeatTimeout > 0 {
		cfg.HeartbeatTimeout = opts.HeartbeatTimeout
	}
	if opts.ElectionTimeout > 0 {
		cfg.ElectionTimeout = opts.ElectionTimeout
	}
	if opts.LeaderLeaseTimeout > 0 {
		cfg.LeaderLeaseTimeout = opts.LeaderLeaseTimeout
	}
	// Group commit: concurrent Applies are taken from the channel up to
	// MaxAppendEntries at a time into one log write (one fsync).
	cfg.MaxAppendEntries = 256
	if opts.trailingLogs > 0 {
		cfg.TrailingLogs = opts.trailingLogs
	}
	cfg.BatchApplyCh = true
	notify := make(chan bool, 16)
	cfg.NotifyCh = notify
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: os.Stderr})

	ok := false
	defer func() {
		if !ok {
			n.closeStores()
		}
	}()
	var stable raft.StableStore
	switch opts.LogStore {
	case "bolt":
		bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(opts.Dir, "raft.db")})
		if err != nil {
			return nil, fmt.Errorf("tier: opening the raft log: %v", err)
		}
		n.bolt, stable = bolt, bolt
		n.logs = &countingLogStore{LogStore: bolt}
	case "", "pebble":
		ps, err := openPebbleStore(filepath.Join(opts.Dir, "log"), opts.Logger)
		if err != nil {
			return nil, fmt.Errorf("tier: opening the raft log: %v", err)
		}
		n.pebble, stable = ps, ps
		n.logs = &countingLogStore{LogStore: ps}
	default:
		return nil, fmt.Errorf("tier: unknown log store %q (bolt or pebble)", opts.LogStore)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(opts.Dir, 2, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("tier: opening the snapshot store: %v", err)
	}
	addr, err := net.ResolveTCPAddr("tcp", opts.RaftListen)
	if err != nil {
		return nil, fmt.Errorf("tier: --raft-listen %s: %v", opts.RaftListen, err)
	}
	// Each peer is dialled at the address this node's own --peers gives
	// for its id, not the one in the replicated configuration (which is
	// the bootstrapper's view): an operator's relay or NAT between two
	// nodes holds for this node's traffic. Ids --peers does not name (added
	// by TIER.ADD) are dialled at the configuration's address.
	trans, err := raft.NewTCPTransportWithConfig(opts.RaftListen, addr, &raft.NetworkTransportConfig{
		ServerAddressProvider: peerAddrs(opts.Peers), MaxPool: 4, Timeout: 5 * time.Second, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("tier: --raft-listen %s: %v", opts.RaftListen, err)
	}
	n.trans = trans
	// The newest entries are kept in memory as they are written: the
	// leader sends them to the followers, and every node applies them, by
	// reading them back (GetLog), which without the cache is a Pebble read
	// per entry (4% of the leader's CPU under load).
	logs, err := raft.NewLogCache(logCacheEntries, n.logs)
	if err != nil {
		return nil, err
	}
	hasState, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return nil, fmt.Errorf("tier: reading the raft state: %v", err)
	}
	// The state machine: a node without Raft state starts it empty, so
	// whatever a state dir holds without its log (a wipe that missed it)
	// is not taken for this tier's.
	stateDir := filepath.Join(opts.Dir, "state")
	if !hasState {
		if err := os.RemoveAll(stateDir); err != nil {
			return nil, fmt.Errorf("tier: clearing the state of a node without raft state: %v", err)
		}
	}
	if n.fsm, err = openFSM(stateDir, opts.CacheEntries, opts.Logger); err != nil {
		return nil, fmt.Errorf("tier: opening the state: %v", err)
	}
	n.fsm.onConfirmApplied = n.confirmApplied
	// Before raft starts: a node without Raft state does not vote until
	// it has caught up (rejoin.go).
	if err := n.gate.start(hasState); err != nil {
		return nil, err
	}
	gated := newGatedTransport(trans, &n.gate)
	r, err := raft.NewRaft(cfg, n.fsm, logs, stable, snaps, gated)
	if err != nil {
		return nil, fmt.Errorf("tier: starting raft: %v", err)
	}
	n.raft = r
	ok = true
	n.health.observe(r)
	n.wg.Add(3)
	go n.leadershipLoop(notify)
	go func() {
		defer n.wg.Done()
		gated.forward(n.closing)
	}()
	go n.watchMembership()
	if !hasState {
		wait := opts.BootstrapWait
		if wait == 0 {
			wait = 3 * cfg.ElectionTimeout
		}
		n.wg.Add(1)
		go n.bootstrapLater(wait)
	}
	return n, nil
}

// bootstrapLater bootstraps the tier from Peers unless a leader contacted
// this node within wait (it was wiped and is being caught up, or it was
// added by TIER.ADD). Bootstrapping with the same Peers as the others did
// writes the same first entry they have, so a late one is harmless.
func (n *Node) bootstrapLater(wait time.Duration) {
	defer n.wg.Done()
	select {
	case <-time.After(wait):
	case <-n.closing:
		return
	}
	if !n.raft.LastContact().IsZero() || n.raft.LastIndex() > 0 || n.gate.tierSeen() {
		// Contacted, or a peer with a longer log asked for a vote: the
		// tier exists, and its leader will catch this node up.
		return
	}
	servers := []raft.Server{}
	self := false
	for _, p := range n.opts.Peers {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
		self = self || p.ID == n.opts.NodeID
	}
	if !self {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.opts.NodeID), Address: raft.ServerAddress(n.opts.RaftListen)})
	}
	if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		n.logger.Warn("tier: bootstrap failed", "err", err)
		return
	}
	n.logger.Info("tier: bootstrapped", "nodes", len(servers))
}

// leadershipLoop follows raft's leadership signals: on gaining it, the
// LeaderStart (leaderStart); on losing it, every lock command ends.
func (n *Node) leadershipLoop(notify <-chan bool) {
	defer n.wg.Done()
	for {
		select {
		case <-n.closing:
			return
		case leader := <-notify:
			n.mu.Lock()
			n.epoch++
			epoch := n.epoch
			wasReady := n.ready
			n.ready = false
			n.readyAt.Store(false)
			if n.lead != nil {
				close(n.lead.done)
				n.lead = nil
			}
			n.share, n.joined = nil, false
			n.mu.Unlock()
			n.overlayMu.Lock()
			clear(n.overlay)
			n.overlayMu.Unlock()
			n.health.forget()
			n.targets.forget()
			if wasReady && n.opts.OnLeadershipLost != nil {
				go n.opts.OnLeadershipLost()
			}
			if leader {
				n.wg.Add(1)
				go n.leaderStart(epoch)
			}
		}
	}
}

// leaderStart makes a new leader ready: a Barrier (every entry of earlier
// terms applied here), then its LeaderStart entry (the fold, a fresh
// window above every bound committed, where followers forward). Until it
// is committed the node serves no lock command.
func (n *Node) leaderStart(epoch uint64) {
	defer n.wg.Done()
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-n.closing:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		if !n.stillEpoch(epoch) || n.raft.State() != raft.Leader {
			return
		}
		if err := n.raft.Barrier(10 * time.Second).Error(); err != nil {
			continue
		}
		term := n.raft.CurrentTerm()
		e := entry{kind: kindLeaderStart, term: term, node: n.opts.NodeID, addr: n.opts.ClientAddr, tierID: newTierID()}
		f := n.raft.Apply(e.encode(), 10*time.Second)
		if err := f.Error(); err != nil {
			continue
		}
		ws, ok := f.Response().(windowStart)
		if !ok {
			n.logger.Error("tier: LeaderStart was not applied", "response", f.Response())
			continue
		}
		var lead *Leadership
		n.mu.Lock()
		if n.epoch == epoch {
			n.term, n.last, n.limit, n.ready = term, ws.from, ws.to, true
			lead = &Leadership{n: n, epoch: epoch, done: make(chan struct{})}
			n.lead = lead
			n.ledTerm.Store(term)
			n.readyAt.Store(true)
		}
		n.mu.Unlock()
		n.logger.Info("tier: leading", "term", term, "tokens_from", ws.from+1)
		if lead != nil && n.opts.OnLeading != nil {
			go n.opts.OnLeading(lead)
		}
		return
	}
}

func (n *Node) stillEpoch(epoch uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.epoch == epoch
}

func newTierID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Ready reports whether this node is the leader and has committed its
// LeaderStart: it may serve lock commands (reads still verify).
func (n *Node) Ready() bool { return n.readyAt.Load() }

// Term is the term in which this node last became the ready leader (0 if
// it never did), never a newer term it has only heard of: owner records
// carry the granting leader's term, and a deposed leader that has heard of
// a newer one must still write under its own, so the scripts refuse it.
// It does not block (the lock scripts ask it under a resource's turn).
func (n *Node) Term() uint64 { return n.ledTerm.Load() }

// TierID is the tier's id, named by its first leader (empty before one).
func (n *Node) TierID() string { return n.fsm.state().tierID }

// LeaderClientAddr is where the current leader serves clients, if known:
// from the last applied LeaderStart, if that was made by the node raft
// knows as leader now.
func (n *Node) LeaderClientAddr() string {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return ""
	}
	st := n.fsm.state()
	if string(id) != st.leader.node {
		return ""
	}
	return st.leader.addr
}

// NotReady is the error a node that is not the ready leader refuses lock
// commands with (an UnavailableError naming the leader if known).
func (n *Node) NotReady() error { return n.notLeader() }

// notLeader is the error for a node that is not the ready leader.
func (n *Node) notLeader() error {
	if n.removed.Load() {
		return ErrRemoved
	}
	return &UnavailableError{LeaderAddr: n.LeaderClientAddr()}
}

// Close stops the node: a leader first hands leadership to another node
// (raft's LeadershipTransfer), then it leaves the tier's elections and
// closes its stores.
func (n *Node) Close() error {
	select {
	case <-n.closing:
		return nil
	default:
	}
	close(n.closing)
	if n.raft.State() == raft.Leader {
		// A drain (SIGTERM) hands leadership over rather than leaving the
		// others an election timeout without a leader.
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			n.logger.Warn("tier: could not hand leadership over before stopping", "err", err)
		}
	}
	err := n.raft.Shutdown().Error()
	n.health.stop(n.raft)
	n.wg.Wait()
	n.mu.Lock()
	n.ready = false
	n.readyAt.Store(false)
	if n.lead != nil {
		close(n.lead.done)
		n.lead = nil
	}
	n.mu.Unlock()
	n.closeStores()
	return err
}

func (n *Node) closeStores() {
	if n.trans != nil {
		n.trans.Close()
	}
	if n.bolt != nil {
		n.bolt.Close()
	}
	if n.pebble != nil {
		n.pebble.Close()
	}
	if n.fsm != nil {
		n.fsm.close()
	}
}

// Status is what INFO's # Tier section and the metrics show.
type Status struct {
	NodeID, Role, LeaderID, LeaderAddr, TierID string
	Term, CommitIndex, AppliedIndex, LastIndex uint64
	Bound, Floor                               uint64
	Pending                                    int
	// SnapshotResources is how many resources the state held when this
	// node last wrote or restored a snapshot (0 before its first).
	SnapshotResources int64
	Members           int // nodes in the tier's configuration
	Voters            int // of them, voters
	// Rejoining: this node lost its Raft state and has not caught up (it
	// does not vote); Removed: it is no longer in the configuration.
	Rejoining, Removed     bool
	VotesRefused           uint64       // vote and pre-vote requests refused while rejoining
	Peers                  []PeerStatus // on the leader: every other node
	LogWrites, LogEntries  uint64       // log writes and the entries they carried (group commit)
	BatchEntries, BatchOps uint64       // Batch entries this node proposed as leader, and the token ops they carried
}

// PeerStatus is one other node as the leader sees it.
type PeerStatus struct {
	ID, Addr string
	Healthy  bool
	Voter    bool // a voter in the configuration (a non-voter is catching up)
	// Lag is how many log entries the node's applied index was behind the
	// leader's last index when the node last reported it (every second,
	// and at once when it learns of a new leader); if the last report is
	// older than staleReport, behind the leader's last index now (the node
	// has stopped reporting, and the distance grows). LagKnown is false
	// until the node has reported to this leader in this leadership (a new
	// leader knows nothing of its followers' progress).
	Lag      uint64
	LagKnown bool
}

// Status reads the node's status.
func (n *Node) Status() Status {
	st := n.fsm.state()
	role := "follower"
	switch n.raft.State() {
	case raft.Leader:
		role = "leader"
	case raft.Candidate:
		role = "candidate"
	case raft.Shutdown:
		role = "none"
	}
	_, leaderID := n.raft.LeaderWithID()
	s := Status{NodeID: n.opts.NodeID, Role: role, LeaderID: string(leaderID), LeaderAddr: n.LeaderClientAddr(), TierID: st.tierID,
		Term: n.raft.CurrentTerm(), CommitIndex: n.raft.CommitIndex(), AppliedIndex: n.raft.AppliedIndex(), LastIndex: n.raft.LastIndex(),
		Bound: st.bound, Floor: st.floor, Pending: st.pending, SnapshotResources: n.fsm.snapResources.Load(),
		LogWrites: n.logs.writes.Load(), LogEntries: n.logs.entries.Load(),
		BatchEntries: n.prop.entries.Load(), BatchOps: n.prop.ops.Load(),
		Rejoining: n.Rejoining(), Removed: n.Removed(), VotesRefused: n.gate.refused.Load()}
	if leaderID == "" {
		s.LeaderID = ""
	}
	if cf := n.raft.GetConfiguration(); cf.Error() == nil {
		servers := cf.Configuration().Servers
		s.Members = len(servers)
		for _, srv := range servers {
			if srv.Suffrage == raft.Voter {
				s.Voters++
			}
			if role != "leader" || string(srv.ID) == n.opts.NodeID {
				continue
			}
			lag, known := n.health.lag(string(srv.ID), s.LastIndex, time.Now())
			s.Peers = append(s.Peers, PeerStatus{ID: string(srv.ID), Addr: string(srv.Address),
				Healthy: n.health.healthy(string(srv.ID)), Voter: srv.Suffrage == raft.Voter, Lag: lag, LagKnown: known})
		}
		sort.Slice(s.Peers, func(i, j int) bool { return s.Peers[i].ID < s.Peers[j].ID })
	}
	return s
}

// AddNode adds a node (on the leader) as a non-voter: it is caught up
// (InstallSnapshot when the log it needs is compacted) and promoted to a
// voter once it has (rejoin.go), so a node that never answers never
// counts against a quorum. Nothing is changed if nothing listens at
// raftAddr. An id already in the tier keeps its suffrage (its address is
// updated).
func (n *Node) AddNode(id, raftAddr string) error {
	if _, _, err := net.SplitHostPort(raftAddr); err != nil || id == "" {
		return resp.Error{Code: "ERR", Msg: "TIER.ADD needs the node's id and its --raft-listen host:port"}
	}
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	if err := probeRaft(raftAddr); err != nil {
		return resp.Error{Code: "ERR", Msg: "fenceproxy: TIER.ADD: nothing answers at " + raftAddr +
			" (the node's --raft-listen); start the node first (with --peers naming the tier), then add it; nothing was changed"}
	}
	servers, err := n.configuration()
	if err != nil {
		return err
	}
	if s, ok := suffrageOf(servers, id); ok && s == raft.Voter {
		return n.fromRaft(n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, 10*time.Second).Error())
	}
	return n.fromRaft(n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, 10*time.Second).Error())
}

// RemoveNode removes a node from the tier (on the leader); an id the tier
// does not have is refused, naming the ids it has.
func (n *Node) RemoveNode(id string) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader()
	}
	servers, err := n.configuration()
	if err != nil {
		return err
	}
	if _, ok := suffrageOf(servers, id); !ok {
		return resp.Error{Code: "ERR", Msg: fmt.Sprintf("fenceproxy: TIER.REMOVE: the tier has no node %q (its nodes: %s); nothing was changed", id, memberIDs(servers))}
	}
	return n.fromRaft(n.raft.RemoveServer(raft.ServerID(id), 0, 10*time.Second).Error())
}

// Members is the tier's configuration: every node and its raft address.
func (n *Node) Members() ([]Peer, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, n.fromRaft(err)
	}
	var out []Peer
	for _, srv := range cf.Configuration().Servers {
		out = append(out, Peer{ID: string(srv.ID), Addr: string(srv.Address)})
	}
	return out, nil
}

// peerAddrs is --peers as raft's ServerAddressProvider.
type peerAddrs []Peer

var errUnknownPeer = errors.New("tier: not named by --peers")

func (p peerAddrs) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	for _, peer := range p {
		if peer.ID == string(id) {
			return raft.ServerAddress(peer.Addr), nil
		}
	}
	return "", errUnknownPeer
}

// peerHealth is each peer's heartbeat health as the leader's replication
// reports it (raft observations), and its progress as it reports it.
type peerHealth struct {
	mu       sync.Mutex
	failed   map[string]bool
	reports  map[string]appliedReport // this leadership's, by peer (ReportApplied)
	ch       chan raft.Observation
	observer *raft.Observer
}

// appliedReport is a peer's applied index as it reported it, with the
// leader's last index when the report came.
type appliedReport struct {
	applied, leaderLast uint64
	at                  time.Time
}

// staleReport: a peer whose last report is older has stopped reporting
// (it reports every reportEvery).
const staleReport = 3 * reportEvery

func (h *peerHealth) init() { h.failed, h.reports = map[string]bool{}, map[string]appliedReport{} }

// lag is how far id's applied index is behind (PeerStatus.Lag), and
// whether it is known.
func (h *peerHealth) lag(id string, last uint64, now time.Time) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.reports[id]
	if !ok {
		return 0, false
	}
	ref := r.leaderLast
	if now.Sub(r.at) > staleReport {
		ref = last
	}
	if r.applied >= ref {
		return 0, true
	}
	return ref - r.applied, true
}

// forget drops every report: a leadership begins (one before it may be long
// stale, and the lag of a peer that has not reported to it is unknown).
func (h *peerHealth) forget() {
	h.mu.Lock()
	clear(h.reports)
	h.mu.Unlock()
}

// ReportApplied records a peer's applied index (followers report theirs
// to the leader over the internal link).
func (n *Node) ReportApplied(id string, applied uint64) {
	last := n.raft.LastIndex()
	n.health.mu.Lock()
	n.health.reports[id] = appliedReport{applied: applied, leaderLast: last, at: time.Now()}
	n.health.mu.Unlock()
}

func (h *peerHealth) observe(r *raft.Raft) {
	ch := make(chan raft.Observation, 64)
	h.ch = ch
	h.observer = raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	r.RegisterObserver(h.observer)
	go func() {
		for o := range ch {
			h.mu.Lock()
			switch d := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				h.failed[string(d.PeerID)] = true
			case raft.ResumedHeartbeatObservation:
				delete(h.failed, string(d.PeerID))
			}
			h.mu.Unlock()
		}
	}()
}

// stop ends the observing goroutine; raft sends nothing after
// DeregisterObserver returns.
func (h *peerHealth) stop(r *raft.Raft) {
	if h.observer != nil {
		r.DeregisterObserver(h.observer)
		close(h.ch)
		h.observer = nil
	}
}

func (h *peerHealth) healthy(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.failed[id]
}

// countingLogStore counts the log writes and the entries they carry: how
// well concurrent Applies share one write (and one fsync).
type countingLogStore struct {
	raft.LogStore
	writes, entries atomic.Uint64
}

func (c *countingLogStore) StoreLog(l *raft.Log) error {
	c.writes.Add(1)
	c.entries.Add(1)
	return c.LogStore.StoreLog(l)
}

func (c *countingLogStore) StoreLogs(ls []*raft.Log) error {
	c.writes.Add(1)
	c.entries.Add(uint64(len(ls)))
	return c.LogStore.StoreLogs(ls)
}

var _ io.Closer = (*Node)(nil)
