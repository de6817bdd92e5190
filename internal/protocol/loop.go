package protocol

import (
	"crypto/tls"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/netloop"
)

// Serving clients from an event loop (Server.Loop).
//
// A goroutine per connection costs a goroutine wake-up per request, and
// with the backend's writer and reader, three per unpipelined request; on
// a machine whose cores are busy, they are wake-ups of OS threads, which
// cost the proxy twice the CPU per request of twemproxy's single epoll
// thread (docs/performance.md). So a client starts on the
// server's loop (netloop), which serves every ready client in turn: it
// reads what the client sent, dispatches each whole request as serve
// would, ends the batch once the client has sent nothing more (left to its
// last reply, as later.go leaves one), and goes on to the next client. The
// requests of all the clients served in one pass leave for Redis in one
// write per backend connection at the end of the pass, and when the loop
// reads their replies (the backend's connections are on the same loop),
// each client's batch is written where its last reply completes it.
//
// A client stays on the loop for its whole life. The loop's thread runs
// only what cannot make it wait: whole requests, framed from what it read
// (Reader.Frame: multibulk or inline, the buffer grown for a long one),
// that the Handler serves without blocking (LoopHandler.ServesOnLoop).
// A request that may block (MayBlock) ends its batch, and the loop
// watches the client while it waits (clientGone). Any other request is
// served on a goroutine while the client stays on the loop, frozen (a
// goroutine detour: goroutinedetour.go), and the loop goes on with the
// client once the Handler has returned. A batch whose write the socket
// does not take at once stays on the loop, which writes its rest as the
// socket makes room (loopwrite.go).
//
// The invariants are in the package doc ("Serving from an event loop").

// LoopHandler is a Handler that serves some requests on an event loop
// (Server.Loop). Without it, every client gets a goroutine.
type LoopHandler interface {
	Handler
	// ServesOnLoop reports whether ServeCommand serves args on the
	// loop's thread without blocking it (AfterReplies and
	// OffLoop are not blocking: on the loop their continuation runs
	// later; TakeWrites and EnablePushes neither: the loop writes the
	// stream, loopoutbox.go). It decides only which thread serves args,
	// never whether the loop does: when it reports false (having changed
	// nothing), ServeCommand serves args on a goroutine while the client
	// stays on the loop, frozen (goroutinedetour.go), where OnLoop is
	// false and AfterReplies and OffLoop wait as on the
	// goroutine transport. MayBlock is allowed either way (the loop ends
	// the batch with it and watches the client: ClientGone as on a
	// goroutine).
	ServesOnLoop(c *Conn, args [][]byte) bool
}

// loopClient is a connection's state while the loop serves it.
type loopClient struct {
	c    *Conn
	loop *netloop.Loop
	fd   int
	reg  netloop.Reg
	edge netloop.Edge // whether the socket may have bytes (netloop is edge-triggered)
	eof  bool         // the client ended its stream; close after the batch
	// closeNow: Shutdown's time is up; close once no batch is in flight.
	closeNow bool
	stopped  bool
	counted  bool // in the server's loopClients
	// laterErr is the write's outcome of a batch left to its last reply,
	// set by doneLater before it posts resume.
	laterErr error
	resumeFn func() // resume, bound once: posting it allocates nothing
	// held says who holds the connection while a batch is in flight
	// (c.later): heldByBatch, heldWanted, or heldByLoop once a quiet
	// batch's completer gave it back without a post (see quietResume).
	held atomic.Int32
	// idleFrom is when the loop last began to wait for the client's next
	// request (it came to the loop, or its batch was written): with
	// c.readAt, where its idle time counts from (loopidle.go).
	idleFrom time.Time
	idleIdx  int // its place in the server's loopIdle, -1 if not there
	// tls is a TLS client's record layer (tlsloop.go), nil in plaintext;
	// tlsDry: its last read found nothing, in the tls.Conn nor in the
	// socket, so only the next readiness edge brings more.
	tls    *tls.Conn
	tlsDry bool
	// fenced: noted by the loop's fence (goroutinedetour.go).
	fenced bool
	// hungUp: a readiness edge said the client's stream ended.
	hungUp bool
	// gone: ClientGone was called for its blocked batch (clientGone); set
	// on the loop, read by finishLater too.
	gone atomic.Bool
	// w is a batch's write that waits for room (loopwrite.go).
	w loopWrite
}

// startOnLoop moves a new plaintext connection's socket to the server's
// loop and reports whether it did (else a goroutine serves it).
func (c *Conn) startOnLoop() bool {
	c.onLoop = true // before the hand-over: Kill and Shutdown go through the loop
	if !c.toLoop() {
		c.onLoop = false
		return false
	}
	return true
}

// toLoop takes the connection's socket off Go's poller and posts its
// hand-over to the loop (moveIn), or reports false, having changed
// nothing, if the socket could not be taken. After true the caller must
// not touch the connection again.
func (c *Conn) toLoop() bool {
	fd, err := netloop.Detach(c.raw)
	if err != nil {
		return false
	}
	lc := newLoopClient(c, fd, time.Now())
	if c.tio != nil {
		lc.tls = c.nc.(*tls.Conn)
	}
	lc.loop.Post(lc.moveIn)
	return true
}

// newLoopClient is c's loop state over the socket fd, waiting for the
// client since idleFrom.
func newLoopClient(c *Conn, fd int, idleFrom time.Time) *loopClient {
	lc := &loopClient{c: c, loop: c.server.Loop, fd: fd, idleFrom: idleFrom, idleIdx: -1}
	lc.edge.Readable() // bytes may have come before it was added
	// Bound once: posting them allocates nothing.
	lc.resumeFn = lc.resume
	lc.w.startFn, lc.w.checkFn = lc.startWrite, lc.checkWrite
	return lc
}

// moveIn gives the connection to the loop, on the loop, where Kill's and
// Shutdown's interrupts for a connection that started there run
// (interruptOnLoop): one posted before this finds the old net.Conn
// (closed by Detach, so it does nothing) and register sees the flag it
// set.
func (lc *loopClient) moveIn() {
	c := lc.c
	c.lp = lc
	if lc.tls != nil {
		c.tio.useLoop(lc) // here, where interrupts read its conn
	}
	c.nc, c.raw, c.rawConn = nil, nil, nil
	c.fd.Store(int64(lc.fd))
	lc.register()
}

func (lc *loopClient) register() {
	reg, err := lc.loop.Add(lc.fd, lc)
	if err != nil {
		lc.c.server.Logger.Error("cannot serve a client from the event loop", "client", lc.c.RemoteAddr, "err", err)
		lc.stop()
		return
	}
	lc.reg = reg
	lc.counted = true
	lc.c.server.loopClients.Add(1)
	lc.trackIdle()
	if killed := lc.c.killed.Load(); killed || lc.c.closing.Load() {
		lc.shutdown(killed) // Kill or Shutdown came first
		return
	}
	if lc.tls != nil {
		// The tls.Conn may hold requests read with the handshake's last
		// bytes, or by the goroutine the client comes back from, for
		// which no edge comes.
		lc.c.serveLoop()
	}
}

// Ready serves the client's readiness, on the loop.
func (lc *loopClient) Ready(ev netloop.Events) {
	lc.edge.Saw(ev)
	if ev&netloop.In != 0 {
		lc.tlsDry = false
	}
	if ev&netloop.Ended != 0 {
		lc.hungUp = true
	}
	if lc.stopped {
		return
	}
	// Bytes or the end that come while a batch is in flight are served
	// once it is written: resume must come then.
	if lc.inFlight(ev&(netloop.In|netloop.Ended) != 0) {
		if lc.w.pending {
			lc.writeReady(ev) // resume follows once it is written
			return
		}
		if lc.hungUp && !lc.c.detour.away {
			// A blocked command waits for nobody now (during a goroutine
			// detour, endGoroutineDetour sees to it: the request may be
			// being served still).
			lc.clientGone()
		}
		return // resume goes on (invariant 2)
	}
	if lc.c.detour.then != nil || lc.c.detour.away {
		return // endDetour or endGoroutineDetour goes on (invariant 2)
	}
	if lc.heldByFence() {
		return // served once another client's detour has dispatched
	}
	lc.c.serveLoop()
}

// serveLoop is serve's loop for a connection on the event loop: it
// dispatches every whole request buffered, reading while the socket has
// bytes, and ends the batch when the client has sent nothing more.
func (c *Conn) serveLoop() {
	lc := c.lp
	if c.outbox != nil && !c.outbox.writeOut() {
		return // a stream's or pushes' write waits, or the client closed
	}
	for {
		if c.killed.Load() {
			// CLIENT KILL (Kill) posts the close to the loop, where it may
			// come after a request that arrived meanwhile: as in Redis, a
			// killed client is served nothing more.
			lc.eof = true
			c.endLoopBatch()
			return
		}
		args, err := c.rd.Frame()
		if err != nil {
			c.refuseOnLoop(err)
			return
		}
		if args == nil {
			// The beginning of a request, or nothing: read what the
			// socket has, without waiting (a request longer than the
			// buffer grows it), and frame again.
			if lc.mayRead() && !lc.eof {
				switch err := c.rd.Fill(); err {
				case nil:
					continue
				case netloop.ErrWouldBlock, errTLSWouldBlock:
				default: // the end of the stream, or a broken socket
					lc.eof = true
				}
			}
			// Nothing more now: the client has sent every request it will
			// until it has these replies.
			c.endLoopBatch()
			return
		}
		if !c.server.handler.(LoopHandler).ServesOnLoop(c, args) {
			c.startGoroutineDetour(args) // endGoroutineDetour goes on
			return
		}
		p := c.batch.next()
		if c.batch.n == 1 {
			c.heldInput = 0
		}
		c.dispatch(args, p)
		if c.detour.then != nil {
			// It goes on once its earlier replies are in (detour.go):
			// nothing more of the client's until then.
			c.startDetour(args)
			return
		}
		if !c.afterDispatch(args) {
			return
		}
	}
}

// refuseOnLoop ends a connection on the loop whose stream cannot be framed
// (a malformed request, or one over a limit), as serveRequests does on a
// goroutine: the batch so far is written, with Redis's "-ERR Protocol
// error: ..." after it for a malformed request (none for the query buffer
// limit, which Redis closes at once), and then the connection is closed.
func (c *Conn) refuseOnLoop(err error) {
	if perr, ok := err.(*ProtocolError); ok {
		p := c.batch.next()
		p.Buf = redcon.AppendError(p.Buf, "ERR "+perr.Error())
		p.Done()
		c.server.logProtocolError(c, perr)
	} else {
		c.server.limitClosed(c, closeQuery, "closing client that reached max query buffer length",
			"client_query_buffer_limit", c.server.Limits.MaxQueryBuf)
	}
	c.lp.eof = true
	c.endLoopBatch()
}

// afterDispatch ends the batch where the request just served (args) says
// so, and reports whether serveLoop goes on with the next one.
func (c *Conn) afterDispatch(args [][]byte) bool {
	lc := c.lp
	if c.closeAfterReply {
		// The Handler panicked: close after the batch.
		lc.eof = true
		c.endLoopBatch()
		return false
	}
	if c.mayBlock {
		// A request that may block (first in its batch, on a
		// connection of its own that is open already: ServesOnLoop, or
		// one that waited for its earlier replies: detour.go) ends its
		// batch; the loop watches the client until its reply is in
		// (clientGone).
		c.endLoopBatch()
		if c.later && (lc.hungUp || lc.closeNow) {
			lc.clientGone() // it hung up with the request, or in a detour
		}
		return false
	}
	// As serve: a full batch is written before more is read; one
	// as long as probeBatch too, since the loop cannot wait to learn
	// its replies' size.
	if c.batch.out.full(c.window) || c.batch.n >= c.window || c.batch.n >= probeBatch {
		c.endLoopBatch()
		return false
	}
	return true
}

// endLoopBatch ends the batch: it is left to its last reply (or written
// now if every reply is in), and the loop holds the connection again once
// it is written (resume). With no batch, a connection at the end of its
// stream is closed.
func (c *Conn) endLoopBatch() {
	if c.batch.n == 0 {
		if c.lp.eof || c.closing.Load() {
			c.lp.stop()
		}
		return
	}
	c.later = true
	if c.lp.quiet() {
		c.lp.held.Store(heldByBatch)
	} else {
		c.lp.held.Store(heldWanted)
	}
	if c.batch.left.Add(-1) == 0 {
		c.finishLater() // every reply is in: written here
	}
}

// resume is posted by doneLater once a batch left to its last reply is
// written: the loop holds the connection again (invariant 2).
func (lc *loopClient) resume() {
	c := lc.c
	lc.reclaimed()
	err := lc.laterErr
	lc.laterErr = nil
	switch {
	case lc.stopped:
	case err != nil || lc.eof || lc.closeNow || lc.gone.Load():
		// Gone: ClientGone may still run, and nothing more of the
		// client's is served (the Handler's calls never overlap).
		lc.stop()
	default:
		// Shutting down too: what the client has sent is still served
		// (endLoopBatch closes it once nothing more is there).
		c.serveLoop()
	}
}

// doneLater is Conn.doneLater (later.go) for a connection on the loop.
func (lc *loopClient) doneLater(err error) {
	lc.laterErr = err
	lc.c.batch.left.Store(1)
	if testHookGiveBack != nil {
		testHookGiveBack()
	}
	if err == nil && lc.held.CompareAndSwap(heldByBatch, heldByLoop) {
		return // quiet: the loop takes it back at its next edge (quietResume)
	}
	lc.loop.Post(lc.resumeFn)
}

// writeNow is Conn.writeNow (rawio_unix.go) for a connection on the loop.
func (lc *loopClient) writeNow(b []byte) (int, error) {
	n, err := netloop.Write(lc.fd, b)
	if err == netloop.ErrWouldBlock {
		return 0, nil
	}
	return n, err
}

// read is the Reader's source on the loop: one read that never waits. A
// read that comes back short ends the loop's reading until the next
// readiness edge.
func (lc *loopClient) read(b []byte) (int, error) {
	if lc.tls != nil {
		return lc.readTLS(b)
	}
	n, err := lc.edge.Read(lc.fd, b)
	if err != nil {
		return 0, err
	}
	// When the pass began: no later than the read (a lease counted from
	// it only ends sooner), and one clock read for every client of the
	// pass.
	lc.c.readAt = lc.loop.Now()
	return n, nil
}

// stop closes a connection on the loop that the loop holds (invariant 4)
// and releases it.
func (lc *loopClient) stop() {
	if lc.stopped {
		return
	}
	lc.stopped = true
	lc.uncount()
	lc.untrackIdle()
	if lc.fd >= 0 {
		lc.closeNotify()
		lc.loop.Del(lc.reg)
		netloop.Close(lc.fd)
		lc.fd = -1
	}
	go lc.c.server.release(lc.c) // Closed may take what a loop must not wait for
}

// uncount takes the connection out of the server's loopClients.
func (lc *loopClient) uncount() {
	if lc.counted {
		lc.counted = false
		lc.c.server.loopClients.Add(-1)
	}
}

// shutdown is Shutdown's interrupt on the loop: the requests the client
// has sent (in the buffer, or in the socket now) are served, and the
// connection is closed once their replies are written and nothing more is
// there to read (endLoopBatch); with closeNow (Shutdown's time is up), at
// once, or once the batch in flight is written (resume).
func (lc *loopClient) shutdown(closeNow bool) {
	lc.closeNow = lc.closeNow || closeNow
	switch {
	case lc.stopped:
	case lc.c.detour.then != nil || lc.c.detour.away:
		// endDetour goes on, and ends the wait of a blocking request it
		// sends (afterDispatch) or closes the client after the batch
		// (resume).
	case lc.inFlight(true): // resume closes it, or serves what came first
		if lc.closeNow {
			// A blocked command would hold the close (invariant 4)
			// until its reply, for as long as it blocks; a write that
			// waits for a client that reads nothing, for good.
			lc.clientGone()
			lc.abandonWrite()
		}
	case lc.closeNow:
		lc.stop()
	default:
		lc.edge.Readable() // whatever came meanwhile is read once more
		lc.tlsDry = false
		lc.c.serveLoop()
	}
}

// clientGone ends the wait of a batch that may block (MayBlock) whose
// client is gone (it hung up, was killed, or outlasted Shutdown): the
// Handler's ClientGone, once, on a goroutine of its own (it may wait),
// which cancels the blocked command, so that its reply comes and the
// loop gets the connection back to close it (resume). ClientGone runs
// under goneMu, as do BatchDone (collect) and Closed (release), since
// the batch's last reply may complete meanwhile.
func (lc *loopClient) clientGone() {
	c := lc.c
	if !c.mayBlock || lc.gone.Load() {
		return
	}
	lc.gone.Store(true)
	go func() {
		c.goneMu.Lock()
		defer c.goneMu.Unlock()
		c.server.handler.ClientGone(c)
	}()
}

// interruptOnLoop is interrupt for a connection that started on the loop,
// run on the loop, where the connection either is or has yet to come (a
// TLS client still in its handshake on a goroutine, interrupted as any
// other there: closeNow closes its socket, else its read gives up).
func (c *Conn) interruptOnLoop(closeNow bool) {
	c.server.Loop.Post(func() {
		switch {
		case c.lp != nil:
			c.lp.shutdown(closeNow)
		case closeNow:
			c.raw.Close()
		default:
			c.nc.SetReadDeadline(time.Now())
		}
	})
}
