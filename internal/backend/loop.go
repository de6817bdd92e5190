package backend

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/netloop"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// A connection served by an event loop (Options.Loop).
//
// With goroutines, every request queued on an idle connection wakes its
// writer, and every read from Redis wakes its reader; at -P 1 with 50
// clients that was 0.2 writes and 0.2 reads to Redis per request, each a
// goroutine (and often an OS thread) woken. On a loop, the clients served
// by the same loop queue their requests during one pass (netloop's
// Schedule), and the pass ends with one write per connection; replies are
// read when the loop finds the socket readable, and each is completed on
// the loop, where the client's reply is then written (protocol's
// later.go). No goroutine is woken on the way.
//
// The socket is the loop's alone (netloop.Detach): the loop reads it
// (until a read comes back short: the loop is edge-triggered) into a
// bufio.Reader whose source never waits, and hands out every reply that
// is whole in the buffer (resp.Frame) under one lock, and with
// Options.OnPush every RESP3 push message in its place among them. A reply that does
// not fit the buffer, or is too large to relay, is read by a goroutine
// that may wait (readLarge) with the same code as the goroutine reader,
// and the loop takes the socket back after it. Writes the socket does not
// take at once are finished when the loop finds room again.

// loopSock is a connection's socket while a loop serves it: the Conn's nc
// (it is a net.Conn for LocalAddr and Close; nothing else of it is used).
type loopSock struct {
	c      *Conn
	fd     int
	reg    netloop.Reg
	local  net.Addr
	remote net.Addr
	rd     *bufio.Reader // over sockReader

	// scheduled: a Flush is scheduled on the loop (guarded by c.mu).
	scheduled bool

	// The rest belongs to the loop's goroutine, but for stopped (read by
	// a lending goroutine) and blocking (set before lending, read by the
	// goroutine it lends to).
	registered bool
	edge       netloop.Edge // whether the socket may have bytes (edge-triggered)
	unsent     []byte       // the rest of a write the socket did not take
	sending    []byte       // the whole buffer unsent is part of, for reuse
	spare      []byte
	lent       bool // a goroutine reads a reply too big for rd (readLarge)
	blocking   bool // sockReader waits for bytes (for that goroutine)
	stopped    atomic.Bool
	ready      []delivery
}

// delivery is a reply whole in the buffer and the request it answers,
// or (push) a RESP3 push message for Options.OnPush.
type delivery struct {
	f       inflight
	off, at int
	push    bool
}

var (
	errOutOfStep = errors.New("reply with no request: stream out of step")
	errClosed    = errors.New("closed")
)

// attach puts nc, just connected and authenticated, in service on the
// loop.
func (c *Conn) attach(nc net.Conn) error {
	s := &loopSock{c: c, local: nc.LocalAddr(), remote: nc.RemoteAddr()}
	s.edge.Readable() // bytes may have come before it was added
	fd, err := netloop.Detach(nc)
	if err != nil {
		nc.Close()
		return err
	}
	s.fd = fd
	s.rd = bufio.NewReaderSize(sockReader{s}, c.readBufferSize())
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		netloop.Close(fd)
		return errClosed
	}
	c.nc = s
	c.mu.Unlock()
	// A flush scheduled before this runs writes to the socket all the
	// same; the first readiness edge comes with the registration.
	c.loop.Post(s.register)
	return nil
}

func (s *loopSock) register() {
	if s.stopped.Load() {
		return
	}
	reg, err := s.c.loop.Add(s.fd, s)
	if err != nil {
		s.stop(err)
		return
	}
	s.reg, s.registered = reg, true
}

// Ready serves the socket's readiness, on the loop.
func (s *loopSock) Ready(ev netloop.Events) {
	if s.stopped.Load() {
		return
	}
	if ev&netloop.Out != 0 && len(s.unsent) > 0 {
		s.send(s.unsent)
	}
	s.edge.Saw(ev)
	if ev&netloop.In != 0 {
		s.readReplies()
	}
}

// Flush writes what was queued since the last write (netloop.Flusher).
func (s *loopSock) Flush() {
	c := s.c
	c.mu.Lock()
	s.scheduled = false
	if c.nc != s || len(s.unsent) > 0 || len(c.wbuf) == 0 {
		// Gone, or waiting for room: the write that finds room takes
		// what was queued meanwhile.
		c.mu.Unlock()
		return
	}
	buf := c.wbuf
	c.wbuf = s.spare[:0]
	c.mu.Unlock()
	s.spare = nil
	s.sending = buf
	s.send(buf)
}

// send writes buf, part of s.sending, as far as the socket takes it; the
// rest waits for room (Ready with Out).
func (s *loopSock) send(buf []byte) {
	for len(buf) > 0 {
		n, err := netloop.Write(s.fd, buf)
		if err == netloop.ErrWouldBlock {
			s.unsent = buf
			return
		}
		if err != nil {
			s.unsent = nil
			s.stop(err)
			return
		}
		buf = buf[n:]
	}
	s.unsent = nil
	if cap(s.sending) <= 1<<20 {
		s.spare = s.sending[:0]
	}
	s.sending = nil
	// Requests queued while the socket was full, if any, go now.
	s.c.mu.Lock()
	more := len(s.c.wbuf) > 0 && !s.scheduled
	s.c.mu.Unlock()
	if more {
		s.Flush()
	}
}

// readReplies reads what the socket has and completes every request whose
// reply is whole, on the loop, until a read comes back short.
func (s *loopSock) readReplies() {
	for !s.lent && !s.stopped.Load() {
		for s.rd.Buffered() > 0 {
			n, ok := s.deliver()
			if !ok {
				return
			}
			if n == 0 {
				break // the rest is the beginning of a reply
			}
		}
		if !s.edge.MayRead() {
			return
		}
		if s.rd.Buffered() == s.rd.Size() {
			// A whole buffer and not a whole reply in it.
			s.lend()
			return
		}
		if _, err := s.rd.Peek(s.rd.Buffered() + 1); err != nil && err != netloop.ErrWouldBlock {
			s.stop(err)
			return
		}
	}
}

// deliver completes the requests whose replies are whole in the buffer
// (one lock for all of them), returns how many bytes they took, and
// reports whether the loop may go on reading: not if the connection
// stopped or was lent.
func (s *loopSock) deliver() (int, bool) {
	c := s.c
	b, _ := s.rd.Peek(s.rd.Buffered())
	// One clock read per read from Redis, for the round-trip histogram
	// only (see readReplies).
	var now time.Time
	if c.opts.ObserveReply != nil {
		now = time.Now()
	}
	off := 0
	var bad error
	ready := s.ready[:0]
	c.mu.Lock()
	for off < len(b) {
		n, err := resp.Frame(b[off:])
		if err != nil {
			bad = err
			break
		}
		if n == 0 {
			break
		}
		if b[off] == '>' && c.opts.OnPush != nil {
			// Handed out in its place among the replies, below.
			ready = append(ready, delivery{off: off, at: n, push: true})
			off += n
			continue
		}
		if c.head == len(c.queue) {
			bad = errOutOfStep
			break
		}
		ready = append(ready, delivery{f: c.queue[c.head], off: off, at: n})
		c.queue[c.head] = inflight{}
		c.head++
		off += n
	}
	c.retiredLocked()
	c.mu.Unlock()
	for i := range ready {
		d := &ready[i]
		if d.push {
			// After the replies Redis sent before it are done, as the
			// goroutine reader hands it (a copy: the buffer is reused).
			c.opts.OnPush(append([]byte(nil), b[d.off:d.off+d.at]...))
			*d = delivery{}
			continue
		}
		p := d.f.p
		p.Buf = append(p.Buf, b[d.off:d.off+d.at]...)
		if c.opts.ObserveReply != nil {
			c.opts.ObserveReply(now.Sub(d.f.start))
		}
		p.Done()
		*d = delivery{}
	}
	s.ready = ready[:0]
	s.rd.Discard(off)
	switch {
	case bad == nil:
		return off, true
	case off > 0:
		// Delivered what came before it; the next call meets it first.
		return off, true
	case errors.Is(bad, resp.ErrTooLarge):
		s.lend() // AppendReply reads past it, and fails only its request
		return 0, false
	default:
		s.stop(bad)
		return 0, false
	}
}

// retiredLocked shrinks the queue after replies were taken off its head.
func (c *Conn) retiredLocked() {
	switch {
	case c.head == len(c.queue):
		c.queue, c.head = c.queue[:0], 0
	case c.head >= 1024 && c.head > len(c.queue)/2:
		// Always busy: slide the live part down so the slice stops growing.
		n := copy(c.queue, c.queue[c.head:])
		clear(c.queue[n:])
		c.queue, c.head = c.queue[:n], 0
	}
}

// lend has a goroutine that may wait read the reply at the head of the
// buffer, which the loop cannot frame in it: one longer than the buffer
// (or too large to relay, or not RESP). The loop takes the socket back
// when it is read.
func (s *loopSock) lend() {
	s.lent, s.blocking = true, true
	go s.readLarge()
}

func (s *loopSock) readLarge() {
	err := s.c.readOne(s.rd)
	s.blocking = false
	s.c.loop.Post(func() {
		s.lent = false
		if s.stopped.Load() {
			netloop.Close(s.fd) // stop left it open for this goroutine
			return
		}
		if err != nil {
			s.stop(err)
			return
		}
		s.edge.Readable() // the goroutine may have left bytes in the socket
		s.readReplies()
	})
}

// readOne reads the reply to the request at the head of the queue from
// rd, waiting for its bytes, and completes the request, as readReplies
// does on a connection of goroutines.
func (c *Conn) readOne(rd *bufio.Reader) error {
	if c.opts.OnPush != nil {
		if b, err := rd.Peek(1); err != nil {
			return err
		} else if b[0] == '>' {
			return c.readPush(rd) // the loop goes on with what follows
		}
	}
	c.mu.Lock()
	if c.head == len(c.queue) {
		c.mu.Unlock()
		return errOutOfStep
	}
	f := c.queue[c.head]
	c.mu.Unlock()
	p := f.p
	if err := readReply(p, rd); err != nil {
		return err
	}
	c.mu.Lock()
	c.queue[c.head] = inflight{}
	c.head++
	c.retiredLocked()
	c.mu.Unlock()
	if c.opts.ObserveReply != nil {
		c.opts.ObserveReply(time.Since(f.start))
	}
	p.Done()
	return nil
}

// stop ends the socket's service, on the loop: out of the Conn, off the
// loop, closed (after a goroutine it was lent to is done with it), and the
// requests on it failed (broken), once.
func (s *loopSock) stop(err error) {
	if s.stopped.Swap(true) {
		return
	}
	c := s.c
	c.mu.Lock()
	if c.nc == s {
		c.nc = nil
		c.wbuf = c.wbuf[:0]
	}
	c.mu.Unlock()
	if s.registered {
		c.loop.Del(s.reg)
	}
	if !s.lent {
		netloop.Close(s.fd)
	}
	c.broken(err)
}

// Close stops the socket's service from any goroutine (Conn.fail).
func (s *loopSock) Close() error {
	if !s.stopped.Load() {
		s.c.loop.Post(func() { s.stop(errClosed) })
	}
	return nil
}

func (s *loopSock) LocalAddr() net.Addr  { return s.local }
func (s *loopSock) RemoteAddr() net.Addr { return s.remote }

// The rest of net.Conn is not used on a loop's socket.
func (s *loopSock) Read([]byte) (int, error)         { return 0, errLoopSock }
func (s *loopSock) Write([]byte) (int, error)        { return 0, errLoopSock }
func (s *loopSock) SetDeadline(time.Time) error      { return errLoopSock }
func (s *loopSock) SetReadDeadline(time.Time) error  { return errLoopSock }
func (s *loopSock) SetWriteDeadline(time.Time) error { return errLoopSock }

var errLoopSock = errors.New("backend: a loop's socket is read and written by its loop")

// sockReader is the source of a loopSock's reader: reads that never wait,
// for the loop (a read that comes back short ends the loop's reading until
// the next readiness edge), or that wait, for a goroutine it was lent to.
type sockReader struct{ s *loopSock }

func (r sockReader) Read(p []byte) (int, error) {
	s := r.s
	if !s.blocking {
		return s.edge.Read(s.fd, p)
	}
	// Lent to a goroutine: the edge is the loop's (Ready goes on noting
	// edges meanwhile), so this reader leaves it alone.
	for {
		n, err := netloop.Read(s.fd, p)
		switch {
		case err == netloop.ErrWouldBlock:
			if s.stopped.Load() {
				return 0, net.ErrClosed
			}
			netloop.WaitReadable(s.fd, 200)
			continue
		case err == nil && n == 0:
			return 0, io.EOF
		}
		return n, err
	}
}
