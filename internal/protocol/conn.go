package protocol

import (
	"bufio"
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
	Name       string
	// Session is the Handler's per-connection state.
	Session any

	server          *Server
	nc              net.Conn
	rd              *Reader
	out             []byte
	batch           batch
	closeAfterReply bool
	closing         atomic.Bool
}

// CloseAfterReply asks for the connection to be closed once the replies
// queued so far are written (QUIT, protocol errors).
func (c *Conn) CloseAfterReply() { c.closeAfterReply = true }

// serve is the connection's whole life: read, dispatch, reply, repeat.
func (c *Conn) serve() {
	defer c.server.release(c)
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

// writeBatch waits for every queued reply and writes them in one call.
func (c *Conn) writeBatch() error {
	if c.batch.n == 0 {
		return nil
	}
	c.out = c.batch.appendTo(c.out[:0])
	if c.server.WriteTimeout > 0 {
		c.nc.SetWriteDeadline(time.Now().Add(c.server.WriteTimeout))
	}
	_, err := c.nc.Write(c.out)
	if cap(c.out) > maxRetainedOutput {
		c.out = nil
	}
	return err
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
		server:     s,
		nc:         nc,
		rd:         NewReader(bufio.NewReaderSize(nc, readBufferSize), s.Limits),
	}
}
