package pubsub

import (
	"bytes"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream/fanout"
)

// A subscriber's mirror connections: its keyspace channels and patterns on
// every master besides the home connection's (fanout.Mirrored says which).
//
// Keyspace notifications in front of a Redis Cluster.
//
// A node publishes a key's __keyspace@<db>__:<key> and __keyevent@<db>__:<event>
// messages only to its own subscribers (they are not sent over the cluster
// bus as PUBLISH is), so a client that hears them through one connection
// hears only the keys of one master. A subscribed client's channels that are
// keyspace channels, and patterns that could match one, are therefore
// "mirrored": subscribed on a connection to every master besides the home
// connection (subscriber.go). From those mirror connections only keyspace
// messages are relayed (every other message reaches the home connection
// too, through the cluster bus, and would arrive twice), and only while the
// mirror's node is a master (a demoted master's replica stream would repeat
// its new master's events); their confirmations are swallowed, and the home
// connection's confirmation of a mirrored name waits until every mirror has
// confirmed it, so that a client told it is subscribed hears every master
// from then on. The home connection's own keyspace messages are relayed
// while its node is a master.
//
// What remains of the difference: a message PUBLISHed by a client to a
// channel named like a keyspace channel reaches the client once per master
// (each node relays it), and when a master fails over, the events of its
// slots between the promotion and the proxy's subscription on the new
// master (it checks every mirrorCheckEvery) are not heard.
//
// __redis__:invalidate is mirrored too: each master sends a redirected
// client-side caching invalidation (CLIENT TRACKING ... REDIRECT) only to
// the connection named on it, and a tracking client's connection to each
// master redirects to the target's connection there (package
// upstream/tracking).

const (
	// mirrorCheckEvery is how often a subscriber with mirrored names
	// compares its mirrors with the masters: a master that joined (a
	// promoted replica) is subscribed, one that left is let go.
	mirrorCheckEvery = 200 * time.Millisecond
	// confirmPatience bounds how long home's confirmation of a mirrored
	// name waits for the mirrors' (a master that does not answer).
	confirmPatience = 5 * time.Second
)

// mirrorName is a mirrored subscription: kind "subscribe" or "psubscribe".
type mirrorName struct{ kind, name string }

// mirrorWait is a mirrored subscription sent on a mirror connection and not
// yet confirmed there.
type mirrorWait struct {
	conn net.Conn
	mirrorName
}

// mirror sends the mirrored names of a (p)(un)subscribe request (kind, in
// lower case) to every mirror, opening them (and the watcher) on the first.
// An unsubscribe without names goes to every mirror.
func (s *Subscriber[N]) mirror(kind string, args [][]byte) {
	subscribing := kind == "subscribe" || kind == "psubscribe"
	base := kind
	if !subscribing {
		base = strings.Replace(kind, "un", "", 1) // "punsubscribe" -> "psubscribe"
	}
	var names [][]byte
	for _, a := range args[1:] {
		if (base == "subscribe" && fanout.Mirrored(a)) || (base == "psubscribe" && fanout.MirroredPattern(a)) {
			names = append(names, a)
		}
	}
	s.mu.Lock()
	switch {
	case subscribing && len(names) == 0:
		s.mu.Unlock()
		return
	case subscribing:
		for _, n := range names {
			s.mirrored[mirrorName{base, string(n)}] = true
		}
	case len(args) == 1: // all of them
		for m := range s.mirrored {
			if m.kind == base {
				delete(s.mirrored, m)
			}
		}
	default:
		for _, n := range names {
			delete(s.mirrored, mirrorName{base, string(n)})
		}
		if len(names) == 0 {
			s.mu.Unlock()
			return
		}
	}
	start := subscribing && !s.watching
	s.watching = s.watching || start
	s.mu.Unlock()
	if start {
		go s.watch()
	}
	req := append([][]byte{[]byte(kind)}, names...)
	for _, n := range s.otherMasters() {
		var conn net.Conn
		if subscribing {
			conn = s.mirrorConn(n)
		} else {
			s.mu.Lock()
			conn = s.mirrors[n] // none: nothing to let go there
			s.mu.Unlock()
		}
		if conn == nil {
			continue // the watcher subscribes it later
		}
		if subscribing {
			s.mu.Lock()
			for _, name := range names {
				s.unconfirmed[mirrorWait{conn, mirrorName{base, string(name)}}]++
			}
			s.mu.Unlock()
		}
		s.write(conn, req)
	}
}

// otherMasters is the masters but the home connection's.
func (s *Subscriber[N]) otherMasters() []N {
	var out []N
	for _, n := range s.opts.Topology.Masters() {
		if n != s.homeNode {
			out = append(out, n)
		}
	}
	return out
}

// mirrorConn returns the mirror connection to n, dialing it (and starting
// its reader) on first use; nil if n cannot be reached or s is closed.
func (s *Subscriber[N]) mirrorConn(n N) net.Conn {
	s.mu.Lock()
	c := s.mirrors[n]
	s.mu.Unlock()
	if c != nil {
		return c
	}
	c, err := n.Tunnel(s.protocol(), 0)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return nil
	}
	if other := s.mirrors[n]; other != nil {
		s.mu.Unlock()
		c.Close()
		return other
	}
	s.mirrors[n] = c
	s.others.Add(1)
	s.mu.Unlock()
	go s.read(c, n, true)
	return c
}

// watch keeps a mirror on every master but home's while the subscriber
// lives: it subscribes the mirrored names on a master that has none (a
// promoted replica, a master added) and closes the mirror of a node that
// is no longer a master.
func (s *Subscriber[N]) watch() {
	tick := time.NewTicker(mirrorCheckEvery)
	defer tick.Stop()
	for range tick.C {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		masters := s.opts.Topology.Masters()
		var gone []net.Conn
		for n, c := range s.mirrors {
			if !slices.Contains(masters, n) {
				delete(s.mirrors, n)
				s.dropWaitsLocked(c)
				gone = append(gone, c)
			}
		}
		var missing []N
		for _, n := range masters {
			if n != s.homeNode && s.mirrors[n] == nil {
				missing = append(missing, n)
			}
		}
		names := len(s.mirrored)
		s.mu.Unlock()
		for _, c := range gone {
			c.Close()
		}
		if names == 0 {
			continue
		}
		for _, n := range missing {
			if conn := s.mirrorConn(n); conn != nil {
				s.subscribeMirrored(conn)
			}
		}
	}
}

// dropWaitsLocked forgets what conn owed confirmations for. Called with
// s.mu held.
func (s *Subscriber[N]) dropWaitsLocked(conn net.Conn) {
	for w := range s.unconfirmed {
		if w.conn == conn {
			delete(s.unconfirmed, w)
		}
	}
	s.cond.Broadcast()
}

// isMaster reports whether n masters slots now.
func (s *Subscriber[N]) isMaster(n N) bool { return slices.Contains(s.opts.Topology.Masters(), n) }

// pubsubMessage reads a pub/sub message: its kind (message, pmessage,
// subscribe ...; lower case) and channel (for pmessage the channel, not the
// pattern). ok is false for anything else (an error, a pong).
func pubsubMessage(msg []byte) (kind string, name, channel []byte, ok bool) {
	elems, ok := resp.Elements(msg)
	if !ok || len(elems) < 3 {
		return "", nil, nil, false
	}
	k, ok := resp.BulkString(elems[0])
	if !ok {
		return "", nil, nil, false
	}
	n, _ := resp.BulkString(elems[1])
	name = []byte(n)
	channel = name
	if k == "pmessage" && len(elems) == 4 {
		c, _ := resp.BulkString(elems[2])
		channel = []byte(c)
	}
	return keys.LowerName([]byte(k)), name, channel, true
}

// mirrorMessage decides what of a mirror connection's message reaches the
// client: keyspace messages while its node is a master, nothing else (its
// confirmations count down what home's wait for).
func (s *Subscriber[N]) mirrorMessage(conn net.Conn, msg []byte, node N) []byte {
	kind, name, channel, ok := pubsubMessage(msg)
	if !ok && isInvalidatePush(msg) {
		return msg // a redirected invalidation to a RESP3 client
	}
	if !ok {
		if len(msg) > 0 && msg[0] == '-' {
			s.opts.Log.Warn("a Redis Cluster master refused a keyspace subscription the proxy mirrored there", "master", node.String(), "reply", string(msg))
		}
		return nil
	}
	switch kind {
	case "message", "pmessage":
		if fanout.Mirrored(channel) && s.isMaster(node) {
			return msg
		}
	case "subscribe", "psubscribe":
		s.mu.Lock()
		w := mirrorWait{conn, mirrorName{kind, string(name)}}
		if s.unconfirmed[w] > 0 {
			if s.unconfirmed[w]--; s.unconfirmed[w] == 0 {
				delete(s.unconfirmed, w)
			}
			s.cond.Broadcast()
		}
		s.mu.Unlock()
	}
	return nil
}

// homeMessage decides what of the home connection's message reaches the
// client: everything, but a keyspace message only while home's node is a
// master; a confirmation of a mirrored name once every mirror has
// confirmed it too (within confirmPatience).
func (s *Subscriber[N]) homeMessage(msg []byte, node N) []byte {
	kind, name, channel, ok := pubsubMessage(msg)
	push := ok && pushKinds[kind]
	if len(msg) > 0 && s.protocol() {
		push = msg[0] == '>' // RESP3 tells them apart itself
	}
	if !push {
		return s.homeReply(msg) // the reply to the oldest request asking
	}
	if !ok {
		return msg // another push (an invalidation)
	}
	if kind != "message" && kind != "pmessage" && kind != "smessage" {
		s.noteSubscriptions(msg)
	}
	switch kind {
	case "message", "pmessage":
		if fanout.Mirrored(channel) && !s.isMaster(node) {
			return nil
		}
	case "subscribe", "psubscribe":
		m := mirrorName{kind, string(name)}
		deadline := time.Now().Add(confirmPatience)
		wake := time.AfterFunc(confirmPatience, func() {
			s.mu.Lock()
			s.cond.Broadcast()
			s.mu.Unlock()
		})
		s.mu.Lock()
		for !s.closed && time.Now().Before(deadline) && s.waitingFor(m) {
			s.cond.Wait()
		}
		s.mu.Unlock()
		wake.Stop()
	}
	return msg
}

// waitingFor reports whether a mirror still owes a confirmation of m.
// Called with s.mu held.
func (s *Subscriber[N]) waitingFor(m mirrorName) bool {
	for w := range s.unconfirmed {
		if w.mirrorName == m {
			return true
		}
	}
	return false
}

// Redirected invalidations (CLIENT TRACKING ... REDIRECT, package
// upstream/tracking): a subscriber is a redirect target on every
// master, through its home connection and its mirrors.

// RedisID is the Redis client id of the home connection (commands'
// REDIRECT check: the client holds a tunnel).
func (s *Subscriber[N]) RedisID() int64 { return redisID(s.home) }

// RedisIDOn is the Redis client id of the subscriber's connection to n,
// where a tracking client's connection to n redirects its invalidations:
// home's, or the mirror's, opened (with the mirrored names subscribed) if
// there is none yet.
func (s *Subscriber[N]) RedisIDOn(n N) (int64, bool) {
	if n == s.homeNode {
		return s.RedisID(), true
	}
	s.mu.Lock()
	conn := s.mirrors[n]
	s.mu.Unlock()
	if conn == nil {
		if conn = s.mirrorConn(n); conn == nil {
			return 0, false
		}
		s.subscribeMirrored(conn)
	}
	id := redisID(conn)
	return id, id != 0
}

// subscribeMirrored subscribes the mirrored names on a new mirror.
func (s *Subscriber[N]) subscribeMirrored(conn net.Conn) {
	s.mu.Lock()
	var channels, patterns [][]byte
	for m := range s.mirrored {
		if m.kind == "subscribe" {
			channels = append(channels, []byte(m.name))
		} else {
			patterns = append(patterns, []byte(m.name))
		}
	}
	s.mu.Unlock()
	if len(channels) > 0 {
		s.write(conn, append([][]byte{[]byte("SUBSCRIBE")}, channels...))
	}
	if len(patterns) > 0 {
		s.write(conn, append([][]byte{[]byte("PSUBSCRIBE")}, patterns...))
	}
}

// Invalidated writes an invalidation a tracker makes itself (value: the
// keys, or a null for all of them) to the client, as Redis writes one to a
// redirect target: a push in RESP3, a __redis__:invalidate message in
// RESP2 (only while subscribed to it, as Redis sends it only then).
func (s *Subscriber[N]) Invalidated(value []byte) {
	var msg []byte
	if s.protocol() {
		msg = append([]byte(">2\r\n$10\r\ninvalidate\r\n"), value...)
	} else {
		s.mu.Lock()
		subscribed := s.mirrored[mirrorName{"subscribe", fanout.InvalidateChannel}]
		s.mu.Unlock()
		if !subscribed {
			return
		}
		msg = append([]byte("*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n"), value...)
	}
	s.wmu.Lock()
	if s.client != nil {
		s.client.Write(msg)
	}
	s.wmu.Unlock()
}

// isInvalidatePush reports whether msg is a RESP3 invalidate push.
func isInvalidatePush(msg []byte) bool {
	return bytes.HasPrefix(msg, []byte(">2\r\n$10\r\ninvalidate\r\n"))
}
