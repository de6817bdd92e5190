package backend

import (
	"bufio"
	"bytes"
	"testing"
)

// BenchmarkAppendReply measures copying one reply of each common shape out
// of the backend's stream; allocs/op should be 0 with a reused buffer.
func BenchmarkAppendReply(b *testing.B) {
	for _, tc := range []struct{ name, reply string }{
		{"status", "+OK\r\n"},
		{"bulk64", "$64\r\n" + string(bytes.Repeat([]byte("v"), 64)) + "\r\n"},
		{"array10", "*10\r\n" + string(bytes.Repeat([]byte("$5\r\nhello\r\n"), 10))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			stream := bytes.Repeat([]byte(tc.reply), 1024)
			src := bytes.NewReader(stream)
			rd := bufio.NewReaderSize(src, 64<<10)
			var dst []byte
			b.SetBytes(int64(len(tc.reply)))
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if n == 1024 {
					src.Reset(stream)
					rd.Reset(src)
					n = 0
				}
				var err error
				if dst, err = AppendReply(dst[:0], rd); err != nil {
					b.Fatal(err)
				}
				n++
			}
		})
	}
}
