package protocol

import (
	"bytes"
	"strings"
	"testing"
)

// BenchmarkFramer measures framing requests from a client that has sent
// many: one GET; a pipelined batch of 16 GETs (one op frames all 16); a
// SET of a 16 KB value, longer than the read buffer. allocs/op should be 0
// once the Reader's buffer has grown.
func BenchmarkFramer(b *testing.B) {
	get := multibulk("GET", "key:000000000001")
	for _, bc := range []struct {
		name string
		req  string
		per  int // requests per op
	}{
		{"GET", get, 1},
		{"Pipeline16GET", strings.Repeat(get, 16), 16},
		{"SET16KB", multibulk("SET", "key:000000000001", strings.Repeat("v", 16<<10)), 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rd := newFramerBenchReader([]byte(strings.Repeat(bc.req, max(1, 64/bc.per))))
			b.SetBytes(int64(len(bc.req)))
			b.ReportAllocs()
			for b.Loop() {
				for range bc.per {
					if _, err := rd.ReadCommand(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

func newFramerBenchReader(data []byte) *Reader {
	return NewReader(&repeatReader{data: bytes.Clone(data)}, DefaultLimits)
}
