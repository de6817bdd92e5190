//go:build linux

package netloop

import (
	"io"
	"testing"

	"golang.org/x/sys/unix"
)

// TestEdgeReadsToTheEnd: bytes and the end of the stream that came in
// one edge: a short read takes the bytes, and only an edge that said the
// stream ended keeps the socket readable for the read that returns its
// end (no later edge would come).
func TestEdgeReadsToTheEnd(t *testing.T) {
	for _, sawEnd := range []bool{false, true} {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fds[0])
		unix.Write(fds[1], []byte("ab"))
		unix.Close(fds[1])
		var e Edge
		ev := In
		if !sawEnd {
			ev = unix.EPOLLIN
		}
		e.Saw(ev)
		buf := make([]byte, 16)
		if n, err := e.Read(fds[0], buf); n != 2 || err != nil {
			t.Fatalf("first read: %d, %v", n, err)
		}
		if e.MayRead() != sawEnd {
			t.Fatalf("saw the end %v: after a short read MayRead is %v", sawEnd, e.MayRead())
		}
		if sawEnd {
			if n, err := e.Read(fds[0], buf); n != 0 || err != io.EOF {
				t.Fatalf("second read: %d, %v; want the end", n, err)
			}
		}
	}
}
