//go:build unix

package tier

import (
	"errors"
	"net"
	"syscall"
)

// connAlive reports whether an idle connection may still carry a request:
// a non-blocking peek at its socket finds nothing to read. A leader that
// restarted, or a link that closed it while it was idle, shows as end of
// file (or a reset) there; bytes nobody asked for mean the stream is out
// of step. Either way a request written on it would be lost, its outcome
// unknown to the follower, although the leader never read it.
func connAlive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var buf [1]byte
	err = raw.Read(func(fd uintptr) bool {
		// Nothing to read (EAGAIN) is the one healthy answer: the peer is
		// still there as far as the socket knows. A read of 0 bytes is
		// end of file, of 1 a stray byte, any other error a dead socket.
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK) || errors.Is(rerr, syscall.EINTR)
		return true // done either way: never wait for the socket here
	})
	return err == nil && alive
}
