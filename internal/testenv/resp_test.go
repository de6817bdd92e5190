package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

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
}

var malformed = []string{
	"\r\n",
	"x\r\n",
	"+OK\n",
	"$-2\r\n",
	"$01\r\nx\r\n",
	"$+1\r\nx\r\n",
	"$1\r\nxy\r\n",
	"$x\r\n",
	"*-2\r\n",
	"%-1\r\n",
	"~-1\r\n",
	"!-1\r\n",
	"$?\r\n",
	"*?\r\n",
	"$999999999999\r\n",
	"*99999999\r\n",
	strings.Repeat("*1\r\n", maxDepth+2) + ":1\r\n",
	"+" + strings.Repeat("x", maxLine) + "\r\n",
}

func readAll(r io.Reader) ([][]byte, error) {
	br := bufio.NewReaderSize(r, 16)
	var out [][]byte
	for {
		reply, err := readReply(br, nil, 0)
		if err == io.EOF && len(reply) == 0 {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, reply)
	}
}

func TestReadReplyWellFormed(t *testing.T) {
	var stream []byte
	for _, s := range wellFormed {
		stream = append(stream, s...)
	}
	readers := map[string]func() io.Reader{
		"whole":   func() io.Reader { return bytes.NewReader(stream) },
		"onebyte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(stream)) },
		"half":    func() io.Reader { return iotest.HalfReader(bytes.NewReader(stream)) },
		"random":  func() io.Reader { return &chunkReader{b: stream, rnd: rand.New(rand.NewPCG(1, 2))} },
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
				t.Fatalf("%s: reply %d = %q, want %q", name, i, got[i], wellFormed[i])
			}
		}
	}
}

func TestReadReplyMalformed(t *testing.T) {
	for _, s := range malformed {
		_, err := readReply(bufio.NewReader(strings.NewReader(s)), nil, 0)
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%.40q: err %v, want ErrProtocol", s, err)
		}
	}
}

func TestReadReplyTruncated(t *testing.T) {
	for _, s := range wellFormed {
		for cut := 1; cut < len(s); cut++ {
			_, err := readReply(bufio.NewReader(strings.NewReader(s[:cut])), nil, 0)
			if err != io.ErrUnexpectedEOF && !errors.Is(err, ErrProtocol) {
				t.Errorf("%q cut at %d: err %v, want io.ErrUnexpectedEOF", s, cut, err)
			}
		}
	}
	if _, err := readReply(bufio.NewReader(strings.NewReader("")), nil, 0); err != io.EOF {
		t.Errorf("empty input: %v, want io.EOF", err)
	}
}

func TestHelpers(t *testing.T) {
	for _, tc := range []struct {
		in string
		n  int64
		ok bool
	}{{":5\r\n", 5, true}, {":-1\r\n", -1, true}, {":x\r\n", 0, false}, {"$1\r\n5\r\n", 0, false}, {":5", 0, false}} {
		if n, ok := ParseInt([]byte(tc.in)); n != tc.n || ok != tc.ok {
			t.Errorf("ParseInt(%q) = %d, %v", tc.in, n, ok)
		}
	}
	for in, want := range map[string]bool{"$-1\r\n": true, "*-1\r\n": true, "_\r\n": true, "$0\r\n\r\n": false, "*0\r\n": false, ":0\r\n": false} {
		if IsNull([]byte(in)) != want {
			t.Errorf("IsNull(%q) != %v", in, want)
		}
	}
	if b, ok := ParseBulk([]byte("$3\r\na\nb\r\n")); !ok || string(b) != "a\nb" {
		t.Errorf("ParseBulk = %q, %v", b, ok)
	}
	for _, in := range []string{"$-1\r\n", "+OK\r\n", "$3\r\nab\r\n", "$1\r\na\r\n:1\r\n"} {
		if _, ok := ParseBulk([]byte(in)); ok {
			t.Errorf("ParseBulk(%q) ok", in)
		}
	}
	elems, ok := SplitArray([]byte("*4\r\n$5\r\nowner\r\n$-1\r\n$5\r\ntoken\r\n*1\r\n:7\r\n"))
	if !ok || len(elems) != 4 || string(elems[1]) != "$-1\r\n" || string(elems[3]) != "*1\r\n:7\r\n" {
		t.Errorf("SplitArray = %q, %v", elems, ok)
	}
	for _, in := range []string{"*-1\r\n", ":1\r\n", "*2\r\n:1\r\n"} {
		if _, ok := SplitArray([]byte(in)); ok {
			t.Errorf("SplitArray(%q) ok", in)
		}
	}
	if got := string(AppendCommand(nil, "SET", "k", "")); got != "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n" {
		t.Errorf("AppendCommand = %q", got)
	}
}

// chunkReader returns b in random-sized chunks.
type chunkReader struct {
	b   []byte
	rnd *rand.Rand
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(1+r.rnd.IntN(7), len(p), len(r.b))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}
