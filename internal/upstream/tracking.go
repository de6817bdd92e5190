package upstream

import (
	"bufio"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream/tracking"
)

// Client-side caching (CLIENT TRACKING) through the proxy.
//
// Redis tracks the keys a connection reads and invalidates them for that
// connection; the proxy's shared connections carry many clients' reads, so
// tracking on them would invalidate everybody's keys to nobody in
// particular, and a push on a shared connection would be taken for a
// reply. A tracking client therefore gets a connection of its own (Track),
// kept while tracking lasts: every request of the client goes on it, so
// Redis itself tracks exactly what the client read, with every option's
// meaning its own (BCAST and PREFIX, OPTIN/OPTOUT with CLIENT CACHING,
// NOLOOP: the client's writes travel on the same connection). Its RESP3
// pushes are handed to the client as they come (backend.Options.OnPush).
// Tried and dropped: one tracking connection in BCAST mode fanning out to
// every client, which cannot tell whose write a change was (NOLOOP) nor
// which client read a key (default mode), and would invalidate keys no
// client cached.
//
// REDIRECT names a client of the proxy; Redis knows only its own
// connections, so the redirection goes to the Redis connection of the
// target's pub/sub tunnel (its Redis id, Tunnel's RedisID), where Redis
// sends the __redis__:invalidate messages (RESP2) or pushes (RESP3).
//
// In front of a Redis Cluster a client's keys live on several masters, and
// each master tracks the reads it served: a tracking client gets a
// connection of its own to each master instead (package tracking).

// Track returns a connection of cl's own for client-side caching: in cl's
// protocol and database, onPush getting its push messages, onLost called
// when it breaks or the node drops it (a failover). It is never reused by
// another client.
func (s *standalone) Track(cl *Client, onPush func([]byte), onLost func()) (*Pinned, error) {
	return s.master.Load().ownConn(cl, false, onPush, onLost)
}

// asUser has a client's connection run as the Redis user it authenticated
// as, if not the proxy's: opened as the proxy's (its SELECT and ROLE are
// the proxy's questions, which that user may not be allowed), then
// authenticated as that user.
func asUser(opts *backend.Options, cl *Client) {
	opts.AsUser, opts.AsPassword = cl.User, cl.Password
}

// RedisID is the Redis client id of the tunnel's connection (0: unknown).
func (t rawTunnel) RedisID() int64 {
	if tt, ok := t.Conn.(*tunnel); ok {
		return tt.redisID
	}
	return 0
}

var clientIDRequest = []byte("*2\r\n$6\r\nCLIENT\r\n$2\r\nID\r\n")

// askClientID reads the Redis client id of a fresh connection nc, before it
// carries anything else (0 if Redis would not say). ok is false if no
// reply came (within 2 s, or the connection failed): the request may still
// be answered later, so the connection must not carry anything else.
func askClientID(nc interface {
	Write([]byte) (int, error)
	Read([]byte) (int, error)
	SetDeadline(time.Time) error
}) (id int64, ok bool) {
	nc.SetDeadline(time.Now().Add(2 * time.Second))
	defer nc.SetDeadline(time.Time{})
	if _, err := nc.Write(clientIDRequest); err != nil {
		return 0, false
	}
	// Only this reply is outstanding, so the reader takes nothing beyond it.
	reply, err := resp.AppendReply(nil, bufio.NewReaderSize(nc, 64))
	if err != nil {
		return 0, false
	}
	if len(reply) < 3 || reply[0] != ':' {
		return 0, true // refused (an ACL user without CLIENT): unknown
	}
	id, _ = resp.ParseInt(reply[1 : len(reply)-2])
	return id, true
}

// Track makes cl a tracking client in front of a Redis Cluster: from now
// on Forward and Pin carry its requests on connections of its own (package
// tracking). It returns no Pinned: unlike a standalone master's, no one
// connection carries everything.
func (c *Cluster) Track(cl *Client, onPush func([]byte), _ func()) (*Pinned, error) {
	if cl.track == nil {
		cl.track = c.trackers.Start(cl.RESP3, onPush)
	}
	return nil, nil
}

// serveTracking answers a tracking client's CLIENT TRACKING, CACHING and
// TRACKINGINFO (false for another request); once tracking is off, the
// client's requests take the shared connections again.
func (c *Cluster) serveTracking(cl *Client, args [][]byte, p *resp.Reply) bool {
	return cl.track.Serve(cl.waiter(), args, p, func() { cl.track = nil })
}

// waiter is how the Forwarder waits for the client's connection: its
// Conn, or where there is none (a subscriber's request, tests) at once.
func (cl *Client) waiter() tracking.Waiter {
	if cl.Conn == nil {
		return tracking.AtOnce{}
	}
	return cl.Conn
}

// redirectID is the Redis id of proxy client id's pub/sub connection to n,
// for CLIENT TRACKING REDIRECT id (tracking.Options.RedirectID).
func (c *Cluster) redirectID(id int64, n *Node) (int64, bool) {
	s := c.subscribers.Of(id)
	if s == nil {
		return 0, false
	}
	return s.RedisIDOn(n)
}

// invalidated hands an invalidation to proxy client id's pub/sub
// connection (tracking.Options.Invalidated).
func (c *Cluster) invalidated(id int64, value []byte) {
	if s := c.subscribers.Of(id); s != nil {
		s.Invalidated(value)
	}
}

// Untrack ends cl's tracking in front of a Redis Cluster (RESET, the
// client gone): its connections close, each once Redis has turned its
// tracking off, so it waits on Redis (HasTracker): call it off the serve
// loop. Nothing to do for a standalone master's tracking client, whose
// connection is its Pinned.
func (cl *Client) Untrack() {
	if cl.track != nil {
		cl.track.End()
		cl.track = nil
	}
}

// HasTracker reports whether cl tracks in front of a Redis Cluster: its
// Untrack and Hello wait on Redis (Hello switches its connections, a round
// trip), and Open opens its connections to the masters.
func (cl *Client) HasTracker() bool { return cl.track != nil }

// Hello switches a tracking client's connections in front of a Redis
// Cluster to the protocol HELLO asked for (tracking.Tracker.Hello). It
// waits on Redis: call it off the serve loop.
func (cl *Client) Hello(resp3 bool) {
	if cl.track != nil {
		cl.track.Hello(resp3)
	}
}
