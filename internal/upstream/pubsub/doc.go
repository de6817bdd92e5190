// Package pubsub serves a client that uses pub/sub in front of a Redis
// Cluster as one Redis holding every channel would: its channels and
// patterns on one "home" connection, its shard channels (SSUBSCRIBE) on
// their slots' masters and followed when a slot moves, its keyspace
// channels mirrored on every master (mirror.go), and its ordinary commands,
// sent on the same connection, answered in order without a redirect
// reaching it (home.go). A standalone master needs none of this: its
// tunnel is one connection (package upstream).
//
// The package knows the cluster only through Topology and Options (what
// package upstream's Cluster gives it): the masters, the master of a slot,
// a connection of the client's own to a master (Master.Tunnel), and the
// ordinary path for a request that is not home's to answer. Registry finds
// a client's Subscriber by the proxy's client id, for CLIENT TRACKING's
// REDIRECT (package upstream's tracker): RedisIDOn and Invalidated.
//
// The serve loop sends a subscriber's request only where Send opens no
// connection (MayDial); one that does is sent off the loop's thread.
//
// Invariants:
//   - The client reads whole messages, one at a time (wmu), from every
//     connection's reader.
//   - A confirmation the client did not ask for (an sunsubscribe of a slot
//     that moved, the re-SSUBSCRIBE's confirmation, a mirror's) never
//     reaches it; a confirmation of a mirrored name waits for the mirrors'.
//   - Replies to ordinary requests keep the requests' order (asking).
//   - Lock order: Subscriber.wmu and Subscriber.mu are never held together.
package pubsub

import (
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Master is one Redis Cluster master as a subscriber uses it: a value the
// topology hands out, the same for the same master (a pointer), that opens
// connections of the client's own (tunnels) to it. String is its address.
type Master interface {
	comparable
	Tunnel(resp3 bool, db int) (net.Conn, error)
	String() string
}

// Topology is the cluster as a subscriber reads it. The zero N stands for
// "no master".
type Topology[N Master] interface {
	Masters() []N
	MasterForSlot(slot int) N
	MasterForKey(key []byte) N
	// Refresh asks for the topology to be read again (a slot moved).
	Refresh()
}

// Options is what every subscriber of a cluster shares.
type Options[N Master] struct {
	Topology Topology[N]
	// Forward serves a request by the proxy's ordinary path, as for a
	// client that never subscribed (the proxy's client id, its protocol):
	// one that Elsewhere says is not home's to answer, or that home
	// redirected.
	Forward func(id int64, resp3 bool, req [][]byte, p *resp.Reply)
	// Elsewhere reports whether a request (name in lower case) goes to
	// every master, or to a master other than home.
	Elsewhere func(name string, args [][]byte, home N) bool
	// Registry holds the subscribers while they are started.
	Registry *Registry[N]
	// RetryWindow bounds how long a request follows a moved slot.
	RetryWindow time.Duration
	Log         *slog.Logger
}

// Registry is the started subscribers by the proxy's client id.
type Registry[N Master] struct{ m sync.Map }

// Of is the subscriber of the proxy's client id, nil if it has none.
func (r *Registry[N]) Of(id int64) *Subscriber[N] {
	if s, ok := r.m.Load(id); ok {
		return s.(*Subscriber[N])
	}
	return nil
}

func (r *Registry[N]) add(id int64, s *Subscriber[N])    { r.m.Store(id, s) }
func (r *Registry[N]) remove(id int64, s *Subscriber[N]) { r.m.CompareAndDelete(id, s) }

// none is the zero N: no master.
func none[N Master]() N {
	var zero N
	return zero
}

// redisID is the Redis client id of a tunnel (0: unknown).
func redisID(conn net.Conn) int64 {
	if t, ok := conn.(interface{ RedisID() int64 }); ok {
		return t.RedisID()
	}
	return 0
}
