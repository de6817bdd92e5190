package commands

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// loopWatcher records what ServesOnLoop answered, per request name.
type loopWatcher struct {
	*Handler
	mu      sync.Mutex
	answers []string // "NAME:true" or "NAME:false", in order
}

func (w *loopWatcher) ServesOnLoop(c *protocol.Conn, args [][]byte) bool {
	ok := w.Handler.ServesOnLoop(c, args)
	name := strings.ToUpper(string(args[0]))
	if len(args) > 1 && (name == "CLIENT" || name == "FUNCTION") {
		name += " " + strings.ToUpper(string(args[1]))
	}
	w.mu.Lock()
	switch {
	case !c.OnLoop():
		// ServesOnLoop is the loop's question only.
		w.answers = append(w.answers, name+":asked off the loop")
	case ok:
		w.answers = append(w.answers, name+":loop")
	default:
		// Served on a goroutine while the client stays on the loop.
		w.answers = append(w.answers, name+":detour")
	}
	w.mu.Unlock()
	return ok
}

// expect fails t unless the requests since the last take were served as
// want says ("NAME:loop NAME:detour ...").
func (w *loopWatcher) expect(t *testing.T, want string) {
	t.Helper()
	if got := w.take(); got != want {
		t.Fatalf("ServesOnLoop answered\n%s\nwant\n%s", got, want)
	}
}

func (w *loopWatcher) take() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := strings.Join(w.answers, " ")
	w.answers = nil
	return a
}

// watchLoop has po's proxy serve from the event loop through a
// loopWatcher, which it returns; po.loop and po.wrap are set here.
func watchLoop(po *proxyOptions) *loopWatcher {
	w := &loopWatcher{}
	po.loop = true
	po.wrap = func(h *Handler) protocol.Handler {
		w.Handler = h
		return w
	}
	return w
}

// TestLongUnknownCommandOnTheLoop: a command name longer than any of the
// proxy's own is forwarded on the loop, and the client reads Redis's own
// refusal. Mutation: refused by ServesOnLoop (as before), it took a
// goroutine detour.
func TestLongUnknownCommandOnTheLoop(t *testing.T) {
	po := proxyOptions{}
	w := watchLoop(&po)
	p, _ := startStandalone(t, po, false)
	c := p.dial(t)
	long := strings.Repeat("x", 40)
	got := string(c.Do(long, "a"))
	if !strings.HasPrefix(got, "-ERR unknown command '"+long+"'") {
		t.Fatalf("%s a = %q, want Redis's unknown command", long, got)
	}
	w.expect(t, strings.ToUpper(long)+":loop")
}

// TestClientReplyOnTheLoop: CLIENT REPLY OFF, SKIP and ON, pipelined
// with other requests, are served on the loop (the mode only marks later
// replies silent), and the client reads exactly what Redis would send:
// the commands run, their replies dropped while off or skipped. Mutation:
// with ServesOnLoop refusing a client whose replies are off (as before),
// the requests sent while off went on a goroutine detour.
func TestClientReplyOnTheLoop(t *testing.T) {
	po := proxyOptions{}
	w := watchLoop(&po)
	p, _ := startStandalone(t, po, false)
	c := p.dial(t)
	// Three replies for eight requests: SET's, ON's and the last GET's.
	pipeline(t, c, [][]string{{"SET", "a", "1"}, {"CLIENT", "REPLY", "OFF"}, {"INCR", "n"}, {"GET", "a"}, {"CLIENT", "REPLY", "ON"},
		{"CLIENT", "REPLY", "SKIP"}, {"INCR", "n"}, {"GET", "n"}}, []string{"+OK\r\n", "+OK\r\n", "$1\r\n2\r\n"})
	const want = "SET:loop CLIENT REPLY:loop INCR:loop GET:loop CLIENT REPLY:loop CLIENT REPLY:loop INCR:loop GET:loop"
	w.expect(t, want)
}

// TestServesOnLoop: with the serve loop, a client's forwarded requests and
// what client libraries send when they connect (CLIENT SETINFO, SETNAME,
// ID, GETNAME, ECHO) are served on the loop, with Redis's and the proxy's
// replies in order; the first request the loop must not serve (one that
// waits for earlier replies, changes the client's protocol, database or
// reply mode, pins a connection, subscribes, or is a LOCK.ACQUIRE
// ... WAIT behind others; a
// blocking command only where it would wait: see TestBlockingOnTheLoop)
// is served on a goroutine detour, and the client's later requests are
// the loop's again.
func TestServesOnLoop(t *testing.T) {
	po := proxyOptions{}
	w := watchLoop(&po)
	p, _ := startStandalone(t, po, false)

	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"CLIENT", "SETINFO", "lib-name", "redis-py"}, "+OK\r\n"},
		{[]string{"CLIENT", "SETNAME", "app"}, "+OK\r\n"},
		{[]string{"SET", "k", "v"}, "+OK\r\n"},
		{[]string{"CLIENT", "GETNAME"}, "$3\r\napp\r\n"},
		{[]string{"ECHO", "e"}, "$1\r\ne\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
		{[]string{"CLIENT", "NO-EVICT", "on"}, "+OK\r\n"},
	})
	// Pipelined: the proxy's own replies stay in their places among
	// Redis's.
	c.Send("INCR", "n")
	c.Send("CLIENT", "GETNAME")
	c.Send("INCR", "n")
	c.Send("ECHO", "x")
	c.Flush()
	for i, want := range []string{":1\r\n", "$3\r\napp\r\n", ":2\r\n", "$1\r\nx\r\n"} {
		if got, err := c.ReadReply(); err != nil || string(got) != want {
			t.Fatalf("pipelined reply %d: %q, %v; want %q", i, got, err, want)
		}
	}
	const onLoop = "CLIENT SETINFO:loop CLIENT SETNAME:loop SET:loop CLIENT GETNAME:loop ECHO:loop GET:loop CLIENT NO-EVICT:loop " +
		"INCR:loop CLIENT GETNAME:loop INCR:loop ECHO:loop"
	if got := w.take(); got != onLoop {
		t.Fatalf("ServesOnLoop answered\n%s\nwant\n%s", got, onLoop)
	}

	// after: what ServesOnLoop answers from then on, for ECHO, GET and
	// GET: the client never left the loop.
	const back = " ECHO:loop GET:loop GET:loop"
	for _, tc := range []struct {
		first []string
		reply string
		after string
		where string // where first is served: "" for a goroutine detour
	}{
		// Database 1 has no connections yet: they are dialled off the
		// loop (OffLoop) and SELECT goes on on the loop.
		{[]string{"SELECT", "1"}, "+OK\r\n", back, "loop"},
		// Its dial fails off the loop (Redis has 16): the client reads
		// Redis's refusal, on the loop.
		{[]string{"SELECT", "99999"}, "-ERR DB index is out of range\r\n", back, "loop"},
		// The mode marks later replies' slots silent or not.
		{[]string{"CLIENT", "REPLY", "ON"}, "+OK\r\n", back, "loop"},
		// From the proxy's table of its clients.
		{[]string{"CLIENT", "LIST"}, "", back, "loop"},
		{[]string{"CLIENT", "INFO"}, "", back, "loop"},
		// Kills carried out by the loop after the reply (none here).
		{[]string{"CLIENT", "KILL", "ID", "999999"}, ":0\r\n", back, "loop"},
		// A USER filter Redis checks (no --aclfile): asked off the loop
		// (OffLoop), the kill goes on on the loop; a user Redis does not
		// have is refused as Redis refuses it.
		{[]string{"CLIENT", "KILL", "ID", "999999", "USER", "default"}, ":0\r\n", back, "loop"},
		{[]string{"CLIENT", "KILL", "USER", "nosuchuser", "ID", "1"}, "-ERR No such user 'nosuchuser'\r\n", back, "loop"},
		// No blocked client of that id: answered by the proxy; one that
		// is blocked gets CLIENT LIST and UNBLOCK on the master's control
		// connection, which wait for nothing (TestBlockingOnTheLoop).
		{[]string{"CLIENT", "UNBLOCK", "999999"}, ":0\r\n", back, "loop"},
		// Longer than the table's other subcommands (it took a detour).
		{[]string{"CLIENT", "TRACKINGINFO"}, "", back, "loop"},
		// Refused by the proxy.
		{[]string{"CLIENT", "PAUSE", "10"}, "-ERR fenceproxy: CLIENT PAUSE is not supported by fenceproxy\r\n", back, "loop"},
		// Handed to a waiter by the loop, which watches the client.
		{[]string{"LOCK.ACQUIRE", "r", "o", "10000", "WAIT", "100"}, ":1\r\n", back, "loop"},
		// Sent on the control connection once the earlier replies are in
		// (a continuation), as PING is.
		{[]string{"FUNCTION", "STATS"}, "", back, "loop"},
		// Put together on a lock worker, which the loop hands it to.
		{[]string{"INFO", "server"}, "", back, "loop"},
		// An operator's tier command, the same (here refused: no tier).
		{[]string{"TIER.INFO"}, "-ERR fenceproxy: this fenceproxy is a single node, not part of a tier (start it with --peers)\r\n", back, "loop"},
		// A command the proxy never forwards: refused at once.
		{[]string{"REPLCONF", "listening-port", "1"}, "-ERR fenceproxy: " + replicationRefused + "\r\n", back, "loop"},
	} {
		c := p.dial(t)
		run(t, c, []exchange{{[]string{"GET", "k"}, "$1\r\nv\r\n"}})
		got, err := c.TryDo(tc.first...)
		if err != nil {
			t.Fatalf("%s: %v", tc.first, err)
		}
		if tc.reply != "" && string(got) != tc.reply {
			t.Fatalf("%s: %q; want %q", tc.first, got, tc.reply)
		} else if tc.reply == "" && strings.HasPrefix(string(got), "-") {
			t.Fatalf("%s: %q", tc.first, got)
		}
		if tc.after != "" {
			c.TryDo("ECHO", "after")
			c.TryDo("GET", "k")
			c.TryDo("GET", "k")
		}
		name := strings.ToUpper(tc.first[0])
		if name == "CLIENT" || name == "FUNCTION" {
			name += " " + tc.first[1]
		}
		where := tc.where
		if where == "" {
			where = "detour"
		}
		if got, want := w.take(), "GET:loop "+name+":"+where+tc.after; got != want {
			t.Errorf("%s: ServesOnLoop answered\n%q; want\n%q", tc.first, got, want)
		}
	}

	// A blocking command first in its batch, with a spare pinned
	// connection ready, is the loop's (TestBlockingOnTheLoop), and so is
	// XREAD without BLOCK, which is only forwarded.
	primeSpares(t, p, 1)
	w.take()
	c = p.dial(t)
	run(t, c, []exchange{
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
		{[]string{"BLPOP", "nolist", "0.01"}, "*-1\r\n"},
		{[]string{"XREAD", "STREAMS", "nostream", "0"}, "*-1\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
	})
	if got, want := w.take(), "GET:loop BLPOP:loop XREAD:loop GET:loop"; got != want {
		t.Errorf("BLPOP, XREAD: ServesOnLoop answered %q; want %q", got, want)
	}

	// PING is the loop's, first in its batch or behind another request,
	// whose reply it follows (AfterReplies, a continuation on the loop).
	c = p.dial(t)
	run(t, c, []exchange{{[]string{"PING"}, "+PONG\r\n"}, {[]string{"PING", "x"}, "$1\r\nx\r\n"}})
	c.Send("GET", "k")
	c.Send("PING")
	c.Flush()
	for i, want := range []string{"$1\r\nv\r\n", "+PONG\r\n"} {
		if got, err := c.ReadReply(); err != nil || string(got) != want {
			t.Fatalf("GET, PING: reply %d: %q, %v; want %q", i, got, err, want)
		}
	}
	if got, want := w.take(), "PING:loop PING:loop GET:loop PING:loop"; got != want {
		t.Errorf("PING: ServesOnLoop answered %q; want %q", got, want)
	}

	// Database 1 is open now: a client's SELECT of it first in its batch,
	// and what it forwards there, stay on the loop, in database 1.
	c = p.dial(t)
	run(t, c, []exchange{
		{[]string{"SELECT", "1"}, "+OK\r\n"},
		{[]string{"SET", "k", "one"}, "+OK\r\n"},
		{[]string{"GET", "k"}, "$3\r\none\r\n"},
		{[]string{"SELECT", "0"}, "+OK\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
	})
	if got, want := w.take(), "SELECT:loop SET:loop GET:loop SELECT:loop GET:loop"; got != want {
		t.Errorf("SELECT of an open database: ServesOnLoop answered %q; want %q", got, want)
	}
	// Behind another request of its batch, SELECT switches once that
	// one's reply is in, on the loop (AfterReplies).
	c.Send("GET", "k")
	c.Send("SELECT", "1")
	c.Send("GET", "k")
	c.Flush()
	for i, want := range []string{"$1\r\nv\r\n", "+OK\r\n", "$3\r\none\r\n"} {
		if got, err := c.ReadReply(); err != nil || string(got) != want {
			t.Fatalf("pipelined SELECT, reply %d: %q, %v; want %q", i, got, err, want)
		}
	}
	run(t, c, []exchange{{[]string{"GET", "k"}, "$3\r\none\r\n"}, {[]string{"GET", "k"}, "$3\r\none\r\n"}, {[]string{"GET", "k"}, "$3\r\none\r\n"}})
	if got, want := w.take(), "GET:loop SELECT:loop GET:loop GET:loop GET:loop GET:loop"; got != want {
		t.Errorf("pipelined SELECT: ServesOnLoop answered %q; want %q", got, want)
	}
}

// TestServesOnLoopEveryKindOfClient: a RESP3 client and the clients of
// fenceproxy's own users are served on the loop as a plaintext RESP2 one
// is: HELLO 3 and AUTH stay on it too (the protocol switches once earlier
// replies are in); there a RESP3 client's
// forwarded replies are Redis's RESP3 ones (its connections of the shared
// pool speak RESP3), and the ACL check answers on the loop (NOAUTH,
// NOPERM) as on a goroutine.
func TestServesOnLoopEveryKindOfClient(t *testing.T) {
	po := proxyOptions{
		acl:         "user reader on >reader-pass ~* +@read +@connection\n",
		requirepass: "root-pass",
	}
	w := watchLoop(&po)
	p, _ := startStandalone(t, po, false)

	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"GET", "k"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"AUTH", "root-pass"}, "+OK\r\n"},
		{[]string{"SET", "k", "v"}, "+OK\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
	})
	if got, err := c.TryDo("HELLO", "3"); err != nil || !strings.HasPrefix(string(got), "%7\r\n") {
		t.Fatalf("HELLO 3: %q, %v", got, err)
	}
	run(t, c, []exchange{
		{[]string{"GET", "missing"}, "_\r\n"},
		{[]string{"GET", "missing"}, "_\r\n"},
		{[]string{"GET", "missing"}, "_\r\n"},
		{[]string{"ECHO", "e"}, "$1\r\ne\r\n"},
	})
	want := "GET:loop AUTH:loop SET:loop GET:loop GET:loop " +
		"HELLO:loop GET:loop GET:loop GET:loop ECHO:loop"
	if got := w.take(); got != want {
		t.Errorf("a RESP3 client of the default user: ServesOnLoop answered\n%s\nwant\n%s", got, want)
	}

	r := p.dial(t)
	run(t, r, []exchange{
		{[]string{"AUTH", "reader", "reader-pass"}, "+OK\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
		{[]string{"SET", "k", "w"}, "-NOPERM this user has no permissions to run the 'set' command\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
	})
	want = "AUTH:loop GET:loop GET:loop SET:loop GET:loop"
	if got := w.take(); got != want {
		t.Errorf("a client of a user without @write: ServesOnLoop answered\n%s\nwant\n%s", got, want)
	}
}

// primeSpares leaves n idle pinned connections at the master (the spares
// a blocking command on the loop takes): n clients in MULTI at once, each
// on a connection of its own, whose EXEC gives it back clean before its
// reply is written (BatchDone).
func primeSpares(t *testing.T, p *testProxy, n int) {
	t.Helper()
	conns := make([]*testenv.Conn, n)
	for i := range conns {
		conns[i] = p.dial(t)
		run(t, conns[i], []exchange{{[]string{"MULTI"}, "+OK\r\n"}, {[]string{"PING"}, "+QUEUED\r\n"}})
	}
	for _, c := range conns {
		run(t, c, []exchange{{[]string{"EXEC"}, "*1\r\n+PONG\r\n"}})
		c.Close()
	}
}

// redisBlocked is how many clients Redis has blocked (INFO clients).
func redisBlocked(t *testing.T, r *testenv.Conn) int {
	t.Helper()
	info := string(r.Do("INFO", "clients"))
	_, rest, _ := strings.Cut(info, "blocked_clients:")
	n, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\r\n", 2)[0]))
	return n
}

// clientID is the proxy's CLIENT ID of c.
func clientID(t *testing.T, c *testenv.Conn) string {
	t.Helper()
	return strings.TrimSuffix(strings.TrimPrefix(string(c.Do("CLIENT", "ID")), ":"), "\r\n")
}

// TestBlockingOnTheLoop: a blocking command first in its batch, with a
// spare pinned connection ready, is served on the loop (ServesOnLoop
// answers "loop", the client stays there): it is answered when another
// client pushes, blocked clients are served in the order they blocked, a
// timeout answers nil, CLIENT LIST shows it blocked (flags=b) and CLIENT
// UNBLOCK ends it; a client that hangs up, or is killed, while blocked has
// its command cancelled in Redis (its pinned connection closed), and a
// killed one is closed at once, with no reply.
func TestBlockingOnTheLoop(t *testing.T) {
	po := proxyOptions{}
	w := watchLoop(&po)
	p, master := startStandalone(t, po, false)
	r := testenv.Dial(t, master.Addr)
	waitBlocked := func(n int) {
		t.Helper()
		waitFor(t, func() bool { return redisBlocked(t, r) == n })
	}
	pusher := p.dial(t)

	// Two clients block in turn; two pushes go to them in that order.
	primeSpares(t, p, 2)
	w.take()
	first, second := p.dial(t), p.dial(t)
	first.Send("BLPOP", "q", "0")
	first.Flush()
	waitBlocked(1)
	second.Send("BRPOPLPUSH", "q", "dst", "0")
	second.Flush()
	waitBlocked(2)
	if got, want := w.take(), "BLPOP:loop BRPOPLPUSH:loop"; got != want {
		t.Fatalf("ServesOnLoop answered %q; want %q", got, want)
	}
	if loop := p.Server.LoopClients(); loop != 3 {
		t.Errorf("the loop serves %d clients; want the two blocked ones and the pusher", loop)
	}
	lister := p.dial(t) // CLIENT LIST takes a goroutine detour
	if list := string(lister.Do("CLIENT", "LIST")); strings.Count(list, "flags=b") != 2 {
		t.Errorf("CLIENT LIST shows %d blocked clients, want 2:\n%s", strings.Count(list, "flags=b"), list)
	}
	lister.Close()
	w.take()
	run(t, pusher, []exchange{{[]string{"RPUSH", "q", "a"}, ":1\r\n"}})
	if got, err := first.ReadReply(); err != nil || string(got) != "*2\r\n$1\r\nq\r\n$1\r\na\r\n" {
		t.Fatalf("the first blocked client got %q, %v; want q's a", got, err)
	}
	run(t, pusher, []exchange{{[]string{"RPUSH", "q", "b"}, ":1\r\n"}})
	if got, err := second.ReadReply(); err != nil || string(got) != "$1\r\nb\r\n" {
		t.Fatalf("the second blocked client got %q, %v; want b", got, err)
	}

	// A timeout answers nil; the client is still the loop's.
	run(t, first, []exchange{{[]string{"BLPOP", "nolist", "0.01"}, "*-1\r\n"}, {[]string{"GET", "k"}, "$-1\r\n"}})
	if got, want := w.take(), "RPUSH:loop RPUSH:loop BLPOP:loop GET:loop"; got != want {
		t.Errorf("ServesOnLoop answered %q; want %q", got, want)
	}

	// CLIENT UNBLOCK ends a BLPOP served on the loop.
	firstID := clientID(t, first)
	primeSpares(t, p, 1)
	w.take()
	first.Send("BLPOP", "q", "0")
	first.Flush()
	waitBlocked(1)
	run(t, pusher, []exchange{{[]string{"CLIENT", "UNBLOCK", firstID}, ":1\r\n"}})
	if got, err := first.ReadReply(); err != nil || string(got) != "*-1\r\n" {
		t.Fatalf("the unblocked client got %q, %v; want nil", got, err)
	}
	if got, want := w.take(), "BLPOP:loop CLIENT UNBLOCK:loop"; got != want {
		t.Errorf("ServesOnLoop answered %q; want %q", got, want)
	}

	// A client that hangs up while blocked: Redis's blocked client goes
	// too, and takes no element pushed after.
	primeSpares(t, p, 1)
	w.take()
	gone := p.dial(t)
	gone.Send("BLPOP", "q3", "0")
	gone.Flush()
	waitBlocked(1)
	gone.Close()
	waitBlocked(0)
	run(t, pusher, []exchange{{[]string{"RPUSH", "q3", "x"}, ":1\r\n"}, {[]string{"LLEN", "q3"}, ":1\r\n"}})

	// CLIENT KILL of a blocked client: closed with no reply, and its
	// blocked command ended in Redis.
	primeSpares(t, p, 1)
	killed := p.dial(t)
	killedID := clientID(t, killed)
	w.take()
	killed.Send("BLPOP", "q4", "0")
	killed.Flush()
	waitBlocked(1)
	run(t, pusher, []exchange{{[]string{"CLIENT", "KILL", "ID", killedID}, ":1\r\n"}})
	if got, err := killed.ReadReply(); err == nil {
		t.Errorf("the killed client got %q; want its connection closed", got)
	}
	waitBlocked(0)
	if got := w.take(); !strings.HasPrefix(got, "BLPOP:loop") {
		t.Errorf("ServesOnLoop answered %q; want BLPOP on the loop", got)
	}
}

// TestShutdownEndsBlockedOnTheLoop: Shutdown with a client blocked on
// the loop (BLPOP 0) returns when its time is up, the client is closed,
// and its blocked command ends in Redis (its pinned connection closed)
// rather than wait on for nobody.
func TestShutdownEndsBlockedOnTheLoop(t *testing.T) {
	po := proxyOptions{}
	w := watchLoop(&po)
	p, master := startStandalone(t, po, false)
	r := testenv.Dial(t, master.Addr)
	primeSpares(t, p, 1)
	w.take()
	c := p.dial(t)
	c.Send("BLPOP", "q", "0")
	c.Flush()
	waitFor(t, func() bool { return redisBlocked(t, r) == 1 })
	if got := w.take(); got != "BLPOP:loop" {
		t.Errorf("ServesOnLoop answered %q; want BLPOP:loop", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := p.Server.Shutdown(ctx); err != context.DeadlineExceeded {
		t.Errorf("Shutdown: %v; want its time up (the client was blocked)", err)
	}
	if got, err := c.ReadReply(); err == nil {
		t.Errorf("the blocked client got %q after Shutdown; want its connection closed", got)
	}
	waitFor(t, func() bool { return redisBlocked(t, r) == 0 })
}

// TestTrackingAndUsersOnTheLoop: in front of a standalone master, a
// tracking client and a client of another Redis user are served on the
// loop, request by request, with their connections of their own dialled
// off it: CLIENT TRACKING ON, reads, an invalidation push ahead of the
// reply Redis sent after it; AUTH as another user, that user's ACL
// applied by Redis; HELLO 3 in a database whose RESP3 connections are not
// open yet (dialled off the loop), and HELLO back to 2 of a client with a
// connection of its own (its switch a round trip off the loop).
func TestTrackingAndUsersOnTheLoop(t *testing.T) {
	po := proxyOptions{}
	w := watchLoop(&po)
	p, master := startStandalone(t, po, false)
	admin := testenv.Dial(t, master.Addr)
	admin.Do("ACL", "SETUSER", "reader", "on", ">readerpw", "~*", "+@read", "+@connection", "+acl")
	admin.Do("SET", "k", "v")

	tracker := p.dial(t)
	run(t, tracker, []exchange{
		{[]string{"SELECT", "0"}, "+OK\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON"}, "+OK\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
	})
	writer := p.dial(t)
	run(t, writer, []exchange{{[]string{"SET", "k", "v2"}, "+OK\r\n"}})
	hello(t, tracker, "3")
	tracker.Send("ECHO", "e")
	tracker.Send("GET", "k")
	tracker.Flush()
	// RESP2 tracking without REDIRECT sends no push; after HELLO 3 the
	// next write of a key read since comes as a push.
	for i, want := range []string{"$1\r\ne\r\n", "$2\r\nv2\r\n"} {
		if got, err := tracker.ReadReply(); err != nil || string(got) != want {
			t.Fatalf("tracking client: reply %d: %q, %v; want %q", i, got, err, want)
		}
	}
	run(t, writer, []exchange{{[]string{"SET", "k", "v3"}, "+OK\r\n"}})
	tracker.Send("GET", "k")
	tracker.Flush()
	if got, err := tracker.ReadReply(); err != nil || !strings.HasPrefix(string(got), ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n") {
		t.Fatalf("tracking client: %q, %v; want the invalidation push of k", got, err)
	}
	if got, err := tracker.ReadReply(); err != nil || string(got) != "$2\r\nv3\r\n" {
		t.Fatalf("tracking client: GET k = %q, %v", got, err)
	}
	w.expect(t, "SELECT:loop CLIENT TRACKING:loop GET:loop SET:loop HELLO:loop ECHO:loop GET:loop SET:loop GET:loop")

	user := p.dial(t)
	run(t, user, []exchange{
		{[]string{"SELECT", "5"}, "+OK\r\n"},
		{[]string{"AUTH", "reader", "readerpw"}, "+OK\r\n"},
		{[]string{"ACL", "WHOAMI"}, "$6\r\nreader\r\n"},
		{[]string{"GET", "k"}, "$-1\r\n"}, // database 5
		{[]string{"SET", "k", "x"}, "-NOPERM this user has no permissions to run the 'set' command\r\n"},
	})
	hello(t, user, "3")
	run(t, user, []exchange{{[]string{"GET", "k"}, "_\r\n"}})
	hello(t, user, "2")
	w.expect(t, "SELECT:loop AUTH:loop ACL:loop GET:loop SET:loop HELLO:loop GET:loop HELLO:loop")

	// HELLO 3 in a database whose RESP3 connections are not open yet.
	fresh := p.dial(t)
	run(t, fresh, []exchange{{[]string{"SELECT", "7"}, "+OK\r\n"}})
	hello(t, fresh, "3")
	run(t, fresh, []exchange{{[]string{"GET", "k"}, "_\r\n"}})
	w.expect(t, "SELECT:loop HELLO:loop GET:loop")
}

// hello sends HELLO ver and fails unless Redis's map (RESP3) or array
// (RESP2) comes back.
func hello(t *testing.T, c *testenv.Conn, ver string) {
	t.Helper()
	if got := string(c.Do("HELLO", ver)); !strings.HasPrefix(got, "%7\r\n") && !strings.HasPrefix(got, "*14\r\n") {
		t.Fatalf("HELLO %s: %q", ver, got)
	}
}
