package commands

import (
	"log/slog"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/auth"
	"github.com/fenceproxy/fenceproxy/internal/cluster"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// command is one entry of the table.
type command struct {
	// arity as Redis counts it: N means exactly N arguments with the name,
	// -N means at least N.
	arity int
	serve func(h *Handler, c *protocol.Conn, args [][]byte, p *resp.Reply)
}

// Options configure a Handler.
type Options struct {
	// Backend is the Redis fronted: requests the proxy does not answer go
	// to its Forwarder.
	Backend cluster.Backend
	// Keys finds a request's keys (from the backend's COMMAND), for the
	// ACL's key patterns.
	Keys    *keys.Table
	Locks   *locks.Manager
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// RedisVersion is reported by HELLO (the backend's own version).
	RedisVersion string
	// ReplicaTimeout bounds one lock write's wait for acknowledgements.
	ReplicaTimeout time.Duration
	// KeyPrefix is the lock manager's key prefix; the proxy's own helper
	// keys use it too.
	KeyPrefix string
	// Info returns the body of INFO's "# fenceproxy" section, lines of
	// field:value ending in CRLF.
	Info func() string
	// ACL, when not nil, turns on fenceproxy's own client authentication
	// and per-user permissions (see acl.go); nil keeps everyone "default"
	// with every permission, at no cost.
	ACL *auth.ACL
}

// Handler serves every client request; it implements protocol.Handler.
type Handler struct {
	opts   Options
	runner *locks.Runner // where lock requests (and INFO) run
	authm  *metrics.Auth
}

// NewHandler returns a Handler.
func NewHandler(opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &Handler{opts: opts, runner: locks.NewRunner(opts.ReplicaTimeout)}
	if opts.ACL != nil {
		h.authm = opts.Metrics.NewAuth()
	}
	return h
}

var table map[string]command

func init() {
	table = map[string]command{
		"ping":   {-1, (*Handler).ping},
		"echo":   {2, (*Handler).echo},
		"quit":   {-1, (*Handler).quit},
		"hello":  {-1, (*Handler).hello},
		"client": {-2, (*Handler).client},
		"select": {2, (*Handler).selectDB},
		"auth":   {-2, (*Handler).auth},
		"reset":  {1, (*Handler).reset},
		"info":   {-1, (*Handler).info},

		"lock.acquire": {-4, (*Handler).lockAcquire},
		"lock.renew":   {4, (*Handler).lockRenew},
		"lock.release": {3, (*Handler).lockRelease},
		"fence.check":  {3, (*Handler).fenceCheck},
		"fence.exec":   {-4, (*Handler).fenceExec},
		"lock.top":     {-1, (*Handler).lockTop},
		"lock.info":    {2, (*Handler).lockInfo},
		"lock.slowlog": {-2, (*Handler).lockSlowlog},
	}
	for name, why := range refused {
		table[name] = command{-1, refuse(why)}
	}
	table["multi"] = command{1, (*Handler).multi}
	table["exec"] = command{1, (*Handler).execOrDiscard}
	table["discard"] = command{1, (*Handler).execOrDiscard}
	table["watch"] = command{-2, (*Handler).watch}
	table["unwatch"] = command{1, (*Handler).unwatch}
	for _, name := range subscribeCommands {
		table[name] = command{-1, (*Handler).subscribe}
	}
	for _, name := range blockingCommands {
		table[name] = command{-1, (*Handler).blocking}
	}
	table["xread"] = command{-4, (*Handler).xread}
	table["xreadgroup"] = command{-7, (*Handler).xread}
}

// ServeCommand dispatches one request.
func (h *Handler) ServeCommand(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if h.opts.ACL != nil && !h.authorize(c, args, p) {
		return
	}
	var lower [32]byte
	name := args[0]
	if len(name) <= len(lower) {
		lname := string(lowerInto(lower[:0], name))
		if s := sessionOf(c); s.tunnel != nil {
			h.sendTunnel(s, args, p)
			return
		} else if s.tx.inMulti && !txControl(lname) {
			// Inside MULTI Redis queues everything, arity errors and lock
			// commands included (an unknown command makes EXEC abort).
			if s.tx.deferred && !h.beginMulti(c, s, args, p) {
				return
			}
			h.sendPinned(s, args, p)
			return
		}
		if cmd, ok := table[lname]; ok {
			if !arityOK(cmd.arity, len(args)) {
				p.Buf = redcon.AppendError(p.Buf, "ERR wrong number of arguments for '"+lname+"' command")
				p.Done()
				return
			}
			cmd.serve(h, c, args, p)
			return
		}
	}
	h.forward(c, args, p)
}

// txControl names the commands a client in MULTI sends to the proxy rather
// than to the transaction (Redis runs them at once too; RESET discards it).
func txControl(name string) bool {
	switch name {
	case "exec", "discard", "multi", "watch", "quit", "reset":
		return true
	}
	return false
}

func arityOK(arity, n int) bool {
	if arity >= 0 {
		return n == arity
	}
	return n >= -arity
}

// reply helpers: each completes p.

func replyError(p *resp.Reply, msg string) {
	p.Buf = redcon.AppendError(p.Buf, msg)
	p.Done()
}

// replyErr answers err, an error value that becomes the client's reply
// where it is written (protocol): one of the backend's failures, a refused
// node's error.
func replyErr(p *resp.Reply, err error) {
	p.Err = err
	p.Done()
}

func replyOK(p *resp.Reply) {
	p.Buf = append(p.Buf, "+OK\r\n"...)
	p.Done()
}

func replyInt(p *resp.Reply, n int64) {
	p.Buf = redcon.AppendInt(p.Buf, n)
	p.Done()
}

func replyNull(c *protocol.Conn, p *resp.Reply) {
	p.Buf = append(p.Buf, nullReply(c)...)
	p.Done()
}

var (
	null2 = []byte("$-1\r\n")
	null3 = []byte("_\r\n")
)

// nullReply is the null of the client's protocol.
func nullReply(c *protocol.Conn) []byte {
	if sessionOf(c).backend.RESP3 {
		return null3
	}
	return null2
}

// parseInt parses an integer argument as Redis does (no leading zeros, no
// sign but '-').
func parseInt(b []byte) (int64, bool) { return resp.ParseInt(b) }
