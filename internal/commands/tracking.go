package commands

import (
	"bytes"
	"strconv"
	"strings"
	"sync"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// Client-side caching: CLIENT TRACKING, CACHING, GETREDIR, TRACKINGINFO.
//
// Tracking is Redis's, per connection. In front of a Redis Cluster the
// Forwarder keeps a tracking client's connections of its own, one per
// master, and routes its requests over them (package upstream/tracking): this
// file only turns it on and off (trackState.conn false). In front of a
// standalone master a client that turns it on gets a
// connection of its own to Redis (Forwarder.Track, see cluster's
// tracking.go) and keeps it while tracking lasts: every request it forwards
// goes there (it is the client's pinned connection, never given back while
// tracking is on), so Redis tracks exactly the keys this client read, and
// OPTIN/OPTOUT with CLIENT CACHING, BCAST and PREFIX, and NOLOOP (the
// client's own writes travel on the same connection) mean what they mean
// in Redis. Its RESP3 invalidation pushes are relayed to the client
// (protocol.Conn.Push), never ahead of a reply Redis sent before them, and
// without the proxy's own keys (ownkeys.go). If
// that connection is lost, the client is disconnected, since nothing can
// tell it any more what to drop from its cache.
//
// REDIRECT id names one of the proxy's clients; it must hold a pub/sub
// tunnel (subscribed, as RESP2 clients are to __redis__:invalidate), whose
// Redis connection is what Redis is told to redirect to. CLIENT GETREDIR
// answers the proxy's id.
//
// What differs from Redis: the lock family's writes (and FENCE.EXEC's
// command) travel on the proxy's own connections, so NOLOOP does not hide
// their invalidations; a command the proxy answers itself does not end a
// CLIENT CACHING yes/no as a command would in Redis; inside MULTI, CLIENT
// TRACKING and CACHING are refused.

// trackState is the client's tracking: on, bcast (BCAST mode, CLIENT
// LIST's flag B), and the proxy id it redirects to (0: none); conn: its
// connection of its own is s.tx.pinned (a standalone master's, or the
// connection as its Redis user; in front of a Redis Cluster the Forwarder
// keeps one per master and routes the client's requests itself).
type trackState struct {
	on       bool
	bcast    bool
	redirect int64
	conn     bool
}

// receivers maps a proxy client's id to the Redis client id of its pub/sub
// tunnel's connection, for REDIRECT.
type receivers struct{ m sync.Map }

// redisIDer is a tunnel that knows its Redis connection's client id.
type redisIDer interface{ RedisID() int64 }

// noteReceiver records a client's new tunnel as a redirection target.
func (h *Handler) noteReceiver(c *protocol.Conn, t upstream.Tunnel) {
	if r, ok := t.(redisIDer); ok && r.RedisID() != 0 {
		h.receivers.m.Store(c.ID, r.RedisID())
	}
}

func (h *Handler) clientTracking(c *protocol.Conn, sub string, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	switch sub {
	case "tracking":
		h.tracking(c, s, args, p)
	case "getredir":
		switch {
		case len(args) != 2:
			replyError(p, "ERR wrong number of arguments for 'client|getredir' command")
		case !s.track.on:
			replyInt(p, -1)
		default:
			replyInt(p, s.track.redirect)
		}
	case "trackinginfo":
		if len(args) != 2 || !s.track.on {
			h.forward(c, args, p) // a shared connection: tracking off, or Redis's arity error
			return
		}
		if !s.track.conn {
			h.forward(c, args, h.redirectShown(s, p)) // the Forwarder's tracking connections
			return
		}
		h.sendPinned(s, args, h.redirectShown(s, p))
	default: // caching: Redis's answer, on the client's own connection if it tracks
		h.forward(c, args, p)
	}
}

func (h *Handler) tracking(c *protocol.Conn, s *session, args [][]byte, p *resp.Reply) {
	if len(args) < 3 {
		replyError(p, "ERR wrong number of arguments for 'client|tracking' command")
		return
	}
	switch strings.ToLower(string(args[2])) {
	case "off":
		if !s.track.on {
			replyOK(p)
			return
		}
		conn := s.track.conn
		s.track = trackState{}
		if !conn {
			h.forward(c, args, p) // the Forwarder ends its tracking connections
			return
		}
		h.sendPinned(s, args, p) // the connection goes when the batch ends
		return
	case "on":
	default:
		replyError(p, "ERR syntax error")
		return
	}
	fwd := append([][]byte(nil), args...)
	var redirect int64
	redirectAt, redirectRedisID := 0, int64(0)
	for i := 3; i < len(fwd); i++ {
		if !bytes.EqualFold(fwd[i], []byte("redirect")) || i+1 == len(fwd) {
			continue
		}
		id, ok := parseInt(fwd[i+1])
		if !ok {
			replyError(p, replyNotInteger)
			return
		}
		redisID, ok := h.receivers.m.Load(id)
		if !ok {
			if h.clientExists(c, id) {
				replyError(p, "ERR fenceproxy: CLIENT TRACKING REDIRECT "+strconv.FormatInt(id, 10)+
					" needs that client to be subscribed first (SUBSCRIBE __redis__:invalidate)")
			} else {
				replyError(p, "ERR The client ID you want redirect to does not exist")
			}
			return
		}
		redirect, redirectAt, redirectRedisID = id, i+1, redisID.(int64)
		i++
	}
	// on finishes CLIENT TRACKING ON once the client is on the connection
	// that tracks (conn: one of its own).
	on := func(conn bool) {
		bcast := false
		for _, a := range args[3:] {
			bcast = bcast || bytes.EqualFold(a, []byte("bcast"))
		}
		s.track = trackState{on: true, bcast: bcast, redirect: redirect, conn: conn}
		if !conn {
			// In front of a Redis Cluster: REDIRECT keeps the proxy's id, made
			// the target's connection on each master there.
			h.forward(c, fwd, p)
			return
		}
		if redirectAt > 0 {
			fwd[redirectAt] = []byte(strconv.FormatInt(redirectRedisID, 10))
		}
		h.sendPinned(s, fwd, p)
	}
	// track switches the client to a connection that tracks, if it needs
	// one, once what it sent before has its replies.
	track := func() {
		switch {
		case !s.track.on:
			// What the client sent before runs before the switch, and the
			// connection is dialled off the serve loop (OffLoop). No push
			// comes before EnablePushes: the connection tracks nothing
			// until on sends CLIENT TRACKING ON on it.
			h.after(c, s, p, func() {
				c.OffLoop(p, func() func() {
					own, err := h.opts.Backend.Track(&s.backend, h.pushHiding(c), c.EndPushes)
					return func() {
						defer h.publish(c, s)
						if err != nil {
							replyErr(p, err)
							return
						}
						c.EnablePushes()
						if own != nil {
							s.tx.pinned = own
						}
						on(own != nil)
					}
				})
			})
		default:
			on(s.track.conn)
		}
	}
	if s.tx.pinned != nil && !s.track.on {
		h.after(c, s, p, func() {
			if s.tx.watching {
				replyError(p, "ERR fenceproxy: CLIENT TRACKING ON cannot be sent while WATCH is open; UNWATCH first")
				return
			}
			s.tx.pinned.Release(true)
			s.tx.pinned = nil
			track()
		})
		return
	}
	track()
}

// pushHiding relays a tracking connection's pushes to c, less the
// invalidations of the proxy's own keys (ownkeys.go).
func (h *Handler) pushHiding(c *protocol.Conn) func([]byte) {
	return func(push []byte) {
		if msg := h.own.filter(push); msg != nil {
			c.Push(msg)
		}
	}
}

// clientExists reports whether the proxy has a client with this id.
func (h *Handler) clientExists(c *protocol.Conn, id int64) bool {
	found := false
	c.Server().Each(func(o *protocol.Conn) {
		if o.ID == id {
			found = true
		}
	})
	return found
}

// redirectShown wraps the reply slot of CLIENT TRACKINGINFO so that its
// redirect field names the proxy's client, not Redis's connection.
func (h *Handler) redirectShown(s *session, p *resp.Reply) *resp.Reply {
	if s.track.redirect == 0 {
		return p
	}
	proxyID := s.track.redirect
	start := len(p.Buf)
	var sub *resp.Reply
	sub = resp.NewReplyFunc(func() {
		field := []byte("$8\r\nredirect\r\n:")
		if i := bytes.Index(sub.Buf[start:], field); i >= 0 {
			at := start + i + len(field)
			if end := bytes.Index(sub.Buf[at:], []byte("\r\n")); end >= 0 {
				rest := append([]byte(strconv.FormatInt(proxyID, 10)), sub.Buf[at+end:]...)
				sub.Buf = append(sub.Buf[:at], rest...)
			}
		}
		p.Buf, p.Err = sub.Buf, sub.Err
		p.Done()
	})
	sub.Buf = p.Buf
	return sub
}

// trackingInMulti reports whether args is a CLIENT TRACKING or CACHING,
// which are not sent into a transaction: EXEC would turn tracking on for a
// connection the proxy gives to other clients afterwards.
func trackingInMulti(args [][]byte) bool {
	return len(args) >= 2 && bytes.EqualFold(args[0], []byte("client")) &&
		(bytes.EqualFold(args[1], []byte("tracking")) || bytes.EqualFold(args[1], []byte("caching")))
}
