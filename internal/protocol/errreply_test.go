package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// codedErr is an error of another package that knows its reply.
type codedErr struct{}

func (codedErr) Error() string                 { return "somepkg: the Go text a client must not see" }
func (codedErr) RESPError() (code, msg string) { return "TRYAGAIN", "somepkg: retry shortly" }

// errHandler answers "CODED" and "UNKNOWN" with an error value in the
// reply's Err (from another goroutine if later), anything else +OK.
type errHandler struct{ later bool }

func (h errHandler) ServeCommand(_ *Conn, args [][]byte, p *resp.Reply) {
	complete := func() {
		switch string(args[0]) {
		case "CODED":
			p.Err = fmt.Errorf("wrapped: %w", codedErr{})
		case "REDIS":
			p.Err = resp.Error{Code: "WRONGTYPE", Msg: "Operation against a key"}
		case "UNKNOWN":
			p.Err = errors.New("somepkg: 10.0.0.7:6379 refused, password hunter2")
		default:
			p.Buf = append(p.Buf, "+OK\r\n"...)
		}
		p.Done()
	}
	if h.later {
		args = [][]byte{bytes.Clone(args[0])}
		go complete()
		return
	}
	complete()
}
func (errHandler) BatchDone(*Conn)  {}
func (errHandler) ClientGone(*Conn) {}
func (errHandler) Closed(*Conn)     {}

// TestErrBecomesTheReply: a reply's Err is written as the client's reply,
// in its place in the pipeline: an error that knows its reply gets it, any
// other the internal-error reply, its text only in the log.
func TestErrBecomesTheReply(t *testing.T) {
	for _, later := range []bool{false, true} {
		var log bytes.Buffer
		s := NewServer(errHandler{later: later}, slog.New(slog.NewTextHandler(&log, nil)))
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
		var req []byte
		for _, cmd := range []string{"PING", "CODED", "PING", "UNKNOWN", "REDIS", "PING"} {
			req = resp.AppendCommand(req, [][]byte{[]byte(cmd)})
		}
		if _, err := nc.Write(req); err != nil {
			t.Fatal(err)
		}
		want := "+OK\r\n" +
			"-TRYAGAIN somepkg: retry shortly\r\n" +
			"+OK\r\n" +
			"-ERR fenceproxy: internal error (see the proxy's log)\r\n" +
			"-WRONGTYPE Operation against a key\r\n" +
			"+OK\r\n"
		got := make([]byte, len(want))
		nc.SetReadDeadline(time.Now().Add(replyWait))
		if _, err := io.ReadFull(bufio.NewReader(nc), got); err != nil || string(got) != want {
			t.Fatalf("later=%v: replies %q, %v; want %q", later, got, err, want)
		}
		s.Shutdown(t.Context())
		if !strings.Contains(log.String(), "hunter2") || !strings.Contains(log.String(), "internal error") {
			t.Errorf("later=%v: the unknown error is not in the log: %q", later, log.String())
		}
	}
}
