package commands

import (
	"bytes"
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// CLIENT REPLY ON|OFF|SKIP is the client's own: Redis would turn the
// replies off on a shared connection, for every client on it. The proxy
// keeps the mode per client and drops the replies it owes while they are
// off (protocol.Conn.SetSilent); the commands still run, in order.
// Redisson's RBatch with skipResult() wraps a batch in CLIENT REPLY OFF ...
// ON: refused, the writes were applied and the caller told they failed.
// Inside MULTI it is refused, and EXEC aborts (Redis would queue it).

// replyInMulti reports whether args is CLIENT REPLY, which is not sent
// into a transaction (select.go's sendQueued): the proxy cannot keep it the
// client's there.
func replyInMulti(args [][]byte) bool {
	return len(args) >= 2 && bytes.EqualFold(args[0], []byte("client")) && bytes.EqualFold(args[1], []byte("reply"))
}

// replyMode is a client's CLIENT REPLY state.
type replyMode struct {
	off      bool // OFF: no reply until ON
	skipNext bool // SKIP: none for the next command
}

// silence is called as each request begins: it drops the request's reply
// while the client turned replies off or skips this one.
func (m *replyMode) silence(c *protocol.Conn, p *resp.Reply) {
	if m.off || m.skipNext {
		c.SetSilent(p, true)
		m.skipNext = false
	}
}

// clientReply serves CLIENT REPLY: ON answers OK, OFF and SKIP nothing
// (their own reply is the first they drop), as Redis.
func (h *Handler) clientReply(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	m := &sessionOf(c).replies
	switch strings.ToLower(string(args[2])) {
	case "on":
		m.off, m.skipNext = false, false
		c.SetSilent(p, false)
		replyOK(p)
	case "off":
		m.off = true
		c.SetSilent(p, true)
		replyOK(p)
	case "skip":
		// SKIP itself is not answered; the next command is not either.
		c.SetSilent(p, true)
		m.skipNext = !m.off
		replyOK(p)
	default:
		replyError(p, "ERR syntax error")
	}
}
