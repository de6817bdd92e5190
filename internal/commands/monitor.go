package commands

import (
	"bytes"
	"context"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// MONITOR, in front of a standalone Redis: the client's connection becomes
// a tunnel to a Redis connection of its own that sends MONITOR, and Redis's
// lines are relayed as they come, less what the proxy does on its own: a
// script run on the token authority's keys (its heartbeat) with the lines
// of the commands that script calls, the probe's INFO every second, and
// the setup of connections that carry clients' requests (setup).
// The lines show the address of the proxy's connection a request came on
// (shared by many clients), not the client's. RESET through the tunnel
// ends MONITOR as in Redis.

func (h *Handler) monitor(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if h.streamRefused(s, "MONITOR", args, p) {
		return
	}
	var probe string
	findProbe := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		probe = h.opts.Backend.Masters()[0].ProbeAddr(ctx)
		cancel()
	}
	h.openTunnel(c, s, args, p, tunnelMonitor, findProbe, func() streamFilter {
		ci := h.clientInfoOf(c, s)
		ci.streamFlags.Store(clientMonitor)
		return &monitorStream{own: h.own, probe: []byte(probe), ci: ci}
	})
}

// streamOnLoop: MONITOR and SYNC are the serve loop's: their connection
// is dialled off the loop (OffLoop), and the loop writes the stream.
func streamOnLoop(*Handler, *protocol.Conn, [][]byte) bool { return true }

// streamRefused answers p for a command that would turn the client's
// connection into Redis's stream (MONITOR, SYNC) where it is not opened,
// and reports whether it did: inside MULTI it is queued on the
// transaction's connection (Redis's own answer at EXEC), and in front of a
// Redis Cluster it is refused (one master's stream is not the cluster's).
func (h *Handler) streamRefused(s *session, name string, args [][]byte, p *resp.Reply) bool {
	if s.tx.inMulti {
		h.sendPinned(s, args, p)
		return true
	}
	if h.opts.Backend.RoutesByKey() {
		replyError(p, "ERR fenceproxy: "+name+" is served in front of a standalone Redis only, not a Redis Cluster; connect to a master directly")
		return true
	}
	return false
}

// monitorStream is a MONITOR tunnel's streamFilter: each line
// ("+<time> [<db> <address>|lua] "command" ...") is relayed unless the
// proxy sent it, with everything else (MONITOR's OK, RESET's answer).
type monitorStream struct {
	own   *ownKeys
	probe []byte
	ci    *clientInfo
	// dropping: the last line from a connection was the proxy's, so the
	// lines of the commands its script calls ("lua") go too.
	dropping bool
}

var (
	replyReset = []byte("+RESET\r\n")
	scriptCmds = [][]byte{[]byte(`"evalsha"`), []byte(`"eval"`), []byte(`"evalsha_ro"`), []byte(`"eval_ro"`)}
)

func (m *monitorStream) next(data, out []byte) (int, []byte) {
	n, ok := resp.Size(data)
	if !ok {
		return 0, out
	}
	line := data[:n]
	if bytes.Equal(line, replyReset) {
		m.ci.streamFlags.Store(0) // RESET ended MONITOR
	}
	open := bytes.Index(line, []byte(" ["))
	end := bytes.Index(line, []byte("] "))
	if line[0] != '+' || open < 0 || end < open {
		return n, append(out, line...)
	}
	who := line[open+2 : end]
	if sp := bytes.IndexByte(who, ' '); sp >= 0 {
		who = who[sp+1:]
	}
	if bytes.Equal(who, []byte("lua")) {
		if m.dropping {
			return n, out
		}
		return n, append(out, line...)
	}
	cmd := line[end+2:]
	m.dropping = (len(m.probe) > 0 && bytes.Equal(who, m.probe)) || m.ownScript(cmd) || setup(cmd)
	if m.dropping {
		return n, out
	}
	return n, append(out, line...)
}

// setup reports whether a MONITOR line's command is one the proxy sends
// on a connection that carries clients' requests, as Redis shows it:
// setting up a new connection (AUTH, HELLO, ROLE, CLIENT ID), or a pinned
// one's database as it is handed to a client and back (SELECT n). The
// proxy spells them in capitals; a client that sends ROLE so, or SELECT
// while it WATCHes (its one SELECT that reaches Redis), is not shown
// either.
func setup(cmd []byte) bool {
	cmd = bytes.TrimSuffix(cmd, []byte("\r\n"))
	switch {
	case bytes.Equal(cmd, []byte(`"ROLE"`)), bytes.Equal(cmd, []byte(`"CLIENT" "ID"`)),
		bytes.HasPrefix(cmd, []byte(`"AUTH" `)), bytes.HasPrefix(cmd, []byte(`"HELLO" "`)):
		return true
	case bytes.HasPrefix(cmd, []byte(`"SELECT" "`)) && len(cmd) > len(`"SELECT" ""`):
		for _, b := range cmd[len(`"SELECT" "`) : len(cmd)-1] {
			if b < '0' || b > '9' {
				return false
			}
		}
		return cmd[len(cmd)-1] == '"'
	}
	return false
}

// ownScript reports whether a MONITOR line's command ("eval" "..." "2"
// "key" ...) runs a script on the authority's keys: its first key is one.
func (m *monitorStream) ownScript(cmd []byte) bool {
	script := false
	for _, c := range scriptCmds {
		if len(cmd) >= len(c) && bytes.EqualFold(cmd[:len(c)], c) {
			script = true
			break
		}
	}
	if !script {
		return false
	}
	for _, k := range m.own.names {
		if bytes.Contains(cmd, append(append([]byte(` "`), k...), '"')) {
			return true
		}
	}
	return false
}
