package commands

import (
	"bytes"
	"errors"
	"strings"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

func (h *Handler) echo(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	p.Buf = redcon.AppendBulk(p.Buf, args[1])
	p.Done()
}

func (h *Handler) quit(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	c.CloseAfterReply()
	replyOK(p)
}

// hello negotiates the protocol. A client that asks for RESP3 gets it from
// Redis itself: its requests then travel over connections that said HELLO 3
// to Redis, so every reply is Redis's own RESP3.
func (h *Handler) hello(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	resp3 := s.backend.RESP3
	rest := args[1:]
	if len(rest) > 0 {
		ver, ok := parseInt(rest[0])
		if !ok {
			replyError(p, "ERR Protocol version is not an integer or out of range")
			return
		}
		if ver < 2 || ver > 3 {
			replyError(p, "NOPROTO unsupported protocol version")
			return
		}
		resp3 = ver == 3
		rest = rest[1:]
	}
	var name, user, password []byte
	setName := false
	for len(rest) > 0 {
		opt := strings.ToLower(string(rest[0]))
		switch {
		case opt == "auth" && len(rest) >= 3:
			user, password = rest[1], rest[2]
			rest = rest[3:]
		case opt == "setname" && len(rest) >= 2:
			if !validClientName(rest[1]) {
				replyError(p, "ERR Client names cannot contain spaces, newlines or special characters.")
				return
			}
			name, setName = rest[1], true
			rest = rest[2:]
		default:
			replyError(p, "ERR Syntax error in HELLO option '"+string(rest[0])+"'")
			return
		}
	}
	if user != nil && h.opts.ACL == nil {
		// Redis checks the credentials, on a connection of their own: a
		// round trip, off the serve loop (OffLoop); args stay valid, since
		// nothing more of the client's is read until it is done.
		c.OffLoop(p, func() func() {
			msg := h.checkAuth(user, password)
			return func() {
				defer h.publish(c, s)
				if msg != "" {
					replyError(p, msg)
					return
				}
				// What follows waits for the client's earlier replies if
				// it changes connections (becomeUser).
				h.becomeUser(c, s, string(user), string(password), p, func(msg string) {
					if msg != "" {
						replyError(p, msg)
						return
					}
					h.authenticated(c, string(user))
					h.helloReply(c, s, resp3, setName, name, p)
				})
			}
		})
		return
	}
	if user != nil {
		if msg := h.authenticate(s, user, password); msg != "" {
			replyError(p, msg)
			return
		}
		h.authenticated(c, string(user))
	} else if h.opts.ACL != nil && h.userOf(s) == nil {
		replyError(p, replyHelloNoAuth)
		return
	}
	h.helloReply(c, s, resp3, setName, name, p)
}

// helloReply switches the client to the protocol HELLO asked for and
// answers it.
func (h *Handler) helloReply(c *protocol.Conn, s *session, resp3, setName bool, name []byte, p *resp.Reply) {
	if resp3 != s.backend.RESP3 {
		// The client's later requests go on connections of the other
		// protocol: its earlier ones reach Redis first. On the serve loop,
		// that protocol's connections of the client's database are
		// dialled off it first if they are not open (as SELECT's).
		h.after(c, s, p, func() {
			h.withOpen(c, p, s.backend.Login(), resp3, s.backend.DB, func() { h.switchProtocol(c, s, resp3, setName, name, p) })
		})
		return
	}
	h.switchProtocol(c, s, resp3, setName, name, p)
}

// switchProtocol is helloReply once the client's earlier replies are in.
func (h *Handler) switchProtocol(c *protocol.Conn, s *session, resp3, setName bool, name []byte, p *resp.Reply) {
	if resp3 != s.backend.RESP3 && (s.tx.pinned != nil || s.backend.HasTracker()) {
		// Its own connections (WATCH, CLIENT TRACKING; in front of a
		// Redis Cluster a tracking client's one per master) switch too,
		// as the client's connection does in Redis: tracking goes on, its
		// invalidations then in the new protocol. The reply waits for
		// Redis's: an invalidation for a write another client makes once
		// the client has its reply must come in the new protocol, and
		// Redis drops one meant for a RESP2 connection without a redirect.
		pinned := s.tx.pinned
		c.OffLoop(p, func() func() {
			if pinned != nil {
				h.opts.Metrics.PassthroughCommands.Inc()
				pinned.Hello(resp3)
			}
			s.backend.Hello(resp3)
			return func() {
				defer h.publish(c, s)
				h.answerHello(c, s, resp3, setName, name, p)
			}
		})
		return
	}
	h.answerHello(c, s, resp3, setName, name, p)
}

// answerHello is switchProtocol once the client's own connections have
// switched.
func (h *Handler) answerHello(c *protocol.Conn, s *session, resp3, setName bool, name []byte, p *resp.Reply) {
	s.backend.RESP3 = resp3
	if setName {
		c.SetName(string(name))
	}
	var b []byte
	if resp3 {
		b = append(p.Buf, "%7\r\n"...)
	} else {
		b = redcon.AppendArray(p.Buf, 14)
	}
	b = redcon.AppendBulkString(b, "server")
	b = redcon.AppendBulkString(b, "redis")
	b = redcon.AppendBulkString(b, "version")
	b = redcon.AppendBulkString(b, h.opts.RedisVersion)
	b = redcon.AppendBulkString(b, "proto")
	if resp3 {
		b = redcon.AppendInt(b, 3)
	} else {
		b = redcon.AppendInt(b, 2)
	}
	b = redcon.AppendBulkString(b, "id")
	b = redcon.AppendInt(b, c.ID)
	b = redcon.AppendBulkString(b, "mode")
	b = redcon.AppendBulkString(b, "standalone")
	b = redcon.AppendBulkString(b, "role")
	b = redcon.AppendBulkString(b, "master")
	b = redcon.AppendBulkString(b, "modules")
	b = redcon.AppendArray(b, 0)
	p.Buf = b
	p.Done()
}

// checkAuth passes a client's credentials on to Redis (on a connection of
// their own) and returns the error to reply, "" if Redis accepted them.
// fenceproxy's own users arrive with the security work; until then Redis
// decides, and a Redis with no password answers as it always does.
func (h *Handler) checkAuth(user, password []byte) string {
	err := h.opts.Backend.Masters()[0].CheckAuth(string(user), string(password))
	var re resp.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &re):
		return re.Error()
	}
	return "TRYAGAIN fenceproxy: Redis is unreachable, retry shortly"
}

// auth is AUTH [user] password: checked by fenceproxy's own users when
// authentication is on (never forwarded), else by Redis as before.
func (h *Handler) auth(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if len(args) != 2 && len(args) != 3 {
		replyError(p, "ERR syntax error")
		return
	}
	user := "default"
	var name []byte
	if len(args) == 3 {
		user, name = string(args[1]), args[1]
	}
	password := args[len(args)-1]
	if h.opts.ACL != nil {
		if msg := h.authenticate(sessionOf(c), name, password); msg != "" {
			replyError(p, msg)
			return
		}
		h.authenticated(c, user)
		replyOK(p)
		return
	}
	// Redis checks them, on a connection of their own: a round trip, off
	// the serve loop (OffLoop).
	c.OffLoop(p, func() func() {
		msg := h.checkAuth(name, password)
		return func() {
			s := sessionOf(c)
			defer h.publish(c, s)
			if msg != "" {
				replyError(p, msg)
				return
			}
			h.becomeUser(c, s, user, string(password), p, func(msg string) {
				if msg != "" {
					replyError(p, msg)
					return
				}
				h.authenticated(c, user)
				replyOK(p)
			})
		}
	})
}

// authenticated notes the user a client authenticated as, for CLIENT
// LIST's user= and CLIENT KILL USER.
func (h *Handler) authenticated(c *protocol.Conn, user string) {
	h.clientInfoOf(c, sessionOf(c)).user.Store(&user)
}

// clientOnLoop is CLIENT's onLoop: the subcommands answered from the
// client's connection alone (ID, GETNAME, SETNAME, SETINFO, NO-EVICT,
// NO-TOUCH: what redis-py and Jedis send on every new connection, INFO,
// and REPLY, whose mode marks each later reply's slot silent or not:
// protocol.Conn.SetSilent), from the proxy's table of its clients (LIST),
// and KILL, whose kills the loop carries out after the reply (Conn.Kill
// posts them; a USER filter that Redis must check, without --aclfile, is
// asked off the loop first: clientKill), UNBLOCK (sent on without a
// wait), the tracking subcommands, and any other, which the proxy
// refuses.
func clientOnLoop(*Handler, *protocol.Conn, [][]byte) bool {
	// Every subcommand is answered by the proxy (an unknown or unsupported
	// one refused), or sent on without a wait: UNBLOCK asks the master's
	// CLIENT LIST, then CLIENT UNBLOCK, on its control connection; what
	// CLIENT TRACKING waits for (a connection of the client's own, in front
	// of a Redis Cluster a round trip to every master) is done off the
	// loop (OffLoop).
	return true
}

// killsByUser reports whether a CLIENT KILL names a USER filter.
func killsByUser(args [][]byte) bool {
	for i := 2; i+1 < len(args); i += 2 {
		if strings.EqualFold(string(args[i]), "user") {
			return true
		}
	}
	return false
}

func always(*Handler, *protocol.Conn, [][]byte) bool { return true }

func (h *Handler) client(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	sub := strings.ToLower(string(args[1]))
	switch {
	case sub == "id" && len(args) == 2:
		replyInt(p, c.ID)
	case sub == "reply" && len(args) == 3:
		h.clientReply(c, args, p)
	case sub == "unblock" && (len(args) == 3 || len(args) == 4):
		h.clientUnblock(c, args, p)
	case sub == "unblock" && len(args) > 4:
		replyError(p, "ERR unknown subcommand or wrong number of arguments for 'UNBLOCK'. Try CLIENT HELP.")
	case sub == "getname" && len(args) == 2:
		if c.Name() == "" {
			replyNull(c, p)
			return
		}
		p.Buf = redcon.AppendBulkString(p.Buf, c.Name())
		p.Done()
	case sub == "setname" && len(args) == 3:
		if !validClientName(args[2]) {
			replyError(p, "ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.SetName(string(args[2]))
		replyOK(p)
	case sub == "setinfo" && len(args) == 4:
		s := sessionOf(c)
		switch strings.ToLower(string(args[2])) {
		case "lib-name":
			s.lib.name = string(args[3])
		case "lib-ver":
			s.lib.ver = string(args[3])
		default:
			replyError(p, "ERR Unrecognized option '"+string(args[2])+"'")
			return
		}
		lib := s.lib
		h.clientInfoOf(c, s).lib.Store(&lib)
		replyOK(p)
	case sub == "info" && len(args) == 2:
		h.clientInfoReply(c, args, p)
	case sub == "list":
		// The proxy's own clients (clients.go): Redis's CLIENT LIST would
		// show the proxy's shared connections, which are nobody's.
		h.clientList(c, args, p)
	case sub == "kill" && len(args) >= 3:
		h.clientKill(c, args, p)
	case (sub == "no-evict" || sub == "no-touch") && len(args) == 3:
		// Accepted and without effect: the proxy's clients are not Redis's
		// (no client eviction applies to them, and their reads already go
		// over connections of the proxy). NO-EVICT shows as flag e, as in
		// Redis 7.0 (which has no NO-TOUCH).
		switch strings.ToLower(string(args[2])) {
		case "on", "off":
			if sub == "no-evict" {
				sessionOf(c).noEvict = strings.EqualFold(string(args[2]), "on")
			}
			replyOK(p)
		default:
			replyError(p, "ERR syntax error")
		}
	case sub == "tracking" || sub == "caching" || sub == "getredir" || sub == "trackinginfo":
		h.clientTracking(c, sub, args, p)
	case sub == "id" || sub == "getname" || sub == "setname" || sub == "setinfo" || sub == "info" || sub == "reply" || sub == "unblock" || sub == "kill":
		replyError(p, "ERR wrong number of arguments for 'client|"+sub+"' command")
	default:
		// PAUSE, UNPAUSE, ...: each would act on a connection that other
		// clients share.
		replyError(p, "ERR fenceproxy: CLIENT "+strings.ToUpper(sub)+" is not supported by fenceproxy")
	}
}

// reset is RESET: the connection's state back to a fresh one's.
func (h *Handler) reset(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if s.tx.pinned != nil || s.backend.DB != 0 || s.tx.execSelects {
		// What the client sent before runs on the connections it had.
		h.after(c, s, p, func() { h.resetNow(c, s, p) })
		return
	}
	h.resetNow(c, s, p)
}

// resetNow is RESET once the client's earlier requests have their replies.
func (h *Handler) resetNow(c *protocol.Conn, s *session, p *resp.Reply) {
	if s.backend.HasTracker() {
		// In front of a Redis Cluster its tracker turns tracking off on
		// every master and waits for their answers: off the loop.
		c.OffLoop(p, func() func() {
			s.backend.Untrack()
			return func() { h.resetNow(c, s, p) }
		})
		return
	}
	if s.tx.pinned != nil {
		h.unblocked(c, s)
		s.tx.pinned.Release(false) // it may hold MULTI or WATCH state
	}
	s.tx = txState{}                            // a MULTI not yet sent too
	s.track = trackState{}                      // its connection went with s.tx.pinned
	s.backend.Untrack()                         // or, in front of a Redis Cluster, the Forwarder's
	s.backend.User, s.backend.Password = "", "" // back to the proxy's user's connections
	h.selectZero(c, s, p)
	s.backend.RESP3 = false
	s.auth.user, s.auth.userSet = nil, false // back to the initial user, as Redis
	s.lib = libInfo{}
	s.noEvict = false
	if s.info != nil {
		s.info.lib.Store(nil)
		s.info.user.Store(nil)
	}
	c.SetName("")
	p.Buf = append(p.Buf, "+RESET\r\n"...)
	p.Done()
}

func validClientName(name []byte) bool {
	for _, b := range name {
		if b < '!' || b > '~' {
			return false
		}
	}
	return true
}

// xread forwards XREAD and XREADGROUP unless they would block.
func (h *Handler) xread(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	for _, a := range args[1:] {
		if bytes.EqualFold(a, []byte("streams")) {
			break
		}
		if bytes.EqualFold(a, []byte("block")) {
			h.blocking(c, args, p)
			return
		}
	}
	h.forward(c, args, p)
}
