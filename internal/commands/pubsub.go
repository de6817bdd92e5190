package commands

import (
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Pub/sub. A subscribed client reads a stream: Redis pushes its messages,
// including those PUBLISHed from Lua, and answers (P|S)SUBSCRIBE with one
// reply per channel. So the first (un)subscribe command turns the client's
// connection into a tunnel to Redis (cluster.Tunnel): its requests are
// still parsed (within limits) and sent on, and what Redis writes back is
// relayed to the client byte for byte. Redis itself then gives every
// answer: subscribe confirmations, unsubscribing from a channel never
// subscribed, PING's "pong" while subscribed, and the error for other
// commands in subscribed mode. The tunnel lasts as long as the client's
// connection: clients keep pub/sub on connections of its own. The one
// thing left out is what Redis says of the proxy's own keys (ownkeys.go).

func (h *Handler) subscribe(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if s.tx.inMulti {
		h.sendPinned(s, args, p) // queued: Redis decides
		return
	}
	tunnel, err := h.opts.Backend.Subscribe(&s.backend)
	if err != nil {
		replyErr(p, err)
		return
	}
	tunnel.Start(&relayConn{Conn: c.TakeWrites(p), filter: &pubsubRelay{own: h.own, ci: h.clientInfoOf(c, s)}})
	s.tunnel = tunnel
	h.noteReceiver(c, tunnel)
	h.sendTunnel(s, args, p)
}

// sendTunnel passes a request through the tunnel; its reply comes from Redis.
func (h *Handler) sendTunnel(s *session, args [][]byte, p *resp.Reply) {
	h.opts.Metrics.PassthroughCommands.Inc()
	s.tunnel.Send(args)
	p.Done()
}
