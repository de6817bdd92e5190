package backend

import (
	"net"
	"syscall"
	"unsafe"
)

// peeker looks, without reading, whether a connection's peer closed it:
// for a SyncConn, before each batch. It keeps the socket's RawConn and the
// peek function between batches, so a look allocates nothing.
type peeker struct {
	of      net.Conn
	raw     syscall.RawConn // nil: not a socket (assumed open)
	fn      func(fd uintptr) bool
	closed  bool
	waiting bool
	buf     [1]byte
}

// look reports whether nc's peer has closed it (an orderly end of stream)
// or reset it, and whether bytes are waiting on it, by one non-blocking
// MSG_PEEK.
func (p *peeker) look(nc net.Conn) (closed, waiting bool) {
	if nc != p.of {
		p.of, p.raw = nc, nil
		if sc, ok := nc.(syscall.Conn); ok {
			p.raw, _ = sc.SyscallConn()
		}
		if p.fn == nil {
			p.fn = p.peek
		}
	}
	if p.raw == nil {
		return false, false
	}
	p.closed, p.waiting = false, false
	p.raw.Read(p.fn)
	return p.closed, p.waiting
}

func (p *peeker) peek(fd uintptr) bool {
	n, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p.buf[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	p.closed = (errno == 0 && n == 0) || (errno != 0 && errno != syscall.EAGAIN && errno != syscall.EINTR)
	p.waiting = errno == 0 && n > 0
	return true // never wait for readability
}
