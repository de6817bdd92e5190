package commands

import (
	"bytes"
	"math"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// SELECT. A client's database is the Forwarder's to route by (the
// standalone Forwarder gives each database in use connections of its own,
// see upstream's databases.go; a Redis Cluster has only 0); the proxy keeps
// which one the client is in (upstream.Client.DB, and Conn.SetDB for CLIENT
// LIST). Lock commands do not follow it: the lock family, FENCE.EXEC's
// command included, always works in database 0, since a resource is one
// lock whichever database its clients selected.
//
// SELECT changes a client's database as Redis does: at once outside a
// transaction (on its own connection too, when it holds one: WATCH, or
// after EXEC in the same batch), and when EXEC runs it inside one (a
// SELECT queued in MULTI, whose result is read from EXEC's reply). RESET
// goes back to 0; HELLO does not, as in Redis.

const (
	replyNotInteger = "ERR value is not an integer or out of range"
	replyDBNotInt32 = "ERR value is out of range, value must between -2147483648 and 2147483647"
)

// queuedSelect is a SELECT queued in the client's transaction: the
// position of its reply in EXEC's and the database it names.
type queuedSelect struct {
	at int
	db int
}

func (h *Handler) selectDB(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	n, ok := parseInt(args[1])
	switch {
	case !ok:
		replyError(p, replyNotInteger)
		return
	case n < math.MinInt32 || n > math.MaxInt32:
		replyError(p, replyDBNotInt32)
		return
	}
	db := int(n)
	s := sessionOf(c)
	if s.tx.execSelects {
		// EXEC's reply says which database the client is in.
		h.after(c, s, p, func() { h.selectIn(c, s, db, p) })
		return
	}
	h.selectIn(c, s, db, p)
}

// selectIn is SELECT db once the database the client is in is known.
func (h *Handler) selectIn(c *protocol.Conn, s *session, db int, p *resp.Reply) {
	s.adoptExecDB(c)
	if db != s.backend.DB && s.tx.pinned == nil {
		// What the client sent before goes on the old database's
		// connection: it runs before anything takes the new one's.
		h.after(c, s, p, func() { h.switchDB(c, s, db, p) })
		return
	}
	h.switchDB(c, s, db, p)
}

// switchDB puts the client in database db and answers SELECT.
func (h *Handler) switchDB(c *protocol.Conn, s *session, db int, p *resp.Reply) {
	if db == s.backend.DB {
		h.selectOpen(c, s, db, p)
		return
	}
	// On the loop, its connections are dialled off it first if they are
	// not open (the client reads and sends nothing meanwhile); then SELECT
	// goes on, on the loop, dialling nothing. Select's errors: an index
	// out of range, Redis unreachable.
	h.withOpen(c, p, s.backend.Login(), s.backend.RESP3, db, func() { h.selectOpen(c, s, db, p) })
}

// selectOpen is switchDB once db's connections are open (or, off the
// loop, dialled by Select).
func (h *Handler) selectOpen(c *protocol.Conn, s *session, db int, p *resp.Reply) {
	if db != s.backend.DB {
		if err := h.opts.Backend.Select(&s.backend, db); err != nil {
			replyErr(p, err)
			return
		}
		c.SetDB(db)
	}
	if s.tx.pinned != nil {
		// Its own connection stays the client's for now (WATCH): Redis
		// selects there too, and answers.
		h.opts.Metrics.PassthroughCommands.Inc()
		s.tx.pinned.Select(db, p)
		return
	}
	replyOK(p)
}

// selectZero puts the client back in database 0 (RESET), once its earlier
// requests have their replies.
func (h *Handler) selectZero(c *protocol.Conn, s *session, p *resp.Reply) {
	s.adoptExecDB(c)
	if s.backend.DB != 0 {
		h.opts.Backend.Select(&s.backend, 0)
	}
	c.SetDB(0)
}

// after runs then once the client's earlier requests have their replies
// (protocol's AfterReplies: on the serve loop, later, from the loop, once
// ServeCommand has returned), and publishes the client's state for CLIENT
// LIST after it.
func (h *Handler) after(c *protocol.Conn, s *session, p *resp.Reply, then func()) {
	c.AfterReplies(p, func() {
		defer h.publish(c, s)
		then()
	})
}

// sendQueued sends a command into the client's open transaction, noting a
// SELECT so that EXEC's reply can say whether it ran.
func (h *Handler) sendQueued(s *session, args [][]byte, p *resp.Reply) {
	if trackingInMulti(args) {
		replyError(p, "ERR fenceproxy: CLIENT TRACKING and CACHING are not served inside MULTI; send them before it")
		return
	}
	if replyInMulti(args) {
		// Queued, it would turn replies off on the transaction's
		// connection in Redis, which the proxy then reads no more replies
		// from (the client hung, EXEC's reply never came) and hands back
		// to other clients' transactions.
		s.tx.denied = true
		replyError(p, "ERR fenceproxy: CLIENT REPLY cannot be part of a transaction; send it before MULTI or after EXEC")
		return
	}
	if authInMulti(args) {
		// EXEC would authenticate the transaction's connection, which
		// goes back to the proxy's for other clients after it.
		s.tx.denied = true
		replyError(p, "ERR fenceproxy: AUTH and HELLO cannot be part of a transaction; authenticate before MULTI")
		return
	}
	if len(args) == 2 && bytes.EqualFold(args[0], []byte("select")) {
		if n, ok := parseInt(args[1]); ok && n >= 0 && n <= math.MaxInt32 {
			s.tx.selects = append(s.tx.selects, queuedSelect{at: s.tx.queued, db: int(n)})
		}
	}
	s.tx.queued++
	h.sendPinned(s, args, p)
}

// execReply wraps EXEC's reply slot when the transaction queued a SELECT:
// the last SELECT that Redis answered +OK in EXEC's reply is the client's
// database from then on. It runs on the backend's reader, so the database
// is handed over in session.execDB and adopted on the connection's side
// (adoptExecDB).
func (h *Handler) execReply(s *session, p *resp.Reply) *resp.Reply {
	selects := s.tx.selects
	s.tx.selects, s.tx.queued = nil, 0
	if len(selects) == 0 {
		return p
	}
	s.tx.execSelects = true
	start := len(p.Buf)
	var sub *resp.Reply
	sub = resp.NewReplyFunc(func() {
		if elems, ok := resp.Elements(sub.Buf[start:]); ok {
			for i := len(selects) - 1; i >= 0; i-- {
				if q := selects[i]; q.at < len(elems) && string(elems[q.at]) == "+OK\r\n" {
					s.execDB.Store(int64(q.db))
					break
				}
			}
		}
		p.Buf, p.Err = sub.Buf, sub.Err
		p.Done()
	})
	sub.Buf = p.Buf
	return sub
}

// adoptExecDB takes on the database a transaction's SELECT chose, once
// EXEC's reply is in (BatchDone, or a later request of the batch after
// waiting for it).
func (s *session) adoptExecDB(c *protocol.Conn) {
	s.tx.execSelects = false
	db := int(s.execDB.Swap(-1))
	if db < 0 {
		return
	}
	s.backend.DB = db
	c.SetDB(db)
	if s.tx.pinned != nil {
		s.tx.pinned.Selected(db)
	}
}
