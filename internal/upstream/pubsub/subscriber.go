package pubsub

import (
	"bufio"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream/fanout"
)

// Subscriber is a subscribed client in front of a Redis Cluster. Its
// SUBSCRIBE, PSUBSCRIBE and every other request go to one "home" connection
// (every node relays every PUBLISH); its shard channels (SSUBSCRIBE) are
// subscribed on a connection to each channel's master. Each connection's
// reader copies whole messages to the client, one at a time.
//
// When a slot moves, its master drops the slot's shard subscribers with an
// sunsubscribe message the client never asked for. The subscriber swallows
// it and subscribes the channel again on the slot's new master (swallowing
// that confirmation too), so the client keeps its messages without noticing.
// The subscription counts in shard confirmations are rewritten to the
// client's total, as one node would count them.
//
// Keyspace notification channels, and patterns that may match one, are
// also subscribed on a mirror connection to every other master
// (mirror.go).
type Subscriber[N Master] struct {
	opts   *Options[N]
	id     int64    // the proxy's client id
	client net.Conn // set by Start, under wmu

	wmu sync.Mutex // one whole message to the client at a time

	mu       sync.Mutex
	home     net.Conn
	homeNode N
	shards   map[N]net.Conn
	// mirrors are the connections to the masters other than homeNode that
	// carry the client's mirrored channels and patterns (mirror.go);
	// mirrored holds those ("subscribe ch" or "psubscribe pat"), to
	// subscribe on a master that joins later; unconfirmed counts, per
	// mirror and name, the subscriptions sent and not yet confirmed, which
	// home's confirmation of that name waits for (cond, with mu).
	mirrors     map[N]net.Conn
	mirrored    map[mirrorName]bool
	unconfirmed map[mirrorWait]int
	cond        *sync.Cond
	watching    bool           // the mirror watcher runs
	channels    map[string]N   // shard channels the client holds
	leaving     map[string]int // SUNSUBSCRIBEs the client sent, not yet confirmed
	moving      map[string]int // our own re-SSUBSCRIBEs, confirmations to swallow
	// asked holds, per shard connection, the channels of SSUBSCRIBEs sent
	// and not yet confirmed, oldest first: an error reply (MOVED when the
	// topology was stale) answers the oldest, which then goes again.
	asked map[net.Conn][][]string
	// resp3 is the protocol of every connection: the client's, which HELLO
	// on home changes; hellos counts, per shard connection, the HELLOs sent
	// to follow it whose replies are the proxy's to drop.
	resp3  bool
	hellos map[net.Conn]int
	// others counts the read loops of the mirrors and shard connections
	// (quit waits for them); quitting: the client sent QUIT, so their end
	// does not end the client.
	others   sync.WaitGroup
	quitting bool
	// asking are the requests sent home that each get one reply (all but
	// the (un)subscriptions), oldest first (moved.go); homeSubs is home's
	// count of the client's channels and patterns, from its last
	// confirmation.
	asking   []asked
	homeSubs int64
	closed   bool
}

// New opens a subscriber's home connection, to the first master, for the
// proxy's client id (its protocol: resp3); Start relays it to the client.
func New[N Master](opts *Options[N], id int64, resp3 bool) (*Subscriber[N], error) {
	m := opts.Topology.Masters()
	if len(m) == 0 {
		return nil, backend.ErrUnavailable
	}
	home, err := m[0].Tunnel(resp3, 0)
	if err != nil {
		return nil, err
	}
	s := &Subscriber[N]{
		opts: opts, id: id, resp3: resp3, home: home, homeNode: m[0],
		shards:      make(map[N]net.Conn),
		channels:    make(map[string]N),
		leaving:     make(map[string]int),
		moving:      make(map[string]int),
		asked:       make(map[net.Conn][][]string),
		hellos:      make(map[net.Conn]int),
		mirrors:     make(map[N]net.Conn),
		mirrored:    make(map[mirrorName]bool),
		unconfirmed: make(map[mirrorWait]int),
	}
	s.cond = sync.NewCond(&s.mu)
	return s, nil
}

// Start relays the home connection to client (and each shard connection,
// as it opens).
func (s *Subscriber[N]) Start(client net.Conn) {
	s.wmu.Lock()
	s.client = client
	s.wmu.Unlock()
	s.opts.Registry.add(s.id, s) // a CLIENT TRACKING REDIRECT target
	go s.read(s.home, s.homeNode, false)
}

// Send routes one request: shard (un)subscriptions to their channel's
// master, everything else home.
func (s *Subscriber[N]) Send(args [][]byte) {
	name := keys.LowerName(args[0])
	var conn net.Conn
	var err error
	switch {
	case name == "ssubscribe" && len(args) > 1:
		channels := make([]string, len(args)-1)
		for i, ch := range args[1:] {
			channels[i] = string(ch)
		}
		s.ssubscribe(channels, none[N]())
		return
	case name == "sunsubscribe" && len(args) > 1:
		s.mu.Lock()
		node := s.channels[string(args[1])]
		for _, ch := range args[1:] {
			s.leaving[string(ch)]++
		}
		s.mu.Unlock()
		if node == none[N]() {
			node = s.opts.Topology.MasterForSlot(keys.SlotOf(args[1]))
		}
		conn, err = s.shardConn(node)
	case name == "sunsubscribe":
		// Every master holding some of the client's shard channels answers
		// for its own; with none, home answers that there are none.
		s.mu.Lock()
		var conns []net.Conn
		for ch, node := range s.channels {
			s.leaving[ch]++
			if c := s.shards[node]; c != nil && !slices.Contains(conns, c) {
				conns = append(conns, c)
			}
		}
		s.mu.Unlock()
		if len(conns) == 0 {
			conns = []net.Conn{s.home}
		}
		for _, c := range conns {
			s.write(c, args)
		}
		return
	case name == "subscribe" || name == "psubscribe" || name == "unsubscribe" || name == "punsubscribe":
		s.mirror(name, args)
		conn = s.home
	case name == "hello":
		s.hello(args)
		conn = s.home
	case name == "quit":
		s.quit()
		conn = s.home
	case name == "reset":
		// Redis ends the home connection's subscriptions: the mirrors' too.
		s.mirror("unsubscribe", args[:1])
		s.mirror("punsubscribe", args[:1])
		conn = s.home
	default:
		conn = s.home
	}
	if conn == s.home && !pubsubCommand(name) {
		if s.elsewhere(name, args) {
			// Its turn is held by a PING sent home (moved.go).
			s.mu.Lock()
			s.asking = append(s.asking, asked{req: cloneArgs(args), placeholder: true})
			s.mu.Unlock()
			s.write(conn, [][]byte{[]byte("PING")})
			return
		}
		s.mu.Lock()
		s.asking = append(s.asking, asked{req: cloneArgs(args)})
		s.mu.Unlock()
	}
	if err != nil || conn == nil {
		s.Close() // the client sees its connection end, as when Redis is lost
		return
	}
	s.write(conn, args)
}

// MayDial reports, without waiting, whether Send(args) may open a
// connection: an SSUBSCRIBE or SUNSUBSCRIBE to a master the client has no
// shard connection to yet, a (P)SUBSCRIBE of a keyspace channel while a
// master has no mirror. The serve loop sends such a request off its
// thread; any other Send only writes to connections already open.
func (s *Subscriber[N]) MayDial(args [][]byte) bool {
	if len(args) < 2 {
		return false
	}
	switch name := keys.LowerName(args[0]); name {
	case "ssubscribe", "sunsubscribe":
		s.mu.Lock()
		node := s.channels[string(args[1])]
		s.mu.Unlock()
		if name == "ssubscribe" || node == none[N]() {
			node = s.opts.Topology.MasterForSlot(keys.SlotOf(args[1]))
		}
		if node == none[N]() {
			return false // answered without a dial (shardConn)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.shards[node] == nil
	case "subscribe", "psubscribe":
		mirrored := false
		for _, a := range args[1:] {
			mirrored = mirrored || name == "subscribe" && fanout.Mirrored(a) || name == "psubscribe" && fanout.MirroredPattern(a)
		}
		if !mirrored {
			return false
		}
		others := s.otherMasters()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, n := range others {
			if s.mirrors[n] == nil {
				return true
			}
		}
	}
	return false
}

func (s *Subscriber[N]) write(conn net.Conn, args [][]byte) {
	if _, err := conn.Write(resp.AppendCommand(nil, args)); err != nil {
		s.Close()
	}
}

// ssubscribe sends SSUBSCRIBE channels to the master of the first one's
// slot (Redis answers CROSSSLOT if they span slots), avoiding the master
// "not" that just let them go.
func (s *Subscriber[N]) ssubscribe(channels []string, not N) {
	node := s.opts.Topology.MasterForSlot(keys.SlotOf([]byte(channels[0])))
	if node == not {
		node = none[N]()
	}
	conn, err := s.shardConn(node)
	if err != nil {
		go s.resubscribe(channels, not)
		return
	}
	args := [][]byte{[]byte("SSUBSCRIBE")}
	for _, ch := range channels {
		args = append(args, []byte(ch))
	}
	s.mu.Lock()
	s.asked[conn] = append(s.asked[conn], channels)
	s.mu.Unlock()
	s.write(conn, args)
}

// resubscribe sends channels again once the topology names a master for
// their slot other than not, within RetryWindow.
func (s *Subscriber[N]) resubscribe(channels []string, not N) {
	slot := keys.SlotOf([]byte(channels[0]))
	deadline := time.Now().Add(s.opts.RetryWindow)
	for pause := 20 * time.Millisecond; time.Now().Before(deadline); pause = min(2*pause, 250*time.Millisecond) {
		s.opts.Topology.Refresh()
		time.Sleep(pause)
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return
		}
		if node := s.opts.Topology.MasterForSlot(slot); node != none[N]() && node != not {
			s.ssubscribe(channels, not)
			return
		}
	}
	s.opts.Log.Warn("could not follow shard channels to a new master; ending the client's subscription", "channels", channels)
	s.Close()
}

// shardConn returns the connection to node for shard channels, dialing it
// (and starting its reader) on first use.
func (s *Subscriber[N]) shardConn(node N) (net.Conn, error) {
	if node == none[N]() {
		return nil, backend.ErrUnavailable
	}
	s.mu.Lock()
	c := s.shards[node]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := node.Tunnel(s.protocol(), 0)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return nil, backend.ErrUnavailable
	}
	if other := s.shards[node]; other != nil {
		s.mu.Unlock()
		c.Close()
		return other, nil
	}
	s.shards[node] = c
	s.others.Add(1)
	s.mu.Unlock()
	go s.read(c, node, false)
	return c, nil
}

// read relays what one Redis connection writes until it ends; then the
// client's connection ends too (Redis closed it: QUIT, or a failure),
// unless it was a shard or mirror connection to a node that is no longer a
// master. node is the connection's master; mirror says it is a mirror
// connection (mirror.go).
func (s *Subscriber[N]) read(conn net.Conn, node N, mirror bool) {
	if conn != s.home {
		defer s.others.Done()
	}
	rd := bufio.NewReaderSize(conn, 16<<10)
	var msg []byte
	for {
		var err error
		msg, err = resp.AppendReply(msg[:0], rd)
		if err != nil {
			break
		}
		switch {
		case mirror:
			msg = s.mirrorMessage(conn, msg, node)
		case conn == s.home:
			msg = s.homeMessage(msg, node)
		default:
			msg = s.shardMessage(conn, msg, node)
		}
		if msg == nil {
			continue
		}
		s.wmu.Lock()
		_, err = s.client.Write(msg)
		s.wmu.Unlock()
		if err != nil {
			break
		}
		if cap(msg) > 64<<10 {
			msg = nil
		}
	}
	s.mu.Lock()
	retired := false
	switch {
	case s.closed:
	case s.quitting && conn != s.home:
		retired = true // home's QUIT ends the client
	case mirror && s.mirrors[node] == conn:
		// Its node failed, or stopped being a master: the watcher
		// subscribes the mirrored names on whatever masters there are.
		delete(s.mirrors, node)
		s.dropWaitsLocked(conn)
		retired = true
	case mirror:
		retired = true // closed by the watcher
	case conn != s.home && s.shards[node] == conn && s.nodeRetired(node):
		delete(s.shards, node) // its channels moved; the rest carries on
		retired = true
	}
	s.mu.Unlock()
	if !retired {
		s.Close()
	}
}

// nodeRetired reports whether node no longer masters any slot of the
// cluster (it failed over or lost its slots): its shard connection may end
// without ending the client. Called with s.mu held.
func (s *Subscriber[N]) nodeRetired(node N) bool {
	for _, n := range s.opts.Topology.Masters() {
		if n == node {
			return false
		}
	}
	return true
}

// shardMessage looks at a message from a shard connection: it keeps the
// channel map up to date, swallows what the client must not see (nil), and
// rewrites the subscription count of confirmations.
func (s *Subscriber[N]) shardMessage(conn net.Conn, msg []byte, node N) []byte {
	if len(msg) > 0 && msg[0] == '-' && fanout.Redirected(msg) {
		// The oldest SSUBSCRIBE met a slot that moved: send it again.
		s.mu.Lock()
		var channels []string
		if q := s.asked[conn]; len(q) > 0 {
			channels, s.asked[conn] = q[0], q[1:]
		}
		s.mu.Unlock()
		if channels != nil {
			go s.resubscribe(channels, node)
			return nil
		}
		return msg
	}
	if len(msg) > 0 && (msg[0] == '%' || msg[0] == '*' || msg[0] == '-') && s.helloReply(conn, msg) {
		return nil
	}
	if string(msg) == "+OK\r\n" {
		s.mu.Lock()
		quitting := s.quitting
		s.mu.Unlock()
		if quitting {
			return nil // the QUIT of quit
		}
	}
	elems, ok := resp.Elements(msg)
	if !ok || len(elems) != 3 {
		return msg
	}
	kind, _ := resp.BulkString(elems[0])
	if kind != "ssubscribe" && kind != "sunsubscribe" {
		return msg // smessage, or a reply the client asked for
	}
	ch, _ := resp.BulkString(elems[1])
	s.mu.Lock()
	defer s.mu.Unlock()
	switch kind {
	case "ssubscribe":
		s.channels[ch] = node
		s.confirmed(conn, ch)
		if s.moving[ch] > 0 {
			s.moving[ch]--
			return nil
		}
	case "sunsubscribe":
		if s.leaving[ch] > 0 {
			s.leaving[ch]--
			if s.channels[ch] == node {
				delete(s.channels, ch)
			}
			break
		}
		if s.channels[ch] != node {
			return nil // an old master letting go of a channel already moved
		}
		// Unasked: the channel's slot left this master. Follow it.
		delete(s.channels, ch)
		s.moving[ch]++
		go s.resubscribe([]string{ch}, node)
		return nil
	}
	return rewriteCount(msg, elems, len(s.channels))
}

// confirmed strikes ch from the oldest SSUBSCRIBE on conn that names it.
// Called with s.mu held.
func (s *Subscriber[N]) confirmed(conn net.Conn, ch string) {
	q := s.asked[conn]
	for i, channels := range q {
		for j, c := range channels {
			if c != ch {
				continue
			}
			channels = append(channels[:j:j], channels[j+1:]...)
			if len(channels) == 0 {
				s.asked[conn] = append(q[:i:i], q[i+1:]...)
			} else {
				q[i] = channels
			}
			return
		}
	}
}

// rewriteCount sets the count of a (un)subscribe confirmation.
func rewriteCount(msg []byte, elems [][]byte, n int) []byte {
	hdr := len(msg) - len(elems[0]) - len(elems[1]) - len(elems[2])
	out := make([]byte, 0, len(msg)+8)
	out = append(out, msg[:hdr]...)
	out = append(out, elems[0]...)
	out = append(out, elems[1]...)
	out = append(out, ':')
	out = strconv.AppendInt(out, int64(n), 10)
	return append(out, "\r\n"...)
}

// Close ends every Redis connection and the client's.
func (s *Subscriber[N]) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := []net.Conn{s.home}
	for _, c := range s.shards {
		conns = append(conns, c)
	}
	for _, c := range s.mirrors {
		conns = append(conns, c)
	}
	s.cond.Broadcast() // a confirmation waiting for the mirrors goes
	s.mu.Unlock()
	s.opts.Registry.remove(s.id, s)
	for _, c := range conns {
		c.Close()
	}
	s.wmu.Lock()
	client := s.client
	s.wmu.Unlock()
	if client != nil {
		client.Close()
	}
}

// hello follows a HELLO the client sends (home answers it): with a
// protocol version, the mirrors and shard connections switch too, so that
// every message reaches the client in one protocol.
func (s *Subscriber[N]) hello(args [][]byte) {
	if len(args) < 2 {
		return
	}
	v, ok := resp.ParseInt(args[1])
	if !ok || (v != 2 && v != 3) {
		return // home answers Redis's error, nothing changes
	}
	s.mu.Lock()
	s.resp3 = v == 3
	var others []net.Conn
	for _, c := range s.mirrors {
		others = append(others, c)
	}
	for _, c := range s.shards {
		others = append(others, c)
		s.hellos[c]++
	}
	s.mu.Unlock()
	for _, c := range others {
		s.write(c, args[:2])
	}
}

// protocol reports whether new connections speak RESP3.
func (s *Subscriber[N]) protocol() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resp3
}

// helloReply reports whether msg is the reply to a HELLO the subscriber
// sent on shard connection conn itself (dropped).
func (s *Subscriber[N]) helloReply(conn net.Conn, msg []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hellos[conn] == 0 {
		return false
	}
	if kind, _, _, ok := pubsubMessage(msg); ok && kind != "server" {
		return false
	}
	if s.hellos[conn]--; s.hellos[conn] == 0 {
		delete(s.hellos, conn)
	}
	return true
}

// quitWait bounds how long a QUIT waits for the other connections to end.
const quitWait = 2 * time.Second

// quit ends the mirrors and shard connections before home's QUIT goes:
// Redis has let go of every connection of the client before the client
// reads QUIT's +OK, as it has of the one connection without the proxy
// (a tracking client redirecting to this one gets tracking-redir-broken
// from every master from then on, not an invalidation sent to a mirror
// still open).
func (s *Subscriber[N]) quit() {
	s.mu.Lock()
	s.quitting = true
	var others []net.Conn
	for _, c := range s.mirrors {
		others = append(others, c)
	}
	for _, c := range s.shards {
		others = append(others, c)
	}
	s.mu.Unlock()
	for _, c := range others {
		s.write(c, [][]byte{[]byte("QUIT")})
	}
	ended := make(chan struct{})
	go func() {
		s.others.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(quitWait):
	}
}
