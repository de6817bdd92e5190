package protocol

import "errors"

// Writing a batch from its last reply.
//
// An unpipelined client (redis-benchmark -P 1, most application code)
// sends a request and waits for its reply. Served plainly, the connection's
// goroutine dispatches the request, parks until the backend's reader
// completes the reply, wakes, writes it, and parks again in a read for the
// next request: two park/wake-ups per request, on a machine where the
// scheduler was a sixth of the proxy's CPU at -P 1. Instead, a batch that
// ends because the client has sent nothing more is left to its last reply:
// whoever completes that reply (a backend reader, a lock worker) writes the
// batch with one non-blocking write, while the connection's goroutine is
// already back in its read. A write that would block (a client not reading,
// a reply bigger than the socket buffer) is finished by a goroutine of its
// own (on the event loop, by the loop as the socket makes room:
// loopwrite.go), under the same limits as any write, so a backend reader
// never waits on a client.
//
// The connection's goroutine dispatches nothing new until that write is
// done (awaitLater), so replies still leave in request order, and it keeps
// every batch that needs it (blocking commands, QUIT, TakeWrites,
// shutdown, the idle timeout, TLS) on the plain path.

// writeLater leaves the current batch, which ended because the client has
// sent nothing more (or, in endHeldBatch, nothing more yet of the request
// under way), to its last reply if it can, and reports whether it did. If
// every reply is already in, it does not: the caller writes the batch
// itself, as usual.
func (c *Conn) writeLater() bool {
	if c.rawConn == nil || c.push != nil || c.mayBlock || c.writesTaken || c.closing.Load() || c.server.IdleTimeout > 0 {
		return false
	}
	if c.batch.left.Add(-1) == 0 {
		c.batch.left.Store(1) // all in already: take it back and write it here
		return false
	}
	c.later = true
	return true
}

// finishLater writes a batch left by writeLater, as writeBatch would. It
// runs on the goroutine that completed the batch's last reply, which must
// not block: what the socket does not take at once, or what must be paced
// by the soft output limit, is written by a goroutine of its own, or, for
// a client on the event loop, by the loop (loopwrite.go).
func (c *Conn) finishLater() {
	if c.lp != nil && c.detourDone() {
		return // not the batch's end: a detour's (detour.go)
	}
	if err := c.collect(); err != nil {
		c.doneLater(err)
		return
	}
	if c.mayBlock && c.lp != nil && c.lp.gone.Load() {
		// A blocked client the loop gave up (clientGone: killed, hung up,
		// or past Shutdown's time) gets nothing more, as from Redis: the
		// reply is the cancelled command's error.
		c.out = c.out[:0]
		c.doneLater(errClientGone)
		return
	}
	if c.lp != nil {
		c.lp.writeBatch()
		return
	}
	if lim := c.server.NormalOutput; lim.Soft == 0 || int64(len(c.out)) <= lim.Soft {
		written, err := c.writeNow(c.out)
		if err != nil || written == len(c.out) {
			c.dropBigOut()
			c.doneLater(err)
			return
		}
		c.out = c.out[written:]
	}
	go func() { c.doneLater(c.flush()) }()
}

// doneLater ends a batch left to its last reply with the outcome of its
// write: the connection's goroutine holds the batch again. A failed write
// closes the socket, so that goroutine's read ends too.
func (c *Conn) doneLater(err error) {
	if c.lp != nil {
		c.lp.doneLater(err) // the loop closes it on an error
		return
	}
	if err != nil {
		c.nc.Close()
	}
	c.batch.left.Store(1)
	c.laterDone <- err
}

// errClientGone ends a blocked batch whose client the loop gave up
// (clientGone): the connection is closed without its reply.
var errClientGone = errors.New("protocol: the blocked client is gone")

// awaitLater waits until the batch left to its last reply is written, and
// returns the write's error.
func (c *Conn) awaitLater() error {
	err := <-c.laterDone
	c.later = false
	return err
}
