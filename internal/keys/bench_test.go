package keys

import (
	"strings"
	"testing"
)

// BenchmarkKeys is the router's per-request work: look the command up by the
// name as sent and find its keys.
func BenchmarkKeys(b *testing.B) {
	tab := fileTable(b)
	for _, bc := range []struct{ name, line string }{
		{"GET", "GET user:1000"},
		{"MSET10", "MSET" + strings.Repeat(" {t}k v", 10)},
		{"EVAL2", "EVAL return 2 {t}a {t}b arg1 arg2"},
		{"XREAD2", "XREAD COUNT 10 BLOCK 0 STREAMS {t}a {t}b 0 0"},
		{"OBJECT", "OBJECT ENCODING user:1000"},
	} {
		args := request{line: bc.line}.args()
		dst := make([]int, 0, 16)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				dst = tab.LookupBytes(args[0]).Keys(dst[:0], args)
			}
		})
	}
}
