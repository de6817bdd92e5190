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

// Write is one replicated write in flight: its script's reply (Reply) and
// the replicas' acknowledgements of it (Acks).
type Write struct {
	call     ScriptCall
	wantAcks bool

	reply   any
	err     error
	replied chan struct{}

	acked    int
	ackErr   error
	ackified chan struct{}
}

// Reply waits for the script's reply: nil for a null reply; the error is the
// script's own (a redis.Error) or ErrOutcomeUnknown.
func (w *Write) Reply() (any, error) {
	<-w.replied
	return w.reply, w.err
}

// Acks waits for WAIT: how many replicas acknowledged every write up to this
// one. An error means the count is unknown (treat it as a shortfall whose
// write may or may not stand).
func (w *Write) Acks() (int, error) {
	<-w.ackified
	return w.acked, w.ackErr
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

	writes  chan *Write // lock writes that wait for replicas
	unacked chan *Write // writes that do not (releases, undos)
	done    chan struct{}
	wg      sync.WaitGroup

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
		PoolSize:     2*opts.WriterConns + 4,
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
		writes:         make(chan *Write, 4096),
		unacked:        make(chan *Write, 4096),
		done:           make(chan struct{}),
	}
	for range max(opts.WriterConns, 1) {
		n.wg.Add(2)
		go n.writeLoop(n.writes)
		go n.writeLoop(n.unacked)
	}
	return n, nil
}

// Start queues call to run on the node. If wantAcks, a WAIT for the
// minimum number of replicas follows it on the same connection. Concurrent
// writes are batched: one pipeline of scripts, then one WAIT for them all.
func (n *Node) Start(ctx context.Context, call ScriptCall, wantAcks bool) *Write {
	w := &Write{call: call, wantAcks: wantAcks, replied: make(chan struct{}), ackified: make(chan struct{})}
	queue := n.writes
	if !wantAcks {
		// Kept apart so they never wait behind another batch's WAIT.
		queue = n.unacked
	}
	select {
	case queue <- w:
	case <-n.done:
		w.fail(errors.New("cluster: node closed"))
	case <-ctx.Done():
		w.fail(ctx.Err())
	}
	return w
}

func (w *Write) fail(err error) {
	w.err, w.ackErr = err, err
	close(w.replied)
	close(w.ackified)
}

// Run runs call with no replica wait, batched with other such writes: for
// writes whose loss in a failover is harmless (a release, an undo: the lease
// merely runs out).
func (n *Node) Run(ctx context.Context, call ScriptCall) (any, error) {
	return n.Start(ctx, call, false).Reply()
}

// writeLoop runs batches from queue.
func (n *Node) writeLoop(queue chan *Write) {
	defer n.wg.Done()
	batch := make([]*Write, 0, maxWriteBatch)
	for {
		select {
		case w := <-queue:
			batch = append(batch, w)
		case <-n.done:
			return
		}
	gather:
		for len(batch) < maxWriteBatch {
			select {
			case w := <-queue:
				batch = append(batch, w)
			default:
				break gather
			}
		}
		n.runBatch(batch)
		clear(batch)
		batch = batch[:0]
	}
}

// runBatch sends every script of the batch and then one WAIT in a single
// pipeline, so the WAIT covers them all and the batch costs one round trip.
// Scripts go by EVALSHA; any that Redis does not know yet (NOSCRIPT: it did
// not run) are sent again in full, with a WAIT of their own.
func (n *Node) runBatch(batch []*Write) {
	ctx, cancel := context.WithTimeout(context.Background(), n.replicaTimeout+5*time.Second)
	defer cancel()
	healthy := true
	todo := batch
	for attempt := 0; len(todo) > 0; attempt++ {
		wait := false
		for _, w := range todo {
			wait = wait || w.wantAcks
		}
		wait = wait && n.minReplicas > 0
		// A pipeline runs on one pooled connection, so its WAIT counts its
		// own scripts; the pool checks a connection's health before handing
		// it out, so a Redis restart costs no lock write an error.
		cmds, _ := n.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, w := range todo {
				if attempt == 0 {
					w.call.Script.EvalSha(ctx, p, w.call.Keys, w.call.Args...)
				} else {
					w.call.Script.Eval(ctx, p, w.call.Keys, w.call.Args...)
				}
			}
			if wait {
				p.Do(ctx, "WAIT", n.minReplicas, max(n.replicaTimeout.Milliseconds(), 1))
			}
			return nil
		})
		acked, ackErr := 0, error(nil)
		if wait {
			acked, ackErr = cmds[len(cmds)-1].(*redis.Cmd).Int()
			if ackErr != nil {
				if !isRedisError(ackErr) {
					healthy = false
				}
				ackErr = ErrOutcomeUnknown
			}
		}
		var again []*Write
		for i, w := range todo {
			reply, err := cmds[i].(*redis.Cmd).Result()
			switch {
			case err == redis.Nil:
				err = nil
			case err != nil && attempt == 0 && strings.HasPrefix(err.Error(), "NOSCRIPT"):
				again = append(again, w)
				continue
			case err != nil && !isRedisError(err):
				healthy = false
				err = ErrOutcomeUnknown
			}
			w.reply, w.err = reply, err
			close(w.replied)
			switch {
			case err != nil:
				w.ackErr = err
			case w.wantAcks:
				w.acked, w.ackErr = acked, ackErr
			}
			close(w.ackified)
		}
		todo = again
	}
	if !healthy {
		n.logger.Warn("lock writes failed on the connection", "addr", n.Addr)
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
	for _, queue := range []chan *Write{n.writes, n.unacked} {
	drain:
		for {
			select {
			case w := <-queue:
				w.fail(errors.New("cluster: node closed"))
			default:
				break drain
			}
		}
	}
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
