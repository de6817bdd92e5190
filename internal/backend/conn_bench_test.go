package backend_test

import (
	"bufio"
	"net"
	"sync"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// getRoundTrip sends GET over conn with a reused Reply and waits for it:
// what forwarding one request costs the proxy's backend side.
func getRoundTrip(conn *backend.Conn, p *resp.Reply, wg *sync.WaitGroup, args [][]byte) {
	p.Buf = p.Buf[:0]
	wg.Add(1)
	conn.Do(args, p)
	wg.Wait()
}

// TestForwardAllocations: forwarding a request and copying its reply back
// allocates nothing once the connection's buffers have grown (counted, not
// timed: allocation counts do not depend on the machine's load).
func TestForwardAllocations(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	conn, err := backend.Dial(backend.Options{Addr: r.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var wg sync.WaitGroup
	p := resp.NewReply(&wg)
	args := [][]byte{[]byte("GET"), []byte("k")}
	for range 100 { // grow the buffers
		getRoundTrip(conn, p, &wg, args)
	}
	if n := testing.AllocsPerRun(1000, func() { getRoundTrip(conn, p, &wg, args) }); n >= 1 {
		t.Errorf("%.2f allocations per forwarded request, want 0", n)
	}
}

// BenchmarkForwardGET is one GET forwarded and answered, one at a time.
func BenchmarkForwardGET(b *testing.B) {
	r := testenv.StartRedis(b, testenv.RedisOptions{})
	conn, err := backend.Dial(backend.Options{Addr: r.Addr})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var wg sync.WaitGroup
	p := resp.NewReply(&wg)
	args := [][]byte{[]byte("GET"), []byte("k")}
	b.ReportAllocs()
	for b.Loop() {
		getRoundTrip(conn, p, &wg, args)
	}
}

// BenchmarkDirectGET is the baseline for BenchmarkForwardGET: the same GET
// on a plain connection, written and read by the benchmark's goroutine.
// The difference is what the shared connection's writer and reader
// goroutines cost one request when nothing else is in flight.
func BenchmarkDirectGET(b *testing.B) {
	r := testenv.StartRedis(b, testenv.RedisOptions{})
	nc, err := net.Dial("tcp", r.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	rd := bufio.NewReader(nc)
	req := []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := nc.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := rd.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
	}
}
