package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream/pinned"
)

// Node is one Redis master.
//
// A Node of a standalone backend is guarded (NodeOptions.NotMaster): it is
// written to only while it is known to be the master. Every connection to
// it, the first and each reconnection, asks ROLE before it carries anything
// (and, with Sentinel, the Sentinels must name it); while it is found not
// to be a master its gate is closed: every request gets NotMaster's reply
// (as its Err, a resp.Error) instead of being sent, and the connections handed to single clients
// (pinned ones, pub/sub tunnels) are closed. Its owner opens the gate again
// once the node is a master (Allow).
//
// Lock order: Node.mu, then a backend Conn's mu (docs/lock-order.md).
type Node struct {
	Addr string
	// pools forward clients' requests byte for byte: [0] for clients that
	// speak RESP2, [1] over connections that speak RESP3 for clients that
	// do (see pool).
	pools [2]*backend.Pool
	// Client runs the proxy's own commands (INFO, lock reads).
	Client *redis.Client
	// control carries only requests Redis answers while a script is busy
	// (Forwarder.Control), so that none waits behind a client's script.
	control *backend.Conn

	logger *slog.Logger

	// lockConn are the lock writer's connections (ServeLockWrites); wg
	// counts the goroutines serving them, which Close waits for.
	lockConn []*backend.SyncConn
	done     chan struct{}
	wg       sync.WaitGroup
	closing  sync.Once

	// The guard; notMaster is "" for an unguarded node (Redis Cluster).
	gate      backend.Gate
	notMaster string
	confirm   func(ctx context.Context, addr string) error
	changed   func()
	confirmed atomic.Bool   // confirm agreed since the last broken connection
	probe     *redis.Client // reads INFO replication past the gate

	memory atomic.Pointer[MemoryPolicy] // see memory.go

	mu       sync.Mutex
	replicas []string
	idle     [2][]*backend.Conn // pinned connections to reuse, RESP2 and RESP3
	// refilling: spare is dialling one for idle[i].
	refilling [2]bool
	handed    map[any]func() // pinned connections and tunnels in clients' hands: their Close
	closed    bool
	pinOpts   backend.Options
	dbs       databases // the shared connections of databases other than 0 (databases.go)
}

// ErrNotMaster means a guarded node was found not to be the master when a
// connection to it was opened (it reports itself a replica, or Sentinel
// names another master): the connection was dropped with nothing sent.
var ErrNotMaster = errors.New("cluster: the Redis node is not the master")

// maxIdlePinned bounds the connections kept for reuse by Pinned.
const maxIdlePinned = 16

// Pinned returns a connection for one client alone (MULTI, WATCH, blocking
// commands), speaking RESP3 if resp3: an idle clean one if any, else a new
// one. It never reconnects by itself: a client's transaction must not carry
// on over a fresh connection.
func (n *Node) Pinned(resp3 bool) (*backend.Conn, error) {
	if n.Refusal() != nil {
		return nil, ErrNotMaster
	}
	if c := n.idlePinned(resp3); c != nil {
		return c, nil
	}
	opts := n.pinOpts
	opts.RESP3 = resp3
	c, err := backend.Dial(opts)
	if err != nil {
		return nil, err
	}
	if !n.Hand(c, c.Close) {
		return nil, ErrUnavailable
	}
	return c, nil
}

// ownConn is a connection of cl's own, opened as cl's Redis user, in its
// protocol and database: never a spare (those are the proxy's user's),
// closed when the client is done with it (Own), never handed to another.
// onPush and onLost (nil for none) are a tracking client's: its pushes,
// and its connection lost or dropped by the node (a failover). keyed is
// pinned.Options.Keyed.
func (n *Node) ownConn(cl *Client, keyed bool, onPush func([]byte), onLost func()) (*Pinned, error) {
	if n.Refusal() != nil {
		return nil, n.Refusal()
	}
	opts := n.pinOpts
	opts.RESP3, opts.DB, opts.OnPush, opts.OnBreak = cl.RESP3, cl.DB, onPush, onLost
	asUser(&opts, cl)
	c, err := backend.Dial(opts)
	var refused resp.Error
	switch {
	case errors.As(err, &refused):
		return nil, refused // Redis's answer to the client's user (asUser)
	case err != nil:
		return nil, n.Unreachable()
	}
	closed := c.Close
	if onLost != nil {
		closed = func() { c.Close(); onLost() }
	}
	if !n.Hand(c, closed) {
		return nil, n.Unreachable()
	}
	return pinned.New(c, n, pinned.Options{RESP3: cl.RESP3, DB: cl.DB, Keyed: keyed, Own: true}), nil
}

// idlePinned is Pinned without a dial: an idle clean connection, nil if
// there is none (a spare is then dialled for the next client).
func (n *Node) idlePinned(resp3 bool) *backend.Conn {
	if n.Refusal() != nil {
		return nil
	}
	i := protoIndex(resp3)
	n.mu.Lock()
	defer n.spare(resp3)
	for len(n.idle[i]) > 0 {
		c := n.idle[i][len(n.idle[i])-1]
		n.idle[i] = n.idle[i][:len(n.idle[i])-1]
		if c.Up() {
			n.handed[c] = c.Close
			n.mu.Unlock()
			return c
		}
		c.Close()
	}
	n.mu.Unlock()
	return nil
}

// spare dials a connection for the idle list in the background when a
// client took the last one, so that the next client's blocking command
// takes one instead of dialling: the serve loop serves a blocking command
// itself only with one ready (PinSpare: it must not wait for a dial), and
// holds other clients' new requests behind one it hands to a goroutine
// detour only until it is written (protocol's fence, at most 5 ms), which
// a dial can outlast, letting another client's request reach Redis first.
func (n *Node) spare(resp3 bool) {
	i := protoIndex(resp3)
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.idle[i]) > 0 || n.refilling[i] || n.closed || n.Refusal() != nil {
		return
	}
	n.refilling[i] = true
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		opts := n.pinOpts
		opts.RESP3 = resp3
		c, err := backend.Dial(opts)
		n.mu.Lock()
		n.refilling[i] = false
		keep := err == nil && !n.closed && n.Refusal() == nil && len(n.idle[i]) < maxIdlePinned
		if keep {
			n.idle[i] = append(n.idle[i], c)
		}
		n.mu.Unlock()
		if err == nil && !keep {
			c.Close()
		}
	}()
}

// Unpin gives back a pinned connection. Only a clean one (no MULTI, WATCH
// or blocked command pending on it) is kept for reuse.
func (n *Node) Unpin(c *backend.Conn, resp3, clean bool) {
	i := protoIndex(resp3)
	n.mu.Lock()
	delete(n.handed, c)
	if clean && c.Up() && !n.closed && len(n.idle[i]) < maxIdlePinned {
		n.idle[i] = append(n.idle[i], c)
		n.mu.Unlock()
		return
	}
	n.mu.Unlock()
	c.Close()
}

// Tunnel returns a raw connection for a client that will get a stream from
// Redis (pub/sub), speaking RESP3 if resp3, in database db.
func (n *Node) Tunnel(resp3 bool, db int) (net.Conn, error) {
	return n.tunnelFor(&Client{RESP3: resp3, DB: db})
}

// tunnelFor is Tunnel for cl: in its protocol and database, as its user.
func (n *Node) tunnelFor(cl *Client) (net.Conn, error) {
	if n.Refusal() != nil {
		return nil, ErrNotMaster
	}
	opts := n.pinOpts
	opts.RESP3, opts.DB = cl.RESP3, cl.DB
	asUser(&opts, cl)
	nc, err := backend.DialRaw(opts)
	if err != nil {
		return nil, err
	}
	id, ok := askClientID(nc)
	if !ok {
		// Its reply may still come, and would reach the client.
		nc.Close()
		return nil, ErrUnavailable
	}
	t := &tunnel{Conn: nc, n: n, redisID: id}
	if !n.Hand(t, func() { t.Conn.Close() }) {
		return nil, ErrUnavailable
	}
	return t, nil
}

// tunnel is a pub/sub connection in a client's hands; closing it tells the
// node it is gone.
type tunnel struct {
	net.Conn
	n       *Node
	redisID int64 // Redis's CLIENT ID of the connection (CLIENT TRACKING REDIRECT)
}

// RedisID is Redis's CLIENT ID of the connection (0: unknown).
func (t *tunnel) RedisID() int64 { return t.redisID }

func (t *tunnel) Close() error {
	t.n.mu.Lock()
	delete(t.n.handed, t)
	t.n.mu.Unlock()
	return t.Conn.Close()
}

// Hand records c as in a client's hands, so that a step-down closes it; it
// closes c and reports false if the node is closed or refusing already.
func (n *Node) Hand(c any, close func()) bool {
	n.mu.Lock()
	if n.closed || n.Refusal() != nil {
		n.mu.Unlock()
		close()
		return false
	}
	n.handed[c] = close
	n.mu.Unlock()
	return true
}

// Dial opens a connection of a client's own to the node, in protocol
// resp3, its pushes to onPush and onBreak called when it breaks (package
// tracking's Master).
func (n *Node) Dial(resp3 bool, onPush func([]byte), onBreak func()) (*backend.Conn, error) {
	opts := n.pinOpts
	opts.RESP3, opts.OnPush, opts.OnBreak = resp3, onPush, onBreak
	return backend.Dial(opts)
}

// Control is the node's connection that carries nothing else (package
// pinned's Home).
func (n *Node) Control() *backend.Conn { return n.control }

// String is the node's address.
func (n *Node) String() string { return n.Addr }

// Refusal is the error every request to the node gets now instead of being
// sent (it was found not to be the master): a resp.Error with NotMaster's
// reply; nil while the node is written to.
func (n *Node) Refusal() error { return n.gate.Refusal() }

// Unreachable is the error for a request that could not get a connection
// to the node: why the proxy refuses to send anything to it (Refusal: it
// is not the master), or else that it cannot be reached.
func (n *Node) Unreachable() error {
	if err := n.Refusal(); err != nil {
		return err
	}
	return backend.ErrUnavailable
}

// Refuse closes the node's gate with its NotMaster reply (reason, if not
// empty) and closes every pinned connection and tunnel in clients' hands:
// a client in MULTI, blocked, or subscribed must see that its connection
// ended rather than carry on with a node that stepped down. Requests
// already on the shared connections get their replies.
func (n *Node) Refuse(reason string) {
	if reason == "" {
		reason = n.notMaster
	}
	n.mu.Lock()
	n.gate.Close(reason)
	handed := n.handed
	n.handed = make(map[any]func())
	n.mu.Unlock()
	for _, close := range handed {
		close()
	}
}

// Allow opens the node's gate: it is the master again.
func (n *Node) Allow() {
	n.confirmed.Store(true)
	n.gate.Open()
}

// admit is asked before each new connection to a guarded node carries
// anything; role is what the node answered to ROLE on it.
func (n *Node) admit(role string) error {
	if role != "master" {
		n.Refuse("")
		n.changed()
		return fmt.Errorf("%w: %s reports itself a %s (ROLE)", ErrNotMaster, n.Addr, role)
	}
	if n.confirm == nil || n.confirmed.Load() {
		return nil
	}
	// The node's connections broke since Sentinel last named it: the
	// server behind the address may be an old master restarted empty.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := n.confirm(ctx, n.Addr)
	if errors.Is(err, ErrNotMaster) {
		n.Refuse("")
		n.changed()
	}
	if err == nil {
		n.confirmed.Store(true)
	}
	return err
}

// Role reads the node's role (INFO replication) and records the replicas
// connected to it; past the gate, so it also works on a refusing node.
func (n *Node) Role(ctx context.Context) (string, error) { return n.refreshReplicas(ctx) }

// CheckAuth asks Redis whether user and password are good, on a connection
// of their own (the shared ones keep the proxy's credentials). The error is
// Redis's own answer (a resp.Error) when it refuses them.
func (n *Node) CheckAuth(user, password string) error {
	opts := n.pinOpts
	opts.Username, opts.Password = user, password
	opts.Admit = nil // ROLE is the proxy's question, not the client's user's
	nc, err := backend.DialRaw(opts)
	if err != nil {
		return err
	}
	return nc.Close()
}

// pool is the shared connections for a client speaking RESP3 if resp3,
// else RESP2: the one place a protocol picks them.
func (n *Node) pool(resp3 bool) *backend.Pool { return n.pools[protoIndex(resp3)] }

func protoIndex(resp3 bool) int {
	if resp3 {
		return 1
	}
	return 0
}

// NodeOptions configure a Node.
type NodeOptions struct {
	Addr        string
	Username    string
	Password    string
	PoolSize    int // passthrough connections
	WriterConns int // connections for lock writes, of each kind (with and without WAIT)
	// ReplicaTimeout is the longest WAIT of a lock write: the lock
	// connections' replies and the go-redis client's reads allow for it.
	ReplicaTimeout time.Duration
	ObserveReply   func(time.Duration)
	Logger         *slog.Logger
	TLS            *tls.Config // nil: plaintext
	// NotMaster, if set, guards the node (see Node): the error reply (no
	// "-", no CRLF) every request gets while it is not the master.
	NotMaster string
	// Confirm, if set, must agree (nil error) before a guarded node's
	// connections reopen after one broke: it asks Sentinel whether addr is
	// still the master. It returns an error wrapping ErrNotMaster when
	// Sentinel names another, any other when it cannot tell.
	Confirm func(ctx context.Context, addr string) error
	// Changed, if set, is told (without waiting) when a connection found a
	// guarded node not to be the master.
	Changed func()
	// Loop, if set, serves the shared connections (the pools) from that
	// event loop; the control, pinned and lock connections keep their
	// goroutines.
	Loop *backend.Loop
}

// NewNode connects to the master at opts.Addr. A guarded node fails with an
// error wrapping ErrNotMaster if it is not the master.
func NewNode(ctx context.Context, opts NodeOptions) (*Node, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	n := &Node{
		Addr:      opts.Addr,
		logger:    opts.Logger,
		done:      make(chan struct{}),
		handed:    make(map[any]func()),
		notMaster: opts.NotMaster,
		confirm:   opts.Confirm,
		changed:   opts.Changed,
	}
	if n.changed == nil {
		n.changed = func() {}
	}
	// Every connection below shares these: ROLE (and Sentinel) before a
	// connection is used, the gate on every request.
	var admit func(string) error
	var onBreak func()
	var gate *backend.Gate
	var onConnect func(context.Context, *redis.Conn) error
	if opts.NotMaster != "" {
		admit, gate = n.admit, &n.gate
		onBreak = func() { n.confirmed.Store(false) }
		onConnect = func(ctx context.Context, cn *redis.Conn) error {
			fields, err := cn.Do(ctx, "ROLE").Slice()
			if err != nil {
				return err
			}
			var role string
			if len(fields) > 0 {
				role, _ = fields[0].(string)
			}
			return n.admit(role)
		}
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
		OnConnect:             onConnect,
	})
	n.Client, n.probe = client, client
	if gate != nil {
		client.AddHook(gateHook{gate})
		// The guard's own reads must pass a closed gate and a node that is
		// not the master: that is what they look for.
		n.probe = redis.NewClient(&redis.Options{
			Addr: opts.Addr, Username: opts.Username, Password: opts.Password,
			Protocol: 2, PoolSize: 1, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second,
			MaxRetries: -1, DisableIdentity: true, ContextTimeoutEnabled: true, TLSConfig: opts.TLS,
		})
	}
	closeClients := func() {
		if n.probe != client {
			n.probe.Close()
		}
		client.Close()
	}
	if err := client.Ping(ctx).Err(); err != nil {
		closeClients()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w%s", opts.Addr, err, tlsHint(err, opts.TLS != nil))
	}
	shared := backend.Options{
		Addr: opts.Addr, Username: opts.Username, Password: opts.Password,
		Logger: opts.Logger, ObserveReply: opts.ObserveReply, TLS: opts.TLS,
		Admit: admit, OnBreak: onBreak, Gate: gate, Loop: opts.Loop,
	}
	pool, err := backend.NewPool(shared, opts.PoolSize)
	if err != nil {
		closeClients()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", opts.Addr, err)
	}
	shared.RESP3 = true
	pool3, err := backend.NewPool(shared, max(opts.PoolSize/2, 1))
	if err != nil {
		pool.Close()
		closeClients()
		return nil, fmt.Errorf("cannot speak RESP3 (HELLO 3) with Redis at %s: %w", opts.Addr, err)
	}
	n.pools = [2]*backend.Pool{pool, pool3}
	n.dbs.opts, n.dbs.size = shared, opts.PoolSize // each database's pools set RESP3 their own way
	// RESP2, whoever asks: PING, SCRIPT KILL and FUNCTION KILL answer the
	// same in both protocols, and CLIENT UNBLOCK's CLIENT LIST is read here.
	// Not in the round-trip histogram of forwarded requests either.
	shared.RESP3, shared.ObserveReply, shared.Loop = false, nil, nil
	if n.control, err = backend.Dial(shared); err != nil {
		pool.Close()
		pool3.Close()
		closeClients()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", opts.Addr, err)
	}
	n.pinOpts = backend.Options{
		Addr: opts.Addr, Username: opts.Username, Password: opts.Password,
		Logger: opts.Logger, ObserveReply: opts.ObserveReply, NoReconnect: true, TLS: opts.TLS,
		// One client's connection: small, since thousands may block at once.
		ReadBuffer: 4 << 10,
		Admit:      admit, Gate: gate,
		// Served by the loop (but with TLS): a client on the loop queues
		// its transaction's requests there without waiting.
		Loop: opts.Loop,
	}
	lockOpts := backend.Options{Addr: opts.Addr, Username: opts.Username, Password: opts.Password, Logger: opts.Logger, TLS: opts.TLS,
		// A lock script or WAIT slower than this means Redis is stopped or
		// hung: fail the writes (outcome unknown) rather than hang clients.
		ReplyTimeout: opts.ReplicaTimeout + 2*time.Second,
		Admit:        admit, OnBreak: onBreak, Gate: gate}
	for range 2 * max(opts.WriterConns, 1) {
		conn, err := backend.DialSync(lockOpts)
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("cannot reach Redis at %s: %w", opts.Addr, err)
		}
		n.lockConn = append(n.lockConn, conn)
	}
	n.refreshMemory(ctx) // before the node is published: no lock write meets an unread policy
	return n, nil
}

// ServeLockWrites hands the node's lock connections to the lock writer
// (internal/locks): it runs serve once for each, on a goroutine of its own
// that writes and reads the connection itself (backend.SyncConn),
// acked true for the NodeOptions.WriterConns that carry writes followed by
// a WAIT, false for as many that carry writes without one. Nothing else is
// ever sent on them. serve must return once Closed is closed; Close waits
// for every serve to return before it closes the connections, so that a
// batch on the wire when the node closes gets its replies and its WAIT,
// not a lost connection. It reports false, and runs nothing, if the node
// is closed already. Call it once per node.
//
// The node dials these connections (at NewNode, so that a master they
// cannot reach fails there, as the rest of the node's connections do) and
// closes them: every connection to a master shares its gate and its ROLE
// check, and ends with the node.
func (n *Node) ServeLockWrites(serve func(conn *backend.SyncConn, acked bool)) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	for i, c := range n.lockConn {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			serve(c, i%2 == 0)
		}()
	}
	return true
}

// Closed is closed when the node begins to close.
func (n *Node) Closed() <-chan struct{} { return n.done }

// ProbeAddr is the address Redis sees the node's probe connection at (it
// reads INFO replication, memory and stats every second), "" if unknown:
// what MONITOR through the proxy leaves out.
func (n *Node) ProbeAddr(ctx context.Context) string {
	if n.probe == n.Client {
		return ""
	}
	info, err := n.probe.Do(ctx, "CLIENT", "INFO").Text()
	if err != nil {
		return ""
	}
	for _, f := range strings.Fields(info) {
		if addr, ok := strings.CutPrefix(f, "addr="); ok {
			return addr
		}
	}
	return ""
}

// Replicas returns the replicas last seen connected to this master.
func (n *Node) Replicas() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.replicas...)
}

// refreshReplicas reads INFO replication and records the connected replicas.
func (n *Node) refreshReplicas(ctx context.Context) (role string, err error) {
	info, err := n.probe.Info(ctx, "replication").Result()
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

// Close stops the node's writers and closes its connections, the pinned
// ones and tunnels in clients' hands too. Closing twice is harmless.
func (n *Node) Close() { n.closing.Do(n.close) }

func (n *Node) close() {
	n.mu.Lock()
	n.closed = true
	handed := n.handed
	n.handed = nil
	n.mu.Unlock()
	for _, close := range handed {
		close()
	}
	close(n.done)
	n.wg.Wait() // the lock writer's batches on the wire have their replies
	for _, c := range n.lockConn {
		c.Close()
	}
	n.mu.Lock()
	for _, idle := range n.idle {
		for _, c := range idle {
			c.Close()
		}
	}
	n.idle = [2][]*backend.Conn{}
	n.mu.Unlock()
	if n.pools[0] != nil {
		n.pools[0].Close()
		n.pools[1].Close()
	}
	if n.control != nil {
		n.control.Close()
	}
	n.dbs.close()
	if n.probe != n.Client {
		n.probe.Close()
	}
	n.Client.Close()
}

// gateHook refuses the go-redis client's commands (lock reads) while the
// node's gate is closed, with the gate's refusal (a resp.Error). INFO
// passes: it tells the operator what the node is.
type gateHook struct{ g *backend.Gate }

func (h gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.g.Refusal(); err != nil && cmd.Name() != "info" {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.g.Refusal(); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
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
// proxy's own reads, such as COMMAND. An error reply is returned as the
// error (a resp.Error).
func (n *Node) Raw(ctx context.Context, args ...string) ([]byte, error) {
	req := make([][]byte, len(args))
	for i, a := range args {
		req[i] = []byte(a)
	}
	opts := n.pinOpts
	opts.ObserveReply, opts.ReadBuffer, opts.Loop = nil, 0, nil
	conn, err := backend.Dial(opts)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	done := make(chan struct{})
	p := resp.NewReplyFunc(func() { close(done) })
	conn.Do(req, p)
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if p.Err != nil {
		return nil, p.Err
	}
	if re, ok := resp.ErrorReply(p.Buf); ok {
		return nil, re
	}
	return p.Buf, nil
}

// Up reports whether the node's passthrough connections are established.
func (n *Node) Up() bool { return n.pools[0].Up() }
