package protocol

import (
	"net"
	"sync"
	"time"
)

// relayBackpressure is how much a subscriber's output buffer may hold when
// the pubsub class has no hard limit: past it, whoever relays to the client
// waits (and so, in the end, does Redis, whose own client-output-buffer-limit
// then applies to the relayed connection). The proxy's memory stays bounded
// either way.
const relayBackpressure = 1 << 20

// outbound is the write side of a connection taken by TakeWrites (pub/sub):
// a stream from Redis that nobody's request paces. Writes are queued and
// sent by a goroutine of its own, so whoever relays (a goroutine reading
// Redis) never blocks on a client that does not read; the queue is the
// client's output buffer, held to the pubsub class's limits as Redis holds
// a subscriber's: over the hard limit, or over the soft limit for longer
// than SoftFor as seen at a write, and the client is disconnected.
type outbound struct {
	net.Conn // the client's socket; Write and Close are outbound's own
	c        *Conn
	limit    OutputLimit

	mu       sync.Mutex
	cond     sync.Cond // queue grew, a write finished, or closed
	queue    []byte    // not yet handed to the socket
	spare    []byte
	inflight int        // bytes of the write under way
	over     overBuffer // the pubsub class's limits on what is queued
	draining bool       // Close: write what is queued, then close
	closed   bool
}

func newOutbound(c *Conn) *outbound {
	o := &outbound{Conn: c.nc, c: c, limit: c.server.PubSubOutput}
	o.cond.L = &o.mu
	go o.writeLoop()
	return o
}

// Write queues b for the client. It fails once the client is gone or was
// disconnected for its limit.
func (o *outbound) Write(b []byte) (int, error) {
	o.mu.Lock()
	for !o.closed && !o.draining && o.limit.Hard == 0 &&
		len(o.queue)+o.inflight > max(relayBackpressure, int(o.limit.Soft)) {
		o.cond.Wait()
	}
	if o.closed || o.draining {
		o.mu.Unlock()
		return 0, net.ErrClosed
	}
	o.queue = append(o.queue, b...)
	if err := o.over.check(o.limit, "pubsub", int64(len(o.queue)+o.inflight)); err != nil {
		o.closed = true
		o.cond.Broadcast()
		o.mu.Unlock()
		o.c.overLimit(err) // closes the socket: the relays and the reader end
		return 0, err
	}
	o.cond.Broadcast()
	o.mu.Unlock()
	return len(b), nil
}

// writeLoop sends whatever is queued, all of it in one write, until closed.
func (o *outbound) writeLoop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for {
		for len(o.queue) == 0 && !o.closed && !o.draining {
			o.cond.Wait()
		}
		if o.closed || len(o.queue) == 0 { // closed, or drained
			o.closed = true
			o.cond.Broadcast()
			o.mu.Unlock()
			o.Conn.Close()
			o.mu.Lock()
			return
		}
		buf := o.queue
		o.queue, o.inflight = o.spare[:0], len(buf)
		o.mu.Unlock()
		_, err := o.Conn.Write(buf)
		o.mu.Lock()
		o.inflight = 0
		if cap(buf) > maxRetainedOutput {
			buf = nil
		}
		o.spare = buf
		if err != nil {
			o.closed = true
		}
		o.cond.Broadcast()
	}
}

// drainTimeout bounds how long Close waits for a client to take what is
// still queued for it (the reply to its QUIT, say).
const drainTimeout = 5 * time.Second

// Close ends the stream: what is queued is still written, then the client's
// connection closes. It is how a relay says Redis ended the stream.
func (o *outbound) Close() error {
	o.mu.Lock()
	if !o.closed && !o.draining {
		o.draining = true
		o.Conn.SetWriteDeadline(time.Now().Add(drainTimeout))
		o.cond.Broadcast()
	}
	o.mu.Unlock()
	return nil
}

// closeNow ends the stream and drops what is queued: the client is gone.
func (o *outbound) closeNow() {
	o.mu.Lock()
	o.closed = true
	o.cond.Broadcast()
	o.mu.Unlock()
	o.Conn.Close()
}
