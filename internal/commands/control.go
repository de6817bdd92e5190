package commands

import (
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Requests Redis answers while a script or function is busy: PING (with
// -BUSY, or -LOADING while it loads its data, as Redis answers it), SCRIPT
// KILL and FUNCTION KILL. They go on the backend's control connection
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

// control sends the request on the control connection, after the
// client's earlier requests have their replies if they went another way:
// a client's PING after its own EVAL is answered after it, as on Redis.
func (h *Handler) control(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if !s.order.prev {
		c.WaitReplies(p)
	}
	s.order.last = true
	h.opts.Backend.Control(&s.backend, args, p)
}

// ping is answered by Redis: the proxy cannot know whether it is busy.
func (h *Handler) ping(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if len(args) > 2 {
		replyError(p, "ERR wrong number of arguments for 'ping' command")
		return
	}
	h.control(c, args, p)
}

// scriptOrFunction sends SCRIPT KILL and FUNCTION KILL on the control
// connection and forwards the other subcommands.
func (h *Handler) scriptOrFunction(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if len(args) == 2 && keys.LowerName(args[1]) == "kill" {
		h.control(c, args, p)
		return
	}
	h.forward(c, args, p)
}
