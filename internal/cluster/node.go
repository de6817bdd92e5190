package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
)

// Node is one Redis master.
type Node struct {
	Addr string
	// Pool forwards clients' requests byte for byte; Pool3 does the same for
	// clients that speak RESP3, over connections that do too.
	Pool  *backend.Pool
	Pool3 *backend.Pool
	// Client runs the proxy's own commands (INFO, lock reads).
	Client *redis.Client

	minReplicas    int
	replicaTimeout time.Duration
	logger         *slog.Logger

	writes   chan *Write // lock writes that wait for replicas
	unacked  chan *Write // writes that do not (releases, undos)
	lockConn []*backend.Conn
	done     chan struct{}
	wg       sync.WaitGroup

	memory atomic.Pointer[MemoryPolicy] // see memory.go

	mu       sync.Mutex
	replicas []string
	idle     [2][]*backend.Conn // pinned connections to reuse, RESP2 and RESP3
	pinOpts  backend.Options
}

// maxIdlePinned bounds the connections kept for reuse by Pinned.
const maxIdlePinned = 16

// Pinned returns a connection for one client alone (MULTI, WATCH, blocking
// commands), speaking RESP3 if resp3: an idle clean one if any, else a new
// one. It never reconnects by itself: a client's transaction must not carry
// on over a fresh connection.
func (n *Node) Pinned(resp3 bool) (*backend.Conn, error) {
	i := protoIndex(resp3)
	n.mu.Lock()
	for len(n.idle[i]) > 0 {
		c := n.idle[i][len(n.idle[i])-1]
		n.idle[i] = n.idle[i][:len(n.idle[i])-1]
		if c.Up() {
			n.mu.Unlock()
			return c, nil
		}
		c.Close()
	}
	n.mu.Unlock()
	opts := n.pinOpts
	opts.RESP3 = resp3
	return backend.Dial(opts)
}

// Unpin gives back a pinned connection. Only a clean one (no MULTI, WATCH
// or blocked command pending on it) is kept for reuse.
func (n *Node) Unpin(c *backend.Conn, resp3, clean bool) {
	i := protoIndex(resp3)
	if clean && c.Up() {
		n.mu.Lock()
		if len(n.idle[i]) < maxIdlePinned {
			n.idle[i] = append(n.idle[i], c)
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
	}
	c.Close()
}

// Tunnel returns a raw connection for a client that will get a stream from
// Redis (pub/sub), speaking RESP3 if resp3.
func (n *Node) Tunnel(resp3 bool) (net.Conn, error) {
	opts := n.pinOpts
	opts.RESP3 = resp3
	return backend.DialRaw(opts)
}

// CheckAuth asks Redis whether user and password are good, on a connection
// of their own (the shared ones keep the proxy's credentials). The error is
// Redis's own answer (a backend.RedisError) when it refuses them.
func (n *Node) CheckAuth(user, password string) error {
	opts := n.pinOpts
	opts.Username, opts.Password = user, password
	nc, err := backend.DialRaw(opts)
	if err != nil {
		return err
	}
	return nc.Close()
}

func protoIndex(resp3 bool) int {
	if resp3 {
		return 1
	}
	return 0
}

// NodeOptions configure a Node.
type NodeOptions struct {
	Addr           string
	Username       string
	Password       string
	PoolSize       int // passthrough connections
	WriterConns    int // connections for lock writes, of each kind (with and without WAIT)
	MinReplicas    int
	ReplicaTimeout time.Duration
	ObserveReply   func(time.Duration)
	Logger         *slog.Logger
	TLS            *tls.Config // nil: plaintext
}

// NewNode connects to the master at opts.Addr.
func NewNode(ctx context.Context, opts NodeOptions) (*Node, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	client := redis.NewClient(&redis.Options{
		Addr:         opts.Addr,
		Username:     opts.Username,
		Password:     opts.Password,
		Protocol:     2,
		PoolSize:     16,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  opts.ReplicaTimeout + 3*time.Second,
		WriteTimeout: 3 * time.Second,
		// The proxy's writes are not idempotent in general: never re-send one.
		MaxRetries:            -1,
		DisableIdentity:       true,
		ContextTimeoutEnabled: true,
		TLSConfig:             opts.TLS,
	})
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w%s", opts.Addr, err, tlsHint(err, opts.TLS != nil))
	}
	pool, err := backend.NewPool(backend.Options{
		Addr: opts.Addr, Username: opts.Username, Password: opts.Password,
		Logger: opts.Logger, ObserveReply: opts.ObserveReply, TLS: opts.TLS,
	}, opts.PoolSize)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", opts.Addr, err)
	}
	pool3, err := backend.NewPool(backend.Options{
		Addr: opts.Addr, Username: opts.Username, Password: opts.Password,
		Logger: opts.Logger, ObserveReply: opts.ObserveReply, RESP3: true, TLS: opts.TLS,
	}, max(opts.PoolSize/2, 1))
	if err != nil {
		pool.Close()
		client.Close()
		return nil, fmt.Errorf("cannot speak RESP3 (HELLO 3) with Redis at %s: %w", opts.Addr, err)
	}
	n := &Node{
		pinOpts: backend.Options{
			Addr: opts.Addr, Username: opts.Username, Password: opts.Password,
			Logger: opts.Logger, ObserveReply: opts.ObserveReply, NoReconnect: true, TLS: opts.TLS,
			// One client's connection: small, since thousands may block at once.
			ReadBuffer: 4 << 10,
		},
		Addr:           opts.Addr,
		Pool:           pool,
		Pool3:          pool3,
		Client:         client,
		minReplicas:    opts.MinReplicas,
		replicaTimeout: opts.ReplicaTimeout,
		logger:         opts.Logger,
		writes:         make(chan *Write, 4096),
		unacked:        make(chan *Write, 4096),
		done:           make(chan struct{}),
	}
	lockOpts := backend.Options{Addr: opts.Addr, Username: opts.Username, Password: opts.Password, Logger: opts.Logger, NoYield: true, TLS: opts.TLS,
		// A lock script or WAIT slower than this means Redis is stopped or
		// hung: fail the writes (outcome unknown) rather than hang clients.
		ReplyTimeout: opts.ReplicaTimeout + 2*time.Second}
	for i := range 2 * max(opts.WriterConns, 1) {
		conn, err := backend.Dial(lockOpts)
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("cannot reach Redis at %s: %w", opts.Addr, err)
		}
		n.lockConn = append(n.lockConn, conn)
		queue := n.writes
		if i%2 == 1 {
			queue = n.unacked
		}
		n.wg.Add(1)
		go n.writeLoop(queue, conn)
	}
	n.refreshMemory(ctx) // before the node is published: no lock write meets an unread policy
	return n, nil
}

// Replicas returns the replicas last seen connected to this master.
func (n *Node) Replicas() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.replicas...)
}

// refreshReplicas reads INFO replication and records the connected replicas.
func (n *Node) refreshReplicas(ctx context.Context) (role string, err error) {
	info, err := n.Client.Info(ctx, "replication").Result()
	if err != nil {
		return "", err
	}
	fields := parseInfo(info)
	var replicas []string
	for k, v := range fields {
		if strings.HasPrefix(k, "slave") && strings.Contains(v, "state=online") {
			var ip, port string
			for _, kv := range strings.Split(v, ",") {
				if s, ok := strings.CutPrefix(kv, "ip="); ok {
					ip = s
				}
				if s, ok := strings.CutPrefix(kv, "port="); ok {
					port = s
				}
			}
			replicas = append(replicas, ip+":"+port)
		}
	}
	n.mu.Lock()
	n.replicas = replicas
	n.mu.Unlock()
	return fields["role"], nil
}

// Close stops the node's writers and closes its connections.
func (n *Node) Close() {
	close(n.done)
	n.wg.Wait()
	for _, c := range n.lockConn {
		c.Close()
	}
	// Writes still queued are answered through a closed connection: each
	// gets the "unreachable" reply at once.
	var scratch []byte
	for _, queue := range []chan *Write{n.writes, n.unacked} {
		if len(n.lockConn) == 0 {
			break
		}
	drain:
		for {
			select {
			case w := <-queue:
				n.sendBatch(n.lockConn[0], []*Write{w}, &scratch)
			default:
				break drain
			}
		}
	}
	n.mu.Lock()
	for _, idle := range n.idle {
		for _, c := range idle {
			c.Close()
		}
	}
	n.idle = [2][]*backend.Conn{}
	n.mu.Unlock()
	n.Pool.Close()
	n.Pool3.Close()
	n.Client.Close()
}

func parseInfo(info string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m
}

// Raw runs one request on a connection of its own (not counted as client
// traffic) and returns the reply's bytes as Redis wrote them: for the
// proxy's own reads, such as COMMAND.
func (n *Node) Raw(ctx context.Context, args ...string) ([]byte, error) {
	req := make([][]byte, len(args))
	for i, a := range args {
		req[i] = []byte(a)
	}
	opts := n.pinOpts
	opts.ObserveReply, opts.ReadBuffer = nil, 0
	conn, err := backend.Dial(opts)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	done := make(chan struct{})
	p := protocol.NewPendingFunc(func() { close(done) })
	conn.Do(req, p)
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if len(p.Buf) > 0 && p.Buf[0] == '-' {
		return nil, backend.RedisError(strings.TrimSpace(string(p.Buf[1:])))
	}
	return p.Buf, nil
}

// Up reports whether the node's passthrough connections are established.
func (n *Node) Up() bool { return n.Pool.Up() }
