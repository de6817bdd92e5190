//go:build !unix

package backend

import "net"

// socketClosed cannot peek here: a closed connection shows at its next
// batch (ErrLost) instead.
func socketClosed(net.Conn) bool { return false }
