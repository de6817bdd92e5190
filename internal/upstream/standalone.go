package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// The replies a standalone master's gate gives (see Node) while it is not
// the master. Without Sentinel the operator has to act, and READONLY is what
// Redis itself answers a write to a replica (clients that follow failovers
// reconnect on it); with Sentinel the proxy follows the failover by itself
// within seconds, so clients are told to retry. Neither names an address.
const (
	replyReplica = "READONLY fenceproxy: the backend Redis reports itself a replica, not a master; " +
		"fenceproxy sends it nothing until it is a master again (point --backend at the master, or use --sentinel)"
	replyFailover = "TRYAGAIN fenceproxy: the Redis master is changing (Sentinel failover); retry shortly"
)

const (
	// roleCheckEvery is how often the master's role, and with Sentinel the
	// master Sentinel names, is read; a connection that finds the role
	// changed and a +switch-master announcement make it happen at once.
	roleCheckEvery = time.Second
	// retireGrace is how long a master that Sentinel no longer names keeps
	// its shared connections, so replies already on their way arrive. Its
	// gate closes at once: nothing more is sent to it.
	retireGrace = 2 * time.Second
)

// standalone is one master and its replicas: the master given by --backend,
// or the one Redis Sentinel names, swapped for the new one after a failover.
//
// The master is a guarded Node (see Node): written to only while it
// reports itself a master and, with Sentinel, while Sentinel names it.
// Lookups read it through an atomic pointer: the request path takes no lock.
type standalone struct {
	opts     Options
	log      *slog.Logger
	sentinel *sentinels // nil without --sentinel
	master   atomic.Pointer[Node]
	check    chan struct{} // read the role (and Sentinel) now
	done     chan struct{}
	wg       sync.WaitGroup

	// keys is where each command has its keys, read from the first
	// master's COMMAND (keysErr: why it could not be).
	keys    *keys.Table
	keysErr error

	mu      sync.Mutex // guards retired
	retired []*Node    // former masters, closed after retireGrace or by Close
}

func newStandalone(opts Options) *standalone {
	return &standalone{opts: opts, log: opts.Logger, check: make(chan struct{}, 1), done: make(chan struct{})}
}

// connectStandalone fronts the master at addr; it refuses to start on a
// replica.
func connectStandalone(ctx context.Context, opts Options, addr string) (*standalone, error) {
	s := newStandalone(opts)
	n, err := s.connectMaster(ctx, addr)
	if errors.Is(err, ErrNotMaster) {
		return nil, fmt.Errorf("%s is a replica, not a master: point --backend at the master", addr)
	}
	if err != nil {
		return nil, err
	}
	s.start(ctx, n)
	return s, nil
}

// connectSentinel fronts the master that opts.Sentinel's Sentinels name.
func connectSentinel(ctx context.Context, opts Options) (*standalone, error) {
	s := newStandalone(opts)
	s.sentinel = newSentinels(*opts.Sentinel)
	addr, _, err := s.sentinel.master(ctx)
	if err != nil {
		s.sentinel.close()
		return nil, err
	}
	n, err := s.connectMaster(ctx, addr)
	if errors.Is(err, ErrNotMaster) {
		err = fmt.Errorf("the Sentinels name %s as the master of %q, but it is not the master now (a failover under way? retry shortly): %v",
			addr, opts.Sentinel.MasterName, err)
	}
	if err != nil {
		s.sentinel.close()
		return nil, err
	}
	s.sentinel.watch(s.Refresh, s.log)
	s.start(ctx, n)
	return s, nil
}

// connectMaster connects to addr as the master: every connection asks
// ROLE (and Sentinel) first, and INFO must say master too.
func (s *standalone) connectMaster(ctx context.Context, addr string) (*Node, error) {
	o := s.opts
	if o.Loop != nil && o.LoopPoolSize > 0 {
		o.PoolSize = o.LoopPoolSize
	}
	nodeOpts := NodeOptions{
		Addr: addr, Username: o.Username, Password: o.Password,
		PoolSize: o.PoolSize, WriterConns: o.WriterConns, ReplicaTimeout: o.ReplicaTimeout,
		ObserveReply: o.ObserveReply, Logger: o.Logger, TLS: o.TLS,
		NotMaster: replyReplica, Changed: s.Refresh, Loop: o.Loop,
	}
	if s.sentinel != nil {
		nodeOpts.NotMaster, nodeOpts.Confirm = replyFailover, s.sentinel.confirm
	}
	n, err := NewNode(ctx, nodeOpts)
	if err != nil {
		return nil, err
	}
	role, err := n.Role(ctx)
	if err == nil && role != "master" {
		err = fmt.Errorf("%w: %s reports itself a %s (INFO replication)", ErrNotMaster, addr, role)
	}
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("INFO replication on %s: %w", addr, err)
	}
	return n, nil
}

func (s *standalone) start(ctx context.Context, n *Node) {
	s.keys, s.keysErr = readKeys(ctx, n)
	s.master.Store(n)
	s.wg.Add(1)
	go s.watch()
}

func (s *standalone) MasterForKey([]byte) *Node            { return s.master.Load() }
func (s *standalone) Masters() []*Node                     { return []*Node{s.master.Load()} }
func (s *standalone) Mode() string                         { return "standalone" }
func (s *standalone) Keys() (*keys.Table, error)           { return s.keys, s.keysErr }
func (s *standalone) Refusal() error                       { return s.master.Load().Refusal() }
func (s *standalone) RetryAfterRefresh([]byte, error) bool { return false }

// Forward sends the request on the client's connection of the master's
// pool, so its requests reach Redis in the order it sent them.
func (s *standalone) Forward(cl *Client, args [][]byte, p *resp.Reply) {
	n := s.master.Load()
	if cl.DB == 0 && cl.User == "" {
		n.pool(cl.RESP3).Conn(cl.ID).Do(args, p)
		return
	}
	pool, err := n.dbs.pool(cl.RESP3, cl.DB, cl.Login())
	if err != nil {
		p.Err = n.Unreachable()
		p.Done()
		return
	}
	pool.Conn(cl.ID).Do(args, p)
}

// Pin returns a connection of the client's own to the master.
func (s *standalone) Pin(cl *Client, _ [][]byte) (*Pinned, error) {
	return pin(cl, s.master.Load(), false)
}

// PinSpare returns the master's idle pinned connection as the client's
// own, nil if it has none (Forwarder.PinSpare).
func (s *standalone) PinSpare(cl *Client, _ [][]byte) *Pinned {
	return pinSpare(cl, s.master.Load(), false)
}

// RoutesByKey is false: one master holds every key.
func (s *standalone) RoutesByKey() bool { return false }

// ClusterView answers nothing: a standalone Redis answers CLUSTER itself
// (that it has no cluster support).
func (s *standalone) ClusterView(*Client, [][]byte, string, *resp.Reply) bool { return false }

// WaitReplicas runs WAIT on the master after a write of the proxy's own.
func (s *standalone) WaitReplicas(cl *Client, args [][]byte, offsetKey string, p *resp.Reply) {
	waitOn(cl, []*Node{s.master.Load()}, func(int) string { return offsetKey }, args, p)
}

// Control sends the request on the master's control connection.
func (s *standalone) Control(cl *Client, args [][]byte, p *resp.Reply) {
	s.master.Load().control.Do(args, p)
}

// Subscribe returns a connection of the client's own to the master,
// relayed as it is.
func (s *standalone) Subscribe(cl *Client) (Tunnel, error) {
	master := s.master.Load()
	redis, err := master.tunnelFor(cl)
	if err != nil {
		return nil, master.Unreachable()
	}
	return rawTunnel{redis}, nil
}

// Refresh asks for the role (and Sentinel) to be read now; it does not wait.
func (s *standalone) Refresh() {
	select {
	case s.check <- struct{}{}:
	default:
	}
}

func (s *standalone) Close() {
	select {
	case <-s.done:
		return
	default:
	}
	close(s.done)
	s.wg.Wait()
	if s.sentinel != nil {
		s.sentinel.close()
	}
	s.master.Load().Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.retired {
		n.Close()
	}
}

// watch checks the master every roleCheckEvery and whenever asked, and
// keeps the replica list and the memory policy fresh for INFO, the log and
// the lock path.
func (s *standalone) watch() {
	defer s.wg.Done()
	t := time.NewTicker(roleCheckEvery)
	defer t.Stop()
	lastReplicas := strings.Join(s.master.Load().Replicas(), ",")
	var lastErr string
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		case <-s.check:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := s.checkMaster(ctx)
		s.master.Load().refreshMemory(ctx)
		cancel()
		// One line per change of trouble, not one a second.
		if msg := errText(err); msg != lastErr {
			if err != nil {
				s.log.Warn("cannot confirm the Redis master", "err", err)
			}
			lastErr = msg
		}
		n := s.master.Load()
		if now := strings.Join(n.Replicas(), ","); now != lastReplicas {
			s.log.Info("replicas changed", "master", n.Addr, "replicas", now)
			lastReplicas = now
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// checkMaster reads which master Sentinel names (with Sentinel) and the
// current master's role: it follows a failover to the master Sentinel
// names, closes the gate of a master that is no longer one, and opens it
// again once it is.
func (s *standalone) checkMaster(ctx context.Context) error {
	n := s.master.Load()
	usable := true
	var sentinelErr error
	if s.sentinel != nil {
		var addr string
		addr, usable, sentinelErr = s.sentinel.master(ctx)
		if sentinelErr == nil && addr != n.Addr {
			return s.follow(ctx, n, addr)
		}
	}
	role, err := n.Role(ctx)
	switch {
	case err != nil:
		// Unreachable: its connections say so themselves, and a
		// reconnection asks ROLE before it is used.
		return errors.Join(sentinelErr, fmt.Errorf("INFO replication on %s: %w", n.Addr, err))
	case role != "master":
		if n.Refusal() == nil {
			s.log.Warn("the Redis master reports itself a replica: fenceproxy sends it nothing (no writes, no lock commands) until it is a master again",
				"addr", n.Addr, "role", role, "sentinel", s.sentinel != nil)
			n.Refuse("")
		}
	case n.Refusal() != nil && usable && sentinelErr == nil:
		s.log.Info("the Redis master is a master again; serving", "addr", n.Addr)
		n.Allow()
		s.masterChanged()
	}
	return sentinelErr
}

// follow makes the master at addr, which Sentinel now names, the backend
// in old's place. Nothing more is sent to old from the start; if addr
// cannot be used yet, the next check tries again.
func (s *standalone) follow(ctx context.Context, old *Node, addr string) error {
	if old.Refusal() == nil {
		s.log.Warn("Sentinel names a new master; nothing more is sent to the old one", "old", old.Addr, "new", addr,
			"master_name", s.opts.Sentinel.MasterName)
		old.Refuse("")
	}
	n, err := s.connectMaster(ctx, addr)
	if err != nil {
		return fmt.Errorf("the master Sentinel names: %w", err)
	}
	s.master.Store(n)
	s.log.Info("following the Sentinel failover: serving from the new master", "master", n.Addr, "old", old.Addr,
		"replicas", strings.Join(n.Replicas(), ","))
	s.retire(old)
	s.masterChanged()
	return nil
}

func (s *standalone) masterChanged() {
	if s.opts.OnMasterChange != nil {
		s.opts.OnMasterChange()
	}
}

// retire closes old after retireGrace (or at Close, if sooner).
func (s *standalone) retire(old *Node) {
	s.mu.Lock()
	s.retired = append(s.retired, old)
	s.mu.Unlock()
	time.AfterFunc(retireGrace, func() {
		old.Close()
		s.mu.Lock()
		s.retired = slices.DeleteFunc(s.retired, func(n *Node) bool { return n == old })
		s.mu.Unlock()
	})
}
