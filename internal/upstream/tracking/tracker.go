package tracking

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
	"github.com/fenceproxy/fenceproxy/internal/upstream/pinned"
)

// Tracker is one tracking client's connections, one to each master it
// uses (the package doc says what it keeps true).
//
// Lock order: Tracker.dialMu, then Tracker.mu; Tracker.sendMu, then a
// backend Conn's. Nothing is sent to the client under any of them.
type Tracker[N Master] struct {
	set    *Trackers[N]
	resp3  bool
	onPush func(frame []byte)

	// dialMu is held while a connection is opened and while CLIENT
	// TRACKING changes ons: a connection opened meanwhile could miss an ON.
	dialMu sync.Mutex
	// sendMu makes CLIENT CACHING and the request it is for one step on a
	// connection (point 2).
	sendMu sync.Mutex

	mu    sync.Mutex
	conns map[N]*backend.Conn
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
	// failed is when each master's connection last failed to open (Ready).
	failed map[N]time.Time
}

// trackOptions is what a client's CLIENT TRACKING ON requests set.
type trackOptions struct {
	bcast, optin, optout bool
	redirect             int64 // the proxy's client id; 0: none
}

// trackWait bounds a wait for Redis's answer to a tracking request sent
// by the tracker itself.
const trackWait = 5 * time.Second

// dialBackoff is how long a master whose connection failed to open counts
// as ready (Ready): the client's requests to it are answered that it cannot
// be reached, and their retries dial it again, off the serve loop.
const dialBackoff = time.Second

// Waiter is how the tracker waits for the client connection (upstream's
// Waiter, protocol.Conn's): its earlier replies, and work that waits on
// Redis, which the serve loop runs on a goroutine (OffLoop).
type Waiter interface {
	AfterReplies(current *resp.Reply, then func())
	OffLoop(current *resp.Reply, work func() (then func()))
}

// AtOnce is the Waiter of a caller that may wait where it is.
type AtOnce struct{}

func (AtOnce) AfterReplies(_ *resp.Reply, then func()) { then() }

func (AtOnce) OffLoop(_ *resp.Reply, work func() func()) {
	if then := work(); then != nil {
		then()
	}
}

// Start makes a client a tracking client: from now on the caller carries
// its requests on the tracker's connections (Send, Lend, Merged). resp3 is
// the client's protocol, onPush where its pushes go (point 5).
func (ts *Trackers[N]) Start(resp3 bool, onPush func([]byte)) *Tracker[N] {
	t := &Tracker[N]{set: ts, resp3: resp3, onPush: onPush, conns: make(map[N]*backend.Conn), failed: make(map[N]time.Time)}
	ts.mu.Lock()
	ts.live[t] = true
	ts.mu.Unlock()
	return t
}

// End ends the client's tracking (RESET, the client gone): its
// connections close, each once Redis has turned its tracking off (see
// off).
func (t *Tracker[N]) End() {
	var none N
	t.turnOff([][]byte{[]byte("CLIENT"), []byte("TRACKING"), []byte("OFF")}, none)
	t.close()
}

// Serve answers the tracking client's CLIENT TRACKING, CACHING and
// TRACKINGINFO (false for another request). What waits on Redis (ON's and
// OFF's round trips to every master) runs in w's OffLoop (p must be the
// request's own reply), so the serve loop never waits for it; ended runs, where the
// client's requests are served, once tracking is off and the tracker
// closed: its requests go on the shared connections again.
func (t *Tracker[N]) Serve(w Waiter, args [][]byte, p *resp.Reply, ended func()) (served bool) {
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
			// Its earlier requests first: one redirected meanwhile may
			// open a connection (dialMu) on a reader that on would wait
			// for.
			w.AfterReplies(p, func() {
				w.OffLoop(p, func() func() {
					reply, err := t.on(args)
					return func() { answer(p, reply, err) }
				})
			})
		case "off":
			w.OffLoop(p, func() func() {
				reply, off, err := t.off(args)
				return func() {
					if off {
						ended()
					}
					answer(p, reply, err)
				}
			})
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
		// From the first master's connection, open (Ready) unless it
		// was just lost or could not be reached.
		conn, err := t.firstConn()
		if err != nil {
			replyErrOf(p, err)
			break
		}
		t.trackingInfo(conn, args, p)
	default:
		return false
	}
	return true
}

// answer completes p with reply, or err.
func answer(p *resp.Reply, reply []byte, err error) {
	if err != nil {
		replyErrOf(p, err)
		return
	}
	p.Buf = append(p.Buf, reply...)
	p.Done()
}

// on serves CLIENT TRACKING ON ...: the first master's answer; then the
// same on every other connection, and with BCAST a connection to every
// master. It waits on Redis.
func (t *Tracker[N]) on(args [][]byte) ([]byte, error) {
	t.dialMu.Lock()
	masters := t.set.Masters()
	if len(masters) == 0 {
		t.dialMu.Unlock()
		return nil, backend.ErrUnavailable
	}
	first := masters[0]
	conn, err := t.connLocked(first)
	if err != nil {
		t.dialMu.Unlock()
		return nil, err
	}
	req, err := t.forNode(args, first)
	if err != nil {
		t.dialMu.Unlock()
		return nil, err
	}
	reply, err := t.do(conn, req)
	if err != nil || reply[0] == '-' {
		t.dialMu.Unlock()
		if err != nil {
			t.lost(first, conn)
			return nil, backend.ErrLost
		}
		return reply, nil
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
	others := make(map[N]*backend.Conn)
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
			t.set.Log.Warn("a Redis Cluster master refused CLIENT TRACKING ON that the first master accepted; dropping the client's connection to it",
				"addr", n.String(), "err", err)
			t.lost(n, c)
		}
	}
	if bcast {
		for _, n := range masters[1:] {
			t.connLocked(n) // a master it cannot reach now: on first use, or when it joins (follow)
		}
	}
	t.dialMu.Unlock()
	return reply, nil
}

// off serves CLIENT TRACKING OFF ...: once the first master accepts it,
// the tracker's connections close (the caller's continuation runs after
// the client's earlier requests have their replies: its next requests take
// the shared connections and must not overtake them). It reports whether
// tracking ended. It waits on Redis.
func (t *Tracker[N]) off(args [][]byte) (reply []byte, ended bool, err error) {
	masters := t.set.Masters()
	if len(masters) == 0 {
		return nil, false, backend.ErrUnavailable
	}
	if _, err := t.conn(masters[0]); err != nil {
		return nil, false, err
	}
	reply, err = t.turnOff(args, masters[0])
	if err != nil {
		return nil, false, err
	}
	if reply[0] == '-' {
		return reply, false, nil
	}
	t.close()
	return reply, true, nil
}

// turnOff sends CLIENT TRACKING OFF (args) on every connection and waits
// for their replies: Redis stops tracking for the client on every master
// before it is answered (closing a connection is not enough: Redis may run
// another client's write, and invalidate for a connection it has not yet
// seen close, in between). It returns the reply of first's connection.
func (t *Tracker[N]) turnOff(args [][]byte, first N) ([]byte, error) {
	t.mu.Lock()
	conns := make(map[N]*backend.Conn, len(t.conns))
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
func (t *Tracker[N]) setCaching(opt []byte, p *resp.Reply) {
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

// TakeCaching returns the CLIENT CACHING flag waiting for the request
// being sent, and clears it.
func (t *Tracker[N]) TakeCaching() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.caching
	t.caching = nil
	return f
}

// firstConn is the client's connection to the first master if it is
// open; it never dials.
func (t *Tracker[N]) firstConn() (*backend.Conn, error) {
	masters := t.set.Masters()
	if len(masters) == 0 {
		return nil, backend.ErrUnavailable
	}
	if c := t.openConn(masters[0]); c != nil {
		return c, nil
	}
	return nil, masters[0].Unreachable()
}

// trackingInfo serves CLIENT TRACKINGINFO from the first master's
// connection (conn), with the CLIENT CACHING flag waiting here added to its
// flags (caching-yes, caching-no) as Redis shows it.
func (t *Tracker[N]) trackingInfo(conn *backend.Conn, args [][]byte, p *resp.Reply) {
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
func (t *Tracker[N]) forNode(args [][]byte, n N) ([][]byte, error) {
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
			redisID, ok := t.set.RedirectID(id, n)
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
func (t *Tracker[N]) do(conn *backend.Conn, args [][]byte) ([]byte, error) {
	return conn.DoWithin(args, trackWait)
}

// Ready reports, without waiting, whether the client's requests may be
// sent to masters now: the tracker has a connection up to each of them (or
// failed to open it within dialBackoff: see there), or is closed. The
// serve loop sends a request only when it is, and has the connections
// opened off the loop (Open) first when it is not.
func (t *Tracker[N]) Ready(masters []N) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return true
	}
	for _, n := range masters {
		if c := t.conns[n]; c != nil && c.Up() {
			continue
		}
		if at, ok := t.failed[n]; ok && time.Since(at) < dialBackoff {
			continue
		}
		return false
	}
	return true
}

// Open opens the client's connections to masters that are not open (with
// tracking on as the client set it), and notes those that fail (Ready). It
// waits on Redis: call it off the serve loop.
func (t *Tracker[N]) Open(masters []N) {
	for _, n := range masters {
		t.conn(n)
	}
}

// openConn is the client's connection to n if it is up, else nil: it
// never dials.
func (t *Tracker[N]) openConn(n N) *backend.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.conns[n]; c != nil && c.Up() {
		return c
	}
	return nil
}

// conn returns the client's connection to n, opening it (with tracking
// on as the client set it) on first use or after it was lost.
func (t *Tracker[N]) conn(n N) (*backend.Conn, error) {
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

// connLocked is conn with t.dialMu held; a failure to open is noted for
// Ready.
func (t *Tracker[N]) connLocked(n N) (*backend.Conn, error) {
	c, err := t.openLocked(n)
	t.mu.Lock()
	if err != nil {
		t.failed[n] = time.Now()
	} else {
		delete(t.failed, n)
	}
	t.mu.Unlock()
	return c, err
}

// openLocked is connLocked but for the note.
func (t *Tracker[N]) openLocked(n N) (*backend.Conn, error) {
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
	t.mu.Lock()
	resp3 := t.resp3
	t.mu.Unlock()
	// onBreak may run before Dial returns: it looks the connection up.
	conn, err := n.Dial(resp3, t.pushed, func() { t.lostLater(n) })
	if err != nil {
		return nil, n.Unreachable()
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
			return nil, n.Unreachable()
		}
	}
	if !n.Hand(conn, func() { conn.Close(); t.lost(n, conn) }) {
		return nil, n.Unreachable()
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
		return nil, n.Unreachable()
	}
	return conn, nil
}

// lostLater is a connection's OnBreak: the tracker finds which of its
// connections to n broke (the callback may run before the Conn is known).
func (t *Tracker[N]) lostLater(n N) {
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
func (t *Tracker[N]) lost(n N, conn *backend.Conn) {
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
func (t *Tracker[N]) invalidate(keyList [][]byte) {
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
		t.set.Invalidated(redirect, value)
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
func (t *Tracker[N]) pushed(frame []byte) {
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

// Merged wraps the reply of a request split over several connections:
// pushes are held from now until p is complete (point 5).
func (t *Tracker[N]) Merged(p *resp.Reply) *resp.Reply {
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

// Hello switches the client's connections to the protocol HELLO asked
// for, as its connection switches in Redis (point 6), and returns once
// every master has answered: from then on Redis sends its invalidations in
// that protocol, so a write another client makes after the client's HELLO
// reply is never dropped as one for a RESP2 connection. It waits on Redis:
// call it off the serve loop.
func (t *Tracker[N]) Hello(resp3 bool) {
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
		// A connection that does not answer is closed (DoWithin) and
		// dialled again in the new protocol on its next use (conn).
		c.DoWithin(pinned.HelloRequest(resp3), trackWait)
	}
}

// close ends the tracker: its connections close, with no invalidation
// (tracking is off, or the client gone).
func (t *Tracker[N]) close() {
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
	t.set.mu.Lock()
	delete(t.set.live, t)
	t.set.mu.Unlock()
}

// follow keeps the tracker's connections on the masters there are: one to
// a node that is no longer a master is lost (point 7); with BCAST each
// master gets one.
func (t *Tracker[N]) follow(masters []N) {
	t.mu.Lock()
	var gone []N
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

// Follow tells every tracker the masters of a new view. Call it before
// the view is published: a client has dropped what a node that is no
// longer a master tracked (its null invalidation is on its way) before any
// of its requests goes to the new master.
func (ts *Trackers[N]) Follow(masters []N) {
	ts.mu.Lock()
	live := make([]*Tracker[N], 0, len(ts.live))
	for t := range ts.live {
		live = append(live, t)
	}
	ts.mu.Unlock()
	for _, t := range live {
		t.follow(masters)
	}
}

// Send sends one request (encoded) of the client to n on its connection
// there, after ASKING if asking and after CLIENT CACHING caching if set,
// in one step (point 2). uncached reports a read under CLIENT CACHING yes
// that ASKING had to carry instead: call InvalidateRead after its reply.
// With dial false (a request's first try, which may be the serve loop's)
// a connection that is not up is not opened: p gets ErrUnavailable, and
// the retry, from a goroutine, dials it.
func (t *Tracker[N]) Send(n N, caching, encoded []byte, asking, dial bool, p *resp.Reply) (uncached bool) {
	conn := t.openConn(n)
	var err error
	if conn == nil && dial {
		conn, err = t.conn(n)
	}
	if conn == nil || err != nil {
		p.Err = backend.ErrUnavailable // the retry path opens it again
		p.Done()
		return false
	}
	t.sendMu.Lock()
	if caching != nil {
		if asking {
			uncached = string(caching) == "yes"
		} else {
			conn.Do([][]byte{[]byte("CLIENT"), []byte("CACHING"), caching}, pinned.Discard())
		}
	}
	conn.DoEncoded(encoded, asking, p)
	t.sendMu.Unlock()
	return uncached
}

// InvalidateRead follows the reply of a read that went with ASKING under
// CLIENT CACHING yes: the importing master did not track it, so the
// client is told at once to drop its keys.
func (t *Tracker[N]) InvalidateRead(encoded []byte) {
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
	if cmd := t.set.Keys().LookupBytes(args[0]); cmd != nil {
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

// Lend returns the client's connection to n for a transaction or a
// blocking command: the tracker's own, lent (Release gives it back to the
// tracker, not the node), with a CLIENT CACHING flag waiting sent before
// its first request.
func (t *Tracker[N]) Lend(n N) (*pinned.Conn, error) {
	var none N
	if n == none {
		return nil, backend.ErrUnavailable
	}
	conn, err := t.conn(n)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	resp3 := t.resp3
	t.mu.Unlock()
	return pinned.Lent(conn, n, t, resp3, t.TakeCaching()), nil
}

// DoLent sends a request on a lent connection: the CLIENT CACHING flag
// first, in one step with it; written at once if now (DoNow, which then
// carries the flag too).
func (t *Tracker[N]) DoLent(pc *pinned.Conn, args [][]byte, p *resp.Reply, now bool) {
	t.sendMu.Lock()
	if caching := pc.TakeCaching(); caching != nil {
		pc.Backend().Do([][]byte{[]byte("CLIENT"), []byte("CACHING"), caching}, pinned.Discard())
	}
	if now {
		pc.Backend().DoNow(args, p)
	} else {
		pc.Backend().Do(args, p)
	}
	t.sendMu.Unlock()
}

// GiveBack takes a lent connection back; one that may hold a transaction's
// or a blocked command's state is closed and lost (point 7).
func (t *Tracker[N]) GiveBack(pc *pinned.Conn, clean bool) {
	if !clean || !pc.Up() {
		t.lost(pc.Home().(N), pc.Backend())
	}
}

// Connected is the masters the client has a connection to now (for
// tests).
func (t *Tracker[N]) Connected() []N {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]N, 0, len(t.conns))
	for n := range t.conns {
		out = append(out, n)
	}
	return out
}

// replyErrOf completes p with err.
func replyErrOf(p *resp.Reply, err error) {
	p.Err = err
	p.Done()
}
