package protocol

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/netloop"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

const (
	readBufferSize = 4 << 10
	// maxBatch bounds how many replies a connection holds before it writes,
	// so a client streaming a huge pipeline still sees replies as it goes.
	maxBatch = 1024
	// probeBatch is where a batch waits for its replies so far, to learn
	// their size (see serve).
	probeBatch = 64
	// maxBatchBytes is the reply bytes after which a batch is written
	// before more requests are read.
	maxBatchBytes = 1 << 20
	// maxRetainedOutput is the largest output buffer kept between batches.
	maxRetainedOutput = 256 << 10
)

// Conn is one client connection. Its exported fields belong to the Handler,
// which may read and write them from its methods (ServeCommand, BatchDone,
// ClientGone, Closed: never two at once, see Handler); other goroutines must
// not touch them.
type Conn struct {
	ID         int64
	RemoteAddr string
	LocalAddr  string
	Created    time.Time
	// Session is the Handler's per-connection state.
	Session any

	name atomic.Pointer[string] // CLIENT SETNAME; read by CLIENT LIST from elsewhere
	db   atomic.Int32           // SELECT; read by CLIENT LIST from elsewhere

	server *Server
	nc     net.Conn // a *tls.Conn for a TLS client
	raw    net.Conn // the TCP connection under nc (nc itself in plaintext)
	// tio is a TLS client's transport under nc, which follows it between
	// its goroutine and the event loop (tlsloop.go); nil in plaintext.
	tio             *tlsTransport
	rd              *Reader
	out             []byte
	batch           batch
	closeAfterReply bool
	mayBlock        bool
	writesTaken     bool
	closing         atomic.Bool
	killed          atomic.Bool  // Kill was called: gone, for CLIENT LIST and KILL
	fd              atomic.Int64 // the socket's descriptor (FD)
	// reading is true while serve waits for the client's next request: the
	// only time the idle timeout runs and a held batch is ended (see
	// clientReader).
	reading   bool
	idleArmed bool      // a read deadline for the idle timeout is set
	outbound  *outbound // the write side once taken (TakeWrites), on a goroutine
	// outbox holds a stream's and pushes' bytes for a client on the event
	// loop, which writes them (loopoutbox.go); nil until TakeWrites or
	// EnablePushes there.
	outbox *loopOutbox
	push   *pushes // nil until EnablePushes (push.go)
	// rawConn writes to a plaintext client's socket without blocking, for
	// a batch written by its last reply (writeLater), and reads from it
	// without blocking, for a batch held over a partial request (held.go);
	// nil over TLS.
	rawConn  syscall.RawConn
	arrival  arrival // ArrivedAt's, on rawConn
	rawWrite rawIO
	rawRead  rawIO
	// heldInput is the bytes read without blocking while the current batch
	// was held over a partial request (see endHeldBatch).
	heldInput int
	// later is true while a batch is left to its last reply to write;
	// laterDone then brings the outcome of that write.
	later     bool
	laterDone chan error
	// window is how many requests a batch may hold: maxBatch, shrunk to
	// what fits maxBatchBytes after a batch of big replies, and doubling
	// back while they are small. With outCount.full, it keeps a pipeline of
	// big GETs from putting maxBatch big replies in flight on a shared
	// backend connection (and in memory, if the client does not read).
	window int
	// readAt is when the last read from the client returned bytes
	// (monotonic): see ReadAt.
	readAt time.Time
	// lp is the connection's state on the server's event loop (loop.go),
	// set when it comes there and kept for its life; nil on the goroutine
	// transport (and for a TLS client until its handshake is done). onLoop
	// says it is bound for the loop.
	lp     *loopClient
	onLoop bool
	// detour is the rest of a request that waits on the loop for its
	// earlier replies (AfterReplies, detour.go).
	detour detour
	// goneMu keeps a ClientGone that the loop runs on a goroutine of its
	// own (clientGone) from overlapping BatchDone and Closed.
	goneMu sync.Mutex
}

// MayBlock says a request of the current batch may wait indefinitely (a
// blocking pop, LOCK.ACQUIRE ... WAIT). While the connection waits for such
// a batch it watches the client, and if the client goes away it calls the
// Handler's ClientGone, so the wait can be cancelled instead of holding a
// backend connection or a place in a lock's line for nobody.
func (c *Conn) MayBlock() { c.mayBlock = true }

// OnLoop reports whether the Handler's call runs on the event loop's
// thread (where it must not wait), false on the goroutine transport and on
// a goroutine detour (goroutinedetour.go). Call it only from the Handler.
func (c *Conn) OnLoop() bool { return !c.onGoroutine() }

// ReadAt is when the bytes of the request being served were read from the
// client (the monotonic clock, taken once per read of the socket, however
// many requests that read brought): when it was received, for a Handler
// that counts from it, as a lease does. Call it only from ServeCommand.
func (c *Conn) ReadAt() time.Time { return c.readAt }

// ArrivedAt is when the request being served reached this host, as near
// as the kernel tells: ReadAt, or earlier when the kernel last received
// data on the connection longer ago than that, by more than a kernel tick
// (TCP_INFO's last_data_recv): the request waited in the socket, or in a connection
// not yet accepted, while this process was busy, paused or starting. A
// lease counted from it ends no later than the client can expect. One
// getsockopt per call: call it only from ServeCommand, for requests that
// count from it.
func (c *Conn) ArrivedAt() time.Time {
	read := c.readAt
	if read.IsZero() {
		return read
	}
	age, ok := time.Duration(0), false
	switch {
	case c.lp != nil:
		age, ok = netloop.LastDataAge(c.lp.fd)
	case c.rawConn != nil:
		a := &c.arrival
		if a.call == nil {
			a.call = a.look // bound once: a closure per call would escape
		}
		if c.rawConn.Control(a.call) == nil {
			age, ok = a.age, a.ok
		}
	case c.raw != nil:
		age, ok = lastDataAge(c.raw)
	}
	// The kernel counts in ticks (jiffies): last_data_recv may be up to one
	// tick above the data's true age. Less a whole tick of the coarsest
	// kernels, it never is: a lag it shows is one that happened.
	if age -= maxKernelTick; !ok || age <= 0 {
		return read
	}
	if at := time.Now().Add(-age); at.Before(read) {
		return at
	}
	return read
}

// lastDataAge is netloop.LastDataAge of a connection's socket, if it has
// one. (A function of its own: the closure's captured results would
// otherwise be allocated on every ArrivedAt, whichever case it takes.)
func lastDataAge(raw net.Conn) (age time.Duration, ok bool) {
	if sc, isSys := raw.(syscall.Conn); isSys {
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { age, ok = netloop.LastDataAge(int(fd)) })
		}
	}
	return age, ok
}

// arrival is ArrivedAt's look at a goroutine-served socket (rawConn).
type arrival struct {
	age  time.Duration
	ok   bool
	call func(fd uintptr)
}

func (a *arrival) look(fd uintptr) { a.age, a.ok = netloop.LastDataAge(int(fd)) }

// maxKernelTick is the longest tick (jiffy) of a Linux kernel, at HZ=100.
const maxKernelTick = 10 * time.Millisecond

// Pipelined reports whether the client sent more than the request being
// served: requests already read follow it. Call it only from ServeCommand.
func (c *Conn) Pipelined() bool { return c.Buffered() > 0 }

// Buffered is how many bytes the client sent that are read and not yet
// parsed. Call it only from ServeCommand.
func (c *Conn) Buffered() int {
	if c.rd == nil {
		return 0
	}
	return c.rd.Buffered()
}

// FD is the client socket's file descriptor (CLIENT LIST's fd), -1 if it
// has none. Safe from any goroutine: the descriptor changes once, when a
// TLS client moves to the event loop after its handshake (netloop's
// Detach duplicates it), so it is kept in c.fd, set where it changes, and
// nc, which the move replaces, is not read here.
func (c *Conn) FD() int { return int(c.fd.Load()) }

// fdOf is nc's file descriptor, -1 if it has none.
func fdOf(nc net.Conn) int {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if t, ok := nc.(*tlsTransport); ok {
		nc = t.conn
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	raw.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// Kill closes the client's connection from any goroutine (CLIENT KILL):
// its goroutine then ends it as if the client had gone. A connection that
// started on the event loop is closed on the loop, which holds its socket
// while it is there (its nc is nil then): at once, or once the batch it
// has in flight is written, as Shutdown's closeNow.
func (c *Conn) Kill() {
	if c.killed.Swap(true) {
		return
	}
	if c.onLoop {
		c.interruptOnLoop(true)
		return
	}
	c.nc.Close()
}

// Killed reports whether Kill was called: the connection is closing, if
// not closed yet (on the loop that may take a moment), and counts as gone,
// as a killed client is to Redis.
func (c *Conn) Killed() bool { return c.killed.Load() }

// CloseAfterReply asks for the connection to be closed once the replies
// queued so far are written (QUIT, protocol errors).
func (c *Conn) CloseAfterReply() { c.closeAfterReply = true }

// dispatch hands one request to the Handler. A panic there is a bug of
// the proxy's, never the client's: the request is answered with an
// internal error (unless its reply was already complete), the panic and
// its stack go to the log, and the connection is closed after the batch,
// since the Handler's state for it may be half changed. Other clients are
// not affected. (Left to run, the panic would end the process; and the
// connection's release, when its serving ends, would wait forever for the
// reply that never comes.)
func (c *Conn) dispatch(args [][]byte, p *resp.Reply) {
	defer func() {
		if r := recover(); r != nil {
			c.panicked(r, args)
		}
	}()
	c.server.handler.ServeCommand(c, args, p)
}

// errPanicked answers a request whose Handler panicked.
var errPanicked = resp.Error{Code: "ERR", Msg: "fenceproxy: internal error serving this request (see the proxy's log); the connection is closed"}

// clipCommand names a request for the log without its arguments, which
// may hold secrets (AUTH) or megabytes.
func clipCommand(args [][]byte) string {
	if len(args) == 0 {
		return ""
	}
	name := args[0]
	if len(name) > 32 {
		name = name[:32]
	}
	return string(name)
}

// serve is a connection's life on a goroutine of its own: the TLS
// handshake, if any, then read, dispatch, reply, repeat (serveRequests). A TLS
// client bound for the event loop (onLoop) goes there once its handshake
// is done (tlsloop.go).
func (c *Conn) serve() {
	if tc, ok := c.nc.(*tls.Conn); ok {
		if !c.handshake(tc) {
			c.server.release(c)
			return
		}
		if c.onLoop && c.toLoop() {
			return
		}
	}
	c.serveRequests()
	c.server.release(c)
}

// serveRequests is the goroutine transport: it serves the connection until
// it ends (--serve-loop=false, a platform without the event loop, a
// Handler that is not a LoopHandler).
func (c *Conn) serveRequests() {
	for {
		c.reading = true
		args, err := c.rd.ReadCommand()
		c.reading = false
		// A batch left to its last reply (writeLater's continue below,
		// or endHeldBatch during the read) is always awaited here, before
		// anything else: serve never returns with one in flight.
		if c.later && c.awaitLater() != nil {
			return
		}
		if c.idleArmed && err == nil {
			// Cleared here rather than in clientReader, so that the reads
			// of awaitWatchingClient keep the deadline its waker sets.
			c.disarmIdle()
		}
		if err != nil {
			var perr *ProtocolError
			var ne net.Error
			switch {
			case errors.As(err, &perr):
				p := c.batch.next()
				p.Buf = redcon.AppendError(p.Buf, "ERR "+perr.Error())
				p.Done()
				c.server.logProtocolError(c, perr)
			case err == ErrQueryBufferLimit:
				// Redis closes at once, with no reply: the rest of the
				// request would still be on its way.
				c.server.limitClosed(c, closeQuery, "closing client that reached max query buffer length",
					"client_query_buffer_limit", c.server.Limits.MaxQueryBuf)
			case c.idleArmed && errors.As(err, &ne) && ne.Timeout() && !c.closing.Load():
				c.server.limitClosed(c, closeIdle, "closing idle client", "timeout", c.server.IdleTimeout)
			}
			c.writeBatch()
			return
		}
		p := c.batch.next()
		if c.batch.n == 1 {
			c.heldInput = 0
			if c.push != nil {
				c.push.beginBatch()
			}
		}
		c.dispatch(args, p)
		if c.batch.n == probeBatch && !c.mayBlock && !c.writesTaken {
			// Requests are dispatched faster than the first reply comes
			// back: learn how big they are before putting a whole window
			// in flight. A pipeline of small replies goes on (one round
			// trip later), one of big GETs is written now.
			c.batch.wait()
		}
		// A batch whose replies are big is written before more is read,
		// as is one as long as the window. One that ends with bytes still
		// buffered goes on: they are most often the rest of a pipeline, and
		// if they are only part of a request, the batch is written before
		// the read of its rest would wait for the client (held.go).
		full := c.batch.out.full(c.window) || c.batch.n >= c.window
		if full || c.closeAfterReply || c.rd.Buffered() == 0 {
			// A batch that ends only because the client has sent
			// nothing more may be left to its last reply (later.go).
			if !full && !c.closeAfterReply && c.writeLater() {
				continue
			}
			// Shutting down, requests already read are still served.
			if err := c.writeBatch(); err != nil || c.closeAfterReply || (c.closing.Load() && c.rd.Buffered() == 0) {
				return
			}
		}
	}
}

// handshake completes a TLS client's handshake within the server's
// HandshakeTimeout and reports whether it succeeded. A client that speaks
// plain RESP to the TLS port is told so in plain text before the close, so
// redis-cli shows why instead of an unexplained disconnect.
func (c *Conn) handshake(tc *tls.Conn) bool {
	if d := c.server.HandshakeTimeout; d > 0 {
		c.raw.SetDeadline(time.Now().Add(d))
	}
	// Shutdown's interrupt (a read deadline of now) may have come before
	// the deadline above replaced it: a client still handshaking has
	// nothing to drain.
	if c.closing.Load() {
		return false
	}
	if err := tc.Handshake(); err != nil {
		var notTLS tls.RecordHeaderError
		if errors.As(err, &notTLS) && notTLS.Conn != nil {
			notTLS.Conn.Write([]byte("-ERR fenceproxy: this port speaks TLS; connect with TLS (redis-cli --tls)\r\n"))
		}
		c.server.logHandshakeError(c, err)
		return false
	}
	c.raw.SetDeadline(time.Time{})
	if c.closing.Load() { // Shutdown's interrupt may have been undone above
		return false
	}
	return true
}

// writeBatch waits for every queued reply and writes them in one call. A
// client whose replies go over the normal class's output limit is closed
// (with an error returned) instead.
func (c *Conn) writeBatch() error {
	if c.batch.n == 0 {
		return nil
	}
	if c.push != nil {
		defer c.endBatch()
	}
	if c.mayBlock {
		c.mayBlock = false
		c.awaitWatchingClient(c.rd.Peek) // buffered data stays for the next ReadCommand
	}
	if err := c.collect(); err != nil {
		return err
	}
	if c.writesTaken {
		if len(c.out) > 0 {
			c.server.Logger.Error("bug: a reply for a connection whose writes were taken", "client", c.RemoteAddr)
		}
		return nil
	}
	return c.flush()
}

// collect waits for every reply of the batch, puts them in c.out in order
// and ends the batch (BatchDone, the next window). A batch over the normal
// class's hard output limit closes the client instead, and its error is
// returned. It runs on the connection's goroutine (writeBatch) or on the
// one that completed a batch left to its last reply (finishLater).
func (c *Conn) collect() error {
	n := c.batch.n
	c.out = c.batch.appendTo(c.out[:0])
	if c.mayBlock && c.lp != nil {
		// The loop may be running ClientGone meanwhile (clientGone).
		c.goneMu.Lock()
		c.server.handler.BatchDone(c)
		c.goneMu.Unlock()
	} else {
		c.server.handler.BatchDone(c)
	}
	o := c.batch.out
	produced := o.reset()
	c.window = nextWindow(c.window, n, produced)
	if o.hard > 0 && produced > o.hard {
		return c.overLimit(&errOutputLimit{"normal", "hard", o.crossed.Load()})
	}
	return nil
}

// flush writes c.out (see write); past an output limit it closes the
// client, and the error says which.
func (c *Conn) flush() error {
	err := c.write()
	c.dropBigOut()
	if le, ok := err.(*errOutputLimit); ok {
		return c.overLimit(le)
	}
	return err
}

// dropBigOut lets go of an output buffer grown past what is kept between
// batches.
func (c *Conn) dropBigOut() {
	if cap(c.out) > maxRetainedOutput {
		c.out = nil
	}
}

// nextWindow is the batch window after a batch of n requests whose replies
// took produced bytes.
func nextWindow(window, n int, produced int64) int {
	fits := maxBatch
	if produced > 0 {
		fits = int(min(int64(maxBatch), int64(maxBatchBytes)*int64(n)/produced))
	}
	switch {
	case fits < window:
		return max(fits, 1)
	case n >= window: // a full batch of small replies: grow
		return min(2*window, fits)
	}
	return window
}

// write writes c.out. Replies produced and not yet written are the client's
// output buffer; while this goroutine writes, it reads no more requests, so
// the buffer only shrinks. Over the normal class's soft limit, the write
// has SoftFor to bring it back under the limit, or the client is closed.
func (c *Conn) write() error { return c.writeTo(c.nc, c.out) }

// writeTo is write of buf to w (c.nc). A client on the event loop is
// written by the loop instead, under the same limits (loopwrite.go).
func (c *Conn) writeTo(w net.Conn, buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	lim := c.server.NormalOutput
	var end time.Time // WriteTimeout, for the whole batch
	if c.server.WriteTimeout > 0 {
		end = time.Now().Add(c.server.WriteTimeout)
	}
	if lim.Soft == 0 || int64(len(buf)) <= lim.Soft {
		if !end.IsZero() {
			w.SetWriteDeadline(end)
		}
		_, err := w.Write(buf)
		return err
	}
	softEnd := time.Now().Add(lim.SoftFor)
	for {
		deadline, soft := end, int64(len(buf)) > lim.Soft
		if soft && (deadline.IsZero() || softEnd.Before(deadline)) {
			deadline = softEnd
		}
		w.SetWriteDeadline(deadline)
		n, err := w.Write(buf)
		buf = buf[n:]
		var ne net.Error
		switch {
		case err == nil:
			w.SetWriteDeadline(end)
			return nil
		case deadline.Equal(softEnd) && errors.As(err, &ne) && ne.Timeout():
			if int64(len(buf)) > lim.Soft {
				return &errOutputLimit{"normal", "soft", int64(len(buf))}
			}
			// Back under the soft limit in time: the rest may take as long
			// as it takes.
		default:
			return err
		}
	}
}

// overLimit closes the connection for going over an output limit.
func (c *Conn) overLimit(e *errOutputLimit) error {
	c.logOverLimit(e)
	if c.lp == nil {
		c.nc.Close()
	} // on the loop, resume closes it (the error is the batch's outcome)
	return e
}

// logOverLimit logs and counts the close of a client over an output limit.
func (c *Conn) logOverLimit(e *errOutputLimit) {
	reason := closeOutputNormal
	if e.class == "pubsub" {
		reason = closeOutputPubSub
	}
	c.server.limitClosed(c, reason, "closing client for overcoming output buffer limits",
		"class", e.class, "limit", e.which, "output_buffer_bytes", e.bytes)
}

// awaitWatchingClient waits for the batch while watching the client to
// notice it closing its end: watch waits until the client sends a byte
// (which it must keep) or its read fails.
func (c *Conn) awaitWatchingClient(watch func() error) {
	done := make(chan struct{})
	go func() {
		c.batch.wait()
		c.nc.SetReadDeadline(time.Now()) // wake the watch below; before close(done)
		close(done)
	}()
	for {
		err := watch()
		select {
		case <-done:
			c.nc.SetReadDeadline(time.Time{})
			return
		default:
		}
		var ne net.Error
		switch {
		case err == nil, c.closing.Load():
			// The client sent more (so it is there), or we are shutting
			// down: just wait for the replies.
		case errors.As(err, &ne) && ne.Timeout():
			continue
		default:
			c.server.handler.ClientGone(c)
		}
		<-done
		c.nc.SetReadDeadline(time.Time{})
		if c.closing.Load() {
			c.nc.SetReadDeadline(time.Now())
		}
		return
	}
}

// interrupt makes a connection blocked in a read give up, for shutdown. A
// connection busy with a batch finishes writing it first.
func (c *Conn) interrupt() {
	c.closing.Store(true)
	if c.onLoop {
		c.interruptOnLoop(false)
		return
	}
	c.nc.SetReadDeadline(time.Now())
}

func newConn(s *Server, nc net.Conn, id int64) *Conn {
	c := newConnOf(s, id, nc.RemoteAddr().String(), nc.LocalAddr().String())
	c.nc, c.raw = nc, nc
	c.fd.Store(int64(fdOf(nc)))
	c.bindRawConn()
	return c
}

// newConnOf is a new connection with no socket yet: newConn gives it a
// net.Conn, the loop's accept a descriptor (loopaccept.go).
func newConnOf(s *Server, id int64, remote, local string) *Conn {
	c := &Conn{
		ID:         id,
		RemoteAddr: remote,
		LocalAddr:  local,
		Created:    time.Now(),
		server:     s,
		window:     maxBatch,
	}
	c.rd = NewReader(readClock{clientReader{c}}, s.Limits)
	c.batch.out = newOutCount(s.NormalOutput.Hard)
	c.batch.conn = c
	c.batch.left.Store(1)
	return c
}

// bindRawConn readies raw reads and writes of a plaintext client's socket
// (c.nc), for later.go and held.go.
func (c *Conn) bindRawConn() {
	if tc, ok := c.nc.(*net.TCPConn); ok && rawIOSupported {
		c.rawConn, _ = tc.SyscallConn()
		if c.laterDone == nil {
			c.laterDone = make(chan error, 1)
		}
	}
}

// clientReader is what a connection's Reader reads: the client's socket
// (or TLS stream). While the connection waits for a request, a read first
// ends a batch held over a partial request (see endHeldBatch), so that no
// reply waits for the client, and then, for a server with an idle timeout
// (Redis's timeout), gets a deadline IdleTimeout away, so a deadline passes
// only after that long without a byte, even in the middle of a request, as
// Redis counts a client's idle time from its last read. A connection
// waiting for a blocked request's reply (BLPOP, LOCK.ACQUIRE ... WAIT) or
// relaying pub/sub is not idle, as Redis exempts blocked and subscribed
// clients.
type clientReader struct{ c *Conn }

func (r clientReader) Read(b []byte) (int, error) {
	c := r.c
	if c.lp != nil {
		return c.lp.read(b)
	}
	if !c.reading {
		return c.nc.Read(b)
	}
	// While a batch is left to its last reply, another goroutine owns it.
	if !c.later && c.batch.n > 0 {
		if n, err := c.endHeldBatch(b); n > 0 || err != nil {
			return n, err
		}
	}
	if c.server.IdleTimeout > 0 && !c.writesTaken {
		c.nc.SetReadDeadline(time.Now().Add(c.server.IdleTimeout))
		c.idleArmed = true
		if c.closing.Load() {
			// interrupt may have set its deadline just before ours.
			c.nc.SetReadDeadline(time.Now())
		}
	}
	return c.nc.Read(b)
}

// readClock notes in readAt when each read of the client (every byte the
// Reader gets comes through clientReader) returns bytes.
type readClock struct{ src clientReader }

func (r readClock) Read(b []byte) (int, error) {
	n, err := r.src.Read(b)
	if n > 0 && r.src.c.lp == nil { // on the loop, its read notes the pass's time
		r.src.c.readAt = time.Now()
	}
	return n, err
}

// disarmIdle clears the idle timeout's read deadline (keeping shutdown's).
func (c *Conn) disarmIdle() {
	c.idleArmed = false
	c.nc.SetReadDeadline(time.Time{})
	if c.closing.Load() {
		c.nc.SetReadDeadline(time.Now())
	}
}

// SetSilent says whether the reply to current (the request being served)
// is written: a silent one is still awaited in its place, and nothing of it
// reaches the client (CLIENT REPLY OFF and SKIP). Call it before current
// leaves the connection's goroutine (before it is sent to Redis).
func (c *Conn) SetSilent(current *resp.Reply, silent bool) {
	s := c.currentSlot(current, "SetSilent")
	s.silent = silent
}

// TakeWrites hands the connection's write side to the caller for good: from
// now on what the client reads is a stream the caller relays (pub/sub, where
// Redis pushes messages no request asked for). The replies to requests sent
// before current are written first, in order; current and every later
// request must be completed with no bytes. Requests are still read and
// dispatched as before. What the caller writes is queued and sent, under
// the pubsub output limits, by a goroutine of the connection's own, or on
// the event loop by the loop (loopoutbox.go): a Write does not wait for
// the client (unless the class has no hard limit and 1 MB is queued), and
// fails once the client was disconnected. On a goroutine TakeWrites waits
// for the earlier replies; on the loop it does not wait (the stream is
// written after the batch that holds them).
func (c *Conn) TakeWrites(current *resp.Reply) net.Conn {
	s := c.currentSlot(current, "TakeWrites")
	if c.lp != nil {
		return c.takeWritesOnLoop()
	}
	c.waitReplies(s)
	c.out = c.out[:0]
	for _, s := range c.batch.replies[:c.batch.n] {
		p := s.reply
		if p == current {
			break
		}
		c.out = append(c.out, p.Buf...)
		p.Buf = p.Buf[:0]
	}
	c.outbound = newOutbound(c)
	if len(c.out) > 0 {
		c.outbound.Write(c.out)
	}
	c.writesTaken = true
	if c.push != nil {
		c.push.takeStream(c.outbound)
	}
	return c.outbound
}

// Name is the client's name (CLIENT SETNAME), "" if none.
func (c *Conn) Name() string {
	if p := c.name.Load(); p != nil {
		return *p
	}
	return ""
}

// SetName sets the client's name.
func (c *Conn) SetName(name string) { c.name.Store(&name) }

// DB is the client's database as the Handler last set it (SetDB), for
// CLIENT LIST.
func (c *Conn) DB() int { return int(c.db.Load()) }

// SetDB records the client's database.
func (c *Conn) SetDB(db int) { c.db.Store(int32(db)) }

// Server returns the server the connection belongs to.
func (c *Conn) Server() *Server { return c.server }
