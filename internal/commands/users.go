package commands

import (
	"bytes"
	"errors"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// Redis users through the proxy. Without fenceproxy's own users
// (--aclfile), AUTH and HELLO ... AUTH are checked by Redis, on a
// connection of their own. A client that authenticates as the user the
// proxy's connections use (BackendUser) goes on with the shared
// connections. One that authenticates as another user goes on with that
// user's shared connections (upstream's databases.go: one set per user,
// database and protocol, opened as that user on first use, shared by that
// user's clients as the proxy's are by its own), and its connections of
// its own (a transaction's, a blocking command's, a tracking client's) and
// its tunnel if it subscribes (or SYNCs, or MONITORs) are opened as that
// user too: Redis then applies that user's ACL to what it sends, scripts'
// redis.call and acl_check_cmd included (unit/scripting "Script ACL
// check"), and ACL WHOAMI names it. It stays that user until RESET, or
// AUTH as another. (Before, each such client had a connection of its own
// for every request: a Redis connection per client, and 1.9-5.5x the
// proxy's CPU per request of the proxy's own user's clients.)
//
// What differs: the lock family runs on the proxy's connections, as the
// proxy's user, whoever the client is (fenceproxy's own users, --aclfile,
// check lock commands per user); the user's password is kept with the
// client's connection while it lasts, to open its tunnel; in front of a
// Redis Cluster (a client's requests go to several masters) the client
// keeps the shared connections.

// authInMulti reports whether args is AUTH or HELLO, which are not sent
// into a transaction.
func authInMulti(args [][]byte) bool {
	return bytes.EqualFold(args[0], []byte("auth")) || bytes.EqualFold(args[0], []byte("hello"))
}

// proxyUser is the Redis user of the proxy's connections.
func (h *Handler) proxyUser() string {
	if h.opts.BackendUser == "" {
		return "default"
	}
	return h.opts.BackendUser
}

// becomeUser puts a client that Redis authenticated as user on the
// connections of that user: the shared ones for the proxy's user, else one
// of its own. It calls done with the error to reply, "" if done; once the
// client's earlier requests have their replies if it changes connections
// (protocol's AfterReplies).
func (h *Handler) becomeUser(c *protocol.Conn, s *session, user, password string, p *resp.Reply, done func(msg string)) {
	if h.opts.Backend.RoutesByKey() {
		done("")
		return
	}
	switch {
	case user == h.proxyUser() && s.backend.User == "":
		done("")
		return
	case s.tx.watching || s.tx.inMulti:
		done("ERR fenceproxy: AUTH as another Redis user cannot be served while WATCH is open; UNWATCH first")
		return
	case s.track.on:
		done("ERR fenceproxy: AUTH as another Redis user cannot be served while CLIENT TRACKING is on; authenticate before CLIENT TRACKING ON")
		return
	}
	// What the client sent before runs as the user it had.
	h.after(c, s, p, func() { h.switchUser(c, s, user, password, p, done) })
}

// switchUser is becomeUser once the client's earlier requests have their
// replies: that user's shared connections in the client's database and
// protocol are opened off the serve loop if they are not open (OffLoop),
// and done called once the client is on them.
func (h *Handler) switchUser(c *protocol.Conn, s *session, user, password string, p *resp.Reply, done func(msg string)) {
	if s.tx.pinned != nil {
		s.tx.pinned.Release(false)
		s.tx.pinned = nil
	}
	s.backend.User, s.backend.Password = "", ""
	if user == h.proxyUser() {
		done("")
		return
	}
	login := upstream.Login{User: user, Password: password}
	resp3, db := s.backend.RESP3, s.backend.DB
	c.OffLoop(p, func() func() {
		err := h.opts.Backend.OpenDB(login, resp3, db)
		return func() {
			defer h.publish(c, s)
			if err != nil {
				var re resp.Error
				if errors.As(err, &re) {
					done(re.Error()) // Redis's own refusal of that user
					return
				}
				done("TRYAGAIN fenceproxy: Redis is unreachable, retry shortly")
				return
			}
			s.backend.User, s.backend.Password = user, password
			done("")
		}
	})
}
