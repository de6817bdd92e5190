package protocol

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
// own, under the same limits as any write, so a backend reader never waits
// on a client.
//
// The connection's goroutine dispatches nothing new until that write is
// done (awaitLater), so replies still leave in request order, and it keeps
// every batch that needs it (blocking commands, QUIT, TakeWrites,
// shutdown, the idle timeout, TLS) on the plain path.

// writeLater leaves the current batch to its last reply if it can, and
// reports whether it did. If every reply is already in, it does not: the
// caller writes the batch itself, as usual.
func (c *Conn) writeLater() bool {
	if c.rawConn == nil || c.mayBlock || c.closeAfterReply || c.writesTaken || c.closing.Load() ||
		c.server.IdleTimeout > 0 || c.rd.Buffered() > 0 || c.batch.n == 0 ||
		c.batch.n >= c.window || c.batch.out.full(c.window) {
		return false
	}
	if c.batch.left.Add(-1) == 0 {
		c.batch.left.Store(1) // all in already: take it back and write it here
		return false
	}
	c.later = true
	return true
}

// finishLater writes a batch left by writeLater. It runs on the goroutine
// that completed the batch's last reply, which must not block: a write the
// socket does not take at once is handed to a goroutine of its own.
func (c *Conn) finishLater() {
	n := c.batch.n
	c.out = c.batch.appendTo(c.out[:0]) // every reply is in: no wait
	c.server.handler.BatchDone(c)
	o := c.batch.out
	produced := o.reset()
	c.window = nextWindow(c.window, n, produced)
	if o.hard > 0 && produced > o.hard {
		c.laterDone <- c.overLimit(&errOutputLimit{"normal", "hard", o.crossed.Load()})
		return
	}
	if lim := c.server.NormalOutput; lim.Soft == 0 || int64(len(c.out)) <= lim.Soft {
		written, err := c.writeNow(c.out)
		if err != nil {
			c.nc.Close() // the reader's next read fails, and the connection ends
			c.laterDone <- err
			return
		}
		if written == len(c.out) {
			c.doneLater()
			return
		}
		c.out = c.out[written:]
	}
	go func() {
		err := c.write()
		if le, ok := err.(*errOutputLimit); ok {
			err = c.overLimit(le)
		} else if err != nil {
			c.nc.Close()
		}
		if err != nil {
			c.laterDone <- err
			return
		}
		c.doneLater()
	}()
}

// doneLater ends a batch left to its last reply: the connection's goroutine
// holds the batch again.
func (c *Conn) doneLater() {
	if cap(c.out) > maxRetainedOutput {
		c.out = nil
	}
	c.batch.left.Store(1)
	c.laterDone <- nil
}

// awaitLater waits until the batch left to its last reply is written, and
// returns the write's error.
func (c *Conn) awaitLater() error {
	err := <-c.laterDone
	c.later = false
	return err
}
