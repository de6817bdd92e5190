package protocol

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// panicHandler panics on BOOM (after completing the reply if BOOMDONE)
// and answers anything else +OK.
type panicHandler struct{}

func (panicHandler) ServeCommand(_ *Conn, args [][]byte, p *resp.Reply) {
	switch string(args[0]) {
	case "BOOM":
		panic("a bug in the handler")
	case "BOOMDONE":
		p.Buf = append(p.Buf, "+DONE\r\n"...)
		p.Done()
		panic("a bug after the reply")
	}
	p.Buf = append(p.Buf, "+OK\r\n"...)
	p.Done()
}
func (panicHandler) BatchDone(*Conn)  {}
func (panicHandler) ClientGone(*Conn) {}
func (panicHandler) Closed(*Conn)     {}

// TestHandlerPanic: a panic while serving a request answers that request
// with an internal error (or keeps the reply it had completed), closes
// that client's connection after the replies before it, logs the panic,
// and leaves the server serving others and able to shut down.
func TestHandlerPanic(t *testing.T) {
	for _, tc := range []struct{ cmd, want string }{
		{"BOOM", "-ERR fenceproxy: internal error serving this request"},
		{"BOOMDONE", "+DONE"},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			var log bytes.Buffer
			s := NewServer(panicHandler{}, slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil)))
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go s.Serve(ln)
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			nc.Write([]byte("*1\r\n$4\r\nPING\r\n*1\r\n$" + string(rune('0'+len(tc.cmd))) + "\r\n" + tc.cmd + "\r\n*1\r\n$4\r\nPING\r\n"))
			rd := bufio.NewReader(nc)
			first, _ := rd.ReadString('\n')
			second, _ := rd.ReadString('\n')
			if first != "+OK\r\n" || !strings.HasPrefix(second, tc.want) {
				t.Fatalf("replies %q, %q; want +OK then %q", first, second, tc.want)
			}
			if rest, err := io.ReadAll(rd); err != nil || len(rest) != 0 {
				t.Fatalf("after the panic: %q, %v; want the connection closed with nothing more", rest, err)
			}

			other, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			other.SetDeadline(time.Now().Add(10 * time.Second))
			other.Write([]byte("*1\r\n$4\r\nPING\r\n"))
			if got, _ := bufio.NewReader(other).ReadString('\n'); got != "+OK\r\n" {
				t.Fatalf("another client after the panic got %q", got)
			}
			other.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown after a panic: %v", err)
			}
			if l := log.String(); !strings.Contains(l, "panic serving a request") || !strings.Contains(l, "command="+tc.cmd) {
				t.Fatalf("the panic is not in the log: %s", l)
			}
		})
	}
}

// syncWriter lets the server's goroutines log into one buffer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
