//go:build !linux

package backend

import "net"

// peeker cannot peek here: a connection Redis closed while idle shows at
// its next batch (ErrLost) instead.
type peeker struct{}

func (*peeker) look(net.Conn) (closed, waiting bool) { return false, false }
