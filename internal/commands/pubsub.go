package commands

import (
	"io"
	"net"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
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

// tunnel carries a subscribed client's requests to Redis; what Redis writes
// back reaches the client by the tunnel's own goroutines.
type tunnel interface {
	send(args [][]byte)
	close()
}

func (h *Handler) subscribe(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if s.inMulti {
		h.sendPinned(s, args, p) // queued: Redis decides
		return
	}
	if h.opts.Cluster != nil {
		sub, err := h.newSubscriber(s.resp3)
		if err != nil {
			replyErr(p, backend.ErrUnavailable)
			return
		}
		sub.start(c.TakeWrites(p))
		s.tunnel = sub
		h.sendTunnel(s, args, p)
		return
	}
	master := h.opts.Backend.Masters()[0]
	redis, err := master.Tunnel(s.resp3)
	if err != nil {
		replyErr(p, unreachable(master))
		return
	}
	client := c.TakeWrites(p)
	s.tunnel = rawTunnel{redis}
	go func() {
		io.Copy(client, redis)
		// Redis closed (QUIT) or failed: the client must see the end too.
		client.Close()
	}()
	h.sendTunnel(s, args, p)
}

// sendTunnel passes a request through the tunnel; its reply comes from Redis.
func (h *Handler) sendTunnel(s *session, args [][]byte, p *resp.Reply) {
	h.opts.Metrics.PassthroughCommands.Inc()
	s.tunnel.send(args)
	p.Done()
}

// rawTunnel is a standalone master's connection, copied to the client as is.
type rawTunnel struct{ net.Conn }

func (t rawTunnel) send(args [][]byte) {
	if _, err := t.Write(resp.AppendCommand(nil, args)); err != nil {
		t.Close() // the copier ends and closes the client
	}
}

func (t rawTunnel) close() { t.Close() }

func closeTunnel(t tunnel) {
	if t != nil {
		t.close()
	}
}
