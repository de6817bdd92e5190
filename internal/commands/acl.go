package commands

import (
	"bytes"
	"strings"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/auth"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Client authentication and ACL users (package auth). With Options.ACL nil
// none of this runs: ServeCommand pays one nil check, and AUTH and HELLO
// AUTH keep asking the backend as before. With it set, fenceproxy owns
// authentication: a client's AUTH is checked against the ACL file and never
// forwarded (the proxy talks to Redis with its own --backend-user), and
// every request is checked against the connection's user before it runs:
// the command, its keys (from the backend's COMMAND key specs), its
// channels, and for the lock family its resource, which is matched against
// the same key patterns. Replies are Redis 7.0's own texts.

// Redis 7.0's error texts (checked against redis-server 7.0.15).
const (
	replyNoAuth      = "NOAUTH Authentication required."
	replyHelloNoAuth = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
	replyWrongPass   = "WRONGPASS invalid username-password pair or user is disabled."
	replyNoDefault   = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	replyNoPermKey   = "NOPERM this user has no permissions to access one of the keys used as arguments"
	replyNoPermChan  = "NOPERM this user has no permissions to access one of the channels used as arguments"
)

func noPermCommand(name string) string {
	return "NOPERM this user has no permissions to run the '" + name + "' command"
}

// ACLCommands is the command universe auth.Compile resolves rules against:
// every command and subcommand of the backend's COMMAND reply with its
// categories, then fenceproxy's own commands with theirs (from the command
// table: @lock and @read or @write for the lock family).
func ACLCommands(t *keys.Table) []auth.Command {
	var cmds []auth.Command
	for _, name := range t.Names() {
		cmds = append(cmds, auth.Command{Name: name, Categories: t.Lookup(name).Categories()})
	}
	for i := range table {
		if e := &table[i]; e.flags&flagOwn != 0 {
			cmds = append(cmds, auth.Command{Name: e.name, Categories: e.categories})
		}
	}
	return cmds
}

// userOf returns the connection's user, nil if it has not authenticated
// (and "default" needs a password). A new or RESET connection starts as
// acl.Initial().
func (h *Handler) userOf(s *session) *auth.User {
	if !s.auth.userSet {
		s.auth.user, s.auth.userSet = h.opts.ACL.Initial(), true
	}
	return s.auth.user
}

// authorize checks a request against the connection's user. It reports
// whether the request may go on; if not, it has replied.
func (h *Handler) authorize(c *protocol.Conn, args [][]byte, p *resp.Reply) bool {
	s := sessionOf(c)
	u := h.userOf(s)
	var lower [32]byte
	name := lowerInto(lower[:0], args[0])
	switch string(name) {
	case "auth", "hello":
		switch {
		case s.tunnel != nil:
			// The connection is a tunnel to Redis now: AUTH would go to
			// Redis, and the client's credentials never do.
			h.refuse(s, p, "ERR fenceproxy: AUTH and HELLO cannot be used on a connection in pub/sub mode; authenticate before subscribing")
			return false
		case s.tx.inMulti:
			// Queued, it would run in Redis at EXEC.
			s.tx.denied = true
			replyError(p, "ERR fenceproxy: AUTH and HELLO cannot be part of a transaction; authenticate before MULTI")
			return false
		}
		return true
	case "quit", "reset":
		// With AUTH and HELLO, Redis's no-auth commands: allowed to
		// everyone, never checked against the user's commands.
		return true
	}
	if u == nil {
		if msg := h.commandError(args); msg != "" {
			replyError(p, msg) // Redis checks the command before the user
			return false
		}
		h.authm.Denials.WithLabelValues("noauth").Inc()
		replyError(p, replyNoAuth)
		return false
	}
	if string(name) == "acl" {
		if s.tunnel != nil {
			h.refuse(s, p, "ERR fenceproxy: ACL is not available on a connection in pub/sub mode")
			return false
		}
		h.acl(c, s, u, args, p)
		return false
	}
	msg := h.permitted(u, s, args, true)
	if msg == "" {
		return true
	}
	if s.tx.inMulti {
		s.tx.denied = true // as Redis flags the transaction: EXEC aborts
	}
	reason := "command"
	switch msg {
	case replyNoPermKey:
		reason = "key"
	case replyNoPermChan:
		reason = "channel"
	}
	h.authm.Denials.WithLabelValues(reason).Inc()
	h.refuse(s, p, msg)
	return false
}

// refuse replies msg to a refused request. On a pub/sub connection Redis
// writes every reply (the tunnel copies its bytes), so a reply of the
// proxy's own could not be placed in order; there the request becomes one
// that Redis refuses in order without running anything, an unknown
// command carrying msg: the client reads "-ERR unknown command
// 'fenceproxy.refused', with args beginning with: '<msg>'".
func (h *Handler) refuse(s *session, p *resp.Reply, msg string) {
	if s.tunnel != nil {
		h.sendTunnel(s, [][]byte{[]byte("fenceproxy.refused"), []byte(msg)}, p)
		return
	}
	replyError(p, msg)
}

// permitted returns the NOPERM reply for a request u may not make, "" if
// it may. Requests the proxy or Redis will refuse anyway for their arity
// pass, so that the client gets that error as Redis gives it. outer is false
// for the command inside FENCE.EXEC. It does not allocate unless it refuses.
func (h *Handler) permitted(u *auth.User, s *session, args [][]byte, outer bool) string {
	var lower [32]byte
	lname := lowerInto(lower[:0], args[0])
	if outer {
		if cmd := lookup(lname); cmd != nil && cmd.flags&flagLock != 0 {
			return h.permittedLock(u, s, cmd, args)
		}
	}
	cmd := h.opts.Keys.LookupBytes(args[0])
	sub := cmd.Sub(args)
	if sub == nil {
		// Unknown to the backend's COMMAND (or an unknown subcommand):
		// Redis would say so, but its keys cannot be found, so only a user
		// who may run everything on every key sends it on.
		if u.AllCommands() && u.AllKeys() {
			return ""
		}
		if cmd != nil && len(args) > 1 {
			return noPermCommand(cmd.Name() + "|" + lowerName(args[1]))
		}
		return noPermCommand(string(lname))
	}
	if !arityOK(sub.Arity(), len(args)) {
		return ""
	}
	if !u.CanRun(sub.Name()) {
		return noPermCommand(sub.Name())
	}
	if !u.AllKeys() {
		refs := aclKeyRefs(cmd, sub.Name(), s.auth.keyRefs[:0], args)
		if cap(refs) <= 1024 {
			s.auth.keyRefs = refs[:0] // kept for the next request, unless huge
		}
		for _, r := range refs {
			if !u.CanKey(args[r.Pos], r.Read, r.Write) {
				return replyNoPermKey
			}
		}
		if name := sub.Name(); name == "sort" || name == "sort_ro" {
			if msg := sortPermitted(u, args); msg != "" {
				return msg
			}
		}
	}
	if !u.AllChannels() {
		if msg := channelsPermitted(u, sub.Name(), args); msg != "" {
			return msg
		}
	}
	return ""
}

// aclKeyRefs is cmd.KeyRefs, except for the commands whose key flags
// Redis 7.0 takes from C code rather than from COMMAND's key specs (their
// specs say VARIABLE_FLAGS or cannot be applied): SET, BITFIELD, SORT and
// SORT_RO, whose keys and flags are computed here as Redis's setGetKeys,
// bitfieldGetKeys and sortGetKeys compute them (db.c). Without this, SET
// would need read access for its ACCESS flag (it reads only with GET) and
// SORT ... STORE dst would not check dst.
func aclKeyRefs(cmd *keys.Command, name string, dst []keys.KeyRef, args [][]byte) []keys.KeyRef {
	switch name {
	case "set":
		if len(args) < 2 {
			return dst
		}
		for _, a := range args[min(3, len(args)):] {
			if strings.EqualFold(string(a), "get") {
				return append(dst, keys.KeyRef{Pos: 1, Read: true, Write: true})
			}
		}
		return append(dst, keys.KeyRef{Pos: 1, Write: true})
	case "bitfield":
		if len(args) < 2 {
			return dst
		}
		readonly := true
	scan:
		for i := 2; i < len(args); i++ {
			left := len(args) - i - 1
			switch a := string(args[i]); {
			case strings.EqualFold(a, "get") && left >= 2:
				i += 2
			case (strings.EqualFold(a, "set") || strings.EqualFold(a, "incrby")) && left >= 3:
				readonly = false
				break scan
			case strings.EqualFold(a, "overflow") && left >= 1:
				i++
			default:
				readonly = false // a syntax error: Redis assumes a write
				break scan
			}
		}
		return append(dst, keys.KeyRef{Pos: 1, Read: true, Write: !readonly})
	case "sort", "sort_ro":
		if len(args) < 2 {
			return dst
		}
		dst = append(dst, keys.KeyRef{Pos: 1, Read: true})
		store := 0
		for i := 2; i < len(args); i++ {
			switch a := string(args[i]); {
			case strings.EqualFold(a, "limit"):
				i += 2
			case strings.EqualFold(a, "get"), strings.EqualFold(a, "by"):
				i++
			case strings.EqualFold(a, "store") && i+1 < len(args):
				store = i + 1 // the last STORE counts, as in SORT
			}
		}
		if store > 0 {
			dst = append(dst, keys.KeyRef{Pos: store, Write: true})
		}
		return dst
	}
	return cmd.KeyRefs(dst, args)
}

// sortPermitted refuses SORT's BY pattern and GET, which read keys that
// are not arguments, to a user who cannot read every key, with Redis
// 7.0's texts (Redis checks this inside SORT, as the calling user; the
// proxy's backend user would not be refused).
func sortPermitted(u *auth.User, args [][]byte) string {
	if u.CanKey([]byte("*"), true, false) {
		return "" // Redis's test of full key access
	}
	for i := 2; i < len(args); i++ {
		left := len(args) - i - 1
		switch a := string(args[i]); {
		case strings.EqualFold(a, "limit") && left >= 2:
			i += 2
		case strings.EqualFold(a, "store") && left >= 1:
			i++
		case strings.EqualFold(a, "by") && left >= 1:
			if bytes.IndexByte(args[i+1], '*') >= 0 {
				return "ERR BY option of SORT denied due to insufficient ACL permissions."
			}
			i++
		case strings.EqualFold(a, "get") && left >= 1:
			return "ERR GET option of SORT denied due to insufficient ACL permissions."
		}
	}
	return ""
}

// channelsPermitted checks the channels of the pub/sub commands Redis 7.0
// checks (a PSUBSCRIBE pattern must be one of the user's patterns,
// literally).
func channelsPermitted(u *auth.User, name string, args [][]byte) string {
	var chans [][]byte
	literal := false
	switch name {
	case "publish", "spublish":
		chans = args[1:2]
	case "subscribe", "ssubscribe":
		chans = args[1:]
	case "psubscribe":
		chans, literal = args[1:], true
	}
	for _, ch := range chans {
		if !u.CanChannel(ch, literal) {
			return replyNoPermChan
		}
	}
	return ""
}

// permittedLock checks a lock-family request: the command, then its
// resource against the user's key patterns (read, and written too by the
// commands that change its lease), then FENCE.EXEC's command as if the
// user sent it.
func (h *Handler) permittedLock(u *auth.User, s *session, cmd *command, args [][]byte) string {
	if !arityOK(cmd.arity, len(args)) {
		return ""
	}
	if !u.CanRun(cmd.name) {
		return noPermCommand(cmd.name)
	}
	if cmd.resource == 0 {
		return "" // LOCK.TOP, LOCK.SLOWLOG: answered only with resources the user may read
	}
	if !u.CanKey(args[cmd.resource], true, cmd.flags&flagWritesResource != 0) {
		return replyNoPermKey
	}
	if cmd.fenced > 0 {
		switch lowerName(args[cmd.fenced]) {
		case "auth", "hello", "acl":
			// Redis would refuse them in a script anyway; a client's
			// credentials must not travel to it as the script's arguments.
			return "ERR fenceproxy: FENCE.EXEC cannot run AUTH, HELLO or ACL"
		}
		return h.permitted(u, s, args[cmd.fenced:], false)
	}
	return ""
}

// acl answers ACL with authentication on: WHOAMI here, and the rest
// refused, since users live in --aclfile.
func (h *Handler) acl(c *protocol.Conn, s *session, u *auth.User, args [][]byte, p *resp.Reply) {
	sub := ""
	if len(args) > 1 {
		sub = lowerName(args[1])
	}
	if s.tx.inMulti {
		s.tx.denied = true
		replyError(p, "ERR fenceproxy: ACL is answered by fenceproxy and cannot be queued in a transaction")
		return
	}
	switch {
	case len(args) < 2:
		replyError(p, "ERR wrong number of arguments for 'acl' command")
	case sub == "whoami" && len(args) != 2:
		replyError(p, "ERR wrong number of arguments for 'acl|whoami' command")
	case sub == "whoami":
		if !u.CanRun("acl|whoami") {
			replyError(p, noPermCommand("acl|whoami"))
			return
		}
		p.Buf = redcon.AppendBulkString(p.Buf, u.Name())
		p.Done()
	default:
		replyError(p, "ERR fenceproxy: ACL "+strings.ToUpper(clipName(sub))+" is not available: fenceproxy's users are managed in its --aclfile (restart to reload); ACL WHOAMI is answered")
	}
}

// clipName keeps a client's argument short in an error reply.
func clipName(s string) string {
	if len(s) > 32 {
		return s[:32]
	}
	return s
}

// authenticate is AUTH and HELLO's AUTH with authentication on. It returns
// the error to reply, "" on success (the connection is then user's).
func (h *Handler) authenticate(s *session, user, password []byte) string {
	if user == nil {
		if h.opts.ACL.Default().NoPass() {
			return replyNoDefault
		}
		user = []byte(auth.DefaultUser)
	}
	u := h.opts.ACL.Authenticate(user, password)
	if u == nil {
		h.authm.Failures.Inc()
		return replyWrongPass
	}
	s.auth.user, s.auth.userSet = u, true
	return ""
}

// commandError is Redis's answer to an unknown command or subcommand, or
// to a wrong number of arguments, "" for a command it would go on with:
// Redis gives these before NOAUTH (processCommand). Redis's commands are
// looked up in its COMMAND table (keys), the proxy's own in this
// package's.
func (h *Handler) commandError(args [][]byte) string {
	if e := lookupOwn(args[0]); e != nil {
		if !arityOK(e.arity, len(args)) {
			return "ERR wrong number of arguments for '" + e.name + "' command"
		}
		return ""
	}
	if h.opts.Keys == nil {
		return "" // Redis's table is unknown: no command is judged
	}
	cmd := h.opts.Keys.LookupBytes(args[0])
	if cmd == nil {
		var b strings.Builder
		for _, a := range args[1:] {
			if b.Len() >= 128 {
				break
			}
			b.WriteString("'" + clip(string(a), max(128-b.Len(), 0)) + "' ")
		}
		return "ERR unknown command '" + clip(string(args[0]), 128) + "', with args beginning with: " + b.String()
	}
	if len(args) > 1 && len(cmd.Subcommands()) > 0 {
		sub := cmd.Sub(args)
		if sub == nil {
			return "ERR unknown subcommand '" + clip(string(args[1]), 128) + "'. Try " + strings.ToUpper(cmd.Name()) + " HELP."
		}
		cmd = sub
	}
	if !arityOK(cmd.Arity(), len(args)) {
		return "ERR wrong number of arguments for '" + cmd.Name() + "' command"
	}
	return ""
}

// lookupOwn is the table entry of one of the proxy's own commands, nil
// for any other.
func lookupOwn(name []byte) *command {
	var lower [32]byte
	if len(name) > len(lower) {
		return nil
	}
	if e := lookup(lowerInto(lower[:0], name)); e != nil && e.flags&flagOwn != 0 {
		return e
	}
	return nil
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
