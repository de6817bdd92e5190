package protocol

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// okHandler answers every request +OK at once: what is left is the
// connection's own cost (read, dispatch, batch, write).
type okHandler struct{}

func (okHandler) ServeCommand(_ *Conn, _ [][]byte, p *resp.Reply) {
	p.Buf = append(p.Buf, "+OK\r\n"...)
	p.Done()
}
func (okHandler) BatchDone(*Conn)  {}
func (okHandler) ClientGone(*Conn) {}
func (okHandler) Closed(*Conn)     {}

// benchServe measures one request and its reply over loopback, one at a
// time, on a server set up by configure. allocs/op counts the server's
// allocations as well as the client's.
func benchServe(b *testing.B, h Handler, configure func(*Server)) {
	roundTrip := dialServer(b, h, configure)
	b.ReportAllocs()
	for b.Loop() {
		roundTrip()
	}
}

// dialServer starts a server with h on loopback, set up by configure, and
// returns a function that sends one GET on a connection to it and reads its
// 5-byte reply; the server stops when the test ends.
func dialServer(tb testing.TB, h Handler, configure func(*Server)) func() {
	nc := connectServer(tb, h, configure)
	req := []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
	reply := make([]byte, 5)
	return func() {
		if _, err := nc.Write(req); err != nil {
			tb.Fatal(err)
		}
		if _, err := io.ReadFull(nc, reply); err != nil {
			tb.Fatal(err)
		}
	}
}

// connectServer starts a server with h on loopback, set up by configure,
// and returns a connection to it; both end with the test.
func connectServer(tb testing.TB, h Handler, configure func(*Server)) net.Conn {
	s := NewServer(h, slog.New(slog.DiscardHandler))
	configure(s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go s.Serve(ln)
	tb.Cleanup(func() { s.Shutdown(context.Background()) })
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nc.Close() })
	return nc
}
