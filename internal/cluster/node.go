package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/backend"
)

// ErrOutcomeUnknown means the connection broke while a write was in flight:
// it may or may not have been applied, and its acknowledgements are unknown.
var ErrOutcomeUnknown = errors.New("cluster: connection to Redis lost; write outcome unknown")

// maxWriteBatch bounds how many lock writes share one WAIT.
const maxWriteBatch = 256

// ScriptCall is one invocation of a Lua script.
type ScriptCall struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// WriteResult is what one replicated write produced.
type WriteResult struct {
	Reply any   // the script's reply; nil for a null reply
	Err   error // the script's own error, or ErrOutcomeUnknown
	Acked int   // replicas that acknowledged every write up to this one (WAIT's reply)
}

type writeOp struct {
	call     ScriptCall
	wantAcks bool
	res      WriteResult
	done     chan struct{}
}

// Node is one Redis master.
type Node struct {
	Addr string
	// Pool forwards clients' requests byte for byte.
	Pool *backend.Pool
	// Client runs the proxy's own commands (INFO, lock reads).
	Client *redis.Client

	minReplicas    int
	replicaTimeout time.Duration
	logger         *slog.Logger

	writes chan *writeOp
	done   chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	replicas []string
}

// NodeOptions configure a Node.
type NodeOptions struct {
	Addr           string
	Username       string
	Password       string
	PoolSize       int // passthrough connections
	WriterConns    int // connections running batched lock writes
	MinReplicas    int
	ReplicaTimeout time.Duration
	ObserveReply   func(time.Duration)
	Logger         *slog.Logger
}

// NewNode connects to the master at opts.Addr.
func NewNode(ctx context.Context, opts NodeOptions) (*Node, error) {
	client := redis.NewClient(&redis.Options{
		Addr:         opts.Addr,
		Username:     opts.Username,
		Password:     opts.Password,
		Protocol:     2,
		PoolSize:     opts.WriterConns + 4,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  opts.ReplicaTimeout + 3*time.Second,
		WriteTimeout: 3 * time.Second,
		// The proxy's writes are not idempotent in general: never re-send one.
		MaxRetries:            -1,
		DisableIdentity:       true,
		ContextTimeoutEnabled: true,
	})
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", opts.Addr, err)
	}
	pool, err := backend.NewPool(backend.Options{
		Addr: opts.Addr, Username: opts.Username, Password: opts.Password,
		Logger: opts.Logger, ObserveReply: opts.ObserveReply,
	}, opts.PoolSize)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", opts.Addr, err)
	}
	n := &Node{
		Addr:           opts.Addr,
		Pool:           pool,
		Client:         client,
		minReplicas:    opts.MinReplicas,
		replicaTimeout: opts.ReplicaTimeout,
		logger:         opts.Logger,
		writes:         make(chan *writeOp, 4096),
		done:           make(chan struct{}),
	}
	for range max(opts.WriterConns, 1) {
		n.wg.Add(1)
		go n.writeLoop()
	}
	return n, nil
}

// Write runs call on the node. If wantAcks, it returns only after WAIT has
// reported how many replicas acknowledged it (compare Acked with the minimum
// you need). Concurrent writes are batched: one pipeline, one WAIT.
func (n *Node) Write(ctx context.Context, call ScriptCall, wantAcks bool) WriteResult {
	op := &writeOp{call: call, wantAcks: wantAcks, done: make(chan struct{})}
	select {
	case n.writes <- op:
	case <-n.done:
		return WriteResult{Err: errors.New("cluster: node closed")}
	case <-ctx.Done():
		return WriteResult{Err: ctx.Err()}
	}
	<-op.done // once queued, a write always completes: it may be running
	return op.res
}

// writeLoop owns one pinned connection and runs batches on it.
func (n *Node) writeLoop() {
	defer n.wg.Done()
	conn := n.Client.Conn()
	defer conn.Close()
	batch := make([]*writeOp, 0, maxWriteBatch)
	for {
		select {
		case op := <-n.writes:
			batch = append(batch, op)
		case <-n.done:
			return
		}
	gather:
		for len(batch) < maxWriteBatch {
			select {
			case op := <-n.writes:
				batch = append(batch, op)
			default:
				break gather
			}
		}
		n.runBatch(conn, batch)
		for i, op := range batch {
			close(op.done)
			batch[i] = nil
		}
		batch = batch[:0]
	}
}

// runBatch sends every script of the batch and then one WAIT, on one
// connection, so WAIT covers them all. Scripts go by EVALSHA; any that Redis
// does not know yet (NOSCRIPT: it did not run) are sent again in full.
func (n *Node) runBatch(conn *redis.Conn, batch []*writeOp) {
	ctx, cancel := context.WithTimeout(context.Background(), n.replicaTimeout+5*time.Second)
	defer cancel()
	todo := batch
	for attempt := 0; len(todo) > 0 && attempt < 2; attempt++ {
		wantAcks := false
		for _, op := range todo {
			wantAcks = wantAcks || op.wantAcks
		}
		wait := wantAcks && n.minReplicas > 0
		cmds, _ := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, op := range todo {
				if attempt == 0 {
					op.call.Script.EvalSha(ctx, p, op.call.Keys, op.call.Args...)
				} else {
					op.call.Script.Eval(ctx, p, op.call.Keys, op.call.Args...)
				}
			}
			if wait {
				p.Do(ctx, "WAIT", n.minReplicas, max(n.replicaTimeout.Milliseconds(), 1))
			}
			return nil
		})
		acked := 0
		if wait {
			acked64, err := cmds[len(cmds)-1].(*redis.Cmd).Int64()
			if err != nil {
				acked = -1
			} else {
				acked = int(acked64)
			}
		}
		var again []*writeOp
		for i, op := range todo {
			cmd := cmds[i].(*redis.Cmd)
			reply, err := cmd.Result()
			switch {
			case err == redis.Nil:
				err = nil
			case err != nil && attempt == 0 && strings.HasPrefix(err.Error(), "NOSCRIPT"):
				again = append(again, op)
				continue
			case err != nil && !isRedisError(err):
				n.logger.Warn("lock write failed on the connection", "addr", n.Addr, "err", err)
				err = ErrOutcomeUnknown
			}
			op.res = WriteResult{Reply: reply, Err: err}
			if op.res.Err == nil && wait {
				if acked < 0 {
					op.res.Err = ErrOutcomeUnknown
				}
				op.res.Acked = acked
			}
		}
		// A later round's WAIT also covers the writes of this one.
		if len(again) > 0 {
			todo = again
			continue
		}
		break
	}
}

func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
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
	n.Pool.Close()
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

// Up reports whether the node's passthrough connections are established.
func (n *Node) Up() bool { return n.Pool.Up() }
