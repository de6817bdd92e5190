//go:build unix

package protocol

import "syscall"

const rawIOSupported = true

// rawWrite is one non-blocking write to a socket through syscall.RawConn.
// Its callback is bound once per connection: a closure made per write
// would escape to the heap, three allocations per request.
type rawWrite struct {
	buf  []byte
	n    int
	err  error
	call func(fd uintptr) bool
}

func (w *rawWrite) write(fd uintptr) bool {
	for {
		w.n, w.err = syscall.Write(int(fd), w.buf)
		if w.err != syscall.EINTR {
			return true // done either way: never wait for the socket here
		}
	}
}

// writeNow makes one non-blocking write of b to the client's socket and
// returns how much of it the socket took (0 if it is full).
func (c *Conn) writeNow(b []byte) (int, error) {
	w := &c.rawWrite
	if w.call == nil {
		w.call = w.write
	}
	w.buf = b
	err := c.rawConn.Write(w.call)
	w.buf = nil
	switch {
	case err != nil:
		return 0, err
	case w.err == syscall.EAGAIN:
		return 0, nil
	case w.err != nil:
		return 0, w.err
	}
	return w.n, nil
}

// rawRead is one non-blocking read from a socket, bound once per
// connection as rawWrite is.
type rawRead struct {
	buf  []byte
	n    int
	err  error
	call func(fd uintptr) bool
}

func (r *rawRead) read(fd uintptr) bool {
	for {
		r.n, r.err = syscall.Read(int(fd), r.buf)
		if r.err != syscall.EINTR {
			return true
		}
	}
}

// readNow makes one non-blocking read from the client's socket into b and
// returns how many bytes it got: 0 when none are there yet, and also at
// the end of the stream or on an error, which the blocking read that
// follows then reports.
func (c *Conn) readNow(b []byte) int {
	r := &c.rawRead
	if r.call == nil {
		r.call = r.read
	}
	r.buf = b
	err := c.rawConn.Read(r.call)
	r.buf = nil
	if err != nil || r.err != nil || r.n < 0 {
		return 0
	}
	return r.n
}
