package backend

import (
	"bufio"
	"bytes"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// consumed is how many bytes of in the reader has handed out.
func consumed(in []byte, src *bytes.Reader, rd *bufio.Reader) int {
	return len(in) - src.Len() - rd.Buffered()
}

// claimsHuge reports whether in has a length header over 1 MB: AppendReply
// allocates a bulk before reading it (a backend is trusted to send what it
// claims), which would make the fuzzer allocate up to 512 MB per input.
func claimsHuge(in []byte) bool {
	for _, line := range bytes.Split(in, []byte("\n")) {
		if len(line) > 1 && (line[0] == '$' || line[0] == '!' || line[0] == '=') {
			n, ok := atoi(bytes.TrimSuffix(line[1:], []byte("\r")))
			if ok && n > 1<<20 {
				return true
			}
		}
	}
	return false
}

type smallReads struct {
	b   []byte
	rng *rand.Rand
}

func (r *smallReads) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.b), 1+r.rng.IntN(5))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

func FuzzAppendReply(f *testing.F) {
	for _, s := range []string{
		"+OK\r\n", "-ERR bad\r\n", ":42\r\n", "$5\r\nhello\r\n", "$-1\r\n", "*-1\r\n", "*0\r\n",
		"*3\r\n:1\r\n$1\r\na\r\n*1\r\n-ERR inner\r\n",
		"%1\r\n+k\r\n:1\r\n", "~2\r\n:1\r\n:2\r\n", ">2\r\n+message\r\n$1\r\nx\r\n",
		"|1\r\n+ttl\r\n:3\r\n+OK\r\n", "_\r\n", ",3.14\r\n", "#t\r\n", "(12345678901234567890\r\n",
		"!5\r\nERROR\r\n", "=7\r\ntxt:abc\r\n",
		"$5\r\nhe\r\n\r\n", "*2\r\n:1\r\n", "+OK\n", "\r\n", "$abc\r\n", "*" + strings.Repeat("*1\r\n", 70),
		"$3\r\nabcde", "+" + strings.Repeat("x", 100) + "\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if claimsHuge(in) {
			t.Skip()
		}
		src := bytes.NewReader(in)
		rd := bufio.NewReaderSize(src, 64)
		prefix := []byte("prefix:")
		out, err := AppendReply(bytes.Clone(prefix), rd)
		if !bytes.HasPrefix(out, prefix) {
			t.Fatalf("dst's earlier bytes were changed: %q", out)
		}
		if err != nil {
			return
		}
		n := consumed(in, src, rd)
		if got := out[len(prefix):]; !bytes.Equal(got, in[:n]) {
			t.Fatalf("appended %q, but consumed %q", got, in[:n])
		}
		if n == 0 {
			t.Fatalf("success without consuming anything")
		}

		// Split into small reads, the same reply must come out.
		h := fnv.New64a()
		h.Write(in)
		rd2 := bufio.NewReaderSize(&smallReads{b: in, rng: rand.New(rand.NewPCG(h.Sum64(), 3))}, 64)
		out2, err2 := AppendReply(nil, rd2)
		if err2 != nil || !bytes.Equal(out2, out[len(prefix):]) {
			t.Fatalf("split reads: %q, %v; whole: %q", out2, err2, out[len(prefix):])
		}
	})
}

// TestAppendReplyLongLine: a status or error line may be longer than the
// reader's buffer (EVAL "return redis.status_reply(string.rep('x', 70000))"
// makes Redis send one of 70 KB); it is still one well-formed reply.
func TestAppendReplyLongLine(t *testing.T) {
	for _, in := range []string{
		"+" + strings.Repeat("s", 200) + "\r\n",
		"-ERR " + strings.Repeat("e", 200) + "\r\n",
		"*2\r\n:1\r\n+" + strings.Repeat("s", 200) + "\r\n",
	} {
		rd := bufio.NewReaderSize(strings.NewReader(in), 64)
		out, err := AppendReply(nil, rd)
		if err != nil || string(out) != in {
			t.Errorf("%.30q… (%d bytes) through a 64-byte reader: %v, got %d bytes", in, len(in), err, len(out))
		}
	}
}

func TestAppendReplyRejects(t *testing.T) {
	for _, in := range []string{
		"\r\n", "+OK\n", "x\r\n", "$abc\r\n", "$\r\n", "*x\r\n", "$-\r\n",
		"$536870913\r\n", "$1234567890123456789\r\n",
		strings.Repeat("*1\r\n", 100) + ":1\r\n", // deeper than maxReplyDepth
	} {
		_, err := AppendReply(nil, bufio.NewReader(strings.NewReader(in)))
		if err == nil {
			t.Errorf("%q: accepted", in)
		}
	}
}
