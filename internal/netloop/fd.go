//go:build linux

package netloop

import (
	"errors"
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrWouldBlock is a read or write that found nothing to read or no room.
var ErrWouldBlock = errors.New("netloop: would block")

// Detach takes nc's socket out of Go's poller and returns a descriptor of
// it for a loop: a non-blocking duplicate, after which nc is closed (Go
// then stops watching the socket, which stays open through the duplicate).
// The caller owns the descriptor. nc must support syscall.Conn (a
// *net.TCPConn does).
func Detach(nc net.Conn) (int, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1, errors.New("netloop: connection has no descriptor")
	}
	return detach(sc, nc)
}

// DetachListener is Detach for a listening socket, whose connections a
// loop then accepts (Accept): ln is closed, its socket stays open through
// the returned descriptor. ln must be a *net.TCPListener.
func DetachListener(ln net.Listener) (int, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return -1, errors.New("netloop: only a TCP listener can be served from a loop")
	}
	return detach(tl, ln)
}

func detach(sc syscall.Conn, closer io.Closer) (int, error) {
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var dupErr error
	if err := raw.Control(func(s uintptr) {
		fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	if dupErr != nil {
		return -1, dupErr
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	closer.Close()
	return fd, nil
}

// Close closes a descriptor from Detach.
func Close(fd int) error { return unix.Close(fd) }

// Read makes one non-blocking read from fd: n > 0 bytes, or 0 and
// ErrWouldBlock (nothing there yet), io.EOF-like (0, nil: the peer closed
// its end), or the socket's error. It is a raw system call: it never
// parks the goroutine, nor lets the runtime hand its thread's P on (the
// socket is non-blocking, so the call is short).
func Read(fd int, p []byte) (int, error) { return rawIO(unix.SYS_READ, fd, p) }

// Write makes one non-blocking write of p to fd and returns how much the
// socket took: all, part, or 0 with ErrWouldBlock when it has no room.
func Write(fd int, p []byte) (int, error) { return rawIO(unix.SYS_WRITE, fd, p) }

// rawIO is one read or write (trap) of p on the non-blocking fd, again
// after EINTR.
func rawIO(trap uintptr, fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, ErrWouldBlock
		}
		return 0, e
	}
}

// WaitReadable waits up to ms milliseconds (a blocking poll(2), on a
// goroutine that may block, never the loop's) for fd to have bytes to
// read or be closed, and reports whether it has.
func WaitReadable(fd int, ms int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, ms)
	return err == nil && n > 0
}

// LastDataAge is how long ago the kernel last received data on the TCP
// socket fd (TCP_INFO's last_data_recv, in whole milliseconds, rounded
// down to the kernel's tick); ok is false if it cannot tell. Data that
// waited in the socket, or in a connection not yet accepted, is older
// than its read says.
//
// It asks for tcp_info only as far as last_data_recv, into a buffer on the
// stack: unix.GetsockoptTCPInfo returns the whole struct on the heap, an
// allocation of every lock request (the grant's lease counts from when
// its request arrived).
func LastDataAge(fd int) (age time.Duration, ok bool) {
	var info [lastDataRecvEnd]byte
	n := uint32(len(info))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_INFO,
		uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 || n < uint32(lastDataRecvEnd) {
		return 0, false
	}
	ms := *(*uint32)(unsafe.Pointer(&info[lastDataRecvEnd-4]))
	return time.Duration(ms) * time.Millisecond, true
}

// lastDataRecvEnd is where tcp_info's last_data_recv ends.
const lastDataRecvEnd = int(unsafe.Offsetof(unix.TCPInfo{}.Last_data_recv)) + 4
