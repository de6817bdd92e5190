package commands

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// Pub/sub. A subscribed client reads a stream: Redis pushes its messages,
// including those PUBLISHed from Lua, and answers (P|S)SUBSCRIBE with one
// reply per channel. So the first (un)subscribe command turns the client's
// connection into a tunnel to Redis (upstream.Tunnel): its requests are
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
	h.openTunnel(c, s, args, p, tunnelPubSub, nil, func() streamFilter {
		return &pubsubRelay{own: h.own, ci: h.clientInfoOf(c, s)}
	})
}

// openTunnel turns the client's connection into a tunnel to Redis
// (SUBSCRIBE, MONITOR, SYNC) and sends args through it. The tunnel's
// connection is dialled where that may wait (on the serve loop, a
// goroutine of its own: OffLoop), and alsoOff (if set) runs there after a
// successful dial; then, once what the client sent before has its replies,
// its writes are taken for the stream filter makes of Redis's, and the
// session records the tunnel of kind.
func (h *Handler) openTunnel(c *protocol.Conn, s *session, args [][]byte, p *resp.Reply, kind tunnelKind, alsoOff func(), filter func() streamFilter) {
	var tunnel upstream.Tunnel
	var err error
	c.OffLoop(p, func() func() {
		if tunnel, err = h.opts.Backend.Subscribe(&s.backend); err == nil && alsoOff != nil {
			alsoOff()
		}
		return func() {
			defer h.publish(c, s)
			if err != nil {
				replyErr(p, err)
				return
			}
			tunnel.Start(&relayConn{Conn: c.TakeWrites(p), filter: filter()})
			s.tunnel, s.tunnelKind = tunnel, kind
			if kind == tunnelPubSub {
				h.noteReceiver(c, tunnel)
			}
			h.sendTunnel(s, args, p)
		}
	})
}

// subscribeOnLoop: a subscription is the serve loop's: its connection is
// dialled off the loop (openTunnel's OffLoop), and so is any other a
// request needs in front of a Redis Cluster (a shard channel's master, a
// keyspace channel's mirrors: sendTunnel); the loop writes the stream
// (protocol's outbox).
func subscribeOnLoop(*Handler, *protocol.Conn, [][]byte) bool { return true }

// refuseOwnSubscribed refuses one of the proxy's own commands (the lock
// family) on a subscribed connection, where Redis writes every reply: sent
// on, it was answered Redis's "unknown command", as if the proxy were not
// there. A reply of the proxy's own could not be placed in order among
// the tunnel's, so Redis is sent an unknown command, subscribedRefusal,
// carrying the command's name, and the tunnel's filter (pubsubRelay)
// rewrites Redis's refusal of it into the reply a client expects: over
// RESP2 Redis's own for a command not allowed in subscribed mode; over
// RESP3, where Redis runs any command there, the proxy's.
func (h *Handler) refuseOwnSubscribed(s *session, cmd *command, p *resp.Reply) {
	marker := subscribedRefusalRESP2
	if s.backend.RESP3 {
		marker = subscribedRefusalRESP3
	}
	h.sendTunnel(s, [][]byte{[]byte(marker), []byte(cmd.name)}, p)
}

// The unknown commands refuseOwnSubscribed sends, and Redis's refusal of
// them up to the command's name (then "' \r\n").
const (
	subscribedRefusalRESP2 = "fenceproxy.refused-in-subscribed-mode"
	subscribedRefusalRESP3 = "fenceproxy.refused-in-subscribed-mode-resp3"
	unknownCommandHead     = "-ERR unknown command '"
	unknownCommandArgs     = "', with args beginning with: '"
)

// subscribedRefusal is the reply that replaces Redis's refusal msg of
// refuseOwnSubscribed's unknown command, or nil if msg is another reply.
func subscribedRefusal(msg []byte) []byte {
	if len(msg) < len(unknownCommandHead) || msg[0] != '-' || !bytes.HasPrefix(msg, []byte(unknownCommandHead+subscribedRefusalRESP2)) {
		return nil
	}
	marker, rest, ok := bytes.Cut(msg[len(unknownCommandHead):], []byte(unknownCommandArgs))
	name, _, ok2 := bytes.Cut(rest, []byte("' "))
	if !ok || !ok2 {
		return nil
	}
	switch string(marker) {
	case subscribedRefusalRESP2:
		return []byte("-ERR Can't execute '" + string(name) + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n")
	case subscribedRefusalRESP3:
		return []byte("-ERR fenceproxy: " + strings.ToUpper(string(name)) + " cannot run on a subscribed connection: its replies come from Redis, which does not know the lock family; send it on another connection\r\n")
	}
	return nil
}

// sendTunnel passes a request through the tunnel; its reply comes from Redis.
func (h *Handler) sendTunnel(s *session, args [][]byte, p *resp.Reply) {
	if s.backend.RESP3 && isClientID(args) {
		args = clientIDByScript(s.backend.ID)
	}
	h.opts.Metrics.PassthroughCommands.Inc()
	if s.tunnel.MayDial(args) {
		// In front of a Redis Cluster: a shard channel's master or a
		// mirror is dialled first, which the serve loop must not wait
		// for (OffLoop; the client's later requests follow it).
		tunnel := s.tunnel
		s.backend.Conn.OffLoop(p, func() func() {
			tunnel.Send(args)
			return p.Done
		})
		return
	}
	s.tunnel.Send(args)
	p.Done()
}

// A client's CLIENT ID on its tunnel. Redis answers every request there, so
// it would name the tunnel's Redis connection, not the client: the id would
// change when the client subscribes, and CLIENT TRACKING REDIRECT, which
// takes the proxy's ids, would refuse it (Redisson's TrackingListener asks
// CLIENT ID on its subscribed RESP3 connection and redirects to it). So the
// request becomes a script that returns the proxy's id: Redis still writes
// the reply, in order among the tunnel's pushes. Only over RESP3, where a
// subscribed connection runs any command; a RESP2 subscriber gets Redis's
// refusal of CLIENT ID itself, which a script's refusal would misname. (A
// RESP2 client that has unsubscribed from everything still gets the
// tunnel's Redis id: the proxy does not follow the subscription count.)
// One script body for every id, so Redis caches one script.
const clientIDScript = "return tonumber(ARGV[1])"

func isClientID(args [][]byte) bool {
	return len(args) == 2 && bytes.EqualFold(args[0], []byte("client")) && bytes.EqualFold(args[1], []byte("id"))
}

func clientIDByScript(id int64) [][]byte {
	return [][]byte{[]byte("EVAL"), []byte(clientIDScript), []byte("0"), []byte(strconv.FormatInt(id, 10))}
}
