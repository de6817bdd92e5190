package commands

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// The proxy's clients as CLIENT LIST, CLIENT INFO and CLIENT KILL see
// them. Redis's own CLIENT LIST would show the proxy's connections, which
// carry many clients' requests (or are the proxy's own); so the proxy
// lists its clients itself, in Redis's format and field order, each field
// with what it means for that client:
//
//   - id, addr, laddr, fd, name, age, db, resp: the client's connection to
//     the proxy;
//   - idle and cmd: since and what the proxy last served it (cmd as Redis
//     names it, "client|list");
//   - flags, sub, psub, ssub, multi, redir, user: the state the proxy keeps
//     for it (x in MULTI, b blocked, t tracking and B BCAST, P subscribed,
//     S following the replication stream (SYNC), e NO-EVICT; sub and psub
//     from Redis's own subscribe confirmations on its tunnel);
//   - qbuf and argv-mem: the request being served, for the client that
//     asks; 0 for the others, whose requests are served and gone;
//   - the memory and output-buffer fields: 0, and events=r: the proxy does
//     not keep Redis's per-client accounting (its buffers are not Redis's).
//
// Other connections' goroutines read a client's clientInfo (CLIENT LIST
// from another client), so every field is atomic; only the client's own
// goroutine writes them.

// clientInfo is what other clients may see of one client.
type clientInfo struct {
	// The last command served: a Redis command (keys' table) or one of the
	// proxy's own (this package's table); at is when its request was
	// read (unix ns).
	cmd    atomic.Pointer[keys.Command]
	ownCmd atomic.Pointer[command]
	at     atomic.Int64

	flags atomic.Uint32
	// streamFlags are set by the client's tunnel as Redis's stream goes
	// (O while MONITOR lasts, monitor.go).
	streamFlags atomic.Uint32
	multi       atomic.Int32 // commands queued in MULTI, -1 outside one
	// subs and psubs are channels and patterns subscribed, ssubs shard
	// channels (pubsubRelay).
	subs, psubs, ssubs atomic.Int32
	redir              atomic.Int64
	resp3              atomic.Bool
	user               atomic.Pointer[string] // nil: "default"
	lib                atomic.Pointer[libInfo]
}

// Client flags, each with Redis's letter (flagLetters).
const (
	clientReplica  uint32 = 1 << iota // S: SYNC
	clientMonitor                     // O
	clientPubSub                      // P: subscribed to something (from the counts)
	clientMulti                       // x
	clientBlocked                     // b
	clientTracking                    // t
	clientBCast                       // B
	clientNoEvict                     // e
)

var flagLetters = []struct {
	bit    uint32
	letter byte
}{
	{clientMonitor, 'O'}, {clientReplica, 'S'}, {clientPubSub, 'P'}, {clientMulti, 'x'},
	{clientBlocked, 'b'}, {clientTracking, 't'}, {clientBCast, 'B'}, {clientNoEvict, 'e'},
}

// publish brings what other clients see of c up to date with its session,
// after each request and at the end of each batch. Only c's goroutine (or
// the one completing its batch while it waits) calls it; it stores
// nothing when nothing changed.
func (h *Handler) publish(c *protocol.Conn, s *session) {
	ci := h.clientInfoOf(c, s)
	var f uint32
	if s.tunnel != nil && s.tunnelKind == tunnelSync {
		f |= clientReplica
	}
	if s.tx.inMulti {
		f |= clientMulti
	}
	if s.tx.blocked {
		f |= clientBlocked
	}
	if s.track.on {
		f |= clientTracking
		if s.track.bcast {
			f |= clientBCast
		}
	}
	if s.noEvict {
		f |= clientNoEvict
	}
	if ci.flags.Load() != f {
		ci.flags.Store(f)
	}
	multi := int32(-1)
	if s.tx.inMulti {
		multi = int32(s.tx.queued)
	}
	if ci.multi.Load() != multi {
		ci.multi.Store(multi)
	}
	if ci.redir.Load() != s.track.redirect {
		ci.redir.Store(s.track.redirect)
	}
	if ci.resp3.Load() != s.backend.RESP3 {
		ci.resp3.Store(s.backend.RESP3)
	}
}

// clientRegistry maps the proxy's client ids to their clientInfo.
type clientRegistry struct{ m sync.Map }

func (r *clientRegistry) of(id int64) *clientInfo {
	if v, ok := r.m.Load(id); ok {
		return v.(*clientInfo)
	}
	return nil
}

// clientInfoOf is the client's clientInfo, registered on first use.
func (h *Handler) clientInfoOf(c *protocol.Conn, s *session) *clientInfo {
	if s.info == nil {
		s.info = &clientInfo{}
		s.info.multi.Store(-1)
		h.clients.m.Store(c.ID, s.info)
	}
	return s.info
}

// served notes the command being served for CLIENT LIST's cmd and idle.
// It does not allocate.
func (h *Handler) served(c *protocol.Conn, s *session, own *command, args [][]byte) {
	ci := h.clientInfoOf(c, s)
	ci.at.Store(c.ReadAt().UnixNano())
	if own != nil && own.flags&flagOwn != 0 {
		ci.ownCmd.Store(own)
		ci.cmd.Store(nil)
		return
	}
	if kc := h.opts.Keys.LookupBytes(args[0]); kc != nil {
		if sub := kc.Sub(args); sub != nil {
			kc = sub
		}
		ci.cmd.Store(kc)
		ci.ownCmd.Store(nil)
	}
}

// clientType is Redis's client type of a client: normal, replica or pubsub.
func clientType(ci *clientInfo) string {
	switch {
	case ci.flags.Load()&clientReplica != 0:
		return "replica"
	case ci.subs.Load()+ci.psubs.Load()+ci.ssubs.Load() > 0:
		return "pubsub"
	}
	return "normal"
}

// clientLine describes a client as Redis's CLIENT LIST does, one line
// (ending in "\n"). self is the request being served when the client
// describes itself (qbuf, argv-mem), nil for another.
func clientLine(b []byte, c *protocol.Conn, ci *clientInfo, self [][]byte) []byte {
	now := time.Now()
	b = append(b, "id="...)
	b = strconv.AppendInt(b, c.ID, 10)
	b = append(b, " addr="...)
	b = append(b, c.RemoteAddr...)
	b = append(b, " laddr="...)
	b = append(b, c.LocalAddr...)
	b = append(b, " fd="...)
	b = strconv.AppendInt(b, int64(c.FD()), 10)
	b = append(b, " name="...)
	b = append(b, c.Name()...)
	b = append(b, " age="...)
	b = strconv.AppendInt(b, int64(now.Sub(c.Created)/time.Second), 10)
	b = append(b, " idle="...)
	idle := int64(0)
	if at := ci.at.Load(); at != 0 && self == nil {
		idle = max(0, (now.UnixNano()-at)/int64(time.Second))
	}
	b = strconv.AppendInt(b, idle, 10)
	b = append(b, " flags="...)
	flags := ci.flags.Load() | ci.streamFlags.Load()
	if ci.subs.Load()+ci.psubs.Load()+ci.ssubs.Load() > 0 {
		flags |= clientPubSub
	}
	n := len(b)
	for _, f := range flagLetters {
		if flags&f.bit != 0 {
			b = append(b, f.letter)
		}
	}
	if len(b) == n {
		b = append(b, 'N')
	}
	b = append(b, " db="...)
	b = strconv.AppendInt(b, int64(c.DB()), 10)
	b = append(b, " sub="...)
	b = strconv.AppendInt(b, int64(ci.subs.Load()), 10)
	b = append(b, " psub="...)
	b = strconv.AppendInt(b, int64(ci.psubs.Load()), 10)
	b = append(b, " ssub="...)
	b = strconv.AppendInt(b, int64(ci.ssubs.Load()), 10)
	b = append(b, " multi="...)
	b = strconv.AppendInt(b, int64(ci.multi.Load()), 10)
	qbuf, argv := 0, 0
	if self != nil {
		qbuf = len(resp.AppendCommand(nil, self)) + c.Buffered()
		for _, a := range self {
			argv += len(a)
		}
	}
	b = append(b, " qbuf="...)
	b = strconv.AppendInt(b, int64(qbuf), 10)
	b = append(b, " qbuf-free=0 argv-mem="...)
	b = strconv.AppendInt(b, int64(argv), 10)
	b = append(b, " multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd="...)
	switch kc, own := ci.cmd.Load(), ci.ownCmd.Load(); {
	case kc != nil:
		b = append(b, kc.Name()...)
	case own != nil:
		b = append(b, own.name...)
	default:
		b = append(b, "NULL"...)
	}
	b = append(b, " user="...)
	if u := ci.user.Load(); u != nil {
		b = append(b, *u...)
	} else {
		b = append(b, "default"...)
	}
	b = append(b, " redir="...)
	redir := int64(-1)
	if flags&clientTracking != 0 {
		redir = ci.redir.Load()
	}
	b = strconv.AppendInt(b, redir, 10)
	b = append(b, " resp="...)
	if ci.resp3.Load() {
		b = append(b, '3')
	} else {
		b = append(b, '2')
	}
	lib := ci.lib.Load()
	if lib == nil {
		lib = &libInfo{}
	}
	b = append(b, " lib-name="...)
	b = append(b, lib.name...)
	b = append(b, " lib-ver="...)
	b = append(b, lib.ver...)
	return append(b, '\n')
}

// clientInfoReply is CLIENT INFO: the client's own line.
func (h *Handler) clientInfoReply(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	line := clientLine(nil, c, h.clientInfoOf(c, sessionOf(c)), args)
	p.Buf = redcon.AppendBulk(p.Buf, line)
	p.Done()
}

// clientList is CLIENT LIST [TYPE type] [ID id ...]: the proxy's clients.
func (h *Handler) clientList(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	var typ string
	var ids map[int64]bool
	for i := 2; i < len(args); {
		switch opt := strings.ToLower(string(args[i])); {
		case opt == "type" && i+1 < len(args):
			typ = normalType(strings.ToLower(string(args[i+1])))
			if typ == "" {
				replyError(p, "ERR Unknown client type '"+string(args[i+1])+"'")
				return
			}
			i += 2
		case opt == "id" && i+1 < len(args):
			ids = map[int64]bool{}
			for i++; i < len(args); i++ {
				id, ok := parseInt(args[i])
				if !ok {
					replyError(p, "ERR Invalid client ID")
					return
				}
				ids[id] = true
			}
		default:
			replyError(p, "ERR syntax error")
			return
		}
	}
	h.clientInfoOf(c, sessionOf(c))
	var b []byte
	c.Server().Each(func(o *protocol.Conn) {
		ci := h.clients.of(o.ID)
		if ci == nil || o.Killed() || (ids != nil && !ids[o.ID]) || (typ != "" && clientType(ci) != typ) {
			return
		}
		var self [][]byte
		if o == c {
			self = args
		}
		b = clientLine(b, o, ci, self)
	})
	p.Buf = redcon.AppendBulk(p.Buf, b)
	p.Done()
}

// normalType is a client type as Redis accepts it, "" if unknown.
func normalType(t string) string {
	switch t {
	case "normal", "pubsub", "master":
		return t
	case "replica", "slave":
		return "replica"
	}
	return ""
}

// clientKill is CLIENT KILL, for the proxy's clients: the old form
// (addr:port: OK, or "No such client") and the filters (ID, ADDR, LADDR,
// USER, TYPE, SKIPME: how many were killed). A client killed closes its
// connection, and what it held in Redis with it (a blocked command's
// connection, a tunnel); one that kills itself gets its reply first.
func (h *Handler) clientKill(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if h.opts.ACL == nil && killsByUser(args) {
		// Redis knows its users: asked off the serve loop (OffLoop; args
		// stay valid, nothing more of the client's is read meanwhile),
		// then the kill goes on where it was, each USER filter judged in
		// its place among the others, as Redis does.
		c.OffLoop(p, func() func() {
			known := map[string]bool{}
			for i := 2; i+1 < len(args); i += 2 {
				if strings.EqualFold(string(args[i]), "user") {
					known[string(args[i+1])] = h.userExists(string(args[i+1]))
				}
			}
			return func() { h.clientKillWith(c, args, p, func(name string) bool { return known[name] }) }
		})
		return
	}
	h.clientKillWith(c, args, p, h.userExists)
}

// clientKillWith is CLIENT KILL, with exists telling whether a USER
// filter names a user there is.
func (h *Handler) clientKillWith(c *protocol.Conn, args [][]byte, p *resp.Reply, exists func(string) bool) {
	if len(args) == 3 { // CLIENT KILL addr:port
		n := h.kill(c, func(o *protocol.Conn, _ *clientInfo) bool { return o.RemoteAddr == string(args[2]) }, false)
		if n == 0 {
			replyError(p, "ERR No such client")
			return
		}
		replyOK(p)
		return
	}
	if len(args)%2 != 0 {
		replyError(p, "ERR syntax error")
		return
	}
	var id int64
	var addr, laddr, user, typ string
	skipMe := true
	for i := 2; i < len(args); i += 2 {
		v := string(args[i+1])
		switch strings.ToLower(string(args[i])) {
		case "id":
			n, ok := parseInt(args[i+1])
			if !ok || n <= 0 {
				replyError(p, "ERR client-id should be greater than 0")
				return
			}
			id = n
		case "type":
			if typ = normalType(strings.ToLower(v)); typ == "" {
				replyError(p, "ERR Unknown client type '"+v+"'")
				return
			}
		case "addr":
			addr = v
		case "laddr":
			laddr = v
		case "user":
			if !exists(v) {
				replyError(p, "ERR No such user '"+v+"'")
				return
			}
			user = v
		case "skipme":
			switch strings.ToLower(v) {
			case "yes":
				skipMe = true
			case "no":
				skipMe = false
			default:
				replyError(p, "ERR syntax error")
				return
			}
		default:
			replyError(p, "ERR syntax error")
			return
		}
	}
	n := h.kill(c, func(o *protocol.Conn, ci *clientInfo) bool {
		switch {
		case id != 0 && o.ID != id,
			addr != "" && o.RemoteAddr != addr,
			laddr != "" && o.LocalAddr != laddr,
			typ != "" && clientType(ci) != typ,
			user != "" && userName(ci) != user:
			return false
		}
		return true
	}, skipMe)
	replyInt(p, int64(n))
}

func userName(ci *clientInfo) string {
	if u := ci.user.Load(); u != nil {
		return *u
	}
	return "default"
}

// kill closes the clients that match, c itself after its reply (unless
// skipMe), and returns how many.
func (h *Handler) kill(c *protocol.Conn, match func(*protocol.Conn, *clientInfo) bool, skipMe bool) int {
	h.clientInfoOf(c, sessionOf(c))
	var victims []*protocol.Conn
	c.Server().Each(func(o *protocol.Conn) {
		ci := h.clients.of(o.ID)
		if ci == nil || o.Killed() || (o == c && skipMe) || !match(o, ci) {
			return
		}
		victims = append(victims, o)
	})
	for _, o := range victims {
		if o == c {
			c.CloseAfterReply()
		} else {
			o.Kill()
		}
	}
	return len(victims)
}

// userExists reports whether CLIENT KILL USER names a user there is:
// fenceproxy's own with --aclfile, else Redis's.
func (h *Handler) userExists(name string) bool {
	if h.opts.ACL != nil {
		return h.opts.ACL.User(name) != nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := h.opts.Backend.Masters()[0].Client.Do(ctx, "ACL", "GETUSER", name).Err()
	// Another error (ACL refused to the proxy's user, Redis unreachable)
	// cannot tell: the filter is kept.
	return !errors.Is(err, redis.Nil)
}
