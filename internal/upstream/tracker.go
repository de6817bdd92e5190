package upstream

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Client-side caching in front of a Redis Cluster (tracking.go has why a
// tracking client gets connections of its own).
//
// Redis tracks a key for the connection that read it, on the node that
// holds the key, and invalidates it there. A tracking client in front of a
// cluster therefore gets a tracker: a connection of its own to each master
// its requests go to, opened on first use. Before a new connection carries
// anything, every CLIENT TRACKING ON the client sent is replayed on it, in
// order, and answered (a read on a connection that does not track would be
// cached and never invalidated). Forward then sends each of the client's
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
//     last slot moved away: the tracker follows the view, followTrackers),
//     so no cached value outlives the master that tracked it. A key that
//     migrates to another master is deleted from the old one, which
//     invalidates it.
//
// Lock order: tracker.dialMu, then tracker.mu; tracker.sendMu, then a
// backend Conn's. Nothing is sent to the client under any of them.
type tracker struct {
	c      *Cluster
	resp3  bool
	onPush func(frame []byte)

	// dialMu is held while a connection is opened and while CLIENT
	// TRACKING changes ons: a connection opened meanwhile could miss an ON.
	dialMu sync.Mutex
	// sendMu makes CLIENT CACHING and the request it is for one step on a
	// connection (point 2).
	sendMu sync.Mutex

	mu    sync.Mutex
	conns map[*Node]*backend.Conn
	// ons are the CLIENT TRACKING ON requests Redis accepted, in order
	// (REDIRECT naming the proxy's client), replayed on each new
	// connection; opts is what they add up to.
	ons  [][][]byte
	opts trackOptions
	// caching is CLIENT CACHING's yes or no, waiting for the next request.
	caching []byte
	// broken: a master said tracking-redir-broken since the last ON
	// (TRACKINGINFO's broken_redirect, which only that master would show).
	broken bool
	// merging counts the client's requests split over several connections
	// whose merged reply is not complete yet; held are the pushes that
	// came meanwhile (point 5).
	merging int
	held    [][]byte
	closed  bool
}

// trackOptions is what a client's CLIENT TRACKING ON requests set.
type trackOptions struct {
	bcast, optin, optout bool
	redirect             int64 // the proxy's client id; 0: none
}

// trackWait bounds a wait for Redis's answer to a tracking request sent
// by the tracker itself.
const trackWait = 5 * time.Second

// Track makes cl a tracking client: from now on Forward and Pin carry its
// requests on connections of its own (tracker). It returns no Pinned:
// unlike a standalone master's, no one connection carries everything.
func (c *Cluster) Track(cl *Client, onPush func([]byte), _ func()) (*Pinned, error) {
	if cl.track == nil {
		t := &tracker{c: c, resp3: cl.RESP3, onPush: onPush, conns: make(map[*Node]*backend.Conn)}
		c.tmu.Lock()
		if c.trackers == nil {
			c.trackers = make(map[*tracker]bool)
		}
		c.trackers[t] = true
		c.tmu.Unlock()
		cl.track = t
	}
	return nil, nil
}

// Untrack ends cl's tracking in front of a Redis Cluster (RESET, the
// client gone): its connections close, each once Redis has turned its
// tracking off (see off). Nothing to do for a standalone master's tracking
// client, whose connection is its Pinned.
func (cl *Client) Untrack() {
	if cl.track != nil {
		cl.track.turnOff([][]byte{[]byte("CLIENT"), []byte("TRACKING"), []byte("OFF")}, nil)
		cl.track.close()
		cl.track = nil
	}
}

// serve answers the tracking client's CLIENT TRACKING, CACHING and
// TRACKINGINFO; false for another request.
func (t *tracker) serve(cl *Client, args [][]byte, p *resp.Reply) bool {
	if len(args) < 2 {
		return false
	}
	switch keys.LowerName(args[1]) {
	case "tracking":
		if len(args) < 3 {
			return false
		}
		switch keys.LowerName(args[2]) {
		case "on":
			if cl.Conn != nil {
				// Its earlier requests first: one redirected meanwhile may
				// open a connection (dialMu) on a reader that on would
				// wait for.
				cl.Conn.AfterReplies(p, func() { t.on(args, p) })
				break
			}
			t.on(args, p)
		case "off":
			if t.off(args, p) {
				cl.track = nil
			}
		default:
			return false
		}
	case "caching":
		if len(args) < 3 {
			return false // Redis's arity error, from the first master
		}
		t.setCaching(args[2], p)
	case "trackinginfo":
		if len(args) != 2 {
			return false
		}
		t.trackingInfo(args, p)
	default:
		return false
	}
	return true
}

// on serves CLIENT TRACKING ON ...: the first master's answer; then the
// same on every other connection, and with BCAST a connection to every
// master.
func (t *tracker) on(args [][]byte, p *resp.Reply) {
	t.dialMu.Lock()
	masters := t.c.Masters()
	if len(masters) == 0 {
		t.dialMu.Unlock()
		replyErrOf(p, backend.ErrUnavailable)
		return
	}
	first := masters[0]
	conn, err := t.connLocked(first)
	if err != nil {
		t.dialMu.Unlock()
		replyErrOf(p, err)
		return
	}
	req, err := t.forNode(args, first)
	if err != nil {
		t.dialMu.Unlock()
		replyErrOf(p, err)
		return
	}
	reply, err := t.do(conn, req)
	if err != nil || reply[0] == '-' {
		t.dialMu.Unlock()
		if err != nil {
			t.lost(first, conn)
			replyErrOf(p, backend.ErrLost)
			return
		}
		p.Buf = append(p.Buf, reply...)
		p.Done()
		return
	}
	kept := make([][]byte, len(args))
	for i, a := range args {
		kept[i] = bytes.Clone(a)
	}
	t.mu.Lock()
	t.ons = append(t.ons, kept)
	t.opts = t.opts.with(kept)
	t.broken = false
	bcast := t.opts.bcast
	others := make(map[*Node]*backend.Conn)
	for n, c := range t.conns {
		if n != first {
			others[n] = c
		}
	}
	t.mu.Unlock()
	for n, c := range others {
		req, err := t.forNode(args, n)
		if err == nil {
			var reply []byte
			if reply, err = t.do(c, req); err == nil && reply[0] == '-' {
				err = resp.NewError(string(bytes.TrimRight(reply[1:], "\r\n")))
			}
		}
		if err != nil {
			t.c.log.Warn("a Redis Cluster master refused CLIENT TRACKING ON that the first master accepted; dropping the client's connection to it",
				"addr", n.Addr, "err", err)
			t.lost(n, c)
		}
	}
	if bcast {
		for _, n := range masters[1:] {
			t.connLocked(n) // a master it cannot reach now: on first use, or when it joins (follow)
		}
	}
	t.dialMu.Unlock()
	p.Buf = append(p.Buf, reply...)
	p.Done()
}

// off serves CLIENT TRACKING OFF ...: once the first master accepts it,
// the tracker's connections close, after the client's earlier requests
// have their replies (the client's next requests take the shared
// connections and must not overtake them). It reports whether tracking
// ended.
func (t *tracker) off(args [][]byte, p *resp.Reply) bool {
	masters := t.c.Masters()
	if len(masters) == 0 {
		replyErrOf(p, backend.ErrUnavailable)
		return false
	}
	if _, err := t.conn(masters[0]); err != nil {
		replyErrOf(p, err)
		return false
	}
	reply, err := t.turnOff(args, masters[0])
	if err != nil {
		replyErrOf(p, err)
		return false
	}
	p.Buf = append(p.Buf, reply...)
	if reply[0] == '-' {
		p.Done()
		return false
	}
	t.close()
	p.Done()
	return true
}

// turnOff sends CLIENT TRACKING OFF (args) on every connection and waits
// for their replies: Redis stops tracking for the client on every master
// before it is answered (closing a connection is not enough: Redis may run
// another client's write, and invalidate for a connection it has not yet
// seen close, in between). It returns the reply of first's connection.
func (t *tracker) turnOff(args [][]byte, first *Node) ([]byte, error) {
	t.mu.Lock()
	conns := make(map[*Node]*backend.Conn, len(t.conns))
	for n, c := range t.conns {
		conns[n] = c
	}
	t.mu.Unlock()
	var wg sync.WaitGroup
	var firstReply []byte
	var firstErr error = backend.ErrUnavailable
	for n, c := range conns {
		req, err := t.forNode(args, n)
		if err != nil {
			req = [][]byte{[]byte("CLIENT"), []byte("TRACKING"), []byte("OFF")}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply, err := t.do(c, req)
			if n == first {
				firstReply, firstErr = reply, err
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, backend.ErrLost
	}
	return firstReply, nil
}

// setCaching serves CLIENT CACHING yes|no as Redis does, remembering the
// flag for the next request.
func (t *tracker) setCaching(opt []byte, p *resp.Reply) {
	t.mu.Lock()
	o := t.opts
	on := len(t.ons) > 0
	var msg string
	switch v := strings.ToLower(string(opt)); {
	case !on:
		msg = "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"
	case v == "yes" && !o.optin:
		msg = "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
	case v == "no" && !o.optout:
		msg = "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
	case v != "yes" && v != "no":
		msg = "ERR syntax error"
	default:
		t.caching = []byte(v)
	}
	t.mu.Unlock()
	if msg != "" {
		p.Buf = redcon.AppendError(p.Buf, msg)
	} else {
		p.Buf = append(p.Buf, "+OK\r\n"...)
	}
	p.Done()
}

// takeCaching returns the CLIENT CACHING flag waiting for the request
// being sent, and clears it.
func (t *tracker) takeCaching() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.caching
	t.caching = nil
	return f
}

// trackingInfo serves CLIENT TRACKINGINFO from the first master's
// connection, with the CLIENT CACHING flag waiting here added to its
// flags (caching-yes, caching-no) as Redis shows it.
func (t *tracker) trackingInfo(args [][]byte, p *resp.Reply) {
	masters := t.c.Masters()
	if len(masters) == 0 {
		replyErrOf(p, backend.ErrUnavailable)
		return
	}
	conn, err := t.conn(masters[0])
	if err != nil {
		replyErrOf(p, err)
		return
	}
	t.mu.Lock()
	flag := ""
	if t.caching != nil {
		flag = "caching-" + string(t.caching)
	}
	broken := t.broken
	t.mu.Unlock()
	if flag == "" && !broken {
		conn.Do(args, p)
		return
	}
	start := len(p.Buf)
	var sub *resp.Reply
	sub = resp.NewReplyFunc(func() {
		if sub.Err == nil {
			reply := sub.Buf[start:]
			if flag != "" {
				reply = withFlag(reply, flag)
			}
			if broken && !bytes.Contains(reply, []byte("$15\r\nbroken_redirect\r\n")) {
				reply = withFlag(reply, "broken_redirect")
			}
			sub.Buf = append(sub.Buf[:start], reply...)
		}
		p.Buf, p.Err = sub.Buf, sub.Err
		p.Done()
	})
	sub.Buf = p.Buf
	conn.Do(args, sub)
}

// withFlag adds flag to TRACKINGINFO's flags (the value after "flags"),
// caching-yes|no after "optin" or "optout", broken_redirect last, as Redis
// orders them; the reply as it was if it is not that shape.
func withFlag(reply []byte, flag string) []byte {
	elems, _, ok := resp.FlatElements(reply) // RESP3: a map
	if !ok || len(elems) < 2 {
		return reply
	}
	if name, _ := resp.BulkString(elems[0]); name != "flags" {
		return reply
	}
	flags, ok := resp.Elements(elems[1])
	if !ok {
		return reply
	}
	hdr := len(reply) - resp.ElementsLen(elems)
	out := append([]byte(nil), reply[:hdr]...)
	out = append(out, elems[0]...)
	out = append(out, elems[1][0]) // '*' or '~'
	out = strconv.AppendInt(out, int64(len(flags)+1), 10)
	out = append(out, "\r\n"...)
	for _, f := range flags {
		out = append(out, f...)
		if s, _ := resp.BulkString(f); (s == "optin" || s == "optout") && strings.HasPrefix(flag, "caching-") {
			out = redcon.AppendBulkString(out, flag)
		}
	}
	if !strings.HasPrefix(flag, "caching-") {
		out = redcon.AppendBulkString(out, flag)
	}
	for _, e := range elems[2:] {
		out = append(out, e...)
	}
	return out
}

// with is o after one more CLIENT TRACKING ON (args): the mode flags are
// the last request's, as Redis sets them.
func (o trackOptions) with(args [][]byte) trackOptions {
	o.bcast, o.optin, o.optout, o.redirect = false, false, false, 0
	for i := 3; i < len(args); i++ {
		switch keys.LowerName(args[i]) {
		case "bcast":
			o.bcast = true
		case "optin":
			o.optin = true
		case "optout":
			o.optout = true
		case "redirect", "prefix":
			if i+1 < len(args) {
				if keys.LowerName(args[i]) == "redirect" {
					o.redirect, _ = resp.ParseInt(args[i+1])
				}
				i++
			}
		}
	}
	return o
}

// errRedirectGone answers a request that needs a new connection to a
// master while the client REDIRECT names has gone (or never subscribed).
var errRedirectGone = resp.Error{Code: "ERR", Msg: "fenceproxy: the client CLIENT TRACKING REDIRECT names is gone or not subscribed; turn tracking off and on again"}

// forNode is a CLIENT TRACKING request (args) as sent to n: REDIRECT's
// proxy client id becomes the Redis id of that client's connection to n.
func (t *tracker) forNode(args [][]byte, n *Node) ([][]byte, error) {
	out := args
	for i := 3; i+1 < len(args); i++ {
		switch keys.LowerName(args[i]) {
		case "prefix":
			i++
		case "redirect":
			id, ok := resp.ParseInt(args[i+1])
			if !ok {
				continue // Redis's own error
			}
			s := t.c.subscribers.Of(id)
			if s == nil {
				return nil, errRedirectGone
			}
			redisID, ok := s.RedisIDOn(n)
			if !ok {
				return nil, errRedirectGone
			}
			if &out[0] == &args[0] {
				out = slices.Clone(args)
			}
			out[i+1] = strconv.AppendInt(nil, redisID, 10)
			i++
		}
	}
	return out, nil
}

// do sends one request on conn and waits (within trackWait) for its reply.
func (t *tracker) do(conn *backend.Conn, args [][]byte) ([]byte, error) {
	return replyWithin(conn, args, trackWait)
}

// replyWithin sends one request on conn and waits up to wait for its reply;
// past it conn is closed, since its reply would never be read now.
func replyWithin(conn *backend.Conn, args [][]byte, wait time.Duration) ([]byte, error) {
	done := make(chan struct{})
	p := resp.NewReplyFunc(func() { close(done) })
	conn.Do(args, p)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		conn.Close()
		return nil, backend.ErrLost
	}
	if p.Err != nil {
		return nil, p.Err
	}
	if len(p.Buf) == 0 {
		return nil, backend.ErrLost
	}
	return p.Buf, nil
}

// conn returns the client's connection to n, opening it (with tracking
// on as the client set it) on first use or after it was lost.
func (t *tracker) conn(n *Node) (*backend.Conn, error) {
	t.mu.Lock()
	c := t.conns[n]
	closed := t.closed
	t.mu.Unlock()
	if c != nil && c.Up() {
		return c, nil
	}
	if closed {
		return nil, backend.ErrUnavailable
	}
	t.dialMu.Lock()
	defer t.dialMu.Unlock()
	return t.connLocked(n)
}

// connLocked is conn with t.dialMu held.
func (t *tracker) connLocked(n *Node) (*backend.Conn, error) {
	t.mu.Lock()
	c := t.conns[n]
	closed := t.closed
	ons := t.ons
	t.mu.Unlock()
	if c != nil {
		if c.Up() {
			return c, nil
		}
		t.lost(n, c) // broken, and its break not yet seen
	}
	if closed {
		return nil, backend.ErrUnavailable
	}
	if n.Refusal() != nil {
		return nil, n.Refusal()
	}
	opts := n.pinOpts
	t.mu.Lock()
	opts.RESP3 = t.resp3
	t.mu.Unlock()
	opts.OnPush = t.pushed
	// OnBreak may run before Dial returns: it looks the connection up.
	opts.OnBreak = func() { t.lostLater(n) }
	conn, err := backend.Dial(opts)
	if err != nil {
		return nil, unreachable(n)
	}
	for _, on := range ons {
		req, err := t.forNode(on, n)
		var reply []byte
		if err == nil {
			reply, err = t.do(conn, req)
		}
		if err == nil && reply[0] == '-' {
			err = resp.NewError(string(bytes.TrimRight(reply[1:], "\r\n")))
		}
		if err != nil {
			conn.Close()
			var re resp.Error
			if errors.As(err, &re) {
				return nil, err
			}
			return nil, unreachable(n)
		}
	}
	if !n.hand(conn, func() { conn.Close(); t.lost(n, conn) }) {
		return nil, unreachable(n)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		n.Unpin(conn, false, false)
		return nil, backend.ErrUnavailable
	}
	t.conns[n] = conn
	t.mu.Unlock()
	if !conn.Up() {
		t.lost(n, conn)
		return nil, unreachable(n)
	}
	return conn, nil
}

// lostLater is a connection's OnBreak: the tracker finds which of its
// connections to n broke (the callback may run before the Conn is known).
func (t *tracker) lostLater(n *Node) {
	t.mu.Lock()
	c := t.conns[n]
	t.mu.Unlock()
	if c != nil && !c.Up() {
		t.lost(n, c)
	}
}

// lost forgets the client's connection conn to n and closes it; if it was
// tracking, the client (or its redirect target) is told to drop its whole
// cache: what Redis tracked on it is gone (point 7).
func (t *tracker) lost(n *Node, conn *backend.Conn) {
	t.mu.Lock()
	current := conn != nil && t.conns[n] == conn
	if current {
		delete(t.conns, n)
	}
	tracking := current && !t.closed && len(t.ons) > 0
	t.mu.Unlock()
	if conn != nil {
		n.Unpin(conn, false, false)
	}
	if tracking {
		t.invalidate(nil)
	}
}

// invalidate tells the client (or its redirect target) that keys are
// invalid, as Redis would: nil keys for all of them (a null invalidation).
func (t *tracker) invalidate(keyList [][]byte) {
	t.mu.Lock()
	redirect, resp3 := t.opts.redirect, t.resp3
	t.mu.Unlock()
	var value []byte
	switch {
	case keyList != nil:
		value = redcon.AppendArray(nil, len(keyList))
		for _, k := range keyList {
			value = redcon.AppendBulk(value, k)
		}
	case resp3:
		value = []byte("_\r\n")
	default:
		value = []byte("$-1\r\n")
	}
	if redirect != 0 {
		if s := t.c.subscribers.Of(redirect); s != nil {
			s.Invalidated(value)
		}
		return
	}
	if resp3 {
		t.pushed(append([]byte(">2\r\n$10\r\ninvalidate\r\n"), value...))
	}
}

var redirBroken = []byte(">2\r\n$21\r\ntracking-redir-broken\r\n:")

// pushed relays a push from one of the connections (held while a merged
// reply is incomplete, point 5): tracking-redir-broken names the proxy's
// client, not a Redis connection.
func (t *tracker) pushed(frame []byte) {
	t.mu.Lock()
	if bytes.HasPrefix(frame, redirBroken) {
		t.broken = true
		frame = strconv.AppendInt(append([]byte(nil), redirBroken...), t.opts.redirect, 10)
		frame = append(frame, "\r\n"...)
	}
	if t.merging > 0 {
		t.held = append(t.held, bytes.Clone(frame))
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.onPush(frame)
}

// merged wraps the reply of a request split over several connections:
// pushes are held from now until p is complete (point 5).
func (t *tracker) merged(p *resp.Reply) *resp.Reply {
	t.mu.Lock()
	t.merging++
	t.mu.Unlock()
	var sub *resp.Reply
	sub = resp.NewReplyFunc(func() {
		p.Buf, p.Err = sub.Buf, sub.Err
		p.Done()
		t.mu.Lock()
		t.merging--
		var held [][]byte
		if t.merging == 0 {
			held, t.held = t.held, nil
		}
		t.mu.Unlock()
		for _, f := range held {
			t.onPush(f)
		}
	})
	sub.Buf = p.Buf
	return sub
}

// Hello switches a tracking client's connections in front of a Redis
// Cluster to the protocol HELLO asked for, as its connection switches in
// Redis (point 6), and returns once every master has answered: from then
// on Redis sends its invalidations in that protocol, so a write another
// client makes after the client's HELLO reply is never dropped as one for
// a RESP2 connection. It waits on Redis: call it off the serve loop.
func (cl *Client) Hello(resp3 bool) {
	if cl.track != nil {
		cl.track.hello(resp3)
	}
}

// SwitchesOnHello says whether the client has connections of its own that
// HELLO must switch (Pinned.Hello, Hello): a round trip to Redis.
func (cl *Client) SwitchesOnHello() bool { return cl.track != nil }

// hello switches the connections to the client's protocol (point 6).
func (t *tracker) hello(resp3 bool) {
	t.dialMu.Lock()
	defer t.dialMu.Unlock()
	t.mu.Lock()
	if t.resp3 == resp3 {
		t.mu.Unlock()
		return
	}
	t.resp3 = resp3
	conns := make([]*backend.Conn, 0, len(t.conns))
	for _, c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		// A connection that does not answer is closed (replyWithin) and
		// dialled again in the new protocol on its next use (conn).
		replyWithin(c, helloRequest(resp3), trackWait)
	}
}

// close ends the tracker: its connections close, with no invalidation
// (tracking is off, or the client gone).
func (t *tracker) close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	for n, c := range conns {
		n.Unpin(c, false, false)
	}
	t.c.tmu.Lock()
	delete(t.c.trackers, t)
	t.c.tmu.Unlock()
}

// follow keeps the tracker's connections on the masters there are: one to
// a node that is no longer a master is lost (point 7); with BCAST each
// master gets one.
func (t *tracker) follow(masters []*Node) {
	t.mu.Lock()
	var gone []*Node
	var conns []*backend.Conn
	for n, c := range t.conns {
		if !slices.Contains(masters, n) {
			gone, conns = append(gone, n), append(conns, c)
		}
	}
	bcast := t.opts.bcast && !t.closed
	t.mu.Unlock()
	for i, n := range gone {
		t.lost(n, conns[i])
	}
	if bcast {
		go func() {
			for _, n := range masters {
				t.conn(n)
			}
		}()
	}
}

// followTrackers tells every tracker the masters of a new view, before
// the view is published: a client has dropped what a node that is no
// longer a master tracked (its null invalidation is on its way) before
// any of its requests goes to the new master.
func (c *Cluster) followTrackers(masters []*Node) {
	c.tmu.Lock()
	ts := make([]*tracker, 0, len(c.trackers))
	for t := range c.trackers {
		ts = append(ts, t)
	}
	c.tmu.Unlock()
	for _, t := range ts {
		t.follow(masters)
	}
}

// send sends one request (encoded) of the client to n on its connection
// there, after ASKING if asking and after CLIENT CACHING caching if set,
// in one step (point 2). uncached reports a read under CLIENT CACHING yes
// that ASKING had to carry instead (see invalidateRead).
func (t *tracker) send(n *Node, caching, encoded []byte, asking bool, p *resp.Reply) (uncached bool) {
	conn, err := t.conn(n)
	if err != nil {
		p.Err = backend.ErrUnavailable // the retry path opens it again
		p.Done()
		return false
	}
	t.sendMu.Lock()
	if caching != nil {
		if asking {
			uncached = string(caching) == "yes"
		} else {
			conn.Do([][]byte{[]byte("CLIENT"), []byte("CACHING"), caching}, discard())
		}
	}
	conn.DoEncoded(encoded, asking, p)
	t.sendMu.Unlock()
	return uncached
}

// invalidateRead follows the reply of a read that went with ASKING under
// CLIENT CACHING yes: the importing master did not track it, so the
// client is told at once to drop its keys.
func (t *tracker) invalidateRead(encoded []byte) {
	elems, ok := resp.Elements(encoded)
	if !ok || len(elems) == 0 {
		t.invalidate(nil)
		return
	}
	args := make([][]byte, len(elems))
	for i, e := range elems {
		s, _ := resp.BulkString(e)
		args[i] = []byte(s)
	}
	var positions []int
	if cmd := t.c.keys.LookupBytes(args[0]); cmd != nil {
		positions = cmd.Keys(nil, args)
	}
	keyList := make([][]byte, 0, len(positions))
	for _, at := range positions {
		keyList = append(keyList, args[at])
	}
	if len(keyList) == 0 {
		return
	}
	t.invalidate(keyList)
}

// pinned returns the client's connection to n for a transaction or a
// blocking command (Pin): the tracker's own, lent (Release gives it back
// to the tracker, not the node), with a CLIENT CACHING flag waiting sent
// before its first request.
func (t *tracker) pinned(n *Node) (*Pinned, error) {
	if n == nil {
		return nil, backend.ErrUnavailable
	}
	conn, err := t.conn(n)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	resp3 := t.resp3
	t.mu.Unlock()
	return &Pinned{conn: conn, node: n, resp3: resp3, keyed: true, lender: t, caching: t.takeCaching()}, nil
}

// doPinned sends a request on a lent connection: the CLIENT CACHING flag
// first, in one step with it.
func (t *tracker) doPinned(pc *Pinned, args [][]byte, p *resp.Reply) {
	t.sendMu.Lock()
	if pc.caching != nil {
		pc.conn.Do([][]byte{[]byte("CLIENT"), []byte("CACHING"), pc.caching}, discard())
		pc.caching = nil
	}
	pc.conn.Do(args, p)
	t.sendMu.Unlock()
}

// giveBack takes a lent connection back; one that may hold a transaction's
// or a blocked command's state is closed and lost (point 7).
func (t *tracker) giveBack(pc *Pinned, clean bool) {
	if !clean || !pc.conn.Up() {
		t.lost(pc.node, pc.conn)
	}
}

// replyErrOf completes p with err.
func replyErrOf(p *resp.Reply, err error) {
	p.Err = err
	p.Done()
}
