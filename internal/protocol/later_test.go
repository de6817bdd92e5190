package protocol

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// laterHandler answers each request from another goroutine, after a short
// random delay, as a backend reader does: replies complete out of order and
// off the connection's goroutine, so batches are written by their last
// reply (writeLater). "BIG n" answers a bulk string of n bytes.
type laterHandler struct{}

func (laterHandler) ServeCommand(_ *Conn, args [][]byte, p *resp.Reply) {
	var reply []byte
	if strings.EqualFold(string(args[0]), "big") {
		n, _ := strconv.Atoi(string(args[1]))
		reply = fmt.Appendf(nil, "$%d\r\n%s\r\n", n, strings.Repeat("x", n))
	} else {
		reply = fmt.Appendf(nil, "+%s\r\n", args[0])
	}
	delay := time.Duration(rand.IntN(200)) * time.Microsecond
	go func() {
		time.Sleep(delay)
		p.Buf = append(p.Buf, reply...)
		p.Done()
	}()
}
func (laterHandler) BatchDone(*Conn)  {}
func (laterHandler) ClientGone(*Conn) {}
func (laterHandler) Closed(*Conn)     {}

func serveLater(t *testing.T, configure func(*Server)) string {
	_, addr := startServer(t, laterHandler{}, configure)
	return addr
}

// startServer starts a server of h, configured by configure, on a
// loopback port, and stops it when t ends (Shutdown must finish within
// 5 s); it returns the server and its address.
func startServer(t *testing.T, h Handler, configure func(*Server)) (*Server, string) {
	t.Helper()
	s := NewServer(h, slog.New(slog.DiscardHandler))
	configure(s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s, ln.Addr().String()
}

// TestLaterWriteKeepsOrder: single requests and pipelines, the latter cut
// into several writes so that a batch ends (and is left to its last reply)
// while the rest of the pipeline is on its way; every reply must come back,
// in order.
func TestLaterWriteKeepsOrder(t *testing.T) {
	addr := serveLater(t, func(*Server) {})
	for c := range 4 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		rd := bufio.NewReader(nc)
		next := 0
		for round := range 300 {
			n := 1
			if round%3 == 0 {
				n = 1 + rand.IntN(20)
			}
			var req []byte
			for i := range n {
				req = fmt.Appendf(req, "*1\r\n$%d\r\nr%d\r\n", len(strconv.Itoa(next+i))+1, next+i)
			}
			// Send it in up to three pieces, with pauses between.
			for len(req) > 0 {
				cut := min(len(req), 1+rand.IntN(len(req)))
				if _, err := nc.Write(req[:cut]); err != nil {
					t.Fatal(err)
				}
				req = req[cut:]
				if len(req) > 0 {
					time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
				}
			}
			for range n {
				line, err := rd.ReadString('\n')
				if err != nil {
					t.Fatalf("client %d: %v", c, err)
				}
				if want := fmt.Sprintf("+r%d\r\n", next); line != want {
					t.Fatalf("client %d: got %q, want %q", c, line, want)
				}
				next++
			}
		}
	}
}

// TestLaterWriteToFullSocket: a reply too big for the socket to take at
// once is finished off the goroutine that completed it (on the serve loop,
// by a goroutine the connection leaves the loop for); a client that reads
// only later still gets every byte, then the next reply in order.
func TestLaterWriteToFullSocket(t *testing.T) {
	bothServings(t, func(t *testing.T, configure func(*Server)) {
		addr := serveLater(t, configure)
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		const size = 8 << 20
		if _, err := nc.Write([]byte(multibulk("BIG", "8388608"))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the socket fills; the write must not be lost
		if _, err := nc.Write([]byte(multibulk("next"))); err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		rd := bufio.NewReader(nc)
		head, err := rd.ReadString('\n')
		if err != nil || head != "$8388608\r\n" {
			t.Fatalf("header %q, %v", head, err)
		}
		body := make([]byte, size+2)
		if _, err := io.ReadFull(rd, body); err != nil {
			t.Fatal(err)
		}
		if strings.Trim(string(body[:size]), "x") != "" || string(body[size:]) != "\r\n" {
			t.Fatal("big reply corrupted")
		}
		if line, err := rd.ReadString('\n'); err != nil || line != "+next\r\n" {
			t.Fatalf("after the big reply: %q, %v", line, err)
		}
	})
}

// TestLaterWriteOverHardLimit: a batch written by its last reply (on a
// goroutine or on the serve loop) still honours the normal class's hard
// output limit: the client is closed, with none of the reply.
func TestLaterWriteOverHardLimit(t *testing.T) {
	bothServings(t, func(t *testing.T, configure func(*Server)) {
		addr := serveLater(t, func(s *Server) { s.NormalOutput = OutputLimit{Hard: 1 << 20}; configure(s) })
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := nc.Write([]byte(multibulk("ping"))); err != nil {
			t.Fatal(err)
		}
		rd := bufio.NewReader(nc)
		if line, _ := rd.ReadString('\n'); line != "+ping\r\n" {
			t.Fatalf("got %q", line)
		}
		if _, err := nc.Write([]byte(multibulk("BIG", "2097152"))); err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.Copy(io.Discard, rd)
		if err != nil || n != 0 {
			t.Fatalf("want the connection closed with no bytes, got %d bytes, %v", n, err)
		}
	})
}

// bothServings runs test with each client served by a goroutine of its
// own, then from the serve loop (where the platform has one).
func bothServings(t *testing.T, test func(t *testing.T, configure func(*Server))) {
	t.Run("goroutine", func(t *testing.T) { test(t, func(*Server) {}) })
	t.Run("loop", func(t *testing.T) { test(t, func(s *Server) { onLoop(t, s) }) })
}

// BenchmarkServeLater is BenchmarkServeRoundTrip with replies completed by
// another goroutine, as the backend completes them: the path where the
// completing goroutine writes the batch.
func BenchmarkServeLater(b *testing.B) {
	benchServe(b, laterNowHandler{}, func(*Server) {})
}

// laterNowHandler completes each reply from one long-lived goroutine, with
// no delay and no allocation.
type laterNowHandler struct{}

var laterQueue = make(chan *resp.Reply, 16)

func init() {
	go func() {
		for p := range laterQueue {
			p.Buf = append(p.Buf, "+OK\r\n"...)
			p.Done()
		}
	}()
}

func (laterNowHandler) ServeCommand(_ *Conn, _ [][]byte, p *resp.Reply) { laterQueue <- p }
func (laterNowHandler) BatchDone(*Conn)                                 {}
func (laterNowHandler) ClientGone(*Conn)                                {}
func (laterNowHandler) Closed(*Conn)                                    {}

// TestLaterWriteAllocations: a request whose reply another goroutine
// completes, written by that goroutine, allocates nothing (counted, not
// timed).
func TestLaterWriteAllocations(t *testing.T) {
	roundTrip := dialServer(t, laterNowHandler{}, func(*Server) {})
	for range 100 {
		roundTrip()
	}
	if n := testing.AllocsPerRun(1000, roundTrip); n >= 1 {
		t.Errorf("%.2f allocations per request, want 0", n)
	}
}
