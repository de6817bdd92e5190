// Package passthrough checks that fenceproxy forwards ordinary commands so a
// client sees exactly what Redis itself would send: the proxy, in front of one
// Redis (A), and a second Redis (B) reached directly get the same requests,
// and their replies must be the same bytes.
package passthrough

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// pair is a proxy in front of Redis A, and Redis B on its own.
type pair struct {
	A, B  *testenv.Redis
	Proxy *testenv.Proxy
}

func startPair(t *testing.T) *pair {
	t.Helper()
	return startPairWith(t)
}

// startPairWith is startPair with extra fenceproxy flags.
func startPairWith(t *testing.T, proxyArgs ...string) *pair {
	t.Helper()
	a := testenv.StartRedis(t, testenv.RedisOptions{})
	b := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: a.Addr, MinReplicas: 0, Args: proxyArgs})
	pr := &pair{A: a, B: b, Proxy: p}
	// Both start empty; FLUSHALL anyway so the corpus starts from a known state.
	for _, addr := range []string{p.Addr, b.Addr} {
		if got := testenv.Dial(t, addr).Do("FLUSHALL"); string(got) != "+OK\r\n" {
			t.Fatalf("FLUSHALL on %s: %q", addr, got)
		}
	}
	return pr
}

// conns dials the proxy and B.
func (pr *pair) conns(t *testing.T) (proxy, direct *testenv.Conn) {
	t.Helper()
	return testenv.Dial(t, pr.Proxy.Addr), testenv.Dial(t, pr.B.Addr)
}

// same sends cmd to both and fails unless the replies are the same bytes.
// It returns the reply.
func same(t *testing.T, proxy, direct *testenv.Conn, cmd ...string) []byte {
	t.Helper()
	got, err := proxy.TryDo(cmd...)
	if err != nil {
		t.Fatalf("%s via proxy: %v (got %s)", testenv.ShowCommand(cmd), err, testenv.ShowReply(got))
	}
	want, err := direct.TryDo(cmd...)
	if err != nil {
		t.Fatalf("%s direct: %v (got %s)", testenv.ShowCommand(cmd), err, testenv.ShowReply(want))
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s:\n proxy  %s\n redis  %s", testenv.ShowCommand(cmd), testenv.ShowReply(got), testenv.ShowReply(want))
	}
	return got
}

// alive fails the test unless the proxy process exists and answers PING on
// a new connection.
func (pr *pair) alive(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(pr.Proxy.Pid(), 0); err != nil {
		t.Fatalf("fenceproxy (pid %d) is gone: %v", pr.Proxy.Pid(), err)
	}
	c := testenv.Dial(t, pr.Proxy.Addr)
	defer c.Close()
	got, err := c.TryDo("PING")
	if err != nil || string(got) != "+PONG\r\n" {
		t.Fatalf("fenceproxy does not answer PING on a new connection: %q %v", got, err)
	}
}

// exchange writes raw to a new connection to addr, then reads until the
// peer closes or wait passes. It reports what arrived and whether the peer
// closed.
func exchange(t *testing.T, addr string, raw []byte, wait time.Duration) (got []byte, closed bool) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer nc.Close()
	nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(raw); err != nil {
		// The peer may close before it has read everything (a protocol error
		// early in a long input); what it sent back still counts.
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("write to %s: %v", addr, err)
		}
	}
	nc.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 64<<10)
	for len(got) < 1<<20 {
		n, err := nc.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return got, false
			}
			// EOF or connection reset: closed by the peer.
			return got, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || !errors.As(err, &ne)
		}
	}
	return got, false
}
