package commands

import (
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// forward sends the request to the master on the connection this client
// always uses, so its requests reach Redis in the order it sent them; in
// front of a Redis Cluster, route picks the master by slot.
func (h *Handler) forward(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if s, _ := c.Session.(*session); s != nil && s.tunnel != nil {
		h.sendTunnel(s, args, p)
		return
	} else if s != nil && s.pinned != nil {
		h.sendPinned(s, args, p)
		return
	}
	if h.opts.Cluster != nil {
		h.route(c, sessionOf(c), args, p)
		return
	}
	var key []byte
	if len(args) > 1 {
		key = args[1]
	}
	h.opts.Metrics.PassthroughCommands.Inc()
	node := h.opts.Backend.MasterForKey(key)
	if s, _ := c.Session.(*session); s != nil && s.resp3 {
		node.Pool3.Conn(c.ID).Do(args, p)
		return
	}
	node.Pool.Conn(c.ID).Do(args, p)
}
