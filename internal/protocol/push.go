package protocol

import (
	"net"
	"sync"
	"time"
)

// Pushes: bytes for a client that no request of its asked for, other than
// pub/sub's stream: RESP3 push messages Redis sends on a connection of the
// client's own (client-side caching's invalidations), relayed as they come.
//
// A push must never reach the client ahead of a reply that Redis sent
// before it: an invalidation written before the reply of the read it
// invalidates would leave the client caching a stale value. Redis's order
// is kept: a push that arrives while a batch is being served goes right
// before the first of its replies still to come (the pushing connection
// completes its replies in the order Redis sent them, so every one Redis
// sent before the push is in: an invalidation of a key evicted while a
// command runs comes before that command's reply, as from Redis, unit/
// tracking "Tracking invalidation message of eviction keys should be
// before response"); one that arrives once every reply of the batch is in
// goes out right after the batch; one that arrives while the connection
// waits for requests is written at once (the next batch waits for that
// write). A later push coming after a reply is always safe: at worst the
// client drops what it had just cached. A connection with pushes writes every batch itself
// (never left to its last reply, later.go), so that the end of a batch is
// always seen here.

type pushes struct {
	mu     sync.Mutex
	open   bool     // a batch is being served or written
	queued []byte   // pushes waiting for the batch's end
	stream net.Conn // the stream, once the connection's writes were taken
	// loop is the outbox of a client on the event loop (loopoutbox.go),
	// which the loop writes only between batches: a push that comes when
	// every reply so far is in goes there, and is written after the
	// batch, as queued is on a goroutine.
	loop *loopOutbox
}

// EnablePushes prepares the connection for Push; call it from ServeCommand,
// before anything can push.
func (c *Conn) EnablePushes() {
	if c.push == nil {
		c.push = &pushes{open: true} // called while serving a batch
		if c.lp != nil {
			c.push.loop = c.outboxOnLoop()
		}
	}
}

// Push writes b to the client after every reply completed so far (see
// above). It may be called from any goroutine once EnablePushes was, the
// serve loop's too (it never waits); a failed write closes the client's
// connection.
func (c *Conn) Push(b []byte) {
	ps := c.push
	ps.mu.Lock()
	defer ps.mu.Unlock()
	switch {
	case ps.stream != nil:
		ps.stream.Write(b)
	case ps.loop != nil:
		if s := c.batch.pending(); s != nil {
			s.pre = append(s.pre, b...)
			return
		}
		if ps.loop.push(b) != nil {
			return // closed, or being closed for a limit
		}
	case ps.open:
		if s := c.batch.pending(); s != nil {
			s.pre = append(s.pre, b...)
			return
		}
		ps.queued = append(ps.queued, b...)
	default:
		if err := c.writePush(b); err != nil {
			c.nc.Close()
		}
	}
}

// EndPushes disconnects the client: what pushed to it is gone (its own
// Redis connection broke), and a client that caches must learn that its
// cache can no longer be kept valid.
func (c *Conn) EndPushes() {
	if c.onLoop {
		c.interruptOnLoop(true) // the loop holds its socket, or knows it left
		return
	}
	c.nc.Close()
}

// writePush writes b with the server's write timeout.
func (c *Conn) writePush(b []byte) error {
	if d := c.server.WriteTimeout; d > 0 {
		c.nc.SetWriteDeadline(time.Now().Add(d))
	}
	_, err := c.nc.Write(b)
	return err
}

// beginBatch: the connection serves a new batch; pushes wait for its end.
func (ps *pushes) beginBatch() {
	ps.mu.Lock()
	ps.open = true
	ps.mu.Unlock()
}

// endBatch writes the pushes that waited for the batch just written.
func (c *Conn) endBatch() {
	ps := c.push
	for {
		ps.mu.Lock()
		if len(ps.queued) == 0 || ps.stream != nil {
			ps.open = false
			ps.mu.Unlock()
			return
		}
		b := ps.queued
		ps.queued = nil
		ps.mu.Unlock()
		if err := c.writePush(b); err != nil {
			c.nc.Close()
			return
		}
	}
}

// takeStream sends later pushes to the stream that took the connection's
// writes.
func (ps *pushes) takeStream(stream net.Conn) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.queued) > 0 {
		stream.Write(ps.queued)
		ps.queued = nil
	}
	ps.stream = stream
}
