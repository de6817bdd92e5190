package commands

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/auth"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/lockcmd"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// Options configure a Handler.
type Options struct {
	// Backend is the Redis fronted: requests the proxy does not answer go
	// to its Forwarder.
	Backend upstream.Backend
	// Keys finds a request's keys (from the backend's COMMAND), for the
	// ACL's key patterns.
	Keys *keys.Table
	// Locks are the lock family's own parts: the lock manager, the tier
	// this node is one of, --lock-keys (package lockcmd).
	Locks   lockcmd.Locks
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// RedisVersion is reported by HELLO (the backend's own version).
	RedisVersion string
	// ReplicaTimeout bounds one lock write's wait for acknowledgements.
	ReplicaTimeout time.Duration
	// KeyPrefix is the lock manager's key prefix; the proxy's own helper
	// keys use it too.
	KeyPrefix string
	// OwnKeys are the keys of the proxy's own bookkeeping that relayed
	// messages leave out (the token authority's, ownkeys.go); nil for none.
	OwnKeys []string
	// Info returns the body of INFO's "# fenceproxy" section, lines of
	// field:value ending in CRLF.
	Info func() string
	// ACL, when not nil, turns on fenceproxy's own client authentication
	// and per-user permissions (see acl.go); nil keeps everyone "default"
	// with every permission, at no cost.
	ACL *auth.ACL
	// BackendUser is the Redis user the proxy's connections authenticate
	// as ("" is "default"): a client that authenticates (through Redis)
	// as another gets a connection of its own as that user (users.go).
	BackendUser string
}

// Handler serves every client request; it implements protocol.Handler.
type Handler struct {
	opts Options
	// locks serves the lock family and clients' lock recipes (package
	// lockcmd); its workers run INFO too.
	locks *lockcmd.Family
	authm *metrics.Auth
	// blocked maps the proxy's clients to the connection their blocking
	// command waits on, for CLIENT UNBLOCK (unblock.go).
	blocked blockedClients
	// receivers are the clients with a pub/sub tunnel, for CLIENT
	// TRACKING REDIRECT (tracking.go).
	receivers receivers
	// own are the proxy's keys that relayed messages leave out (ownkeys.go).
	own *ownKeys
	// ownPrefix starts every key of the proxy's own, which clients may
	// read but not write (ownwrites.go).
	ownPrefix []byte
	// clients are what CLIENT LIST shows of each client (clients.go).
	clients clientRegistry
}

// NewHandler returns a Handler.
func NewHandler(opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &Handler{opts: opts, own: newOwnKeys(opts.OwnKeys), ownPrefix: ownPrefix(opts.KeyPrefix)}
	h.locks = lockcmd.New(lockcmd.Options{Locks: opts.Locks, Backend: opts.Backend, Keys: opts.Keys,
		Metrics: opts.Metrics, Logger: opts.Logger, ReplicaTimeout: opts.ReplicaTimeout,
		KeyPrefix: opts.KeyPrefix, Auth: opts.ACL != nil, Forward: h.forward})
	if opts.ACL != nil {
		h.authm = opts.Metrics.NewAuth()
	}
	countFromZero(opts.Metrics)
	return h
}

// The command table: every command the proxy does more with than forward
// it, in one list. An entry says what the command is (its arity and flags,
// the argument naming a lock resource), who serves it, and how it is
// counted; everything that needs to know a command reads it from here:
// ServeCommand (dispatch, arity errors, what runs at once inside MULTI),
// the ACL checks (permittedLock: the lock family's resource and its access)
// and the ACL universe (ACLCommands: the categories of the proxy's own
// commands), COMMAND (command.go: the proxy's own commands beside Redis's),
// INFO's "# locks" section and the result counters (lockcmd's lockobs.go).
//
// A command not in the table is forwarded to Redis as it came.

// command is one entry of the table.
type command struct {
	name string
	// arity as Redis counts it: N means exactly N arguments with the name,
	// -N means at least N.
	arity int
	flags flags
	// resource is the argument naming a lock resource (0: none). The ACL
	// check matches it against the user's key patterns, for reading, and
	// for writing too with flagWritesResource; COMMAND shows it as the
	// command's key. LOCK.TOP and LOCK.SLOWLOG name none: their replies
	// show a user only the resources it may read.
	resource int
	// fenced is where FENCE.EXEC's command begins (0: none): the ACL check
	// checks that command as if the user sent it.
	fenced int
	// refusal is the reply to a command that is never forwarded (after
	// "ERR fenceproxy: ").
	refusal string
	// summary and syntax describe a command of the proxy's own in COMMAND
	// DOCS: syntax as the README writes it, after the name (see docArgs).
	summary, syntax string
	// results, if set, is the counter of the command's requests by result
	// (one of metrics' series) with every result it counts, and the INFO
	// lines made from it.
	results *resultCounter
	// serve answers the request; nil for the entries served by their
	// flags (flagPubSub, flagMayBlock) or refused.
	serve func(h *Handler, c *protocol.Conn, args [][]byte, p *resp.Reply)
	// onLoop, if set, reports whether serve serves args for c without
	// waiting, so that the serve loop may call it (ServesOnLoop): from the
	// client's connection alone (ECHO, most of CLIENT), or as the first of
	// its batch, which waits for no earlier reply (PING, SELECT of an open
	// database). A command without it leaves the loop.
	onLoop func(h *Handler, c *protocol.Conn, args [][]byte) bool

	// Derived by init from the above.
	categories []string // ACL categories without '@' (see categoriesOf)
	docs       []docArg // COMMAND DOCS's arguments, from syntax
}

// flags say what a command is. The first ones are Redis's own command
// flags and give the proxy's own commands their ACL categories as Redis
// gives its commands theirs (setImplicitACLCategories: write is @write,
// readonly @read, admin @admin and @dangerous, fast @fast and the rest
// @slow); @lock comes from flagLock.
type flags uint16

const (
	flagWrite    flags = 1 << iota // changes state (a lease, or a fenced command's write)
	flagReadonly                   // only reads
	flagAdmin                      // an operator's command
	flagFast                       // O(1) or close, never waits on others
	// flagOwn: fenceproxy's own command, which Redis does not know. COMMAND
	// describes it from its entry and the ACL universe has it, with its
	// categories.
	flagOwn
	flagLock           // the lock family: @lock, its resource checked as a key
	flagWritesResource // changes the resource's lease: the ACL wants write access to it
	flagMovableKeys    // it has keys beyond resource (FENCE.EXEC's command's)
	// flagImmediate: it runs at once inside MULTI instead of being queued,
	// as Redis runs EXEC, DISCARD, MULTI, WATCH and QUIT.
	flagImmediate
	flagMayBlock // may wait in Redis for others: served by blocking on a pinned connection
	flagPubSub   // turns the connection into a tunnel to Redis (pubsub.go)
)

// lockFlags are every lock-family command's.
const lockFlags = flagOwn | flagLock

// table is set in init: its serve functions refer to it.
var table []command

func init() {
	table = []command{
		// Answered by the proxy: they describe the client's own connection,
		// which Redis never sees.
		{name: "ping", arity: -1, serve: (*Handler).ping, onLoop: pingOnLoop},
		{name: "echo", arity: 2, serve: (*Handler).echo, onLoop: always},
		{name: "quit", arity: -1, flags: flagImmediate, serve: (*Handler).quit, onLoop: always},
		// AUTH and HELLO are the loop's: AUTH checked by fenceproxy's own
		// users (--aclfile, --requirepass) is answered from the ACL at
		// once; checked by Redis (checkAuth), its round trip is made off
		// the loop (OffLoop), and so is the dial of a connection as
		// another Redis user (switchUser), which the loop then serves as
		// a transaction's. HELLO's switch of protocol dials that
		// protocol's connections of the client's database off the loop
		// if they are not open (helloReply), and a client's own
		// connections switch there too (switchProtocol).
		{name: "hello", arity: -1, serve: (*Handler).hello, onLoop: always},
		{name: "client", arity: -2, serve: (*Handler).client, onLoop: clientOnLoop},
		{name: "select", arity: 2, serve: (*Handler).selectDB, onLoop: selectOnLoop},
		{name: "auth", arity: -2, serve: (*Handler).auth, onLoop: always},
		// Inside MULTI too: it discards it. On the loop: what the client
		// sent before goes first (AfterReplies), and its connections are
		// given back without a wait (a tracking client's RESET takes a
		// detour, as all its requests do).
		{name: "reset", arity: 1, flags: flagImmediate, serve: (*Handler).reset, onLoop: always},
		{name: "info", arity: -1, serve: (*Handler).info, onLoop: infoOnLoop},
		{name: "command", arity: -1, serve: (*Handler).command, onLoop: always},
		// In front of a Redis Cluster, a cluster of one node: the proxy
		// (clusterview.go).
		{name: "cluster", arity: -2, serve: (*Handler).clusterView, onLoop: always},
		// Forwarded, on the control connection while a script may be busy
		// (control.go).
		{name: "script", arity: -2, serve: (*Handler).scriptOrFunction, onLoop: always},
		{name: "function", arity: -2, serve: (*Handler).scriptOrFunction, onLoop: always},
		// Clients' own lock recipes run as the lock manager's twins;
		// every other script is forwarded (lockcmd's recipes.go).
		{name: "eval", arity: -3, serve: lockServe((*lockcmd.Family).Eval), onLoop: evalOnLoop},
		{name: "evalsha", arity: -3, serve: lockServe((*lockcmd.Family).Eval), onLoop: evalOnLoop},
		// SET NX on a --lock-keys key is a value lock's grant; every other
		// SET is forwarded (lockcmd's setnx.go).
		{name: "set", arity: -1, serve: lockServe((*lockcmd.Family).Set), onLoop: setOnLoop},

		// The lock family, in the order of INFO's "# locks" lines.
		{name: "lock.acquire", arity: -4, flags: lockFlags | flagWrite | flagWritesResource, resource: 1,
			summary: "Acquire a lock for an owner and get its fencing token; with WAIT, wait in line for it",
			syntax:  "resource owner ttl-ms [WAIT timeout-ms]",
			results: &resultCounter{
				of:      func(m *metrics.Metrics) *prometheus.CounterVec { return m.Acquires },
				results: []string{"granted", "busy", "queuefull", "noreplicas", "evictable", "late", "invalid", "error"},
				info: []infoLine{
					{"lock_acquires", []string{"granted"}}, {"lock_acquires_denied", []string{"busy"}},
					{"lock_acquires_queue_full", []string{"queuefull"}}, {"lock_acquires_noreplicas", []string{"noreplicas"}},
					{"lock_acquires_errors", []string{"error"}},
				},
			},
			serve: lockServe((*lockcmd.Family).Acquire), onLoop: leaseOnLoop},
		{name: "lock.renew", arity: 4, flags: lockFlags | flagWrite | flagWritesResource | flagFast, resource: 1,
			summary: "Extend the lease of a lock the owner holds, keeping its token",
			syntax:  "resource owner ttl-ms",
			results: &resultCounter{
				of:      func(m *metrics.Metrics) *prometheus.CounterVec { return m.Renewals },
				results: []string{"renewed", "lost", "noreplicas", "evictable", "late", "invalid", "error"},
				info:    []infoLine{{"lock_renewals", []string{"renewed"}}, {"lock_renewals_lost", []string{"lost"}}},
			},
			serve: lockServe((*lockcmd.Family).Renew), onLoop: leaseOnLoop},
		{name: "lock.release", arity: 3, flags: lockFlags | flagWrite | flagWritesResource | flagFast, resource: 1,
			summary: "Release a lock the owner holds; the next waiter gets it",
			syntax:  "resource owner",
			results: &resultCounter{
				of:      func(m *metrics.Metrics) *prometheus.CounterVec { return m.Releases },
				results: []string{"released", "notheld", "invalid", "error"},
				info:    []infoLine{{"lock_releases", []string{"released"}}, {"lock_releases_not_held", []string{"notheld"}}},
			},
			serve: lockServe((*lockcmd.Family).Release), onLoop: leaseOnLoop},
		{name: "fence.check", arity: 3, flags: lockFlags | flagReadonly | flagFast, resource: 1,
			summary: "Tell whether a token is the newest issued for a resource (1) or stale (0)",
			syntax:  "resource token",
			results: &resultCounter{
				of:      func(m *metrics.Metrics) *prometheus.CounterVec { return m.FenceChecks },
				results: []string{"current", "stale", "invalid", "error"},
				info:    []infoLine{{"fence_checks", []string{"current", "stale"}}, {"stale_fence_checks", []string{"stale"}}},
			},
			serve: lockServe((*lockcmd.Family).FenceCheck), onLoop: leaseOnLoop},
		{name: "fence.exec", arity: -4, flags: lockFlags | flagWrite | flagMovableKeys, resource: 1, fenced: 3,
			summary: "Run a command in Redis only if a token is the newest issued for a resource",
			syntax:  "resource token command [arg ...]",
			serve:   lockServe((*lockcmd.Family).FenceExec), onLoop: leaseOnLoop},
		{name: "lock.info", arity: 2, flags: lockFlags | flagReadonly | flagFast, resource: 1,
			summary: "Show a lock's owner, newest token, remaining lease and waiters",
			syntax:  "resource",
			serve:   lockServe((*lockcmd.Family).LockInfo), onLoop: leaseOnLoop},
		{name: "lock.token", arity: 3, flags: lockFlags | flagReadonly | flagFast, resource: 1,
			summary: "Get the fencing token of a holder's current grant of a lock: a client recipe's lock key, or a lock-family resource",
			syntax:  "resource holder",
			serve:   lockServe((*lockcmd.Family).Token), onLoop: leaseOnLoop},
		{name: "lock.top", arity: -1, flags: lockFlags | flagReadonly,
			summary: "List the most contended resources, most first",
			syntax:  "[count]",
			serve:   lockServe((*lockcmd.Family).Top), onLoop: leaseOnLoop},
		// As Redis's SLOWLOG: it shows other clients' resources and addresses.
		{name: "lock.slowlog", arity: -2, flags: lockFlags | flagAdmin,
			summary: "Read or reset the slow-lock log: long waits, long holds, expired leases",
			syntax:  "GET|LEN|RESET|HELP [count]",
			serve:   lockServe((*lockcmd.Family).Slowlog), onLoop: leaseOnLoop},

		// A tier's membership and state (lockcmd's tier.go): an operator's,
		// each handed to a lock worker from the loop (as INFO is).
		{name: "tier.info", arity: 1, flags: lockFlags | flagAdmin,
			summary: "Show this tier node's role, term, leader, indexes and peers",
			syntax:  "", serve: lockServe((*lockcmd.Family).TierInfo), onLoop: infoOnLoop},
		{name: "tier.add", arity: 3, flags: lockFlags | flagAdmin,
			summary: "Add a node to the tier (on the leader); it catches up from the leader",
			syntax:  "id raft-addr", serve: lockServe((*lockcmd.Family).TierAdd), onLoop: infoOnLoop},
		{name: "tier.remove", arity: 2, flags: lockFlags | flagAdmin,
			summary: "Remove a node from the tier (on the leader)",
			syntax:  "id", serve: lockServe((*lockcmd.Family).TierRemove), onLoop: infoOnLoop},

		// Transactions: their state is kept on a connection of the
		// client's own (pinned.go).
		{name: "multi", arity: 1, flags: flagImmediate, serve: (*Handler).multi, onLoop: always},
		{name: "exec", arity: 1, flags: flagImmediate, serve: (*Handler).execOrDiscard, onLoop: always},
		{name: "discard", arity: 1, flags: flagImmediate, serve: (*Handler).execOrDiscard, onLoop: always},
		{name: "watch", arity: -2, flags: flagImmediate, serve: (*Handler).watch, onLoop: always},
		{name: "unwatch", arity: 1, serve: (*Handler).unwatch, onLoop: always},

		// Redis's replication stream, less the proxy's own writes
		// (replication.go): the connection becomes a tunnel to Redis.
		{name: "sync", arity: 1, serve: (*Handler).sync, onLoop: streamOnLoop},
		// MONITOR, less the proxy's own commands (monitor.go).
		{name: "monitor", arity: 1, serve: (*Handler).monitor, onLoop: streamOnLoop},

		// Pub/sub: the first one makes the connection a tunnel to Redis.
		{name: "subscribe", arity: -1, flags: flagPubSub, onLoop: subscribeOnLoop},
		{name: "psubscribe", arity: -1, flags: flagPubSub, onLoop: subscribeOnLoop},
		{name: "ssubscribe", arity: -1, flags: flagPubSub, onLoop: subscribeOnLoop},
		{name: "unsubscribe", arity: -1, flags: flagPubSub, onLoop: subscribeOnLoop},
		{name: "punsubscribe", arity: -1, flags: flagPubSub, onLoop: subscribeOnLoop},
		{name: "sunsubscribe", arity: -1, flags: flagPubSub, onLoop: subscribeOnLoop},

		// Commands that wait in Redis for data (or, WAIT, for replicas): on a
		// connection of the client's own, so they stall nobody else. XREAD and
		// XREADGROUP do only with BLOCK.
		{name: "blpop", arity: -1, flags: flagMayBlock, onLoop: blockingOnLoop},
		{name: "brpop", arity: -1, flags: flagMayBlock, onLoop: blockingOnLoop},
		{name: "brpoplpush", arity: -1, flags: flagMayBlock, onLoop: blockingOnLoop},
		{name: "blmove", arity: -1, flags: flagMayBlock, onLoop: blockingOnLoop},
		{name: "blmpop", arity: -1, flags: flagMayBlock, onLoop: blockingOnLoop},
		{name: "bzpopmin", arity: -1, flags: flagMayBlock, onLoop: blockingOnLoop},
		{name: "bzpopmax", arity: -1, flags: flagMayBlock, onLoop: blockingOnLoop},
		{name: "bzmpop", arity: -1, flags: flagMayBlock, onLoop: blockingOnLoop},
		{name: "wait", arity: -1, flags: flagMayBlock, onLoop: blockingOnLoop},
		{name: "waitaof", arity: -1, flags: flagMayBlock, onLoop: blockingOnLoop},
		{name: "xread", arity: -4, flags: flagMayBlock, serve: (*Handler).xread, onLoop: xreadOnLoop},
		{name: "xreadgroup", arity: -7, flags: flagMayBlock, serve: (*Handler).xread, onLoop: xreadOnLoop},

		// Refused: they cannot run on a shared backend connection, or would
		// take the proxy's Redis away.
		{name: "psync", arity: -1, refusal: replyPSyncRefused[len("ERR fenceproxy: "):]},
		{name: "replconf", arity: -1, refusal: replicationRefused},
		{name: "shutdown", arity: -1, refusal: "SHUTDOWN is not forwarded: fenceproxy's locks depend on that Redis; stop it directly"},
	}
	index()
}

const replicationRefused = "REPLCONF is not served through fenceproxy (a replica that follows the proxy uses SYNC); connect to Redis directly"

// resultCounter is a command's counter of requests by result.
type resultCounter struct {
	of      func(*metrics.Metrics) *prometheus.CounterVec
	results []string // every result it counts: each series exists from the start, at 0
	info    []infoLine
}

// infoLine is one line of INFO's "# locks" section: field, the sum of the
// counts of results.
type infoLine struct {
	field   string
	results []string
}

var (
	byName      map[string]*command // the table by name
	ownCommands []*command          // the table's own commands (flagOwn), in table order
)

// index completes the table's entries and indexes them.
func index() {
	byName = make(map[string]*command, len(table))
	for i := range table {
		e := &table[i]
		switch {
		case e.refusal != "":
			e.serve, e.onLoop = refuse(e.refusal), always // answered at once
		case e.serve != nil:
		case e.flags&flagPubSub != 0:
			e.serve = (*Handler).subscribe
		case e.flags&flagMayBlock != 0:
			e.serve = (*Handler).blocking
		}
		e.categories = categoriesOf(e.flags)
		e.docs = docArgs(e.syntax, e.resource)
		byName[e.name] = e
		if e.flags&flagOwn != 0 {
			ownCommands = append(ownCommands, e)
		}
	}
}

// lookup finds the entry of a lower-case command name, nil if there is
// none. It does not allocate.
func lookup(lower []byte) *command { return byName[string(lower)] }

// mayForward reports whether serving args may forward it on the client's
// shared connections: anything but the proxy's own commands (the lock
// family and the tier's, on connections of their own) and QUIT.
func mayForward(args [][]byte) bool {
	cmd := lookupName(args[0])
	return cmd == nil || cmd.flags&flagOwn == 0 && cmd.name != "quit"
}

// lookupName is lookup of a command name in any case.
func lookupName(name []byte) *command {
	var lower [32]byte
	if len(name) > len(lower) {
		return nil // no command of the table's is this long
	}
	return lookup(lowerInto(lower[:0], name))
}

// categoriesOf is the ACL categories (without '@') of a command of the
// proxy's own with these flags, in the order Redis's COMMAND lists them.
func categoriesOf(f flags) []string {
	if f&flagOwn == 0 {
		return nil // Redis's command: its categories are Redis's
	}
	var cats []string
	if f&flagReadonly != 0 {
		cats = append(cats, "read")
	}
	if f&flagWrite != 0 {
		cats = append(cats, "write")
	}
	if f&flagAdmin != 0 {
		cats = append(cats, "admin")
	}
	if f&flagFast != 0 {
		cats = append(cats, "fast")
	} else {
		cats = append(cats, "slow")
	}
	if f&flagAdmin != 0 {
		cats = append(cats, "dangerous")
	}
	if f&flagLock != 0 {
		cats = append(cats, "lock")
	}
	return cats
}

// countFromZero makes every result of every command's counter exist from
// the start, at 0: a rate over a series that appears only with its first
// event shows nothing before it, and dashboards of errors would look empty
// rather than quiet.
func countFromZero(m *metrics.Metrics) {
	if m == nil {
		return
	}
	for i := range table {
		if rc := table[i].results; rc != nil {
			vec := rc.of(m)
			for _, r := range rc.results {
				vec.WithLabelValues(r)
			}
		}
	}
}

// lockServe is the serve function of a lock-family command: the family's
// serve function, given the connection as the family sees it.
func lockServe(serve func(*lockcmd.Family, lockcmd.Conn, [][]byte, *resp.Reply)) func(*Handler, *protocol.Conn, [][]byte, *resp.Reply) {
	return func(h *Handler, c *protocol.Conn, args [][]byte, p *resp.Reply) {
		serve(h.locks, lockConn(c), args, p)
	}
}

// evalOnLoop: an EVAL the serve loop may forward (lockcmd's EvalOnLoop).
func evalOnLoop(h *Handler, _ *protocol.Conn, args [][]byte) bool { return h.locks.EvalOnLoop(args) }

// leaseOnLoop: a lock request the serve loop may hand to the lock path
// (lockcmd's LeaseOnLoop).
func leaseOnLoop(h *Handler, _ *protocol.Conn, args [][]byte) bool { return h.locks.LeaseOnLoop(args) }

// infoOnLoop: INFO is put together on one of the lock path's workers
// (Family.Go), which the serve loop may hand it to while their backlog
// has room (lockcmd's GoOnLoop).
func infoOnLoop(h *Handler, _ *protocol.Conn, _ [][]byte) bool { return h.locks.GoOnLoop() }

// setOnLoop: a SET the serve loop may forward (lockcmd's SetOnLoop).
func setOnLoop(h *Handler, _ *protocol.Conn, args [][]byte) bool { return h.locks.SetOnLoop(args) }

// lockCounts writes INFO's "# locks" lines of each lock command's
// counters, as its entry says (lockcmd's Section).
func lockCounts(m *metrics.Metrics) func(line func(name string, v int64)) {
	return func(line func(name string, v int64)) {
		for i := range table {
			rc := table[i].results
			if rc == nil {
				continue
			}
			vec := rc.of(m)
			for _, l := range rc.info {
				var n uint64
				for _, r := range l.results {
					n += metrics.Count(vec.WithLabelValues(r))
				}
				line(l.field, int64(n))
			}
		}
	}
}

func refuse(why string) func(*Handler, *protocol.Conn, [][]byte, *resp.Reply) {
	return func(h *Handler, c *protocol.Conn, args [][]byte, p *resp.Reply) {
		replyError(p, "ERR fenceproxy: "+why)
	}
}

// ServeCommand dispatches one request.
func (h *Handler) ServeCommand(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	s := sessionOf(c)
	if s.tunnel == nil {
		// A subscribed client's CLIENT REPLY is Redis's own: its tunnel
		// is a connection of its own.
		s.replies.silence(c, p)
		s.order.next()
		s.pipelined = c.Pipelined()
		s.onLoop = c.OnLoop()
		if (s.onLoop || s.backend.HasTracker()) && s.tx.pinned == nil && !h.opts.Backend.Ready(&s.backend) && mayForward(args) {
			// Some connection the request may go on is not open: a
			// failover replaced the master, which has none of the
			// client's shared connections (its database's, its Redis
			// user's), or in front of a Redis Cluster a tracking client's
			// connection to some master is not (its first request since
			// CLIENT TRACKING ON, or one was lost). They are opened off
			// the loop first (Open). (On a goroutine Forward dials the
			// shared ones itself; a tracker's, only on a retry.)
			openThen(c, p, func() error { return h.opts.Backend.Open(&s.backend) }, func() { h.serve(c, args, p) })
			return
		}
	}
	h.serve(c, args, p)
}

// withOpen calls then once the shared connections of database db for a
// client speaking RESP3 if resp3, as login, are open: at once if they are
// (or off the serve loop, where Forward and Select dial what they need),
// else once they are dialled off the loop (OffLoop, for the request of p;
// the client's earlier replies come in meanwhile), or it answers p with
// why they could not be opened (Redis's refusal of the database or the
// user, or that it is unreachable).
func (h *Handler) withOpen(c *protocol.Conn, p *resp.Reply, login upstream.Login, resp3 bool, db int, then func()) {
	if !c.OnLoop() || h.opts.Backend.DBOpen(login, resp3, db) {
		then()
		return
	}
	openThen(c, p, func() error { return h.opts.Backend.OpenDB(login, resp3, db) }, then)
}

// openThen runs open (a dial) off the serve loop (OffLoop, for the request
// of p), then calls then, or answers p with open's error: why the
// connections could not be opened.
func openThen(c *protocol.Conn, p *resp.Reply, open func() error, then func()) {
	c.OffLoop(p, func() func() {
		err := open()
		return func() {
			if err != nil {
				replyErr(p, err)
				return
			}
			then()
		}
	})
}

// serve dispatches one request: ServeCommand's, or the client command a
// tier peer's TIER.RELAY carries.
func (h *Handler) serve(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if h.locks.InTier() && h.serveTierLink(c, args, p) {
		return
	}
	if h.opts.ACL != nil && !h.authorize(c, args, p) {
		return
	}
	if h.refuseOwnWrite(c, args, p) {
		return
	}
	var lower [32]byte
	name := args[0]
	if len(name) <= len(lower) {
		cmd := lookup(lowerInto(lower[:0], name))
		s := sessionOf(c)
		h.served(c, s, cmd, args)
		defer h.publish(c, s)
		if s.tunnel != nil {
			if cmd != nil && cmd.flags&flagOwn != 0 {
				h.refuseOwnSubscribed(s, cmd, p)
				return
			}
			h.sendTunnel(s, args, p)
			return
		} else if s.tx.inMulti && (cmd == nil || cmd.flags&flagImmediate == 0) {
			if cmd != nil && cmd.flags&flagOwn != 0 {
				refuseOwnInMulti(s, cmd, p)
				return
			}
			// Inside MULTI Redis queues everything else, arity errors
			// included (an unknown command makes EXEC abort).
			if s.tx.deferred {
				h.beginMulti(c, s, args, p, func() { h.sendQueued(s, args, p) })
				return
			}
			h.sendQueued(s, args, p)
			return
		}
		if cmd != nil {
			if !arityOK(cmd.arity, len(args)) {
				p.Buf = redcon.AppendError(p.Buf, "ERR wrong number of arguments for '"+cmd.name+"' command")
				p.Done()
				return
			}
			if lc := (lockcmd.Conn{Conn: c, Client: s}); cmd.flags&flagLock != 0 && h.locks.Relaying(lc, cmd.name) {
				h.locks.RelayLock(lc, lockcmd.Relayed{Name: cmd.name, Resource: cmd.resource,
					Readonly: cmd.flags&flagReadonly != 0}, args, p)
				return
			}
			cmd.serve(h, c, args, p)
			return
		}
	}
	h.forward(c, args, p)
}

func arityOK(arity, n int) bool {
	if arity >= 0 {
		return n == arity
	}
	return n >= -arity
}

// reply helpers: each completes p.

func replyError(p *resp.Reply, msg string) { p.DoneError(msg) }

// replyErr answers err, an error value that becomes the client's reply
// where it is written (protocol): one of the backend's failures, a refused
// node's error.
func replyErr(p *resp.Reply, err error) { p.DoneErr(err) }

func replyOK(p *resp.Reply) { p.DoneOK() }

func replyInt(p *resp.Reply, n int64) { p.DoneInt(n) }

func replyNull(c *protocol.Conn, p *resp.Reply) {
	p.Buf = append(p.Buf, nullReply(c)...)
	p.Done()
}

// nullReply is the null of the client's protocol.
func nullReply(c *protocol.Conn) []byte { return resp.Null(sessionOf(c).backend.RESP3) }

// parseInt parses an integer argument as Redis does (no leading zeros, no
// sign but '-').
func parseInt(b []byte) (int64, bool) { return resp.ParseInt(b) }
