package commands

import (
	"bytes"
	"net"
	"strconv"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/authority"
)

func arr(head byte, elems ...[]byte) []byte {
	b := append([]byte{head}, []byte(itoa(len(elems))+"\r\n")...)
	for _, e := range elems {
		b = append(b, e...)
	}
	return b
}

func bs(s string) []byte { return []byte("$" + itoa(len(s)) + "\r\n" + s + "\r\n") }

func itoa(n int) string { return strconv.Itoa(n) }

// TestOwnKeysFilter: notifications of the authority's keys are dropped,
// invalidations lose them, everything else is relayed as it came.
func TestOwnKeysFilter(t *testing.T) {
	o := newOwnKeys(authority.Keys("fenceproxy:lock:"))
	live, bound := "fenceproxy:lock:{authority}:live", "fenceproxy:lock:{authority}:bound"
	for _, tc := range []struct {
		name    string
		in, out []byte
	}{
		{"plain message", arr('*', bs("message"), bs("ch"), bs("hi")), arr('*', bs("message"), bs("ch"), bs("hi"))},
		{"keyspace of live", arr('*', bs("pmessage"), bs("*"), bs("__keyspace@15__:"+live), bs("zadd")), nil},
		{"keyevent of bound", arr('>', bs("pmessage"), bs("*"), bs("__keyevent@15__:evicted"), bs(bound)), nil},
		{"keyevent subscribed", arr('*', bs("message"), bs("__keyevent@0__:zadd"), bs(live)), nil},
		{"keyevent of a lock record", arr('*', bs("message"), bs("__keyevent@0__:hset"), bs("fenceproxy:lock:{r}")),
			arr('*', bs("message"), bs("__keyevent@0__:hset"), bs("fenceproxy:lock:{r}"))},
		{"a client's channel named like it", arr('*', bs("message"), bs(live), bs(live)), arr('*', bs("message"), bs(live), bs(live))},
		{"RESP2 invalidation, only live", arr('*', bs("message"), bs("__redis__:invalidate"), arr('*', bs(live))), nil},
		{"RESP2 invalidation, mixed", arr('*', bs("message"), bs("__redis__:invalidate"), arr('*', bs("a"), bs(live), bs("b"))),
			arr('*', bs("message"), bs("__redis__:invalidate"), arr('*', bs("a"), bs("b")))},
		{"RESP3 push, mixed", arr('>', bs("invalidate"), arr('*', bs(bound), bs("k"))), arr('>', bs("invalidate"), arr('*', bs("k")))},
		{"RESP3 push, only own", arr('>', bs("invalidate"), arr('*', bs(bound), bs(live))), nil},
		{"flush", arr('>', bs("invalidate"), []byte("_\r\n")), arr('>', bs("invalidate"), []byte("_\r\n"))},
	} {
		got := o.filter(tc.in)
		if !bytes.Equal(got, tc.out) {
			t.Errorf("%s: filter(%q) = %q, want %q", tc.name, tc.in, got, tc.out)
		}
	}
}

// TestRelayConnChunks: messages cut anywhere across writes come out whole,
// in order, the proxy's left out.
func TestRelayConnChunks(t *testing.T) {
	live := "fenceproxy:lock:{authority}:live"
	var stream, want []byte
	for i := range 50 {
		m := arr('*', bs("message"), bs("ch"), bs(itoa(i)))
		stream, want = append(stream, m...), append(want, m...)
		stream = append(stream, arr('*', bs("pmessage"), bs("*"), bs("__keyspace@15__:"+live), bs("zadd"))...)
	}
	for _, size := range []int{1, 3, 7, 64, len(stream)} {
		got := relayInChunks(newOwnKeys(authority.Keys("fenceproxy:lock:")), stream, size)
		if !bytes.Equal(got, want) {
			t.Errorf("chunks of %d: got %q, want %q", size, got, want)
		}
	}
}

// relayInChunks writes in through a relayConn with filter, size bytes at
// a time, and returns what came out of it.
func relayInChunks(filter streamFilter, in []byte, size int) []byte {
	a, b := net.Pipe()
	r := &relayConn{Conn: a, filter: filter}
	go func() {
		for rest := in; len(rest) > 0; {
			n := min(size, len(rest))
			r.Write(rest[:n])
			rest = rest[n:]
		}
		a.Close()
	}()
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := b.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return got
		}
	}
}

// BenchmarkRelayConn: the cost of framing what a tunnel relays, per
// chunk of 64 small messages (none the proxy's).
func BenchmarkRelayConn(b *testing.B) {
	var chunk []byte
	for i := range 64 {
		chunk = append(chunk, arr('*', bs("message"), bs("channel:"+itoa(i)), bs("a payload of some forty bytes, as many are"))...)
	}
	h := &relayConn{Conn: discardConn{}, filter: newOwnKeys(authority.Keys("fenceproxy:lock:"))}
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		h.Write(chunk)
	}
}

type discardConn struct{ net.Conn }

func (discardConn) Write(b []byte) (int, error) { return len(b), nil }
