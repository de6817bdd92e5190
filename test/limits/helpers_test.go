// Package limits tests fenceproxy under overload and failure: clients that
// never read their replies, oversized requests, idle clients, a backend
// outage and a fence store that cannot write. Every test runs the real
// binary against real redis-server processes.
package limits

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// patience bounds every wait for something that must happen; it is never a
// measure of how fast it happens.
const patience = 30 * time.Second

// metric returns the value of the sample named exactly name (labels
// included) on the proxy's /metrics, 0 if absent.
func metric(t *testing.T, p *testenv.Proxy, name string) float64 {
	t.Helper()
	_, body := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/metrics")
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %q", name, line)
			}
			return f
		}
	}
	return 0
}

// closedFor is the proxy's count of clients it closed for reason.
func closedFor(t *testing.T, p *testenv.Proxy, reason string) float64 {
	t.Helper()
	return metric(t, p, `fenceproxy_clients_closed_total{reason="`+reason+`"}`)
}

// eventually polls cond until it holds, failing the test after patience.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", patience, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drainUntilClosed reads nc until the proxy closes it and returns what
// arrived. A read that times out fails the test: the connection is open.
func drainUntilClosed(t *testing.T, nc net.Conn) []byte {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(patience))
	b, err := io.ReadAll(nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v (read %d bytes)", patience, len(b))
	}
	return b
}

// stillOpen reports whether nothing but a timeout comes from nc within a
// short read: the proxy has not closed it.
func stillOpen(nc net.Conn) bool {
	nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var one [1]byte
	_, err := nc.Read(one[:])
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// rawDial connects a client that the test drives byte by byte.
func rawDial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc, bufio.NewReader(nc)
}

func logHas(p *testenv.Proxy, s string) bool { return strings.Contains(p.Log(), s) }
