package commands

import (
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// forward sends a request that the proxy does not answer itself to Redis:
// on the client's pub/sub tunnel or its own connection if it has one, else
// by the backend's Forwarder, which knows the topology.
func (h *Handler) forward(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	switch {
	case s.tunnel != nil:
		h.sendTunnel(s, args, p)
	case s.tx.pinned != nil:
		h.sendPinned(s, args, p)
	default:
		h.opts.Metrics.PassthroughCommands.Inc()
		h.opts.Backend.Forward(&s.backend, args, p)
	}
}
