package commands

import (
	"io"
	"net"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
)

// Pub/sub. A subscribed client reads a stream: Redis pushes its messages,
// including those PUBLISHed from Lua, and answers (P|S)SUBSCRIBE with one
// reply per channel. So the first (un)subscribe command turns the client's
// connection into a tunnel to a Redis connection of its own: its requests
// are still parsed (within limits) and sent on, and everything Redis writes
// back is copied to the client byte for byte, by one goroutine. Redis itself
// then gives every answer: subscribe confirmations, unsubscribing from a
// channel never subscribed, PING's "pong" while subscribed, and the error
// for other commands in subscribed mode. The tunnel lasts as long as the
// client's connection: clients keep pub/sub on connections of its own.

var subscribeCommands = []string{
	"subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe",
}

func (h *Handler) subscribe(c *protocol.Conn, args [][]byte, p *protocol.Pending) {
	s := sessionOf(c)
	if s.inMulti {
		h.sendPinned(s, args, p) // queued: Redis decides
		return
	}
	// In a Redis Cluster every node relays every PUBLISH, so SUBSCRIBE may
	// go anywhere; SSUBSCRIBE must reach its shard channel's master.
	node := h.nodeFor(args)
	if node == nil {
		replyError(p, "TRYAGAIN fenceproxy: Redis is unreachable, retry shortly")
		return
	}
	redis, err := node.Tunnel(s.resp3)
	if err != nil {
		replyError(p, "TRYAGAIN fenceproxy: Redis is unreachable, retry shortly")
		return
	}
	client := c.TakeWrites(p)
	s.tunnel = redis
	go func() {
		io.Copy(client, redis)
		// Redis closed (QUIT) or failed: the client must see the end too.
		client.Close()
	}()
	h.sendTunnel(s, args, p)
}

// sendTunnel passes a request through the tunnel; its reply comes from Redis.
func (h *Handler) sendTunnel(s *session, args [][]byte, p *protocol.Pending) {
	h.opts.Metrics.PassthroughCommands.Inc()
	if _, err := s.tunnel.Write(backend.AppendCommand(nil, args)); err != nil {
		s.tunnel.Close() // the copier ends and closes the client
	}
	p.Done()
}

func closeTunnel(t net.Conn) {
	if t != nil {
		t.Close()
	}
}
