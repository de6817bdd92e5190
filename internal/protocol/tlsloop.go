package protocol

import (
	"crypto/tls"
	"net"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/netloop"
)

// TLS clients on the event loop.
//
// A TLS client's handshake runs on its goroutine, as always (bounded by
// HandshakeTimeout, with blocking reads and writes). Then it moves to the
// loop as a plaintext client does, and its requests and replies go through
// the same *tls.Conn, Go's own record layer: the tls.Conn is built over a
// tlsTransport, a net.Conn of ours whose transport switches with the
// client. On a goroutine (the handshake, and whenever the client has left
// the loop) it is the TCP connection in Go's poller; on the loop, the
// loop's descriptor, read once without waiting and written without
// waiting.
//
// Why crypto/tls can be driven this way (go1.26, src/crypto/tls/conn.go):
//
//   - Reads. readRecordOrCCS reads a record's header and then its body
//     with readFromUntil, which appends to c.rawInput whatever the
//     transport returns (bytes.Buffer.ReadFrom keeps the bytes of a read
//     that also returns an error). On an error that is a net.Error whose
//     Temporary() is true it returns the error without
//     c.in.setErrorLocked ("if e, ok := err.(net.Error); !ok ||
//     !e.Temporary() { c.in.setErrorLocked(err) }", after both
//     readFromUntil calls), so the half record stays in c.rawInput and the
//     next Read parses it again from its header. Read returns such an
//     error as it is (atLeastReader passes it through), so errTLSWouldBlock
//     comes back by identity. A post-handshake message (a TLS 1.3
//     KeyUpdate or session ticket) cut the same way stays in c.hand.
//     Read may return n > 0 together with the error (its close_notify
//     look-ahead reads the next record when an alert's first bytes are
//     there): readTLS drops the error then, so it never sits in the
//     Reader's bufio.Reader.
//   - Writes. Every error of the transport's Write is permanent:
//     writeRecordLocked has already advanced the record sequence number,
//     and Write ends with "c.out.setErrorLocked(err)", which wraps any
//     net.Error as a permanentError (Temporary() false). So the
//     transport's Write never fails but for a broken socket: on the loop
//     it writes what the socket takes and keeps the rest in its outbox,
//     in order, which the loop writes as the socket makes room
//     (loopwrite.go, as the rest of a plaintext batch). The record buffer
//     it is given is pooled by crypto/tls (outBufPool): the outbox copies.
//
// On the loop, "the socket is drained" does not mean "nothing to read":
// the tls.Conn may hold the decrypted rest of a record (up to 16 KB, more
// than the Reader's buffer) or whole records read with the last bytes of
// the handshake. So the loop reads through the tls.Conn until it says
// errTLSWouldBlock (loopClient.tlsDry), in place of the socket's edge,
// which the transport still consults before each system call.

// errTLSWouldBlock is the transport's read on the loop that found nothing
// to read: a net.Error that crypto/tls takes as temporary (see above).
var errTLSWouldBlock error = tlsWouldBlock{}

type tlsWouldBlock struct{}

func (tlsWouldBlock) Error() string   { return "protocol: nothing to read yet (event loop)" }
func (tlsWouldBlock) Timeout() bool   { return true }
func (tlsWouldBlock) Temporary() bool { return true }

// tlsTransport is the net.Conn under a TLS client's tls.Conn (see above).
// Its reads are the tls.Conn's reader's (one at a time); its writes, and
// the loop's writes of the outbox (flushOutbox), are serialized by mu, so
// that nothing crypto/tls writes (a KeyUpdate's answer, an alert)
// overtakes what waits in the outbox.
type tlsTransport struct {
	// conn is the TCP connection in Go's poller, nil while on the loop.
	conn net.Conn
	// lc is the loop's state while on the loop, nil otherwise.
	lc *loopClient

	mu sync.Mutex
	// outbox[head:] is the encrypted bytes the socket did not take yet
	// (an offset, not a reslice: a batch of megabytes is written a
	// socket buffer at a time).
	outbox []byte
	head   int
}

// useLoop puts the transport on the loop's descriptor of lc.
func (t *tlsTransport) useLoop(lc *loopClient) { t.conn, t.lc = nil, lc }

func (t *tlsTransport) Read(b []byte) (int, error) {
	lc := t.lc
	if lc == nil {
		return t.conn.Read(b)
	}
	if !lc.edge.MayRead() {
		// Edge-triggered: a short read drained the socket, and the next
		// edge (Ready) says when more came.
		return 0, errTLSWouldBlock
	}
	n, err := lc.edge.Read(lc.fd, b)
	if err == netloop.ErrWouldBlock {
		return 0, errTLSWouldBlock
	}
	return n, err
}

// Write never fails on the loop but for a broken socket: what the socket
// does not take waits in the outbox (see above).
func (t *tlsTransport) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lc == nil {
		if t.pendingLocked() > 0 {
			// Left by the loop: a batch's rest never is (the loop
			// writes it before the client may leave), only what
			// crypto/tls wrote on its own while reading on the loop.
			if _, err := t.conn.Write(t.outbox[t.head:]); err != nil {
				return 0, err
			}
			t.emptyLocked()
		}
		return t.conn.Write(b)
	}
	if _, err := t.flushLocked(); err != nil {
		return 0, err
	}
	if t.pendingLocked() > 0 {
		t.outbox = append(t.outbox, b...)
		return len(b), nil
	}
	n, err := netloop.Write(t.lc.fd, b)
	switch {
	case err == netloop.ErrWouldBlock:
		n = 0
	case err != nil:
		return 0, err
	}
	t.outbox = append(t.outbox, b[n:]...)
	return len(b), nil
}

// flushLocked writes what the socket takes of the outbox, on the loop,
// without waiting, and returns how many bytes are left in it.
func (t *tlsTransport) flushLocked() (left int, err error) {
	for t.pendingLocked() > 0 {
		n, err := netloop.Write(t.lc.fd, t.outbox[t.head:])
		switch {
		case err == netloop.ErrWouldBlock:
			return t.pendingLocked(), nil
		case err != nil:
			return t.pendingLocked(), err
		}
		t.head += n
	}
	t.emptyLocked()
	return 0, nil
}

// flushOutbox is flushLocked for the loop's write of a batch's rest
// (loopwrite.go).
func (t *tlsTransport) flushOutbox() (left int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.flushLocked()
}

// pendingLocked is how many bytes the outbox holds; the caller holds mu.
func (t *tlsTransport) pendingLocked() int { return len(t.outbox) - t.head }

// pendingBytes is how many bytes the outbox holds: the socket did not
// take them yet.
func (t *tlsTransport) pendingBytes() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pendingLocked()
}

// pending reports whether the outbox holds bytes the socket did not take.
func (t *tlsTransport) pending() bool { return t.pendingBytes() > 0 }

// emptyLocked empties the outbox, letting go of one grown past what is
// kept between batches; the caller holds mu.
func (t *tlsTransport) emptyLocked() {
	t.outbox, t.head = t.outbox[:0], 0
	if cap(t.outbox) > maxRetainedOutput {
		t.outbox = nil
	}
}

// Close closes a goroutine's connection. On the loop, the loop closes
// the descriptor itself (loopClient.stop): a tls.Conn's Close is not used
// there.
func (t *tlsTransport) Close() error {
	if conn := t.conn; conn != nil {
		return conn.Close()
	}
	return nil
}

func (t *tlsTransport) LocalAddr() net.Addr  { return t.addr(net.Conn.LocalAddr) }
func (t *tlsTransport) RemoteAddr() net.Addr { return t.addr(net.Conn.RemoteAddr) }

func (t *tlsTransport) addr(get func(net.Conn) net.Addr) net.Addr {
	if conn := t.conn; conn != nil {
		return get(conn)
	}
	return nil
}

// The deadlines are a goroutine's: on the loop nothing waits.

func (t *tlsTransport) SetDeadline(d time.Time) error {
	return t.deadline(net.Conn.SetDeadline, d)
}

func (t *tlsTransport) SetReadDeadline(d time.Time) error {
	return t.deadline(net.Conn.SetReadDeadline, d)
}

func (t *tlsTransport) SetWriteDeadline(d time.Time) error {
	return t.deadline(net.Conn.SetWriteDeadline, d)
}

func (t *tlsTransport) deadline(set func(net.Conn, time.Time) error, d time.Time) error {
	if conn := t.conn; conn != nil {
		return set(conn, d)
	}
	return nil
}

// newTLSConn is the tls.Conn of a client accepted on raw, over a
// transport of its own.
func newTLSConn(raw net.Conn, cfg *tls.Config) (*tls.Conn, *tlsTransport) {
	t := &tlsTransport{conn: raw}
	return tls.Server(t, cfg), t
}

// readTLS is the Reader's source on the loop for a TLS client: one read
// through the tls.Conn, which reads the socket at most once (and not at
// all when the edge says it is drained).
func (lc *loopClient) readTLS(b []byte) (int, error) {
	n, err := lc.tls.Read(b)
	if err == errTLSWouldBlock {
		if n > 0 {
			err = nil // the next read meets it again (see above)
		} else {
			lc.tlsDry = true
		}
	}
	if n > 0 {
		lc.c.readAt = lc.loop.Now()
	}
	return n, err
}

// mayRead reports whether a read may find bytes (or the end of the
// stream): the socket's edge, or, for a TLS client, the tls.Conn's (see
// above).
func (lc *loopClient) mayRead() bool {
	if lc.tls != nil {
		return !lc.tlsDry
	}
	return lc.edge.MayRead()
}

// writeTLS writes b through the tls.Conn on the loop (or from whoever
// completes a batch left to its last reply, while the loop does not touch
// the connection: invariant 2) and reports whether the socket took all of
// it; the rest waits in the transport's outbox, which the loop writes as
// the socket makes room (loopwrite.go).
func (lc *loopClient) writeTLS(b []byte) (all bool, err error) {
	if _, err := lc.tls.Write(b); err != nil {
		return false, err
	}
	return !lc.c.tio.pending(), nil
}

// closeNotify sends a TLS client's close_notify before the loop closes
// it, as tls.Conn.Close does on a goroutine, without waiting: a client
// that reads nothing does not get it.
func (lc *loopClient) closeNotify() {
	if lc.tls != nil && lc.fd >= 0 && !lc.c.tio.pending() {
		lc.tls.CloseWrite()
	}
}
