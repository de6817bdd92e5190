package protocol

import (
	"bytes"
	"io"
	"testing"
)

// repeatReader serves the same bytes forever, so a benchmark can parse
// without allocating input.
type repeatReader struct {
	data []byte
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.data[r.off:])
		n += c
		r.off = (r.off + c) % len(r.data)
	}
	return n, nil
}

var _ io.Reader = (*repeatReader)(nil)

// BenchmarkReadCommand measures parsing one pipelined SET; allocs/op should
// be 0 once the reader's buffer has grown.
func BenchmarkReadCommand(b *testing.B) {
	cmd := []byte("*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000001\r\n$64\r\n" + string(bytes.Repeat([]byte("v"), 64)) + "\r\n")
	rd := NewReader(&repeatReader{data: bytes.Repeat(cmd, 64)}, DefaultLimits)
	b.SetBytes(int64(len(cmd)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rd.ReadCommand(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadInline measures an inline request (redis-cli, telnet).
func BenchmarkReadInline(b *testing.B) {
	cmd := []byte("SET key:000000000001 \"hello world\"\r\n")
	rd := NewReader(&repeatReader{data: bytes.Repeat(cmd, 64)}, DefaultLimits)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rd.ReadCommand(); err != nil {
			b.Fatal(err)
		}
	}
}
