//go:build unix

package backend

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketClosed reports whether nc's peer has closed it (an orderly end of
// stream) or reset it, by one non-blocking peek: data waiting is not a
// close. A connection that is not a socket is assumed open.
func socketClosed(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var b [1]byte
	raw.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		closed = (n == 0 && err == nil) || (err != nil && err != unix.EAGAIN && err != unix.EINTR)
		return true // never wait for readability
	})
	return closed
}
