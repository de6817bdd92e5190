package protocol

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"
)

const (
	readBufferSize = 4 << 10
	// maxBatch bounds how many replies a connection holds before it writes,
	// so a client streaming a huge pipeline still sees replies as it goes.
	maxBatch = 1024
	// maxRetainedOutput is the largest output buffer kept between batches.
	maxRetainedOutput = 256 << 10
)

// Conn is one client connection. Its exported fields belong to the Handler,
// which may read and write them from the connection's own goroutine (that is,
// inside ServeCommand); other goroutines must not touch them.
type Conn struct {
	ID         int64
	RemoteAddr string
	LocalAddr  string
	Created    time.Time
	// Session is the Handler's per-connection state.
	Session any

	name atomic.Pointer[string] // CLIENT SETNAME; read by CLIENT LIST from elsewhere

	server          *Server
	nc              net.Conn // a *tls.Conn for a TLS client
	raw             net.Conn // the TCP connection under nc (nc itself in plaintext)
	rd              *Reader
	out             []byte
	batch           batch
	closeAfterReply bool
	mayBlock        bool
	writesTaken     bool
	closing         atomic.Bool
}

// MayBlock says a request of the current batch may wait indefinitely (a
// blocking pop, LOCK.ACQUIRE ... WAIT). While the connection waits for such
// a batch it watches the client, and if the client goes away it calls the
// Handler's ClientGone, so the wait can be cancelled instead of holding a
// backend connection or a place in a lock's line for nobody.
func (c *Conn) MayBlock() { c.mayBlock = true }

// CloseAfterReply asks for the connection to be closed once the replies
// queued so far are written (QUIT, protocol errors).
func (c *Conn) CloseAfterReply() { c.closeAfterReply = true }

// serve is the connection's whole life: read, dispatch, reply, repeat.
func (c *Conn) serve() {
	defer c.server.release(c)
	if tc, ok := c.nc.(*tls.Conn); ok && !c.handshake(tc) {
		return
	}
	for {
		args, err := c.rd.ReadCommand()
		if err != nil {
			var perr *ProtocolError
			if errors.As(err, &perr) {
				p := c.batch.next()
				p.Buf = redcon.AppendError(p.Buf, "ERR "+perr.Error())
				p.Done()
				c.server.logProtocolError(c, perr)
			}
			c.writeBatch()
			return
		}
		c.server.handler.ServeCommand(c, args, c.batch.next())
		if c.closeAfterReply || c.batch.n >= maxBatch || c.rd.Buffered() == 0 {
			if err := c.writeBatch(); err != nil || c.closeAfterReply || c.closing.Load() {
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

// writeBatch waits for every queued reply and writes them in one call.
func (c *Conn) writeBatch() error {
	if c.batch.n == 0 {
		return nil
	}
	if c.mayBlock {
		c.mayBlock = false
		c.awaitWatchingClient()
	}
	c.out = c.batch.appendTo(c.out[:0])
	c.server.handler.BatchDone(c)
	if c.writesTaken {
		if len(c.out) > 0 {
			c.server.Logger.Error("bug: a reply for a connection whose writes were taken", "client", c.RemoteAddr)
		}
		return nil
	}
	if c.server.WriteTimeout > 0 {
		c.nc.SetWriteDeadline(time.Now().Add(c.server.WriteTimeout))
	}
	_, err := c.nc.Write(c.out)
	if cap(c.out) > maxRetainedOutput {
		c.out = nil
	}
	return err
}

// awaitWatchingClient waits for the batch while reading ahead, without
// consuming, to notice the client closing its end.
func (c *Conn) awaitWatchingClient() {
	done := make(chan struct{})
	go func() {
		c.batch.wait()
		c.nc.SetReadDeadline(time.Now()) // wake the Peek below; before close(done)
		close(done)
	}()
	for {
		err := c.rd.Peek() // buffered data stays for the next ReadCommand
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
	c.nc.SetReadDeadline(time.Now())
}

func newConn(s *Server, nc net.Conn, id int64) *Conn {
	return &Conn{
		ID:         id,
		RemoteAddr: nc.RemoteAddr().String(),
		LocalAddr:  nc.LocalAddr().String(),
		Created:    time.Now(),
		server:     s,
		nc:         nc,
		raw:        nc,
		rd:         NewReader(bufio.NewReaderSize(nc, readBufferSize), s.Limits),
	}
}

// WaitReplies waits until every request dispatched before current (the
// request being served) has its reply. A Handler calls it before switching a
// client to another backend connection, so requests sent before the switch
// run first.
func (c *Conn) WaitReplies(current *Pending) {
	current.done = &c.batch.late
	c.batch.late.Add(1)
	c.batch.wg.Done() // current is now counted in late
	c.batch.wg.Wait()
}

// TakeWrites hands the connection's write side to the caller for good: from
// now on what the client reads is a stream the caller relays (pub/sub, where
// Redis pushes messages no request asked for). The replies to requests sent
// before current are written first, in order; current and every later
// request must be completed with no bytes. Requests are still read and
// dispatched as before.
func (c *Conn) TakeWrites(current *Pending) net.Conn {
	c.WaitReplies(current)
	c.out = c.out[:0]
	for _, p := range c.batch.replies[:c.batch.n] {
		if p == current {
			break
		}
		c.out = append(c.out, p.Buf...)
		p.Buf = p.Buf[:0]
	}
	if len(c.out) > 0 {
		c.nc.Write(c.out)
	}
	c.writesTaken = true
	return c.nc
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

// Server returns the server the connection belongs to.
func (c *Conn) Server() *Server { return c.server }
