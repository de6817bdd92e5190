// Package tracking is client-side caching in front of a Redis Cluster:
// a tracking client's connections of its own, one to each master, and
// what keeps its cache true over them. (upstream's tracking.go says why a
// tracking client gets connections of its own, and serves a standalone
// master's, which is one pinned connection.)
//
// Redis tracks a key for the connection that read it, on the node that
// holds the key, and invalidates it there. A tracking client in front of a
// cluster therefore gets a tracker: a connection of its own to each master
// its requests go to, opened on first use. Before a new connection carries
// anything, every CLIENT TRACKING ON the client sent is replayed on it, in
// order, and answered (a read on a connection that does not track would be
// cached and never invalidated). upstream's Forward then sends each of the client's
// requests on these connections instead of the shared pools, by the same
// routing (slot, split and merge, broadcast, SCAN, MOVED, ASK and retries),
// so each master tracks exactly what the client read there, and every
// option means what it means in Redis:
//
//  1. CLIENT TRACKING ON is answered by the first master's connection
//     (Redis's own reply and errors), then sent to every other connection
//     the client has. With BCAST (and PREFIX) the tracker connects to every
//     master at once, and to each master that joins: any master may change
//     a key of the prefixes.
//  2. OPTIN/OPTOUT: CLIENT CACHING yes|no is answered by the proxy, with
//     Redis's errors, and sent just before the client's next request on
//     each connection that request goes to (a transaction: before its
//     MULTI), in one step with it (sendMu), so no redirected request
//     slips in between and takes the flag. An ASK redirect cannot carry it
//     (Redis's ASKING and CLIENT CACHING each clear the other), so a read
//     sent with ASKING under CACHING yes is followed by an invalidation of
//     its keys: the client keeps no value that no master tracks for it.
//     CLIENT TRACKINGINFO shows the flag waiting.
//  3. NOLOOP: the client's writes travel on the same connections.
//  4. REDIRECT id names a proxy client subscribed to __redis__:invalidate
//     (or, RESP3, to anything): its subscriber holds a connection to every
//     master (the channel is mirrored as keyspace channels are: package
//     pubsub), and each master's CLIENT TRACKING redirects to the target's
//     connection on that master. tracking-redir-broken names the proxy id.
//  5. Pushes from every connection reach the client through one stream
//     (the onPush given to Track: protocol's Conn.Push), each after the
//     replies Redis sent before it on its own connection: a connection
//     completes its replies in order before it reads a push, and a push
//     that comes while a request split over several connections (MGET
//     over masters, a broadcast) waits for its other parts is held until
//     the merged reply is complete, for it may invalidate a key that reply
//     carries.
//  6. HELLO switches the connections' protocol with the client's, as it
//     switches a tracking connection's in Redis (Client.Hello).
//  7. Losing a connection loses what Redis tracked on it (Redis forgets a
//     connection's tracking when it ends): the client (or its redirect
//     target) is sent a null invalidation, as Redis sends one on FLUSHALL,
//     and drops its whole cache; the connection is opened again on next
//     use. The same when a node stops being a master (a failover, or its
//     last slot moved away: the tracker follows the view, Trackers.Follow),
//     so no cached value outlives the master that tracked it. A key that
//     migrates to another master is deleted from the old one, which
//     invalidates it.
//
// Nothing of the tracker waits where the serve loop serves the client:
// upstream's Forward sends a request only once Ready says the client's
// connection to every master is open (or was just found unreachable), the
// Handler having had them opened off the loop (Open) first; a request's
// first try never dials (Send), its retry does, from a goroutine; CLIENT
// TRACKING ON and OFF, whose round trips to every master wait for Redis,
// run in the client connection's OffLoop (Serve's Waiter).
//
// The package knows a cluster's master only through Master (upstream's
// *Node) and the cluster through Options, so it needs no import of
// upstream; a lent connection is a package pinned Conn.
package tracking

import (
	"log/slog"
	"sync"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/upstream/pinned"
)

// Master is a Redis Cluster master as a tracker uses it.
type Master interface {
	comparable
	pinned.Home
	// String names the master in logs (its address).
	String() string
	// Refusal is why nothing may be sent to the node now (it is not the
	// master), nil if it may.
	Refusal() error
	// Unreachable is the error for a request that could not get a
	// connection to the node: its Refusal, or else that it cannot be
	// reached.
	Unreachable() error
	// Dial opens a connection of the client's own to the master, in
	// protocol resp3, its pushes to onPush and onBreak called when it
	// breaks; it never reconnects.
	Dial(resp3 bool, onPush func([]byte), onBreak func()) (*backend.Conn, error)
	// Hand records a connection given to a client, closed by close when
	// the node closes or stops being the master; false (close called) if
	// it already has.
	Hand(c any, close func()) bool
}

// Options is what a cluster's trackers ask of it.
type Options[N Master] struct {
	// Masters are the cluster's masters now.
	Masters func() []N
	// RedirectID is the Redis client id of proxy client id's pub/sub
	// connection to n, where CLIENT TRACKING REDIRECT id sends (false: it
	// has none, or is gone).
	RedirectID func(id int64, n N) (int64, bool)
	// Invalidated hands an invalidation (the message's value) to proxy
	// client id's pub/sub connection, if it is still subscribed.
	Invalidated func(id int64, value []byte)
	// Keys is where each command has its keys (InvalidateRead), read
	// once the cluster has asked COMMAND.
	Keys func() *keys.Table
	Log  *slog.Logger
}

// Trackers are a cluster's tracking clients.
type Trackers[N Master] struct {
	Options[N]
	mu   sync.Mutex
	live map[*Tracker[N]]bool
}

// New returns the trackers of a cluster (none yet).
func New[N Master](o Options[N]) *Trackers[N] {
	return &Trackers[N]{Options: o, live: make(map[*Tracker[N]]bool)}
}
