//go:build unix

package protocol

import "syscall"

const rawIOSupported = true

// rawIO is one non-blocking read or write on a socket through
// syscall.RawConn. Its callback is bound once per connection: a closure
// made per call would escape to the heap, three allocations per request.
type rawIO struct {
	buf  []byte
	n    int
	err  error
	op   func(fd int, p []byte) (int, error) // syscall.Read or syscall.Write
	call func(fd uintptr) bool
}

func (r *rawIO) do(fd uintptr) bool {
	for {
		r.n, r.err = r.op(int(fd), r.buf)
		if r.err != syscall.EINTR {
			return true // done either way: never wait for the socket here
		}
	}
}

// bind readies r for op on its first use.
func (r *rawIO) bind(op func(fd int, p []byte) (int, error)) *rawIO {
	if r.call == nil {
		r.op, r.call = op, r.do
	}
	return r
}

// writeNow makes one non-blocking write of b to the client's socket and
// returns how much of it the socket took (0 if it is full).
func (c *Conn) writeNow(b []byte) (int, error) {
	if c.lp != nil {
		return c.lp.writeNow(b)
	}
	w := c.rawWrite.bind(syscall.Write)
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

// readNow makes one non-blocking read from the client's socket into b and
// returns how many bytes it got: 0 when none are there yet, and also at
// the end of the stream or on an error, which the blocking read that
// follows then reports.
func (c *Conn) readNow(b []byte) int {
	r := c.rawRead.bind(syscall.Read)
	r.buf = b
	err := c.rawConn.Read(r.call)
	r.buf = nil
	if err != nil || r.err != nil || r.n < 0 {
		return 0
	}
	return r.n
}
