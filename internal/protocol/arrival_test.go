package protocol

import (
	"bufio"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// arrivalHandler: SLEEP holds the connection's goroutine 300 ms in
// ServeCommand; AGE answers ReadAt - ArrivedAt in ms.
type arrivalHandler struct{}

func (arrivalHandler) ServeCommand(c *Conn, args [][]byte, p *resp.Reply) {
	if string(args[0]) == "SLEEP" {
		time.Sleep(300 * time.Millisecond)
		p.Buf = append(p.Buf, "+OK\r\n"...)
	} else {
		p.Buf = redcon.AppendInt(p.Buf, c.ReadAt().Sub(c.ArrivedAt()).Milliseconds())
	}
	p.Done()
}
func (arrivalHandler) BatchDone(*Conn)  {}
func (arrivalHandler) ClientGone(*Conn) {}
func (arrivalHandler) Closed(*Conn)     {}

// TestArrivedAtOnAGoroutine: on a client served by a goroutine of its own
// (not the loop), a request that waited in the socket while that goroutine
// was busy arrived before it was read, by about the wait (TCP_INFO, less a
// kernel tick); a request read at once arrived when read.
func TestArrivedAtOnAGoroutine(t *testing.T) {
	_, addr := startServer(t, arrivalHandler{}, func(*Server) {})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rd := bufio.NewReader(nc)
	reply := func() string {
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return line
	}
	age := func() int {
		got := reply()
		ms, err := strconv.Atoi(got[1 : len(got)-2])
		if err != nil || got[0] != ':' {
			t.Fatalf("AGE: %q", got)
		}
		return ms
	}
	nc.Write([]byte("*1\r\n$3\r\nAGE\r\n"))
	if ms := age(); ms > 100 {
		t.Fatalf("a request read at once arrived %d ms before its read", ms)
	}
	nc.Write([]byte("*1\r\n$5\r\nSLEEP\r\n"))
	time.Sleep(20 * time.Millisecond) // the goroutine is in SLEEP: AGE waits in the socket
	nc.Write([]byte("*1\r\n$3\r\nAGE\r\n"))
	if got := reply(); got != "+OK\r\n" {
		t.Fatalf("SLEEP: %q", got)
	}
	if ms := age(); ms < 200 || ms > 300 {
		t.Fatalf("a request that waited 280 ms in the socket arrived %d ms before its read, want 200 to 300", ms)
	}
}
