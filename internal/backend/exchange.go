package backend

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// SyncConn is a connection to Redis that its one user's goroutine writes
// and reads itself (Exchange): a batch of requests leaves in one write and
// its replies are read on the same goroutine, with no writer or reader
// goroutine in between. It is for a user that does nothing else while a
// batch is out, the lock writer (internal/locks: it sends its scripts and
// one WAIT, then waits for the WAIT), for whom a Conn's goroutines were
// only handoffs: a wake-up of the writer, one of the reader when the
// replies came, and one of the user when the last was in.
//
// It is a Conn's dialling, gate and reconnection, shared, not copied: the
// same Options (ROLE and Admit before a connection carries anything, the
// Gate, OnBreak, TLS), the same failures in a reply's Err, and after a
// break the same reconnection in the background, during which Exchange
// answers ErrUnavailable. ObserveReply, OnPush, RESP3 pushes, Loop and
// NoReconnect do not apply.
type SyncConn struct {
	c *Conn
	// Exchange's own, touched by its caller only.
	nc       net.Conn      // the connection rd reads: c.nc when it was last looked at
	rd       *bufio.Reader // nc's replies
	deadline time.Time     // nc's read deadline
	peek     peeker        // whether Redis closed nc between batches
}

// DialSync connects to Redis for a SyncConn.
func DialSync(opts Options) (*SyncConn, error) {
	c := newConn(opts)
	c.synchronous = true
	nc, err := c.connect()
	if err != nil {
		return nil, err
	}
	c.nc = nc
	return &SyncConn{c: c}, nil
}

// Exchange sends req, RESP requests whose replies are replies' in order, in
// one write, and reads their replies, completing each (its Done) as soon
// as it is read: whoever waits for the first is answered while the later
// ones (a WAIT) are still out. It returns once every reply is complete.
//
// What keeps a request from its reply is its Err, as on a Conn: the Gate's
// refusal or ErrUnavailable (the connection is down) for the whole batch,
// nothing sent; ErrLost for every reply not read when the connection broke
// or a reply took longer than ReplyTimeout (the request may or may not have
// run), after which the connection reconnects in the background. One
// goroutine at a time may call Exchange.
func (s *SyncConn) Exchange(req []byte, replies []*resp.Reply) {
	s.ExchangeHeld(req, replies, nil)
}

// Holder is what ExchangeHeld holds while it completes replies
// (persist.Store's commits, through lockwriter).
type Holder interface {
	HoldCommits()
	ReleaseCommits()
}

// ExchangeHeld is Exchange with hold, if not nil, held while the replies
// that came in together (whole in the read buffer, no wait on the socket
// between them) are completed, one after another, and released before it
// waits for more: what their callers start that can go as one then does
// (the grants of a lock round, whose script replies come in one read,
// start one fence-store commit between them, not one for the first and
// one for the rest). It is never held while Exchange waits on the socket,
// also not for the rest of a reply that came in part.
func (s *SyncConn) ExchangeHeld(req []byte, replies []*resp.Reply, hold Holder) {
	err := s.c.opts.Gate.Refusal()
	var nc net.Conn
	if err == nil {
		if nc = s.current(); nc == nil {
			err = ErrUnavailable
		}
	}
	if err == nil && s.peerClosed(nc) {
		// Redis closed it while no batch was out (a restart, CLIENT
		// KILL): nobody was reading to notice, as a Conn's reader would
		// have. Sent into it, the batch would end in ErrLost, an unknown
		// outcome, for requests Redis never got: dial again first.
		if nc = s.redial(nc); nc == nil {
			err = ErrUnavailable
		}
	}
	if err != nil {
		completeWith(replies, err)
		return
	}
	s.armDeadline(nc)
	if _, err := nc.Write(req); err != nil {
		s.broke(nc, err, replies)
		return
	}
	held := false
	for i, p := range replies {
		if held && !s.replyBuffered() {
			hold.ReleaseCommits() // the next reply is a wait away
			held = false
		}
		if err := readReply(p, s.rd); err != nil {
			if held {
				hold.ReleaseCommits()
			}
			s.broke(nc, err, replies[i:])
			return
		}
		if hold != nil && !held {
			hold.HoldCommits()
			held = true
		}
		p.Done()
	}
	if held {
		hold.ReleaseCommits()
	}
	if s.rd.Buffered() > 0 {
		// Bytes no request of this batch asked for would be read as the
		// next batch's replies.
		s.broke(nc, errors.New("reply with no request: stream out of step"), nil)
	}
}

// replyBuffered reports whether a whole reply waits in rd's buffer, to be
// read with no wait on the socket.
func (s *SyncConn) replyBuffered() bool {
	n := s.rd.Buffered()
	if n == 0 {
		return false
	}
	b, _ := s.rd.Peek(n) // buffered: no read
	_, whole := resp.Size(b)
	return whole
}

// current is the connection in service (nil while it is down), with rd
// reading it.
func (s *SyncConn) current() net.Conn {
	s.c.mu.Lock()
	nc := s.c.nc
	s.c.mu.Unlock()
	if nc != nil && nc != s.nc {
		s.nc, s.deadline = nc, time.Time{}
		if s.rd == nil {
			s.rd = bufio.NewReaderSize(nc, s.c.readBufferSize())
		} else {
			s.rd.Reset(nc)
		}
	}
	return nc
}

// peerClosed reports whether nc was closed by Redis (or reset) since its
// last batch, by a non-blocking peek at the socket. Bytes waiting there
// are no reply to anything on a plaintext connection (Redis sends nothing
// unasked on a lock connection): out of step, as good as closed. Under TLS
// they may be a record with no data for us (a session ticket) or the
// close_notify Redis sends as it closes: tlsClosed reads them to tell.
func (s *SyncConn) peerClosed(nc net.Conn) bool {
	sock := nc
	t, isTLS := nc.(interface{ NetConn() net.Conn })
	if isTLS {
		sock = t.NetConn()
	}
	closed, waiting := s.peek.look(sock)
	if closed || !waiting {
		return closed
	}
	return !isTLS || s.tlsClosed(nc)
}

// tlsClosed reads what waits on a TLS connection between batches, for at
// most a millisecond (a deadline already past would not read even what is
// there): a timeout means only records with nothing for the reader (the
// connection is fine); an end of stream, an alert or reply bytes nobody
// asked for mean it is not.
func (s *SyncConn) tlsClosed(nc net.Conn) bool {
	nc.SetReadDeadline(time.Now().Add(time.Millisecond))
	s.deadline = time.Time{} // armDeadline sets the real one again
	_, err := s.rd.Peek(1)
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

var errPeerClosed = errors.New("closed by Redis while idle")

// redial replaces old, found closed by Redis, with a new connection at
// once, on the caller's goroutine (the lock writer has nothing else to
// do); if Redis cannot be reached it reconnects in the background, as
// after any break, and redial returns nil.
func (s *SyncConn) redial(old net.Conn) net.Conn {
	s.c.fail(old, errPeerClosed)
	nc, err := s.c.connect()
	if err != nil {
		s.c.afterBreak(fmt.Errorf("%w; redial: %w", errPeerClosed, err), 0)
		return nil
	}
	if s.c.opts.OnBreak != nil {
		s.c.opts.OnBreak()
	}
	if !s.c.install(nc) {
		return nil
	}
	return s.current()
}

// armDeadline makes sure nc's read deadline is at least ReplyTimeout
// away. It moves it a quarter further than that, so that it is set once in
// that quarter rather than for every batch (a deadline is a runtime timer
// to reset); a batch thus has between ReplyTimeout and 1.25 times it for
// its replies. The deadline passes unnoticed while no batch is out: nobody
// reads then.
func (s *SyncConn) armDeadline(nc net.Conn) {
	timeout := s.c.opts.ReplyTimeout
	if timeout <= 0 {
		return
	}
	now := time.Now()
	if s.deadline.Sub(now) >= timeout {
		return
	}
	s.deadline = now.Add(timeout + timeout/4)
	nc.SetReadDeadline(s.deadline)
}

// broke takes the broken nc out of service, fails the replies it owed
// (lost) with ErrLost, and reconnects in the background, as a Conn's
// reader does (Conn.broken).
func (s *SyncConn) broke(nc net.Conn, err error, lost []*resp.Reply) {
	s.c.fail(nc, err)
	completeWith(lost, ErrLost)
	s.c.afterBreak(err, len(lost))
}

// completeWith completes each of replies with err.
func completeWith(replies []*resp.Reply, err error) {
	for _, p := range replies {
		p.Err = err
		p.Done()
	}
}

// Up reports whether the connection is established.
func (s *SyncConn) Up() bool { return s.c.Up() }

// LocalAddr is the connection's local address as Redis shows it (CLIENT
// LIST's addr), "" while it is down.
func (s *SyncConn) LocalAddr() string { return s.c.LocalAddr() }

// Close ends the connection: an Exchange under way gets ErrLost for the
// replies it has not read yet.
func (s *SyncConn) Close() { s.c.Close() }
