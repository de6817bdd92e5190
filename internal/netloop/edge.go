package netloop

import "io"

// Edge keeps what the readiness edges of one edge-triggered socket said:
// whether a read may find bytes now. A read that comes back short drained
// the socket, and nothing more is signalled until the next edge; but an
// edge that says the stream ended (Ended) is the last one, even when the
// end arrived with the last bytes and one short read took them all: the
// socket then stays readable until the read that returns its end. (Taking
// that short read for "nothing more" left a client that sent its last
// bytes and closed held by the loop for good: FuzzServeSplit's
// "max number of clients reached".)
//
// An Edge is its socket's reader's alone (the loop's goroutine, or a
// goroutine the socket was lent to). The zero Edge is not readable: a new
// socket starts with Readable, since bytes may have come before it was
// added.
type Edge struct{ readable, ended bool }

// Readable notes that the socket may have bytes to read (a new socket, or
// one handed back with bytes its last reader may have left).
func (e *Edge) Readable() { e.readable = true }

// Saw notes a readiness edge.
func (e *Edge) Saw(ev Events) {
	if ev&In != 0 {
		e.readable = true
	}
	if ev&Ended != 0 {
		e.ended = true
	}
}

// MayRead reports whether a read may find bytes, or the end of the stream.
func (e *Edge) MayRead() bool { return e.readable }

// Read makes one non-blocking read of fd into p, as Read does, and notes
// what it says of the socket: n > 0 bytes; (0, ErrWouldBlock) when nothing
// is there yet; (0, io.EOF) at the end of the stream; or the socket's
// error.
func (e *Edge) Read(fd int, p []byte) (int, error) {
	n, err := Read(fd, p)
	switch {
	case err == ErrWouldBlock:
		e.readable = false
		return 0, err
	case err != nil:
		return 0, err
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	if n < len(p) && !e.ended {
		e.readable = false
	}
	return n, nil
}
