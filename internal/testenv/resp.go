package testenv

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// DefaultTimeout is a Conn's deadline for each operation.
const DefaultTimeout = 5 * time.Second

// ErrProtocol is returned (wrapped) by ReadReply when the bytes received
// are not one well-formed RESP2/RESP3 reply. It is resp.ErrBadReply: the
// reply is framed by the proxy's own codec (package resp), the one reader
// of RESP in the tree. That does not let a framing bug through unseen:
// tests compare the bytes it frames with literal replies of their own.
var ErrProtocol = resp.ErrBadReply

// Conn is a raw RESP client for tests that compare reply bytes exactly. It
// does not interpret replies: Do and ReadReply return exactly the bytes of
// one reply as they arrived.
//
// Do, Send, Flush and WriteRaw fail the test on error, so call them from the
// test goroutine; TryDo and ReadReply return errors instead.
type Conn struct {
	t       testing.TB // nil for testenv's own probes
	nc      net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	timeout time.Duration
	once    sync.Once
}

// Dial connects to addr; t.Cleanup closes the connection. Each operation has
// a 5s deadline (see SetTimeout).
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := dialConn(addr, DefaultTimeout)
	if err != nil {
		t.Fatalf("testenv: Dial %s: %v", addr, err)
	}
	c.t = t
	t.Cleanup(c.Close)
	return c
}

func dialConn(addr string, timeout time.Duration) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	return &Conn{nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc), timeout: timeout}, nil
}

// SetTimeout sets the deadline of each later operation, e.g. longer than a
// blocking command's own timeout.
func (c *Conn) SetTimeout(d time.Duration) { c.timeout = d }

// NetConn is the underlying connection, e.g. to half-close it.
func (c *Conn) NetConn() net.Conn { return c.nc }

// Do sends one command and returns the raw bytes of one full reply. It
// fails the test on any I/O or protocol error.
func (c *Conn) Do(args ...string) []byte {
	c.t.Helper()
	reply, err := c.TryDo(args...)
	if err != nil {
		c.t.Fatalf("testenv: %s: %v", ShowCommand(args), err)
	}
	return reply
}

// TryDo is Do returning its error instead of failing the test.
func (c *Conn) TryDo(args ...string) ([]byte, error) {
	if err := c.send(args); err != nil {
		return nil, err
	}
	if err := c.flush(); err != nil {
		return nil, err
	}
	return c.ReadReply()
}

// Send writes one command to the buffer without flushing or reading, for
// pipelines: Send, Send, Flush, then one ReadReply per command.
func (c *Conn) Send(args ...string) {
	c.t.Helper()
	if err := c.send(args); err != nil {
		c.t.Fatalf("testenv: Send %s: %v", ShowCommand(args), err)
	}
}

// Flush writes what Send buffered.
func (c *Conn) Flush() {
	c.t.Helper()
	if err := c.flush(); err != nil {
		c.t.Fatalf("testenv: Flush: %v", err)
	}
}

// WriteRaw writes b as is, at once (after anything Send buffered), for
// tests of malformed or split input.
func (c *Conn) WriteRaw(b []byte) {
	c.t.Helper()
	if err := c.flush(); err != nil {
		c.t.Fatalf("testenv: WriteRaw: %v", err)
	}
	c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("testenv: WriteRaw: %v", err)
	}
}

// ReadReply reads the raw bytes of one full reply, nested aggregates and a
// leading RESP3 attribute included (resp.AppendReply). It returns io.EOF
// if the connection was closed cleanly before the reply began,
// io.ErrUnexpectedEOF if it was closed in the middle, a net.Error with
// Timeout() true if the deadline passed, and ErrProtocol (wrapped) for
// bytes that are not RESP. RESP3 streamed strings and aggregates ($? and
// *?) are not supported.
func (c *Conn) ReadReply() ([]byte, error) {
	c.nc.SetReadDeadline(time.Now().Add(c.timeout))
	return resp.AppendReply(nil, c.r)
}

// Close closes the connection; later calls do nothing.
func (c *Conn) Close() { c.once.Do(func() { c.nc.Close() }) }

func (c *Conn) send(args []string) error {
	c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
	_, err := c.w.Write(AppendCommand(nil, args...))
	return err
}

func (c *Conn) flush() error {
	c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.w.Flush()
}

// AppendCommand appends args to b as a RESP multibulk request. It is kept
// apart from resp.AppendCommand on purpose: the tests' client must not
// share the encoder of the proxy it checks (a request the proxy could not
// read would otherwise go unnoticed).
func AppendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

// ParseInt returns N for a reply that is exactly ":N\r\n".
func ParseInt(reply []byte) (int64, bool) {
	if len(reply) < 4 || reply[0] != ':' || !bytes.HasSuffix(reply, []byte("\r\n")) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(reply[1:len(reply)-2]), 10, 64)
	return n, err == nil
}

// IsNull reports whether reply is a null: "$-1\r\n", "*-1\r\n" or RESP3 "_\r\n".
func IsNull(reply []byte) bool {
	switch string(reply) {
	case "$-1\r\n", "*-1\r\n", "_\r\n":
		return true
	}
	return false
}

// ParseBulk returns the payload of a reply that is exactly one non-null bulk
// string.
func ParseBulk(reply []byte) ([]byte, bool) {
	if len(reply) < 1 || reply[0] != '$' || IsNull(reply) || !whole(reply) {
		return nil, false
	}
	hdr := bytes.IndexByte(reply, '\n')
	return reply[hdr+1 : len(reply)-2], true
}

// SplitArray returns the raw bytes of each element of a reply that is
// exactly one non-null RESP2 array (or RESP3 set or push), e.g. to read
// LOCK.INFO's field/value pairs.
func SplitArray(reply []byte) ([][]byte, bool) { return resp.Elements(reply) }

// whole reports whether reply is exactly one well-formed reply.
func whole(reply []byte) bool {
	n, ok := resp.Size(reply)
	return ok && n == len(reply)
}
