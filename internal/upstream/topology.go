package upstream

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/upstream/pubsub"
	"github.com/fenceproxy/fenceproxy/internal/upstream/tracking"
)

// SlotCount is the number of hash slots of Redis Cluster.
const SlotCount = 16384

// How the topology is kept fresh: periodically, and at once (at most every
// minRefreshGap) when a request learns that it moved.
const (
	refreshEvery  = 2 * time.Second
	minRefreshGap = 100 * time.Millisecond
	// retireAfter is how long a node that no longer owns slots keeps its
	// connections, so requests already on them get their replies.
	retireAfter = 10 * time.Second
)

// Cluster is a Redis Cluster: its masters, the master of each slot, and
// a refresher that follows failovers and resharding. It learns the topology
// from CLUSTER SLOTS of any node it knows (the seeds, then every master and
// replica it has seen), so losing the seed named in --backend does not
// matter once the proxy has started.
//
// Lookups (MasterForSlot, Masters) read an immutable view through an atomic
// pointer: the request path takes no lock.
type Cluster struct {
	opts Options
	log  *slog.Logger
	view atomic.Pointer[view]
	keys *keys.Table // where each command's keys are: routing depends on it
	// configs is what clients set with CONFIG SET, for masters that join
	// later (configs.go).
	configs configs
	// own are the proxy's own keys (Options.OwnKeys), all in ownSlot:
	// left out of DBSIZE, KEYS and SCAN (ownkeys.go).
	own     [][]byte
	ownSlot int
	// slowIDs are the proxy's ids of SLOWLOG entries (slowlog.go).
	slowIDs slowIDs

	mu    sync.Mutex       // guards nodes and known
	nodes map[string]*Node // connected masters, by address
	known []string         // every address seen: seeds, masters, replicas

	// trackers are the tracking clients' connections, which follow the
	// masters (package tracking). subscribers are the pub/sub clients by
	// proxy client id, for CLIENT TRACKING REDIRECT; pubsub is what they
	// all share.
	trackers    *tracking.Trackers[*Node]
	subscribers pubsub.Registry[*Node]
	pubsub      pubsub.Options[*Node]

	refreshNow chan struct{}
	done       chan struct{}
	wg         sync.WaitGroup
}

// view is one reading of the topology.
type view struct {
	epoch   uint64           // grows with every change
	slots   [SlotCount]*Node // nil: no master reachable for the slot
	masters []*Node          // ordered by their first slot
	first   map[*Node]int    // each master's first slot
}

// connectCluster builds the topology from the seeds and connects to every
// master. It fails if some slot has no master: the proxy would start
// unable to serve part of the keyspace.
func connectCluster(ctx context.Context, opts Options) (*Cluster, error) {
	c := &Cluster{
		opts:       opts,
		log:        opts.Logger,
		nodes:      make(map[string]*Node),
		known:      slices.Clone(opts.Seeds),
		refreshNow: make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	c.pubsub = pubsub.Options[*Node]{
		Topology: c, Forward: c.forwardFor, Elsewhere: c.elsewhere,
		Registry: &c.subscribers, RetryWindow: RetryWindow, Log: c.log,
	}
	c.trackers = tracking.New(tracking.Options[*Node]{
		Masters: c.Masters, RedirectID: c.redirectID, Invalidated: c.invalidated, Log: c.log,
		Keys: func() *keys.Table { return c.keys },
	})
	c.setOwnKeys(opts.OwnKeys)
	if err := c.refresh(ctx); err != nil {
		c.Close()
		return nil, err
	}
	v := c.view.Load()
	for slot, n := range v.slots {
		if n == nil {
			end := slot
			for end+1 < SlotCount && v.slots[end+1] == nil {
				end++
			}
			c.Close()
			return nil, fmt.Errorf("slots %d-%d of the Redis Cluster have no reachable master (is the cluster created and ok? redis-cli --cluster check %s)", slot, end, opts.Seeds[0])
		}
	}
	var err error
	if c.keys, err = readKeys(ctx, v.masters[0]); err != nil {
		c.Close()
		return nil, fmt.Errorf("reading COMMAND (needed to route by slot): %v", err)
	}
	c.wg.Add(1)
	go c.refreshLoop()
	return c, nil
}

// MasterForKey returns the master of key's slot (nil if none is reachable).
func (c *Cluster) MasterForKey(key []byte) *Node { return c.MasterForSlot(keys.SlotOf(key)) }

// MasterForSlot returns the master of slot (nil if none is reachable).
func (c *Cluster) MasterForSlot(slot int) *Node { return c.view.Load().slots[slot] }

// Masters returns the masters, ordered by their first slot.
func (c *Cluster) Masters() []*Node { return c.view.Load().masters }

// Epoch numbers the current view of the slots; it grows whenever a slot
// changes master. A client whose requests were routed by an older view waits
// for their replies before sending more: a request of the new view must not
// overtake one of the old that is still being redirected.
func (c *Cluster) Epoch() uint64 { return c.view.Load().epoch }

// SlotOn returns a slot that n masters (its first), or -1.
func (c *Cluster) SlotOn(n *Node) int {
	if slot, ok := c.view.Load().first[n]; ok {
		return slot
	}
	return -1
}

// Mode is "cluster".
func (c *Cluster) Mode() string { return "cluster" }

// Keys is where each command has its keys (read at connect).
func (c *Cluster) Keys() (*keys.Table, error) { return c.keys, nil }

// Refresh asks for the topology to be read again soon; it does not wait.
func (c *Cluster) Refresh() {
	select {
	case c.refreshNow <- struct{}{}:
	default:
	}
}

// Moved records what an -MOVED reply said: slot now belongs to addr. If
// addr is a master the proxy is connected to, the view changes at once;
// either way a full refresh follows.
func (c *Cluster) Moved(slot int, addr string) {
	c.mu.Lock()
	n := c.nodes[addr]
	c.mu.Unlock()
	if n != nil {
		for {
			old := c.view.Load()
			if old.slots[slot] == n {
				break
			}
			nv := *old
			nv.slots[slot] = n
			nv.epoch = old.epoch + 1
			if c.view.CompareAndSwap(old, &nv) {
				break
			}
		}
	}
	c.Refresh()
}

// Close stops the refresher and closes every node.
func (c *Cluster) Close() {
	select {
	case <-c.done:
		return
	default:
	}
	close(c.done)
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		n.Close()
	}
	c.nodes = nil
}

func (c *Cluster) refreshLoop() {
	defer c.wg.Done()
	tick := time.NewTicker(refreshEvery)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-tick.C:
		case <-c.refreshNow:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		if err := c.refresh(ctx); err != nil {
			c.log.Warn("cannot read the Redis Cluster topology", "err", err)
		}
		cancel()
		select {
		case <-c.done:
			return
		case <-time.After(minRefreshGap):
		}
	}
}

// shard is one slot range of CLUSTER SLOTS.
type shard struct {
	start, end int
	master     string
	replicas   []string
}

// refresh reads CLUSTER SLOTS, connects to new masters and publishes a new
// view. Masters that no longer own slots are closed after retireAfter.
func (c *Cluster) refresh(ctx context.Context) error {
	shards, from, err := c.readSlots(ctx)
	if err != nil {
		return err
	}
	var nv view
	owners := make(map[string]bool)
	var firstErr error
	for _, s := range shards {
		n, err := c.node(ctx, s.master)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		owners[s.master] = true
		for slot := s.start; slot <= s.end && slot < SlotCount; slot++ {
			nv.slots[slot] = n
		}
		c.learn(append([]string{s.master}, s.replicas...)...)
	}
	// Masters in order of their first slot: stable across refreshes, so a
	// SCAN cursor (which names a master by position) stays meaningful.
	nv.first = make(map[*Node]int)
	for slot, n := range nv.slots {
		if _, seen := nv.first[n]; n != nil && !seen {
			nv.first[n] = slot
			nv.masters = append(nv.masters, n)
		}
	}
	// Publish only a change: a new view makes pipelining clients wait for
	// their requests routed by the old one (see Epoch).
	old := c.view.Load()
	if old != nil && !sameMasters(old.masters, nv.masters) {
		c.trackers.Follow(nv.masters)
	}
	if old == nil || old.slots != nv.slots {
		nv.epoch = 1
		if old != nil {
			nv.epoch = old.epoch + 1
		}
		c.view.Store(&nv)
	}
	if old == nil || !sameMasters(old.masters, nv.masters) {
		c.log.Info("Redis Cluster topology", "masters", addrs(nv.masters), "read_from", from)
	}
	c.retire(owners)
	for _, n := range nv.masters {
		n.refreshReplicas(ctx)
		n.refreshMemory(ctx)
	}
	if firstErr != nil && len(nv.masters) == 0 {
		return firstErr
	}
	return nil
}

// readSlots asks the known nodes, masters first, for CLUSTER SLOTS and
// returns the first answer.
func (c *Cluster) readSlots(ctx context.Context) ([]shard, string, error) {
	c.mu.Lock()
	var candidates []string
	if v := c.view.Load(); v != nil {
		for _, n := range v.masters {
			candidates = append(candidates, n.Addr)
		}
	}
	for _, a := range c.known {
		if !slices.Contains(candidates, a) {
			candidates = append(candidates, a)
		}
	}
	c.mu.Unlock()
	var lastErr error
	for _, addr := range candidates {
		// A hung node (stopped, or swapping) must not hold up the others.
		one, cancel := context.WithTimeout(ctx, time.Second)
		shards, err := c.slotsFrom(one, addr)
		cancel()
		if err == nil {
			return shards, addr, nil
		}
		lastErr = fmt.Errorf("CLUSTER SLOTS on %s: %w", addr, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, "", lastErr
}

func (c *Cluster) slotsFrom(ctx context.Context, addr string) ([]shard, error) {
	var client *redis.Client
	c.mu.Lock()
	if n := c.nodes[addr]; n != nil {
		client = n.Client
	}
	c.mu.Unlock()
	if client == nil {
		client = redis.NewClient(&redis.Options{
			Addr: addr, Username: c.opts.Username, Password: c.opts.Password,
			Protocol: 2, DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
			MaxRetries: -1, DisableIdentity: true, PoolSize: 1, TLSConfig: c.opts.TLS,
		})
		defer client.Close()
	}
	// CLUSTER SLOTS, sent as is: go-redis deprecates its ClusterSlots for
	// CLUSTER SHARDS, which only Redis 7.0 and later answer.
	cmd := redis.NewClusterSlotsCmd(ctx, "cluster", "slots")
	_ = client.Process(ctx, cmd)
	slots, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	if len(slots) == 0 {
		return nil, fmt.Errorf("the node owns no slots and knows no cluster (run redis-cli --cluster create)")
	}
	shards := make([]shard, 0, len(slots))
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		sh := shard{start: s.Start, end: s.End, master: nodeAddr(s.Nodes[0], addr)}
		for _, r := range s.Nodes[1:] {
			sh.replicas = append(sh.replicas, nodeAddr(r, addr))
		}
		shards = append(shards, sh)
	}
	return shards, nil
}

// nodeAddr is a node's address as CLUSTER SLOTS gives it; an empty host
// (a node that does not know its own IP) means the host we asked.
func nodeAddr(n redis.ClusterNode, askedAddr string) string {
	if strings.HasPrefix(n.Addr, ":") {
		host := askedAddr[:strings.LastIndex(askedAddr, ":")]
		return host + n.Addr
	}
	return n.Addr
}

// node returns the connected master at addr, connecting if needed.
func (c *Cluster) node(ctx context.Context, addr string) (*Node, error) {
	c.mu.Lock()
	n := c.nodes[addr]
	c.mu.Unlock()
	if n != nil {
		return n, nil
	}
	poolSize := c.opts.PoolSize
	if c.opts.Loop != nil && c.opts.LoopPoolSize > 0 {
		poolSize = c.opts.LoopPoolSize
	}
	n, err := NewNode(ctx, NodeOptions{
		Addr: addr, Username: c.opts.Username, Password: c.opts.Password,
		PoolSize: poolSize, WriterConns: c.opts.WriterConns, ReplicaTimeout: c.opts.ReplicaTimeout,
		ObserveReply: c.opts.ObserveReply, Logger: c.opts.Logger, TLS: c.opts.TLS,
		Loop: c.opts.Loop,
	})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.nodes == nil { // closed meanwhile
		c.mu.Unlock()
		n.Close()
		return nil, ErrUnavailable
	}
	if other := c.nodes[addr]; other != nil {
		c.mu.Unlock()
		n.Close()
		return other, nil
	}
	c.nodes[addr] = n
	c.mu.Unlock()
	// Before it is in a view (refresh publishes it after this returns): no
	// client's request reaches it first.
	c.applyConfigs(ctx, n)
	return n, nil
}

// retire closes, after a grace period, the nodes that own no slot.
func (c *Cluster) retire(owners map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, n := range c.nodes {
		if owners[addr] {
			continue
		}
		delete(c.nodes, addr)
		c.log.Info("Redis node no longer a master; closing its connections soon", "addr", addr)
		time.AfterFunc(retireAfter, n.Close)
	}
}

// learn remembers addresses to ask for the topology later.
func (c *Cluster) learn(addrs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range addrs {
		if !slices.Contains(c.known, a) {
			c.known = append(c.known, a)
		}
	}
}

func sameMasters(a, b []*Node) bool {
	return slices.Equal(addrs(a), addrs(b))
}

func addrs(nodes []*Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Addr
	}
	return out
}
