package resp

import (
	"bufio"
	"bytes"
	"errors"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

// wellFormed are single replies of every type, each exactly one reply.
var wellFormed = []string{
	"+OK\r\n",
	"+\r\n",
	"-ERR wrong\r\n",
	":0\r\n",
	":-42\r\n",
	"$0\r\n\r\n",
	"$-1\r\n",
	"$6\r\na\r\nb\r\n\r\n",
	"*-1\r\n",
	"*0\r\n",
	"*2\r\n$1\r\na\r\n:1\r\n",
	"*2\r\n*1\r\n*0\r\n$-1\r\n",
	"_\r\n",
	",1.5\r\n",
	",inf\r\n",
	"#t\r\n",
	"(3492890328409238509324850943850943825024385\r\n",
	"!5\r\nerr x\r\n",
	"=9\r\ntxt:hello\r\n",
	"%1\r\n+k\r\n:1\r\n",
	"~2\r\n+a\r\n+b\r\n",
	">2\r\n+message\r\n+x\r\n",
	"|1\r\n+ttl\r\n:3\r\n+value\r\n",
	"*1\r\n|1\r\n+a\r\n+b\r\n%0\r\n",
	"+" + strings.Repeat("s", 70000) + "\r\n", // EVAL "return redis.status_reply(string.rep('s', 70000))"
	// A Lua table that holds itself, returned by EVAL: Redis nests the
	// reply until Lua's stack runs out, then ends it with an error.
	strings.Repeat("*1\r\n", 20000) + "-ERR reached lua stack limit\r\n",
	// Attributes and maps nested: each map's value is the next level, and
	// each attribute's reply comes after it.
	strings.Repeat("|1\r\n+a\r\n%1\r\n+k\r\n", 500) + "+v\r\n" + strings.Repeat("+r\r\n", 500),
}

// malformed are rejected with ErrBadReply, however they are read.
var malformed = []string{
	"\r\n",
	"x\r\n",
	"+OK\n",
	"$-2\r\n",
	"$01\r\nx\r\n",
	"$+1\r\nx\r\n",
	"$1\r\nxy\r\n",
	"$x\r\n",
	"$\r\n",
	"$-\r\n",
	"*x\r\n",
	"*-2\r\n",
	"%-1\r\n",
	"~-1\r\n",
	"!-1\r\n",
	"$?\r\n",
	"*?\r\n",
	"$1234567890123456789\r\n",
}

func readAll(r io.Reader) ([][]byte, error) {
	br := bufio.NewReaderSize(r, 16)
	var out [][]byte
	for {
		reply, err := AppendReply(nil, br)
		if err == io.EOF && len(reply) == 0 {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, reply)
	}
}

// chunkReader returns b in random-sized chunks of at most max bytes, the
// way a slow network does.
type chunkReader struct {
	b   []byte
	rng *rand.Rand
	max int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(1+r.rng.IntN(r.max), len(p), len(r.b))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

// TestAppendReplyWellFormed feeds every well-formed reply in one stream,
// whole, a byte at a time, halved and in random chunks, through a 16-byte
// buffer (so long lines are gathered), and Size and Elements frame each
// the same.
func TestAppendReplyWellFormed(t *testing.T) {
	var stream []byte
	for _, s := range wellFormed {
		stream = append(stream, s...)
	}
	readers := map[string]func() io.Reader{
		"whole":   func() io.Reader { return bytes.NewReader(stream) },
		"onebyte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(stream)) },
		"half":    func() io.Reader { return iotest.HalfReader(bytes.NewReader(stream)) },
		"random":  func() io.Reader { return &chunkReader{b: stream, rng: rand.New(rand.NewPCG(1, 2)), max: 7} },
	}
	for name, mk := range readers {
		got, err := readAll(mk())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != len(wellFormed) {
			t.Fatalf("%s: %d replies, want %d", name, len(got), len(wellFormed))
		}
		for i := range got {
			if string(got[i]) != wellFormed[i] {
				t.Fatalf("%s: reply %d = %.40q, want %.40q", name, i, got[i], wellFormed[i])
			}
		}
	}
	for _, s := range wellFormed {
		if n, ok := Size([]byte(s + "+next\r\n")); !ok || n != len(s) {
			t.Errorf("Size(%.40q) = %d, %v; want %d", s, n, ok, len(s))
		}
		if _, ok := Elements([]byte("*1\r\n" + s)); !ok {
			t.Errorf("Elements of an array of %.40q: not ok", s)
		}
	}
}

func TestAppendReplyMalformed(t *testing.T) {
	for _, s := range malformed {
		_, err := AppendReply(nil, bufio.NewReader(strings.NewReader(s)))
		if !errors.Is(err, ErrBadReply) {
			t.Errorf("%.40q: err %v, want ErrBadReply", s, err)
		}
		if _, ok := Size([]byte(s)); ok {
			t.Errorf("Size(%.40q) accepted it", s)
		}
	}
}

// TestAppendReplyTruncated: a stream that ends inside a reply is
// io.ErrUnexpectedEOF (or malformed, where the cut leaves a bad line); one
// that ends before a reply begins is io.EOF.
func TestAppendReplyTruncated(t *testing.T) {
	for _, s := range append(wellFormed, "*99999999\r\n") {
		step := max(1, len(s)/500) // every cut of short replies, some of the long line
		for cut := 1; cut < len(s); cut += step {
			_, err := AppendReply(nil, bufio.NewReader(strings.NewReader(s[:cut])))
			if err != io.ErrUnexpectedEOF && !errors.Is(err, ErrBadReply) {
				t.Errorf("%.40q cut at %d: err %v, want io.ErrUnexpectedEOF", s, cut, err)
			}
			if _, ok := Size([]byte(s[:cut])); ok && cut < len(s) {
				t.Errorf("Size(%.40q cut at %d) accepted it", s, cut)
			}
		}
	}
	if _, err := AppendReply(nil, bufio.NewReader(strings.NewReader(""))); err != io.EOF {
		t.Errorf("empty input: %v, want io.EOF", err)
	}
}

// TestAttributeIsPartOfItsReply: an attribute (RESP3 '|') is read together
// with the reply it annotates, so that the next request's reply is not
// taken for it. (The proxy's backend reader, before this package, read the
// attribute alone and the stream went out of step.)
func TestAttributeIsPartOfItsReply(t *testing.T) {
	rd := bufio.NewReader(strings.NewReader("|1\r\n+ttl\r\n:3\r\n+value\r\n:2\r\n"))
	first, err := AppendReply(nil, rd)
	if err != nil || string(first) != "|1\r\n+ttl\r\n:3\r\n+value\r\n" {
		t.Fatalf("first reply = %q, %v; want the attribute and its reply", first, err)
	}
	if second, err := AppendReply(nil, rd); err != nil || string(second) != ":2\r\n" {
		t.Fatalf("second reply = %q, %v; want :2", second, err)
	}
}

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
			n, ok := ParseInt(bytes.TrimSuffix(line[1:], []byte("\r")))
			if ok && n > 1<<20 {
				return true
			}
		}
	}
	return false
}

// FuzzAppendReply: what AppendReply appends is exactly the bytes it
// consumed, the same however the input is split, and Size agrees.
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
		size, sized := Size(in)
		framed, frameErr := Frame(in)
		if err != nil {
			if sized {
				t.Fatalf("AppendReply: %v, but Size found a reply of %d bytes", err, size)
			}
			// Frame tells bytes that are not RESP from the beginning of a
			// reply as AppendReply does: an event loop waits for more bytes
			// only where AppendReply would.
			bad := errors.Is(err, ErrBadReply)
			if framed != 0 || bad != errors.Is(frameErr, ErrBadReply) || (!bad && frameErr != nil) {
				t.Fatalf("AppendReply: %v; Frame: %d, %v", err, framed, frameErr)
			}
			return
		}
		n := consumed(in, src, rd)
		if got := out[len(prefix):]; !bytes.Equal(got, in[:n]) {
			t.Fatalf("appended %q, but consumed %q", got, in[:n])
		}
		if n == 0 {
			t.Fatalf("success without consuming anything")
		}
		if !sized || size != n {
			t.Fatalf("AppendReply read %d bytes, Size = %d, %v", n, size, sized)
		}
		if framed != n || frameErr != nil {
			t.Fatalf("AppendReply read %d bytes, Frame = %d, %v", n, framed, frameErr)
		}
		for cut := range n {
			if m, err := Frame(in[:cut]); m != 0 || err != nil {
				t.Fatalf("Frame of the reply's first %d bytes = %d, %v; want 0 (wait for more)", cut, m, err)
			}
		}

		// Split into small reads, the same reply must come out.
		h := fnv.New64a()
		h.Write(in)
		rd2 := bufio.NewReaderSize(&chunkReader{b: in, rng: rand.New(rand.NewPCG(h.Sum64(), 3)), max: 5}, 64)
		out2, err2 := AppendReply(nil, rd2)
		if err2 != nil || !bytes.Equal(out2, out[len(prefix):]) {
			t.Fatalf("split reads: %q, %v; whole: %q", out2, err2, out[len(prefix):])
		}
	})
}

func TestElements(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []string
		ok   bool
	}{
		{"*0\r\n", []string{}, true},
		{"*3\r\n$1\r\na\r\n$-1\r\n:5\r\n", []string{"$1\r\na\r\n", "$-1\r\n", ":5\r\n"}, true},
		{"*2\r\n*2\r\n$1\r\nx\r\n-ERR e\r\n_\r\n", []string{"*2\r\n$1\r\nx\r\n-ERR e\r\n", "_\r\n"}, true},
		{"*1\r\n%1\r\n+k\r\n+v\r\n", []string{"%1\r\n+k\r\n+v\r\n"}, true},
		{">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", []string{"$7\r\nmessage\r\n", "$1\r\nc\r\n", "$1\r\nm\r\n"}, true},
		{"*-1\r\n", nil, false},
		{"-ERR no\r\n", nil, false},
		{"*2\r\n$1\r\na\r\n", nil, false},  // short
		{"*1\r\n$5\r\nab\r\n", nil, false}, // bulk overruns
		{"*1\r\n$1\r\nab\r\n", nil, false}, // bulk not followed by CRLF
		{"*1\r\n:1\r\n:2\r\n", nil, false}, // trailing bytes
	} {
		got, ok := Elements([]byte(tc.raw))
		if ok != tc.ok || len(got) != len(tc.want) {
			t.Errorf("Elements(%q) = %q, %v; want %q, %v", tc.raw, got, ok, tc.want, tc.ok)
			continue
		}
		for i := range got {
			if !bytes.Equal(got[i], []byte(tc.want[i])) {
				t.Errorf("Elements(%q)[%d] = %q, want %q", tc.raw, i, got[i], tc.want[i])
			}
		}
	}
}

// FuzzElements: Elements never panics, and what it splits reassembles into
// the input behind the array's header.
func FuzzElements(f *testing.F) {
	for _, s := range []string{"*0\r\n", "*2\r\n$1\r\na\r\n:1\r\n", "*1\r\n*1\r\n%1\r\n+k\r\n_\r\n", ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", "*1\r\n$-1\r\n", "*3\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		elems, ok := Elements(raw)
		if !ok {
			return
		}
		var body []byte
		for _, e := range elems {
			body = append(body, e...)
		}
		if !bytes.HasSuffix(raw, body) || bytes.IndexByte(raw[:len(raw)-len(body)], '\n') != len(raw)-len(body)-1 {
			t.Fatalf("Elements(%q) = %q: not the input after one header line", raw, elems)
		}
	})
}

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

// zeros is an endless stream of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestAppendReplyTooLarge: a reply with a bulk or a line over MaxBulk is
// read to its end and dropped with ErrTooLarge, and the reply after it is
// read as it was sent: one request fails, the stream stays in step.
func TestAppendReplyTooLarge(t *testing.T) {
	defer func(was int) { bulkLimit = was }(bulkLimit)
	bulkLimit = 10000
	big := int64(bulkLimit + 1)
	cases := map[string]io.Reader{
		"bulk": io.MultiReader(strings.NewReader("$10001\r\n"), io.LimitReader(zeros{}, big),
			strings.NewReader("\r\n:1\r\n")),
		"bulk in an array": io.MultiReader(strings.NewReader("*3\r\n+before\r\n$10001\r\n"),
			io.LimitReader(zeros{}, big), strings.NewReader("\r\n*1\r\n$5\r\nafter\r\n:1\r\n")),
		"status line": io.MultiReader(strings.NewReader("*2\r\n+"), io.LimitReader(zeros{}, big),
			strings.NewReader("\r\n$1\r\nx\r\n:1\r\n")),
		"status line in the buffer": io.MultiReader(strings.NewReader("-"), io.LimitReader(zeros{}, big),
			strings.NewReader("\r\n:1\r\n")),
	}
	if _, err := AppendReply(nil, bufio.NewReader(strings.NewReader("$536870913\r\n"))); err != io.ErrUnexpectedEOF {
		t.Errorf("a bulk over MaxBulk, cut: %v, want io.ErrUnexpectedEOF", err)
	}
	for name, r := range cases {
		size := 4096
		if strings.HasSuffix(name, "in the buffer") {
			size = 2 * bulkLimit
		}
		rd := bufio.NewReaderSize(r, size)
		out, err := AppendReply([]byte("kept"), rd)
		if !errors.Is(err, ErrTooLarge) || string(out) != "kept" {
			t.Errorf("%s: %.40q, %v; want dst unchanged and ErrTooLarge", name, out, err)
			continue
		}
		if next, err := AppendReply(nil, rd); err != nil || string(next) != ":1\r\n" {
			t.Errorf("%s: the next reply = %q, %v; want :1", name, next, err)
		}
	}
}

// TestArrayHeader: the count and the bytes after the header of an array
// reply; anything else, or a null array, is not one.
func TestArrayHeader(t *testing.T) {
	for _, c := range []struct {
		in   string
		rest string
		n    int
		ok   bool
	}{
		{"*2\r\n:1\r\n$1\r\na\r\n", ":1\r\n$1\r\na\r\n", 2, true},
		{"*0\r\n", "", 0, true},
		{"~1\r\n+x\r\n", "+x\r\n", 1, true},
		{"*-1\r\n", "", 0, false},
		{"-ERR no\r\n", "", 0, false},
		{"*2", "", 0, false},
		{"", "", 0, false},
	} {
		rest, n, ok := ArrayHeader([]byte(c.in))
		if ok != c.ok || n != c.n || string(rest) != c.rest {
			t.Errorf("ArrayHeader(%q) = %q, %d, %v; want %q, %d, %v", c.in, rest, n, ok, c.rest, c.n, c.ok)
		}
	}
}
