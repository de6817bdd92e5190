package commands

import (
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Requests Redis answers while a script or function is busy: PING (with
// -BUSY, or -LOADING while it loads its data, as Redis answers it; the
// proxy answers it if Redis does not, see pingPatience), SCRIPT KILL,
// FUNCTION KILL and FUNCTION STATS. They go on the backend's control connection
// (Forwarder.Control), never on a shared one: there they could wait
// behind the busy script itself, and the kill that would end it behind
// the script it is to end.

// controlOrder is how a client's control requests keep their place among
// its other requests.
type controlOrder struct {
	// last: the client's latest request went on the control connection,
	// so the next one may follow it there without waiting (pipelined PINGs
	// stay pipelined); prev is last as it was before the current request.
	last, prev bool
}

// next is called as each request begins.
func (o *controlOrder) next() {
	o.prev, o.last = o.last, false
}

// control sends the request on the control connection, in its place
// among the client's requests (inOrder).
func (h *Handler) control(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	h.inOrder(c, p, func() { h.opts.Backend.Control(&sessionOf(c).backend, args, p) })
}

// inOrder runs send once the client's earlier requests have their replies
// if they went another way than the control connection: a client's PING
// after its own EVAL is answered after it, as on Redis. current is the
// request's reply slot.
func (h *Handler) inOrder(c *protocol.Conn, current *resp.Reply, send func()) {
	s := sessionOf(c)
	s.order.last = true
	if !s.order.prev {
		c.AfterReplies(current, send)
		return
	}
	send()
}

// pingPatience bounds how long a PING waits for Redis. Past it, or if
// Redis cannot be reached, the proxy answers PONG itself: the proxy is
// alive (/readyz tells whether Redis is), and a client's health check must
// not hang on a stopped Redis. A script busy past lua-time-limit (5 s by
// default) is answered -BUSY by Redis at once; one busy for less waits in
// Redis and gets the proxy's PONG after this long.
const pingPatience = time.Second

var replyPong = []byte("+PONG\r\n")

// ping is answered by Redis where it can be: only Redis knows whether it
// is busy or loading.
func (h *Handler) ping(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if len(args) > 2 {
		replyError(p, "ERR wrong number of arguments for 'ping' command")
		return
	}
	// The proxy's own answer, made now: args may hold a later request's
	// bytes by the time it is needed.
	own := replyPong
	if len(args) == 2 {
		own = redcon.AppendBulk(nil, args[1])
	}
	// In place first: the patience runs from when Redis is asked.
	h.inOrder(c, p, func() { h.pingRedis(c, args, own, p) })
}

// pingRedis asks Redis for PING's answer, or answers own past
// pingPatience.
func (h *Handler) pingRedis(c *protocol.Conn, args [][]byte, own []byte, p *resp.Reply) {
	var answered atomic.Bool
	pong := func() {
		p.Buf = append(p.Buf, own...)
		p.Done()
	}
	timer := time.AfterFunc(pingPatience, func() {
		if answered.CompareAndSwap(false, true) {
			pong()
		}
	})
	// Redis's reply lands in a buffer of its own: it may come after the
	// proxy answered, when p already serves a later request.
	var sent *resp.Reply
	sent = resp.NewReplyFunc(func() {
		if !answered.CompareAndSwap(false, true) {
			return
		}
		timer.Stop()
		if sent.Err != nil {
			pong() // Redis not reached, or the link broke
			return
		}
		p.Buf = append(p.Buf, sent.Buf...)
		p.Done()
	})
	h.opts.Backend.Control(&sessionOf(c).backend, args, sent)
}

// scriptOrFunction sends SCRIPT KILL and FUNCTION KILL on the control
// connection and forwards the other subcommands, but FUNCTION STATS: it is
// how a client learns which function is busy while it runs (Redis answers
// it then, as it answers the kills), so a RESP2 client's goes on the
// control connection too, where no function can hold it up. On a shared
// connection it waited for ever behind a looping function that another
// client had started on the same connection (unit/functions "test function
// kill": always with one shared connection per master, as with the serve
// loop, and for one client in --backend-conns before). A RESP3 client's is
// still forwarded: the control connection speaks RESP2, whose reply is an
// array where RESP3's is a map. In front of a Redis Cluster the routing
// (the master where a function runs) answers it.
func (h *Handler) scriptOrFunction(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if len(args) == 2 {
		switch keys.LowerName(args[1]) {
		case "kill":
			h.control(c, args, p)
			return
		case "stats":
			if keys.LowerName(args[0]) == "function" && !sessionOf(c).backend.RESP3 && !h.opts.Backend.RoutesByKey() {
				h.control(c, args, p)
				return
			}
		}
	}
	h.forward(c, args, p)
}
