package commands

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/keys"
)

// commandTable is Redis 7.0's command table (the keys package's recorded
// COMMAND reply).
func commandTable(t testing.TB) *keys.Table {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "keys", "testdata", "command-7.0.reply"))
	if err != nil {
		t.Fatal(err)
	}
	kt, err := keys.Load(raw)
	if err != nil {
		t.Fatal(err)
	}
	return kt
}

func split(s string) [][]byte {
	var args [][]byte
	for _, a := range strings.Split(s, " ") {
		if a == "''" {
			a = ""
		}
		args = append(args, []byte(a))
	}
	return args
}

// TestOwnKeyWritten: which requests write one of the proxy's own keys,
// by their declared keys and the keys' flags.
func TestOwnKeyWritten(t *testing.T) {
	const x = "fp:{x}"
	written := []string{
		"SET fp:{x} v", "set fp:{x} v PX 2000 GET", "DEL a fp:{x}", "UNLINK fp:{x}", "EXPIRE fp:{x} 1",
		"RENAME a fp:{x}", "RENAME fp:{x} a", "RENAMENX a fp:{x}", "COPY a fp:{x}", "RESTORE fp:{x} 0 p",
		"MOVE fp:{x} 2", "SMOVE s fp:{x} m", "LMOVE l fp:{x} LEFT LEFT", "BLMOVE l fp:{x} LEFT LEFT 0",
		"SORT l BY w STORE fp:{x}", "MIGRATE h 1 fp:{x} 0 10", "MIGRATE h 1 '' 0 10 COPY KEYS a fp:{x}",
		"EVAL s 1 fp:{x}", "EVALSHA s 2 a fp:{x}", "FCALL f 1 fp:{x}", "MSET a 1 fp:{x} 2",
		"HSET fp:{x} f v", "ZADD fp:{x} 1 m", "FENCE.EXEC r 5 DEL fp:{x}", "fence.exec r 5 SET fp:{x} v",
	}
	read := []string{
		"GET fp:{x}", "TYPE fp:{x}", "PTTL fp:{x}", "DUMP fp:{x}", "EXISTS fp:{x}", "COPY fp:{x} a",
		"SORT fp:{x}", "SORT_RO fp:{x}", "EVAL_RO s 1 fp:{x}", "FCALL_RO f 1 fp:{x}", "EVAL s 0 fp:{x}",
		"SET a fp:{x}", "SCAN 0 MATCH fp:*", "PUBLISH fp:{x} m", "LOCK.ACQUIRE fp:{x} o 10",
		"FENCE.EXEC fp:{x} 5 GET fp:{x}", "OBJECT ENCODING fp:{x}", "NOSUCH fp:{x}", "FLUSHALL",
		"GET fp:x", "GET fp", "XREADGROUP GROUP g c STREAMS fp:{x} >", // RO in Redis's key spec
	}
	h := &Handler{opts: Options{Keys: commandTable(t)}, ownPrefix: ownPrefix("fp:")}
	for _, s := range written {
		if got := h.ownKeyWritten(split(s)); string(got) != x {
			t.Errorf("%s: own key written = %q, want %q", s, got, x)
		}
	}
	for _, s := range read {
		if got := h.ownKeyWritten(split(s)); got != nil {
			t.Errorf("%s: own key written = %q, want none", s, got)
		}
	}

	// Without the backend's COMMAND: only the plain reads pass.
	h.opts.Keys = nil
	for _, s := range []string{"GET fp:{x}", "TYPE fp:{x}", "SET a fp:{x}"} {
		if got := h.ownKeyWritten(split(s)); got != nil && !strings.HasPrefix(s, "SET") {
			t.Errorf("no table: %s: own key written = %q, want none", s, got)
		}
	}
	if got := h.ownKeyWritten(split("DEL fp:{x}")); string(got) != x {
		t.Errorf("no table: DEL: own key written = %q, want %q", got, x)
	}
}

func TestPrintable(t *testing.T) {
	if got := printable([]byte("a\r\nb\xff")); got != "a??b?" {
		t.Errorf("printable = %q", got)
	}
	if got := printable([]byte(strings.Repeat("k", 200))); len(got) != 131 {
		t.Errorf("printable of 200 bytes has %d", len(got))
	}
}

// BenchmarkOwnKeyWritten: the check's cost on the hot path, a request
// that names no key of the proxy's (every request but the rare one).
func BenchmarkOwnKeyWritten(b *testing.B) {
	h := &Handler{opts: Options{Keys: commandTable(b)}, ownPrefix: ownPrefix("")}
	for _, s := range []string{"SET user:1000:profile some-value-of-forty-bytes-or-so-xxxxxxxx", "MSET a 1 b 2 c 3 d 4 e 5 f 6 g 7 h 8"} {
		args := split(s)
		b.Run(string(args[0]), func(b *testing.B) {
			for b.Loop() {
				if h.ownKeyWritten(args) != nil {
					b.Fatal("refused")
				}
			}
		})
	}
}
