package protocol

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Streams and pushes for a client on the event loop.
//
// A subscribed client (TakeWrites: pub/sub, MONITOR) reads a stream that no
// request of its paces, and a client with pushes (EnablePushes: tracking's
// invalidations) gets bytes between its replies. On a goroutine each has a
// writer of its own (outbound.go, push.go). On the loop the client keeps
// its one write path: whoever relays (a goroutine reading Redis) appends
// to the client's outbox under its small lock and, once per batch of
// appends, posts flush to the loop; the loop writes the outbox when no
// batch of the client's is open or in flight (so a batch's replies, which
// Redis sent before what followed them, always go first), with one write
// that never waits, and what the socket does not take is written on Out
// edges as a batch's rest is (loopwrite.go: the batch stays in flight,
// c.later, and resume goes on with the client's requests). Requests the
// client still sends (more SUBSCRIBE, PING, UNSUBSCRIBE, RESET) are read
// and dispatched on the loop as any other.
//
// The limits are those of the goroutine's writers. A stream is the pubsub
// class's (checkLocked, as outbound's: over the hard limit at an append,
// or over the soft limit for longer than SoftFor as seen at appends, and
// the client is closed, with the same log line and count; the rest of a
// waiting write also has SoftFor to go under the soft limit); with no
// hard limit, an append waits while 1 MB is queued (relayBackpressure).
// Pushes alone are the normal class's (its hard limit at an append; a
// waiting rest under the soft limit and WriteTimeout, as a batch's). A
// client over a limit, killed or gone is closed on the loop; the
// outbox's next append fails, which ends the relay.

// loopOutbox is a client's outbox on the loop.
type loopOutbox struct {
	c       *Conn
	lc      *loopClient
	flushFn func() // flush, bound once

	mu   sync.Mutex
	cond sync.Cond // the loop took the queue, or it closed
	// queue is what was appended and not yet taken by the loop; spare is
	// the buffer it had before, for reuse.
	queue, spare []byte
	posted       bool // a flush is posted and has not run yet
	stream       bool // the client's writes were taken (TakeWrites): pubsub class
	draining     bool // Close: write what is queued, then close the client
	closed       bool // over a limit, or the client is gone: drop everything
	over         overBuffer
	// rest is what the loop took and the socket has not yet (its write
	// waits), counted by the limits at an append: set by the loop when a
	// write begins to wait, cleared when the next one starts.
	rest atomic.Int64
}

// outboxOnLoop is the client's outbox, made on first use. On the loop.
func (c *Conn) outboxOnLoop() *loopOutbox {
	if c.outbox == nil {
		o := &loopOutbox{c: c, lc: c.lp}
		o.cond.L = &o.mu
		o.flushFn = o.flush
		c.outbox = o
	}
	return c.outbox
}

// append queues b for the client and has the loop write it. It fails once
// the client is gone or was closed for a limit. A stream with no hard
// limit waits for room (relayBackpressure): call it on a relaying
// goroutine, never on the loop.
func (o *loopOutbox) append(b []byte) error { return o.add(b, true) }

// push is append for a push (Conn.Push), which never waits: it may come
// from the loop's own thread (a backend connection on the loop reading
// a tracking connection's invalidations), which alone drains the queue.
// Pushes are small and rare; the limits still apply.
func (o *loopOutbox) push(b []byte) error { return o.add(b, false) }

func (o *loopOutbox) add(b []byte, mayWait bool) error {
	o.mu.Lock()
	for mayWait && !o.closed && !o.draining && o.stream && o.limit().Hard == 0 &&
		int64(len(o.queue))+o.rest.Load() > max(relayBackpressure, o.limit().Soft) {
		o.cond.Wait()
	}
	if o.closed || o.draining {
		o.mu.Unlock()
		return net.ErrClosed
	}
	o.queue = append(o.queue, b...)
	if err := o.checkLocked(int64(len(o.queue)) + o.rest.Load()); err != nil {
		o.closeLocked()
		o.mu.Unlock()
		o.c.logOverLimit(err)
		o.c.interruptOnLoop(true) // closed on the loop, now or after its write in flight
		return err
	}
	post := !o.posted
	o.posted = true
	o.mu.Unlock()
	if post {
		o.lc.loop.Post(o.flushFn)
	}
	return nil
}

// limit is the class the outbox is held to. Under mu.
func (o *loopOutbox) limit() OutputLimit {
	if o.stream {
		return o.c.server.PubSubOutput
	}
	return o.c.server.NormalOutput
}

// checkLocked is the outbox's verdict on pending bytes: a stream's is
// outbound's (the pubsub class, the soft limit as seen at appends);
// pushes alone are held to the normal class's hard limit only.
func (o *loopOutbox) checkLocked(pending int64) *errOutputLimit {
	if !o.stream {
		if hard := o.limit().Hard; hard > 0 && pending > hard {
			return &errOutputLimit{"normal", "hard", pending}
		}
		return nil
	}
	return o.over.check(o.limit(), "pubsub", pending)
}

func (o *loopOutbox) closeLocked() {
	o.closed = true
	o.queue, o.spare = nil, nil
	o.cond.Broadcast()
}

// close drops what is queued and fails later appends: the client is gone.
// From any goroutine.
func (o *loopOutbox) close() {
	o.mu.Lock()
	o.closeLocked()
	o.mu.Unlock()
}

// drain is Close of the stream: what is queued is still written, then the
// client is closed (Redis ended the stream). From any goroutine.
func (o *loopOutbox) drain() {
	o.mu.Lock()
	if o.closed || o.draining {
		o.mu.Unlock()
		return
	}
	o.draining = true
	post := !o.posted
	o.posted = true
	o.cond.Broadcast()
	o.mu.Unlock()
	if post {
		o.lc.loop.Post(o.flushFn)
	}
}

// flush is posted by an append: the loop writes the outbox now if the
// client has no batch open or in flight; else it is written once the
// batch is (serveLoop, after resume).
func (o *loopOutbox) flush() {
	o.mu.Lock()
	o.posted = false
	o.mu.Unlock()
	if o.lc.inFlight(true) {
		// The batch in flight is written first; its writer must then
		// have the loop go on (resume), even if the batch was quiet.
		return
	}
	if o.lc.stopped || o.c.detour.then != nil || o.c.batch.n > 0 {
		return
	}
	o.writeOut()
}

// writeOut writes what is queued, on the loop, between batches, and
// reports whether the loop may go on with the client's requests: false
// while the write waits for room (resume goes on once it is written) or
// once the client is closed. Mid-batch (after a detour) it writes nothing.
func (o *loopOutbox) writeOut() bool {
	c, lc := o.c, o.lc
	if lc.stopped || c.batch.n > 0 {
		return !lc.stopped
	}
	o.mu.Lock()
	o.rest.Store(0)
	buf := o.queue
	o.queue = o.spare[:0]
	o.spare = nil
	closed, drained := o.closed, o.draining && len(buf) == 0
	lim, class, timeout := o.limit(), "normal", !o.stream
	if o.stream {
		class = "pubsub"
	}
	o.cond.Broadcast()
	o.mu.Unlock()
	if closed {
		return true // the client is being closed (interruptOnLoop)
	}
	if drained {
		lc.eof = true // Redis ended the stream, and it is all written
		lc.stop()
		return false
	}
	if len(buf) == 0 {
		o.keep(buf)
		return true
	}
	var all bool
	var err error
	written := 0
	if lc.tls != nil {
		all, err = lc.writeTLS(buf)
		written = len(buf)
	} else {
		written, err = lc.writeNow(buf)
		all = written == len(buf)
	}
	if err != nil {
		o.close()
		lc.stop()
		return false
	}
	if all {
		o.keep(buf)
		return true
	}
	// The rest waits for room, as a batch's rest (loopwrite.go): c.out is
	// free between batches.
	if lc.tls == nil {
		o.keep(c.out)
		c.out, lc.w.off = buf, written
	}
	o.rest.Store(int64(lc.unwritten()))
	c.later = true
	lc.held.Store(heldWanted) // resume goes on once it is written
	lc.startWriteUnder(lim, class, timeout)
	return false
}

// keep gives buf back to the outbox for reuse, unless it grew big.
func (o *loopOutbox) keep(buf []byte) {
	if cap(buf) > maxRetainedOutput {
		return
	}
	o.mu.Lock()
	if o.spare == nil && !o.closed {
		o.spare = buf[:0]
	}
	o.mu.Unlock()
}

// loopStream is the net.Conn TakeWrites returns on the loop: the relay's
// writes go to the outbox; Close ends the stream once it is written.
type loopStream struct{ o *loopOutbox }

func (s loopStream) Write(b []byte) (int, error) {
	if err := s.o.append(b); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (s loopStream) Close() error                     { s.o.drain(); return nil }
func (s loopStream) Read([]byte) (int, error)         { return 0, net.ErrClosed }
func (s loopStream) LocalAddr() net.Addr              { return loopAddr(s.o.c.LocalAddr) }
func (s loopStream) RemoteAddr() net.Addr             { return loopAddr(s.o.c.RemoteAddr) }
func (s loopStream) SetDeadline(time.Time) error      { return nil }
func (s loopStream) SetReadDeadline(time.Time) error  { return nil }
func (s loopStream) SetWriteDeadline(time.Time) error { return nil }

// loopAddr is a client's address as its Conn keeps it.
type loopAddr string

func (a loopAddr) Network() string { return "tcp" }
func (a loopAddr) String() string  { return string(a) }

// takeWritesOnLoop is TakeWrites on the loop: nothing to wait for, since
// the outbox is written only once the batch (current and the replies
// before it) is.
func (c *Conn) takeWritesOnLoop() net.Conn {
	o := c.outboxOnLoop()
	o.mu.Lock()
	o.stream = true
	o.mu.Unlock()
	c.writesTaken = true
	if !c.detour.away {
		c.lp.untrackIdle() // a subscribed client is never idle, as in Redis
	} // else endGoroutineDetour, on the loop
	s := loopStream{o}
	if c.push != nil {
		c.push.takeStream(s)
	}
	return s
}
