package upstream

import (
	"net"
	"sync"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream/pinned"
	"github.com/fenceproxy/fenceproxy/internal/upstream/tracking"
)

// Forwarder carries clients' requests to the Redis that fenceproxy fronts:
// the request path's one way to Redis, whatever the topology. Each
// topology implements it (overlord's proxy/proto Forwarder is the model):
//
//   - a standalone master (given by --backend, or named by Sentinel) sends
//     a client's requests on its connection of the master's pool, chosen by
//     the client's id and protocol;
//   - a Redis Cluster picks the master by slot, splits and merges requests
//     whose keys span slots (split.go's table), runs the commands about the
//     whole keyspace on every master (broadcast.go's table), walks SCAN
//     across the masters and follows MOVED, ASK and retries (route.go), so
//     that the client sees one node.
//
// The caller never asks which topology it has: what differs is behind
// these methods. Each is called from the client connection's goroutine,
// with the same Client for all of one connection's requests.
type Forwarder interface {
	// Forward sends one request and completes p with Redis's reply, byte for
	// byte (merged, for a request split over masters), or with an error in
	// p.Err for the client: backend.ErrUnavailable (no master could take
	// it), backend.ErrLost (its connection broke: it may have run), a
	// refused master's error.
	Forward(cl *Client, args [][]byte, p *resp.Reply)
	// Pin returns a connection of cl's own (MULTI, WATCH, blocking
	// commands) to the master that serves args: in a Redis Cluster the
	// master of its first key's slot, or the first master for a keyless
	// request. The error is the client's reply: the master's refusal, or
	// backend.ErrUnavailable.
	Pin(cl *Client, args [][]byte) (*Pinned, error)
	// PinSpare is Pin without a dial: a connection of cl's own for args
	// that is open already (a spare the master keeps idle), or nil. It is
	// the serve loop's Pin, which must not wait (with nil, the loop has
	// Pin dial on a goroutine: protocol's OffLoop).
	PinSpare(cl *Client, args [][]byte) *Pinned
	// RoutesByKey reports whether the master for a request depends on its
	// keys (a Redis Cluster). Then a transaction's master is that of its
	// first queued command, so MULTI waits for it; a caller that would
	// build a key only to find the master need not build it otherwise.
	RoutesByKey() bool
	// WaitReplicas serves WAIT numreplicas timeout (args), or WAITAOF
	// numlocal numreplicas timeout, for cl: on every
	// master, since the client's writes went to any of them, each time
	// after a write of the proxy's own to a key named offsetKey (tagged to a
	// slot of that master in a cluster), on a connection of cl's own, so
	// that the count covers every write the client made before it (see
	// Pinned). The reply is the smallest count. Client.Gone ends the wait.
	WaitReplicas(cl *Client, args [][]byte, offsetKey string, p *resp.Reply)
	// Control sends a request that Redis answers while a script or
	// function is busy (PING, which then gets -BUSY; SCRIPT KILL and
	// FUNCTION KILL, which end it) on a connection that carries nothing
	// else: on a shared connection it could wait behind the busy script
	// itself, which only the kill would end. SCRIPT KILL and FUNCTION KILL
	// reach every master (OK if one ended a script); PING the first. The
	// caller waits for cl's earlier replies first (Waiter): a client's own
	// PING still comes after its own script, as on Redis.
	Control(cl *Client, args [][]byte, p *resp.Reply)
	// Subscribe returns a tunnel for cl, which turns to pub/sub: Redis
	// then writes to the client by itself (Tunnel). The error is the
	// client's reply.
	Subscribe(cl *Client) (Tunnel, error)
	// Select makes db cl's database (SELECT db), see databases.go. The
	// error is the client's reply: Redis's (an index out of range, Redis
	// Cluster's refusal of any database but 0) or why Redis could not be
	// reached.
	Select(cl *Client, db int) error
	// DBOpen reports whether database db's shared connections for a
	// client speaking RESP3 if resp3, as login (the zero Login: the
	// proxy's own user), are open, so that Select and Forward of it dial
	// nothing (the serve loop's question: it must not wait).
	DBOpen(login Login, resp3 bool, db int) bool
	// OpenDB opens database db's shared connections for a client speaking
	// RESP3 if resp3, as login, dialling them if they are not open yet (a
	// wait: off the serve loop), so that a Select of db then dials
	// nothing. The error is Select's, or Redis's refusal of login (a
	// resp.Error). Call it with a login only once Redis has accepted its
	// credentials for the client.
	OpenDB(login Login, resp3 bool, db int) error
	// Ready reports, without waiting, whether the connections cl's
	// requests go on are open, so that Forward dials nothing: its
	// database's shared ones (DBOpen) and, in front of a Redis Cluster, a
	// tracking client's own, one to each master (package tracking). Open
	// opens those that are not (a wait: off the serve loop); its error is
	// OpenDB's (a tracker notes a master it cannot reach, whose requests
	// are then answered so).
	Ready(cl *Client) bool
	Open(cl *Client) error
	// Track returns a connection of cl's own for client-side caching
	// (tracking.go): onPush gets Redis's push messages on it, onLost is
	// called when it is lost. The error is the client's reply.
	Track(cl *Client, onPush func(frame []byte), onLost func()) (*Pinned, error)
	// ClusterView answers CLUSTER (args, args[1] its subcommand) itself
	// where the topology calls for it, for cl that reached the proxy at
	// laddr, and reports whether it did: in front of a Redis Cluster the
	// proxy shows one node, itself, and refuses the subcommands that would
	// change the cluster (view.go). Unanswered, the request is forwarded as
	// any other: in front of a standalone Redis every CLUSTER command.
	ClusterView(cl *Client, args [][]byte, laddr string, p *resp.Reply) bool
}

// Client is one client connection as a Forwarder knows it. The caller
// keeps one per connection, with ID and Conn set, and passes it with each
// of the connection's requests; the Forwarder keeps in it what it needs to
// remember between them.
type Client struct {
	// ID picks the client's connection of a pool: one client's requests to
	// a master travel on one connection, so they keep their order.
	ID int64
	// RESP3: the client said HELLO 3; its requests go on connections that
	// speak RESP3 to Redis, so every reply is Redis's own RESP3.
	RESP3 bool
	// DB is the client's database (Forwarder.Select); its requests go on
	// connections in that database.
	DB int
	// User and Password are the Redis user the client authenticated as,
	// when it is not the proxy's own (set by the caller, once Redis has
	// checked them): its shared connections (that user's, databases.go),
	// its connections of its own (Pin, Track) and its tunnel (Subscribe)
	// are opened as that user, so that Redis applies that user's ACL to its
	// requests.
	User, Password string
	// Conn holds a request until the client's earlier requests have their
	// replies (protocol.Conn): before a request takes another way to Redis
	// than those before it.
	Conn Waiter

	// view is the epoch of the Redis Cluster's slot view this client's
	// requests were last routed by (see Cluster.Epoch); 0 before the first.
	view uint64
	// track is, in front of a Redis Cluster, a tracking client's
	// connections of its own (package tracking); caching is the CLIENT
	// CACHING flag the request being forwarded takes with it.
	track   *tracking.Tracker[*Node]
	caching []byte

	// mu guards waiting: Gone runs while a WAIT's reply may be coming in.
	// Lock order: Client.mu, then a backend Conn's (Gone closes them under
	// it, so that none is closed once it went back to the node).
	mu      sync.Mutex
	waiting []*backend.Conn // WAIT's connections, while it waits
}

// Waiter is what a Forwarder asks of a client connection.
type Waiter interface {
	// AfterReplies runs then once every request dispatched before current
	// has its reply (protocol.Conn's: at once, after a wait, or, on the
	// serve loop, later from the loop, after Forward has returned; the
	// client's later requests wait for then). What a request does after
	// such a switch of view is all in then.
	AfterReplies(current *resp.Reply, then func())
	// OffLoop runs work (a dial) and then the function it returns
	// (protocol.Conn's: at once on a goroutine; on the serve loop, work on
	// a goroutine and then later on the loop; the client's later requests
	// wait for then).
	OffLoop(current *resp.Reply, work func() (then func()))
}

// Gone ends what waits in Redis for a client that went away: a WAIT's
// connections are closed, so Redis ends the WAIT (its reply is lost).
func (cl *Client) Gone() {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, c := range cl.waiting {
		c.Close()
	}
}

// Tunnel is a pub/sub client's own way to Redis (see Forwarder.Subscribe).
// A subscribed client reads a stream: Redis pushes messages no request
// asked for, and gives every answer itself (subscribe confirmations, PING
// while subscribed, the error for other commands), so the tunnel relays
// what Redis writes to the client byte for byte, one whole message at a
// time.
type Tunnel interface {
	// Start relays what Redis writes to client until either ends; then
	// client is closed too.
	Start(client net.Conn)
	// Send passes one request on; its reply reaches the client by the
	// relay. It may dial a connection first if MayDial says so.
	Send(args [][]byte)
	// MayDial reports, without waiting, whether Send(args) may open a
	// connection (in front of a Redis Cluster: a shard channel's master,
	// a keyspace channel's mirrors), which the serve loop must not wait
	// for.
	MayDial(args [][]byte) bool
	// Close ends the tunnel.
	Close()
}

// Pinned is a connection to one master that one client has to itself
// (package pinned): a transaction's, a blocking command's, a tracking
// client's.
type Pinned = pinned.Conn

// pin returns a connection of the client's own to node (nil: no master
// reachable).
func pin(cl *Client, node *Node, keyed bool) (*Pinned, error) {
	if node == nil {
		return nil, backend.ErrUnavailable
	}
	if cl.User != "" {
		return node.ownConn(cl, keyed, nil, nil)
	}
	conn, err := node.Pinned(cl.RESP3)
	if err != nil {
		return nil, node.Unreachable()
	}
	if cl.DB != 0 {
		// Ahead of the client's request on the same connection.
		conn.Do(pinned.SelectRequest(cl.DB), pinned.Discard())
	}
	return pinned.New(conn, node, pinned.Options{RESP3: cl.RESP3, DB: cl.DB, Keyed: keyed}), nil
}

// pinSpare is pin with node's idle connection, nil if it has none.
func pinSpare(cl *Client, node *Node, keyed bool) *Pinned {
	if node == nil || cl.User != "" {
		return nil // the spares are the proxy's user's
	}
	conn := node.idlePinned(cl.RESP3)
	if conn == nil {
		return nil
	}
	if cl.DB != 0 {
		conn.Do(pinned.SelectRequest(cl.DB), pinned.Discard())
	}
	return pinned.New(conn, node, pinned.Options{RESP3: cl.RESP3, DB: cl.DB, Keyed: keyed})
}
