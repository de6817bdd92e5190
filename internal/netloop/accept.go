//go:build linux

package netloop

import (
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// Accept takes one connection waiting on the listening socket lfd (from
// DetachListener) without waiting: its descriptor (non-blocking,
// close-on-exec, for Add), and the peer's and its own address as a
// net.TCPAddr prints them. ErrWouldBlock: none is waiting.
//
// The socket gets what Go's net package gives an accepted TCP connection
// (TCP_NODELAY, and keep-alive probes after 15 s idle, every 15 s, 9 of
// them), so a client is the same on either side of the loop.
func Accept(lfd int) (fd int, remote, local string, err error) {
	for {
		fd, sa, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch err {
		case nil:
		case unix.EINTR, unix.ECONNABORTED:
			// Interrupted, or the peer gave up while it waited: try the
			// next.
			continue
		case unix.EAGAIN:
			return -1, "", "", ErrWouldBlock
		default:
			return -1, "", "", err
		}
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15)
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15)
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9)
		remote = addrString(sa)
		if lsa, err := unix.Getsockname(fd); err == nil {
			local = addrString(lsa)
		}
		return fd, remote, local, nil
	}
}

// addrString prints a socket address as net.TCPAddr.String does.
func addrString(sa unix.Sockaddr) string {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	case *unix.SockaddrInet6:
		host := net.IP(a.Addr[:]).String()
		if a.ZoneId != 0 {
			if ifi, err := net.InterfaceByIndex(int(a.ZoneId)); err == nil {
				host += "%" + ifi.Name
			} else {
				host += "%" + strconv.Itoa(int(a.ZoneId))
			}
		}
		return net.JoinHostPort(host, strconv.Itoa(a.Port))
	}
	return ""
}
