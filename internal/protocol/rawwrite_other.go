//go:build !unix

package protocol

// Elsewhere every batch is written by its connection's goroutine.
const rawWriteSupported = false

type rawWrite struct{}

func (c *Conn) writeNow(b []byte) (int, error) { return 0, nil }
