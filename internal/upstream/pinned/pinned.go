package pinned

import (
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream/fanout"
)

// Home is the master a connection belongs to.
type Home interface {
	// Unpin takes a connection back; clean: it may serve another client
	// of protocol resp3.
	Unpin(c *backend.Conn, resp3, clean bool)
	// Control is the master's connection that carries nothing else, where
	// CLIENT LIST and CLIENT UNBLOCK are answered even while a script runs.
	Control() *backend.Conn
}

// Lender is who lent a connection it keeps for itself (a tracker).
type Lender interface {
	// DoLent sends a request on the lent connection c: written before it
	// returns if now (backend.Conn.DoNow), else with what follows.
	DoLent(c *Conn, args [][]byte, p *resp.Reply, now bool)
	// GiveBack takes c back; clean as for Release.
	GiveBack(c *Conn, clean bool)
}

// Conn is a connection to one master that one client has to itself.
type Conn struct {
	conn  *backend.Conn
	home  Home
	resp3 bool
	db    int // the database the connection is in
	// keyed: in front of a Redis Cluster, where a MOVED or ASK on it means
	// the request's key lives on another master than the connection's.
	keyed bool
	// own: a standalone master's tracking connection, never reused.
	own bool
	// lender is who lent the connection (nil: home's pinned pool); caching
	// is a CLIENT CACHING flag to send before its first request.
	lender  Lender
	caching []byte
}

// Options says what a new Conn is for.
type Options struct {
	// RESP3 and DB are the protocol and database the connection is in.
	RESP3 bool
	DB    int
	// Keyed: in front of a Redis Cluster (see Conn.keyed).
	Keyed bool
	// Own: the client's for good (a tracking connection), closed on
	// Release rather than kept for another.
	Own bool
}

// New is conn, taken from home for one client.
func New(conn *backend.Conn, home Home, o Options) *Conn {
	return &Conn{conn: conn, home: home, resp3: o.RESP3, db: o.DB, keyed: o.Keyed, own: o.Own}
}

// Lent is conn to home, lent by lender, which sends caching (CLIENT
// CACHING's flag, nil for none) before the first request (DoLent).
func Lent(conn *backend.Conn, home Home, lender Lender, resp3 bool, caching []byte) *Conn {
	return &Conn{conn: conn, home: home, resp3: resp3, keyed: true, lender: lender, caching: caching}
}

// Backend is the connection itself, for its lender.
func (pc *Conn) Backend() *backend.Conn { return pc.conn }

// Home is the master the connection belongs to.
func (pc *Conn) Home() Home { return pc.home }

// TakeCaching returns the CLIENT CACHING flag waiting to go before the
// connection's first request, and clears it: for its lender.
func (pc *Conn) TakeCaching() []byte {
	f := pc.caching
	pc.caching = nil
	return f
}

// replyOtherMaster replaces a MOVED or ASK on a pinned connection: the
// request's key lives on another master than the one the client's
// transaction or blocking command is bound to.
const replyOtherMaster = "-CROSSSLOT fenceproxy: this key is on another Redis Cluster master than the transaction's; keep a transaction's keys in one slot with a {hash tag}\r\n"

// Do sends a request on the connection; no MOVED or ASK reaches p.
func (pc *Conn) Do(args [][]byte, p *resp.Reply) {
	if pc.lender != nil {
		pc.lender.DoLent(pc, args, noRedirects(p), false)
		return
	}
	if pc.keyed {
		p = noRedirects(p)
	}
	pc.conn.Do(args, p)
}

// DoNow is Do, written before it returns (backend.Conn.DoNow): for the
// last request the client has sent so far.
func (pc *Conn) DoNow(args [][]byte, p *resp.Reply) {
	if pc.lender != nil {
		pc.lender.DoLent(pc, args, noRedirects(p), true) // CLIENT CACHING first
		return
	}
	if pc.keyed {
		p = noRedirects(p)
	}
	pc.conn.DoNow(args, p)
}

// Up reports whether the connection is still established.
func (pc *Conn) Up() bool { return pc.conn.Up() }

// OnLoop reports whether the serve loop serves the connection (not with
// TLS): a request on it, from the loop, waits for nothing and leaves at
// the end of the pass. A lent one (a tracking client's in front of a Redis
// Cluster) too: its lender's DoLent only puts CLIENT CACHING ahead.
func (pc *Conn) OnLoop() bool { return pc.conn.OnLoop() }

// Unblock ends the blocking command the connection waits on, as CLIENT
// UNBLOCK id [TIMEOUT|ERROR] would (mode: nil, or that last argument): it
// finds the connection's client id in the master's CLIENT LIST (by its
// address: no round trip is spent on learning it when a connection is
// pinned) and sends CLIENT UNBLOCK on the master's control connection. p
// gets Redis's reply (:1 if a command was unblocked, :0 if none waited),
// or :0 if the connection is gone. The caller must not give the
// connection to another client afterwards (Release(false)): the UNBLOCK
// may arrive after the command it was meant for has ended.
func (pc *Conn) Unblock(mode []byte, p *resp.Reply) {
	if mode != nil {
		mode = append([]byte(nil), mode...) // used once CLIENT LIST is in, after the request
	}
	laddr := pc.conn.LocalAddr()
	if laddr == "" {
		p.Buf = append(p.Buf, ":0\r\n"...)
		p.Done()
		return
	}
	control := pc.home.Control()
	var list *resp.Reply
	list = resp.NewReplyFunc(func() {
		id, ok := clientIDByAddr(list.Buf, laddr)
		switch {
		case list.Err != nil:
			p.Err = list.Err
			p.Done()
		case !ok:
			p.Buf = append(p.Buf, ":0\r\n"...)
			p.Done()
		default:
			args := [][]byte{[]byte("CLIENT"), []byte("UNBLOCK"), []byte(id)}
			if mode != nil {
				args = append(args, mode)
			}
			control.Do(args, p)
		}
	})
	control.Do([][]byte{[]byte("CLIENT"), []byte("LIST"), []byte("TYPE"), []byte("normal")}, list)
}

// clientIDByAddr finds the id of the client at addr in a CLIENT LIST reply.
func clientIDByAddr(reply []byte, addr string) (string, bool) {
	v, err := resp.Parse(reply)
	list, ok := v.(string)
	if err != nil || !ok {
		return "", false
	}
	for _, line := range strings.Split(list, "\n") {
		var id string
		for _, field := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(field, "id="); ok {
				id = v
			}
			if field == "addr="+addr && id != "" {
				return id, true
			}
		}
	}
	return "", false
}

// Close ends the connection at once: Redis sees its client go, which ends
// a blocked command. Release must still follow.
func (pc *Conn) Close() { pc.conn.Close() }

// Release gives the connection back. Only a clean one (no MULTI, WATCH or
// blocked command pending on it) is kept for another client.
func (pc *Conn) Release(clean bool) {
	if pc.lender != nil {
		pc.lender.GiveBack(pc, clean)
		return
	}
	if clean && !pc.own && pc.db != 0 && pc.conn.Up() {
		// Back to database 0, where the next client's pinning starts.
		pc.conn.Do(SelectRequest(0), Discard())
	}
	pc.home.Unpin(pc.conn, pc.resp3, clean && !pc.own)
}

// Select sends SELECT db for the client on its own connection (its reply,
// Redis's, in p) and remembers that the connection is in db. The caller
// has checked db with the Forwarder's Select.
func (pc *Conn) Select(db int, p *resp.Reply) {
	pc.db = db
	pc.conn.Do(SelectRequest(db), p)
}

// Hello switches the connection's protocol with the client's (HELLO 2 or
// 3, Redis's reply dropped: the client gets the proxy's) and returns once
// Redis has answered, so that a tracking client's invalidations for writes
// made after its HELLO reply come in the new protocol (in RESP2 without a
// redirect Redis drops them). It goes back to the pinned connections of
// that protocol when released. It waits on Redis: call it off the serve
// loop.
func (pc *Conn) Hello(resp3 bool) {
	pc.resp3 = resp3
	pc.conn.DoWithin(HelloRequest(resp3), helloWait)
}

// helloWait bounds Hello's wait; a connection that has not answered by
// then is closed, and the client's next request on it fails.
const helloWait = 5 * time.Second

// Selected records that a SELECT inside a transaction made db the
// connection's database (EXEC ran it).
func (pc *Conn) Selected(db int) { pc.db = db }

// DB is the database the connection is in.
func (pc *Conn) DB() int { return pc.db }

// noRedirects wraps p so that MOVED and ASK never reach the client.
func noRedirects(p *resp.Reply) *resp.Reply {
	start := len(p.Buf)
	var sub *resp.Reply
	sub = resp.NewReplyFunc(func() {
		if k := fanout.RedirectOf(sub.Buf[start:]); k == fanout.Moved || k == fanout.Ask {
			sub.Buf = append(sub.Buf[:start], replyOtherMaster...)
		}
		p.Buf, p.Err = sub.Buf, sub.Err
		p.Done()
	})
	sub.Buf = p.Buf
	return sub
}

// SelectRequest is SELECT db.
func SelectRequest(db int) [][]byte {
	return [][]byte{[]byte("SELECT"), []byte(strconv.Itoa(db))}
}

// HelloRequest is HELLO 3 or HELLO 2.
func HelloRequest(resp3 bool) [][]byte {
	if resp3 {
		return [][]byte{[]byte("HELLO"), []byte("3")}
	}
	return [][]byte{[]byte("HELLO"), []byte("2")}
}

// Discard is the reply slot of a request of the proxy's own on a
// client's connection, whose answer nobody reads.
func Discard() *resp.Reply { return resp.NewReplyFunc(func() {}) }
