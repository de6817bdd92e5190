package protocol

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func readOne(t *testing.T, in string, limits Limits) ([][]byte, error) {
	t.Helper()
	r := newReaderSize(strings.NewReader(in), limits, 16)
	return r.ReadCommand()
}

// TestShouldFail lists requests that must be refused with Redis's own
// protocol error text (after "ERR ").
func TestShouldFail(t *testing.T) {
	const nulInline = "NUL byte in inline request (send binary arguments in a multibulk request)"
	lim := Limits{MaxBulkLen: 512 << 20, MaxArgs: 1 << 20, MaxInlineLen: 64 << 10}
	long := strings.Repeat("x", 70<<10)
	digits := strings.Repeat("1", 70<<10)
	for _, tc := range []struct{ in, err string }{
		{"*abc\r\n", "invalid multibulk length"},
		{"*\r\n", "invalid multibulk length"},
		{"*+1\r\n", "invalid multibulk length"},
		{"*01\r\n", "invalid multibulk length"},
		{"*-0\r\n", "invalid multibulk length"},
		{"* 1\r\n", "invalid multibulk length"},
		{"*1 \r\n", "invalid multibulk length"},
		{"*99999999999999999999\r\n", "invalid multibulk length"},
		{"*9223372036854775808\r\n", "invalid multibulk length"},
		{"*2000000\r\n", "invalid multibulk length"},
		{"*1048577\r\n", "invalid multibulk length"},
		{"*1\r\n$-5\r\n", "invalid bulk length"},
		{"*1\r\n$-1\r\n", "invalid bulk length"},
		{"*1\r\n$\r\n", "invalid bulk length"},
		{"*1\r\n$abc\r\n", "invalid bulk length"},
		{"*1\r\n$04\r\nPING\r\n", "invalid bulk length"},
		{"*1\r\n$+4\r\nPING\r\n", "invalid bulk length"},
		{"*1\r\n$600000000\r\n", "invalid bulk length"},
		{"*1\r\n$536870913\r\n", "invalid bulk length"},
		{"*1\r\n$99999999999999999999\r\n", "invalid bulk length"},
		{"*1\r\n:5\r\n", "expected '$', got ':'"},
		{"*1\r\nPING\r\n", "expected '$', got 'P'"},
		{"*2\r\n$3\r\nGET\r\n*1\r\n", "expected '$', got '*'"},
		{long, "too big inline request"},
		{long + "\r\n", "too big inline request"},
		{"*" + digits, "too big mbulk count string"},
		{"*1\r\n$" + digits, "too big bulk count string"},
		{"SET \"k v\r\n", "unbalanced quotes in request"},
		{"SET 'k v\r\n", "unbalanced quotes in request"},
		{"SET \"k\"v x\r\n", "unbalanced quotes in request"},
		{"SET 'k'v x\r\n", "unbalanced quotes in request"},
		{"SET \"k\\\"\r\n", "unbalanced quotes in request"},
		{"SET 'k\\'\r\n", "unbalanced quotes in request"},
		// A NUL in an inline request: found by FuzzReader, where
		// "P\x00\x00\n" made the splitter append empty arguments until the
		// process ran out of memory.
		{"P\x00\x00\xff\xff\n", nulInline},
		{"GET a\x00\r\n", nulInline},
		{"SET k a\x00b\r\n", nulInline},
		{"\x00\r\n", nulInline},
		{"SET \"k\x00\" v\r\n", nulInline},
		{"SET 'k' \x00\r\n", nulInline},
	} {
		args, err := readOne(t, tc.in, lim)
		var perr *ProtocolError
		if !errors.As(err, &perr) {
			t.Errorf("%.40q: got %q, %v; want protocol error %q", tc.in, args, err, tc.err)
			continue
		}
		if want := "Protocol error: " + tc.err; perr.Error() != want {
			t.Errorf("%.40q: error %q, want %q", tc.in, perr.Error(), want)
		}
	}
}

// TestExpectedDollarByte: Redis puts the offending byte itself in the error
// (addReplyErrorFormat maps CR and LF to spaces); the text must be the same
// bytes, not a Go escape or a UTF-8 re-encoding.
func TestExpectedDollarByte(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"*1\r\n\r\n", "Protocol error: expected '$', got ' '"},
		{"*1\r\n\xff\r\n", "Protocol error: expected '$', got '\xff'"},
		{"*1\r\n\x80x\r\n", "Protocol error: expected '$', got '\x80'"},
	} {
		_, err := readOne(t, tc.in, DefaultLimits)
		var perr *ProtocolError
		if !errors.As(err, &perr) || perr.Error() != tc.want {
			t.Errorf("%q: error %q, want %q", tc.in, err, tc.want)
		}
	}
}

// TestShouldWait lists incomplete requests: no command and no protocol
// error, only the end of the input.
func TestShouldWait(t *testing.T) {
	for _, in := range []string{
		"*", "*1", "*1\r", "*1\r\n", "*1\r\n$", "*1\r\n$4\r\n", "*1\r\n$4\r\nPI", "*1\r\n$4\r\nPING",
		"*1\r\n$4\r\nPING\r", "PING", "SET \"a b\"", "*1\r\n$500000000\r\nxx",
	} {
		args, err := readOne(t, in, DefaultLimits)
		if err == nil || !(err == io.EOF || err == io.ErrUnexpectedEOF) {
			t.Errorf("%q: got %q, %v; want EOF", in, args, err)
		}
	}
}

// TestShouldParse covers well-formed requests, empty ones skipped.
func TestShouldParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"*1\r\n$4\r\nPING\r\n", []string{"PING"}},
		{"*0\r\n*-1\r\n*-7\r\n*1\r\n$4\r\nPING\r\n", []string{"PING"}},
		{"\r\n\n   \r\nPING\r\n", []string{"PING"}},
		{"*2\r\n$3\r\nGET\r\n$0\r\n\r\n", []string{"GET", ""}},
		{"*1\r\n$4\r\nPINGxy", []string{"PING"}}, // Redis does not check the CRLF after a bulk
		{"*1\r\n$2\r\n\r\n\r\n", []string{"\r\n"}},
		{"PING\n", []string{"PING"}},
		{"*1048576\r\n", nil}, // at the limit: accepted, waits for arguments
	} {
		args, err := readOne(t, tc.in, DefaultLimits)
		if tc.want == nil {
			if err != io.ErrUnexpectedEOF && err != io.EOF {
				t.Errorf("%q: %q, %v; want it to wait", tc.in, args, err)
			}
			continue
		}
		if err != nil || !equalArgs(args, tc.want) {
			t.Errorf("%q: %q, %v; want %q", tc.in, args, err, tc.want)
		}
	}
}

func equalArgs(got [][]byte, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if string(got[i]) != want[i] {
			return false
		}
	}
	return true
}

// TestSplitArgs checks inline splitting against what Redis 7's
// sdssplitargs does with the same line (each expectation was checked
// against redis-server 7.0 with EVAL "return ARGV").
func TestSplitArgs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // nil: unbalanced quotes
	}{
		{`a b c`, []string{"a", "b", "c"}},
		{"  a \t b  ", []string{"a", "b"}},
		{`"a b" 'c d'`, []string{"a b", "c d"}},
		{`"\x41\x6a\x4A"`, []string{"AjJ"}},
		{`"\x4g"`, []string{"x4g"}},
		{`"\xZZ"`, []string{"xZZ"}},
		{`"\x4"`, []string{"x4"}},
		{`"\n\r\t\b\a\\\"\q"`, []string{"\n\r\t\b\a\\\"q"}},
		{`'it\'s'`, []string{"it's"}},
		{`'a\b'`, []string{`a\b`}},
		{`'\x41'`, []string{`\x41`}},
		{`"" ''`, []string{"", ""}},
		{`a"b c" d`, []string{"ab c", "d"}}, // a quote mid-argument opens a quoted part
		{`a"b"c`, nil},
		{`a'b`, nil},
		{`a\x41`, []string{`a\x41`}},
		{`"a"b`, nil},
		{`'a'b`, nil},
		{`"unterminated`, nil},
		{`'unterminated`, nil},
		{`"ends with backslash\`, nil},
		{`'x\'`, nil},
		{"\"q\"\va", []string{"q", "a"}}, // \v counts as space after a closing quote
		{"\v\f a", []string{"a"}},        // and as leading space
		// sdssplitargs ends an unquoted argument only at ' ', \n, \r, \t
		// or NUL (a NUL is refused before splitting: see TestShouldFail);
		// \v and \f stay inside it.
		{"a\vb c\fd", []string{"a\vb", "c\fd"}},
		{"ax\v", []string{"ax\v"}},
	} {
		args, err := splitArgs([]byte(tc.in), nil)
		if tc.want == nil {
			if err != errUnbalancedQuotes {
				t.Errorf("%q: %q, %v; want unbalanced quotes", tc.in, args, err)
			}
			continue
		}
		if err != nil || !equalArgs(args, tc.want) {
			t.Errorf("%q: %q, %v; want %q", tc.in, args, err, tc.want)
		}
	}
}

// TestReaderSplitInput feeds one stream whole, halved and in every chunk
// size up to 9: the commands out must not depend on how the bytes arrive.
func TestReaderSplitInput(t *testing.T) {
	in := []byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhe\r\no\r\nPING\r\n\r\nECHO \"a\\x41 b\" 'c'\r\n*0\r\n" +
		"*2\r\n$4\r\nECHO\r\n$40\r\n" + strings.Repeat("z", 40) + "\r\n" + "SET " + strings.Repeat("y", 50) + " v\r\n")
	want, err := parseAll(bytes.NewReader(in), DefaultLimits, 4096)
	if err != io.EOF || len(want) != 5 {
		t.Fatalf("whole: %d commands, %v", len(want), err)
	}
	for size := 1; size <= 9; size++ {
		got, err := parseAll(&fixedChunks{b: in, n: size}, DefaultLimits, 16)
		if err != io.EOF || len(got) != len(want) {
			t.Fatalf("chunks of %d: %d commands, %v", size, len(got), err)
		}
		for i := range want {
			if !bytes.Equal(bytes.Join(got[i], []byte{0}), bytes.Join(want[i], []byte{0})) {
				t.Errorf("chunks of %d: command %d is %q, want %q", size, i, got[i], want[i])
			}
		}
	}
	half := len(in) / 2
	got, err := parseAll(io.MultiReader(bytes.NewReader(in[:half]), bytes.NewReader(in[half:])), DefaultLimits, 16)
	if err != io.EOF || len(got) != len(want) {
		t.Fatalf("halved: %d commands, %v", len(got), err)
	}
}

type fixedChunks struct {
	b []byte
	n int
}

func (r *fixedChunks) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.b), r.n)
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

// TestArgumentsSurviveUntilNextRead: arguments point into the Reader's
// storage; a pipelined stream must still give each command its own bytes.
func TestArgumentsSurviveUntilNextRead(t *testing.T) {
	r := newReaderSize(strings.NewReader("*2\r\n$1\r\na\r\n$1\r\nb\r\nX Y\r\n"), DefaultLimits, 16)
	first, err := r.ReadCommand()
	if err != nil || string(first[0]) != "a" || string(first[1]) != "b" {
		t.Fatalf("first: %q %v", first, err)
	}
	second, err := r.ReadCommand()
	if err != nil || string(second[0]) != "X" || string(second[1]) != "Y" {
		t.Fatalf("second: %q %v", second, err)
	}
}

// TestReaderBufferGrowsAndShrinks: a request longer than the read buffer
// grows it to about the request's size (not doubling past it), and once
// the request is framed and the client has sent nothing more, the buffer
// goes back to readBufferSize, so an idle client stays small.
func TestReaderBufferGrowsAndShrinks(t *testing.T) {
	req := multibulk("SET", "k", strings.Repeat("v", 2<<20))
	src := &loopSource{b: []byte(req + multibulk("GET", "k"))}
	r := NewReader(src, DefaultLimits)
	args, err := r.ReadCommand()
	if err != nil || len(args) != 3 || len(args[2]) != 2<<20 {
		t.Fatalf("the 2 MB SET: %d args, %v", len(args), err)
	}
	if n := len(r.buf); n < len(req) || n > len(req)+2*readBufferSize {
		t.Errorf("the buffer grew to %d bytes for a request of %d", n, len(req))
	}
	if args, err := r.ReadCommand(); err != nil || string(args[0]) != "GET" {
		t.Fatalf("the GET after it: %q, %v", args, err)
	}
	if err := r.Fill(); err != errNothingYet {
		t.Fatalf("read of nothing: %v", err)
	}
	if len(r.buf) != readBufferSize {
		t.Errorf("drained, the buffer is %d bytes, want %d", len(r.buf), readBufferSize)
	}
}

// chunks is a source that returns one chunk per Read.
type chunks [][]byte

func (c *chunks) Read(b []byte) (int, error) {
	if len(*c) == 0 {
		return 0, io.EOF
	}
	n := copy(b, (*c)[0])
	(*c)[0] = (*c)[0][n:]
	if len((*c)[0]) == 0 {
		*c = (*c)[1:]
	}
	return n, nil
}

// TestArgsOutliveTheNextRead: a request's arguments stay as they were
// while the Reader reads what the client sent next, until the next
// request is framed: a lock worker or a backend's reader may still use
// them (a data race, and a renewal of the wrong lock, when they pointed
// into the read buffer, which the next read overwrote).
func TestArgsOutliveTheNextRead(t *testing.T) {
	src := chunks{[]byte("*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"), []byte("*2\r\n$3\r\nSET\r\n$3\r\nXYZ")}
	r := NewReader(&src, DefaultLimits)
	args, err := r.ReadCommand()
	if err != nil || len(args) != 2 {
		t.Fatalf("first request: %q, %v", args, err)
	}
	if err := r.Fill(); err != nil { // the next request's first bytes
		t.Fatal(err)
	}
	if string(args[0]) != "GET" || string(args[1]) != "key" {
		t.Fatalf("the first request's arguments became %q after the next read", args)
	}
}
