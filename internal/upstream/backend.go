package upstream

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/keys"
)

// Backend is the Redis deployment fenceproxy fronts: a standalone master
// (standalone.go) or a Redis Cluster (topology.go). Clients' requests
// reach it through its Forwarder; the proxy's own requests (lock scripts,
// the token authority's heartbeat, INFO) go to the master they name.
type Backend interface {
	Forwarder
	// MasterForKey returns the master that owns key; nil if, in a Redis
	// Cluster, no master of its slot is reachable right now.
	MasterForKey(key []byte) *Node
	// Masters returns every master (in a cluster, ordered by first slot).
	Masters() []*Node
	// Mode is "standalone" or "cluster", for the operator (INFO, the log).
	Mode() string
	// Keys is where each of the backend's commands has its keys, read from
	// its COMMAND at Connect; err says why it could not be read (a Redis
	// Cluster, which routes by it, does not start without it).
	Keys() (table *keys.Table, err error)
	// Refusal is the error every request gets now instead of being sent
	// because the backend is refused (a standalone master found not to be
	// the master: see Node); nil while it is served, and always in a Redis
	// Cluster, whose failed masters' slots move to others.
	Refusal() error
	// RetryAfterRefresh reports whether a request the proxy sent itself
	// (a lock script) that got reply or err did not run and may go again
	// once the topology is read again (Refresh): in a Redis Cluster a MOVED,
	// ASK, TRYAGAIN or CLUSTERDOWN reply or an unreachable master; never for
	// a standalone master.
	RetryAfterRefresh(reply []byte, err error) bool
	// Refresh asks for the topology (for a standalone master: its role,
	// and which master Sentinel names) to be read again soon.
	Refresh()
	Close()
}

// Options describe how to reach the backend.
type Options struct {
	Seeds    []string
	Username string
	Password string
	PoolSize int
	// WriterConns is how many connections of each kind each master keeps
	// for the lock writer (Node.ServeLockWrites); ReplicaTimeout is the
	// longest WAIT a lock write may send.
	WriterConns    int
	ReplicaTimeout time.Duration
	// ObserveReply, if set, gets each forwarded request's round-trip time.
	ObserveReply func(time.Duration)
	Logger       *slog.Logger
	// TLS, if set, is used for every connection to every node: the shared
	// and pinned connections, pub/sub tunnels, and the go-redis clients
	// that read INFO and CLUSTER SLOTS.
	TLS *tls.Config
	// Sentinel, if set, names the backend instead of Seeds: the master
	// these Redis Sentinels name, followed through failovers.
	Sentinel *SentinelOptions
	// OwnKeys are keys the proxy keeps in Redis itself (the token
	// authority's): in front of a Redis Cluster, where they share database
	// 0 with the clients' keys, DBSIZE, KEYS and SCAN leave them out
	// (ownkeys.go).
	OwnKeys []string
	// OnMasterChange, if set, is called (without waiting for it) when a
	// standalone backend starts serving from a new master after a failover,
	// or from its master again after refusing it: for what the proxy keeps
	// on the master (the token authority's heartbeat) to be written there
	// at once.
	OnMasterChange func()
	// Loop, if set, serves the masters' shared connections (the pools
	// clients' requests are forwarded on: a standalone master's, or each
	// Redis Cluster master's) from that event loop (backend.Options.Loop),
	// LoopPoolSize of them (0: PoolSize).
	Loop         *backend.Loop
	LoopPoolSize int
}

// Connect reaches the backend named by opts.Seeds (or, with opts.Sentinel,
// the master those Sentinels name) and works out what it is. It fails, with
// a message meant for the operator, if the backend cannot be reached or is
// not something fenceproxy can front.
func Connect(ctx context.Context, opts Options) (Backend, error) {
	if opts.Sentinel != nil {
		return connectSentinel(ctx, opts)
	}
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
	return connectStandalone(ctx, opts, opts.Seeds[0])
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

// readKeys reads where each command has its keys from n's COMMAND.
func readKeys(ctx context.Context, n *Node) (*keys.Table, error) {
	raw, err := n.Raw(ctx, "COMMAND")
	if err != nil {
		return nil, err
	}
	return keys.Load(raw)
}

// InfoField returns one field of an INFO reply, "" if absent.
func InfoField(info, field string) string {
	return parseInfo(info)[field]
}
