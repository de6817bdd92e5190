package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Backend is the Redis deployment fenceproxy fronts.
type Backend interface {
	// MasterForKey returns the master that owns key; nil if, in a Redis
	// Cluster, no master of its slot is reachable right now.
	MasterForKey(key []byte) *Node
	// Masters returns every master (in a cluster, ordered by first slot).
	Masters() []*Node
	// Mode is "standalone" or "cluster".
	Mode() string
	// Refresh asks for the topology to be read again soon (a no-op for a
	// standalone master).
	Refresh()
	Close()
}

// Options describe how to reach the backend and what a lock write needs.
type Options struct {
	Seeds          []string
	Username       string
	Password       string
	PoolSize       int
	WriterConns    int
	MinReplicas    int
	ReplicaTimeout time.Duration
	// ObserveReply, if set, gets each forwarded request's round-trip time.
	ObserveReply func(time.Duration)
	Logger       *slog.Logger
	// TLS, if set, is used for every connection to every node: the shared
	// and pinned connections, pub/sub tunnels, and the go-redis clients
	// that read INFO and CLUSTER SLOTS.
	TLS *tls.Config
}

// Connect reaches the backend named by opts.Seeds and works out what it is.
// It fails, with a message meant for the operator, if the backend cannot be
// reached or is not something fenceproxy can front.
func Connect(ctx context.Context, opts Options) (Backend, error) {
	if len(opts.Seeds) == 0 {
		return nil, fmt.Errorf("--backend names no address")
	}
	mode, err := detect(ctx, opts)
	if err != nil {
		return nil, err
	}
	if mode == "cluster" {
		return connectCluster(ctx, opts)
	}
	if len(opts.Seeds) != 1 {
		return nil, fmt.Errorf("--backend names %d addresses, but %s is not a Redis Cluster node: a standalone master is given as one address", len(opts.Seeds), opts.Seeds[0])
	}
	addr := opts.Seeds[0]
	n, err := NewNode(ctx, NodeOptions{
		Addr: addr, Username: opts.Username, Password: opts.Password,
		PoolSize: opts.PoolSize, WriterConns: opts.WriterConns,
		MinReplicas: opts.MinReplicas, ReplicaTimeout: opts.ReplicaTimeout,
		ObserveReply: opts.ObserveReply, Logger: opts.Logger, TLS: opts.TLS,
	})
	if err != nil {
		return nil, err
	}
	role, err := n.refreshReplicas(ctx)
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("INFO replication on %s failed: %w", addr, err)
	}
	if role != "master" {
		n.Close()
		return nil, fmt.Errorf("%s is a replica, not a master: point --backend at the master", addr)
	}
	s := &standalone{master: n, done: make(chan struct{})}
	go s.watchReplicas(opts.Logger)
	return s, nil
}

// detect asks the seeds, in order, whether they are Redis Cluster nodes:
// the first that answers decides.
func detect(ctx context.Context, opts Options) (string, error) {
	var lastErr error
	for _, addr := range opts.Seeds {
		client := redis.NewClient(&redis.Options{
			Addr: addr, Username: opts.Username, Password: opts.Password,
			Protocol: 2, DialTimeout: 2 * time.Second, MaxRetries: -1,
			DisableIdentity: true, PoolSize: 1, ContextTimeoutEnabled: true,
			TLSConfig: opts.TLS,
		})
		info, err := client.Info(ctx, "cluster").Result()
		client.Close()
		if err != nil {
			lastErr = fmt.Errorf("cannot reach Redis at %s: %w%s", addr, err, tlsHint(err, opts.TLS != nil))
			continue
		}
		if parseInfo(info)["cluster_enabled"] == "1" {
			return "cluster", nil
		}
		return "standalone", nil
	}
	return "", lastErr
}

// standalone is one master and its replicas.
type standalone struct {
	master *Node
	done   chan struct{}
}

func (s *standalone) MasterForKey([]byte) *Node { return s.master }
func (s *standalone) Masters() []*Node          { return []*Node{s.master} }
func (s *standalone) Mode() string              { return "standalone" }
func (s *standalone) Refresh()                  {}

func (s *standalone) Close() {
	close(s.done)
	s.master.Close()
}

// watchReplicas keeps the replica list and the memory policy fresh for
// INFO, the log and the lock path.
func (s *standalone) watchReplicas(logger *slog.Logger) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	last := strings.Join(s.master.Replicas(), ",")
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := s.master.refreshReplicas(ctx)
		s.master.refreshMemory(ctx)
		cancel()
		if err != nil {
			continue
		}
		if now := strings.Join(s.master.Replicas(), ","); now != last {
			logger.Info("replicas changed", "master", s.master.Addr, "replicas", now)
			last = now
		}
	}
}

// InfoField returns one field of an INFO reply, "" if absent.
func InfoField(info, field string) string {
	return parseInfo(info)[field]
}
