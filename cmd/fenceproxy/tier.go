package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/authority"
	"github.com/fenceproxy/fenceproxy/internal/lockcmd"
	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/tier"
)

// tierFlags make this process one node of a tier (internal/tier).
type tierFlags struct {
	nodeID     string
	raftListen string
	peersFlag  string
	peers      []tier.Peer
	advertise  string // the client address followers forward to; --listen if empty
	secret     string // $FENCEPROXY_TIER_SECRET, or the requirepass: opens relay links
	logStore   string // bolt or pebble
}

func (t *tierFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.nodeID, "node-id", "", "this node's `id` in a tier of fenceproxy nodes (with --raft-listen and --peers)")
	fs.StringVar(&t.raftListen, "raft-listen", "", "`host:port` where this tier node serves Raft to its peers")
	fs.StringVar(&t.peersFlag, "peers", "", "the tier's nodes at its first start, `ID=HOST:PORT[,ID=HOST:PORT...]` (their --raft-listen; this node may be among them); without it fenceproxy is a single node")
	fs.StringVar(&t.logStore, "tier-log-store", "pebble", "where a tier node keeps its Raft log: `pebble` or bolt (raft-boltdb); a node keeps the one it started with")
	fs.StringVar(&t.advertise, "tier-advertise", "", "`host:port` where the tier's other nodes reach this node's clients' port (default: --listen)")
}

// on reports whether this process is a tier node.
func (t *tierFlags) on() bool { return t.peersFlag != "" }

func (t *tierFlags) check() error {
	if !t.on() {
		if t.nodeID != "" || t.raftListen != "" {
			return errors.New("--node-id and --raft-listen need --peers (the tier's nodes)")
		}
		return nil
	}
	if t.nodeID == "" || t.raftListen == "" {
		return errors.New("--peers needs --node-id and --raft-listen")
	}
	if _, _, err := net.SplitHostPort(t.raftListen); err != nil {
		return fmt.Errorf("--raft-listen: %v", err)
	}
	peers, err := tier.ParsePeers(t.peersFlag)
	if err != nil {
		return fmt.Errorf("--peers: %v", err)
	}
	for _, p := range peers {
		if p.ID == t.nodeID && p.Addr != t.raftListen {
			return fmt.Errorf("--peers names this node (%s) at %s, but --raft-listen is %s", p.ID, p.Addr, t.raftListen)
		}
	}
	t.peers = peers
	if t.logStore != "bolt" && t.logStore != "pebble" {
		return errors.New("--tier-log-store must be bolt or pebble")
	}
	return nil
}

// openTier starts this node of the tier, its Raft state under
// --data-dir/raft. Its clients' address is what followers forward to.
func (p *proxy) openTier() error {
	cfg := &p.cfg
	p.tierAuth = newTierAuthority(p)
	advertise := cfg.tier.advertise
	if advertise == "" {
		// The listeners open last (openListeners), so the flag, not the
		// socket: a wildcard host there needs --tier-advertise.
		advertise = cfg.listen
	}
	n, err := tier.Open(tier.Options{
		NodeID: cfg.tier.nodeID, RaftListen: cfg.tier.raftListen, Peers: cfg.tier.peers,
		Dir:          filepath.Join(cfg.dataDir, "raft"),
		CacheEntries: cfg.cacheEntries,
		ClientAddr:   advertise,
		LogStore:     cfg.tier.logStore,
		Logger:       p.logger,
		// The leader runs the token authority (authority.Leader) and
		// shares each window's bound with Redis before issuing from it.
		Shared:    true,
		OnLeading: func(l *tier.Leadership) { p.tierAuth.Lead(l) },
		// Waiters in line here end -TRYAGAIN; in-flight grants end so by
		// themselves (their Reserve fails).
		OnLeadershipLost: func() {
			if m := p.lockManager.Load(); m != nil {
				m.EndWaiters(&tier.UnavailableError{Lost: true})
			}
		},
	})
	if err != nil {
		return fmt.Errorf("--data-dir %s / --raft-listen %s: %v", cfg.dataDir, cfg.tier.raftListen, err)
	}
	p.tier = n
	p.relay = n.NewRelay(cfg.tier.secret)
	p.metrics.RegisterTier(func() metrics.TierStats {
		st := n.Status()
		ts := metrics.TierStats{Role: st.Role, Ready: n.Ready(), Term: st.Term, CommitIndex: st.CommitIndex, Applied: st.AppliedIndex,
			LogWrites: st.LogWrites, LogEntries: st.LogEntries, BatchEntries: st.BatchEntries, BatchOps: st.BatchOps}
		for _, peer := range st.Peers {
			ts.Peers = append(ts.Peers, metrics.TierPeer{ID: peer.ID, Healthy: peer.Healthy, Lag: peer.Lag, LagKnown: peer.LagKnown})
		}
		return ts
	})
	p.onClose(func() { n.Close() })
	return nil
}

// newTierAuthority is the token authority this node runs while it leads
// the tier (authority.Leader, started by startAuthority once the backend is
// up), published in p.tokens; the authority's metrics are registered when
// it first serves here.
func newTierAuthority(p *proxy) *authority.Leader {
	var registered sync.Once
	return authority.NewLeader(authority.LeaderOptions{
		Serving: &p.tokens,
		OnServing: func(*authority.Authority) {
			registered.Do(func() {
				p.metrics.RegisterAuthority(func() metrics.AuthorityStats {
					cur := p.tokens.Load()
					if cur == nil {
						return metrics.AuthorityStats{StoreID: p.tier.TierID()}
					}
					st := cur.Stats()
					return metrics.AuthorityStats{StoreID: st.StoreID, RedisBound: st.RedisBound, Floor: st.Floor, Conflict: len(st.Others) > 0, Confirmed: st.Confirmed}
				})
			})
		},
	})
}

// tierHooks are the lock family's view of the tier (lockcmd.Tier).
type tierHooks struct {
	info   func() string
	node   *tier.Node
	relay  *tier.Relay
	secret string
}

func (t tierHooks) Leads() bool { return t.node.Ready() }

func (t tierHooks) Relay(ctx context.Context, user string, resp3 bool, wait time.Duration, received time.Time, args [][]byte) ([]byte, error) {
	return t.relay.Do(ctx, user, resp3, wait, received, args)
}

func (t tierHooks) PeerSecret(secret string) bool { return tier.CheckSecret(t.secret, secret) }

func (t tierHooks) ReportApplied(node string, index uint64, rejoining bool) (uint64, error) {
	return t.node.Report(node, index, rejoining)
}

func (t tierHooks) Info() string {
	return strings.TrimPrefix(t.info(), "\r\n# Tier\r\n")
}

func (t tierHooks) AddNode(id, raftAddr string) error { return t.node.AddNode(id, raftAddr) }
func (t tierHooks) RemoveNode(id string) error        { return t.node.RemoveNode(id) }

// tierOptions is the lock family's tier (nil for a single node).
func (p *proxy) tierOptions() lockcmd.Tier {
	if p.tier == nil {
		return nil
	}
	return tierHooks{info: p.tierInfo, node: p.tier, relay: p.relay, secret: p.cfg.tier.secret}
}

// tokenStore is the lock manager's TokenStore: the tier's, or the fence
// store's.
func (p *proxy) tokenStore() locks.TokenStore {
	if p.tier != nil {
		return p.tier.Store()
	}
	return locks.PersistStore(p.store)
}

// admit is the lock manager's Admit: the token authority's heartbeat
// decides, and in a tier only the ready leader (which runs it) issues or
// judges tokens.
func (p *proxy) admit() error {
	a, err := p.authoritySeat()
	if err != nil {
		return err
	}
	return a.Admit()
}

// admitWithin is the lock manager's AdmitWithin: admit, but a heartbeat
// round that is merely late is waited for (authority.AdmitWithin).
func (p *proxy) admitWithin(ctx context.Context) error {
	a, err := p.authoritySeat()
	if err != nil {
		return err
	}
	return a.AdmitWithin(ctx)
}

// authoritySeat is the token authority that admits lock commands here, or
// why there is none: a tier node that is not its ready leader, or a new
// leader whose authority is still starting.
func (p *proxy) authoritySeat() (*authority.Authority, error) {
	if p.tier != nil && !p.tier.Ready() {
		return nil, p.tier.NotReady()
	}
	a := p.tokens.Load()
	if a == nil {
		return nil, authority.ErrUnconfirmed
	}
	return a, nil
}

// term is the lock manager's Term: the term this node leads the tier in
// (owner records carry it; scripts refuse an older one), 0 for a single
// node.
func (p *proxy) term() uint64 {
	if p.tier == nil {
		return 0
	}
	return p.tier.Term()
}

// storeStats is the fence store's stats (none in a tier).
func (p *proxy) storeStats() persist.Stats {
	if p.store == nil {
		return persist.Stats{Healthy: true}
	}
	return p.store.Stats()
}

// authorityInfo is the token authority's INFO fields (in a tier, only on
// the leader).
func (p *proxy) authorityInfo() string {
	if a := p.tokens.Load(); a != nil {
		return a.Info()
	}
	return ""
}

// tierInfo is INFO's "# Tier" section, after the fenceproxy section ("" for
// a single node).
func (p *proxy) tierInfo() string {
	if p.tier == nil {
		return ""
	}
	st := p.tier.Status()
	var b strings.Builder
	fmt.Fprintf(&b, "\r\n# Tier\r\ntier_node_id:%s\r\ntier_id:%s\r\ntier_role:%s\r\ntier_ready:%d\r\ntier_term:%d\r\ntier_leader_id:%s\r\ntier_leader_addr:%s\r\n"+
		"tier_commit_index:%d\r\ntier_applied_index:%d\r\ntier_last_index:%d\r\ntier_token_bound:%d\r\ntier_token_floor:%d\r\ntier_snapshot_resources:%d\r\ntier_pending_reservations:%d\r\n"+
		"tier_log_writes:%d\r\ntier_log_entries:%d\r\ntier_batch_entries:%d\r\ntier_batch_ops:%d\r\ntier_peers:%d\r\n"+
		"tier_voters:%d\r\ntier_rejoining:%d\r\ntier_votes_refused:%d\r\ntier_removed:%d\r\n",
		st.NodeID, st.TierID, st.Role, boolInt(p.tier.Ready()), st.Term, st.LeaderID, st.LeaderAddr,
		st.CommitIndex, st.AppliedIndex, st.LastIndex, st.Bound, st.Floor, st.SnapshotResources, st.Pending,
		st.LogWrites, st.LogEntries, st.BatchEntries, st.BatchOps, st.Members,
		st.Voters, boolInt(st.Rejoining), st.VotesRefused, boolInt(st.Removed))
	for _, peer := range st.Peers {
		// lag=-1: the peer has not reported its progress to this leader yet.
		lag := int64(-1)
		if peer.LagKnown {
			lag = int64(peer.Lag)
		}
		fmt.Fprintf(&b, "tier_peer_%s:addr=%s,healthy=%d,voter=%d,lag=%d\r\n", peer.ID, peer.Addr, boolInt(peer.Healthy), boolInt(peer.Voter), lag)
	}
	return b.String()
}
