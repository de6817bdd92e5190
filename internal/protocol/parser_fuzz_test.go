package protocol

import (
	"bytes"
	"errors"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// fuzzLimits are small so the fuzzer reaches every limit quickly.
var fuzzLimits = Limits{MaxBulkLen: 1 << 10, MaxArgs: 16, MaxInlineLen: 64}

// chunkReader returns at most a few bytes per Read, chosen by rng, the way a
// slow network does.
type chunkReader struct {
	b   []byte
	rng *rand.Rand
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.b), 1+r.rng.IntN(7))
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

// parseAll reads every command from rd until an error; commands are copied.
// It returns the commands and the final error. The loop is bounded by the
// input: every command consumes at least one byte.
func parseAll(rd io.Reader, limits Limits, bufSize int) ([][][]byte, error) {
	r := newReaderSize(rd, limits, bufSize)
	var cmds [][][]byte
	for {
		args, err := r.ReadCommand()
		if err != nil {
			return cmds, err
		}
		cp := make([][]byte, len(args))
		for i, a := range args {
			cp[i] = bytes.Clone(a)
		}
		cmds = append(cmds, cp)
	}
}

// sameOutcome compares two final errors: the same protocol error text, or
// both not protocol errors.
func sameOutcome(a, b error) bool {
	var pa, pb *ProtocolError
	ea, eb := errors.As(a, &pa), errors.As(b, &pb)
	if ea != eb {
		return false
	}
	return !ea || pa.Error() == pb.Error()
}

func encode(cmds [][][]byte) []byte {
	var b []byte
	for _, args := range cmds {
		b = append(b, '*')
		b = strconv.AppendInt(b, int64(len(args)), 10)
		b = append(b, "\r\n"...)
		for _, a := range args {
			b = append(b, '$')
			b = strconv.AppendInt(b, int64(len(a)), 10)
			b = append(b, "\r\n"...)
			b = append(b, a...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
		"PING\r\nSET a \"b c\" 'd e'\r\n\r\n",
		"*0\r\n*-1\r\n*1\r\n$0\r\n\r\n",
		"*abc\r\n",
		"*1\r\n$-5\r\n",
		"*1\r\n:5\r\n",
		"*1\r\n$1025\r\n",
		"*17\r\n",
		"SET \"unterminated\r\n",
		"ECHO \"\\x41\\x4g\\n\" 'it\\'s'\r\n",
		strings.Repeat("a", 70) + "\r\n",
		"*" + strings.Repeat("1", 70),
		"*1\r\n$4\r\nPINGxy*1\r\n$4\r\nPING\r\n",
		"*2\r\n$3\r\nGET\r\n",
		"\n\n*1\n$4\nPING\n",
		"P\x00\x00\xff\xff\n", // once looped forever appending empty arguments
		"*1\r\n$3\r\na\x00b\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		whole, werr := parseAll(bytes.NewReader(in), fuzzLimits, 4096)

		h := fnv.New64a()
		h.Write(in)
		seed := h.Sum64()
		rd := &chunkReader{b: in, rng: rand.New(rand.NewPCG(seed, 1))}
		// A small buffer to begin with, so long lines grow it.
		split, serr := parseAll(rd, fuzzLimits, 16)

		if !sameOutcome(werr, serr) {
			t.Fatalf("whole ended with %v, split with %v", werr, serr)
		}
		if len(whole) != len(split) {
			t.Fatalf("whole gave %d commands, split %d", len(whole), len(split))
		}
		for i := range whole {
			if len(whole[i]) != len(split[i]) {
				t.Fatalf("command %d: whole %q, split %q", i, whole[i], split[i])
			}
			for j := range whole[i] {
				if !bytes.Equal(whole[i][j], split[i][j]) {
					t.Fatalf("command %d arg %d: whole %q, split %q", i, j, whole[i][j], split[i][j])
				}
			}
		}

		for i, args := range whole {
			if len(args) == 0 {
				t.Fatalf("command %d is empty; empty requests must be skipped", i)
			}
			// A multibulk request has at most MaxArgs; an inline one at most
			// one per two bytes of its line.
			if most := max(fuzzLimits.MaxArgs, fuzzLimits.MaxInlineLen/2+1); len(args) > most {
				t.Fatalf("command %d has %d args, limit %d", i, len(args), most)
			}
			total := 0
			for _, a := range args {
				if int64(len(a)) > fuzzLimits.MaxBulkLen {
					t.Fatalf("command %d: argument of %d bytes, limit %d", i, len(a), fuzzLimits.MaxBulkLen)
				}
				total += len(a)
			}
			if total > len(in) {
				t.Fatalf("command %d: %d argument bytes from %d input bytes", i, total, len(in))
			}
		}

		// What was parsed, sent again as multibulk, parses to the same.
		// (Multibulk has no inline line limit, but arguments can be no
		// longer than the limits let them be.)
		again, aerr := parseAll(bytes.NewReader(encode(whole)), Limits{MaxBulkLen: 1 << 20, MaxArgs: 1 << 20, MaxInlineLen: 64}, 4096)
		if aerr != io.EOF || len(again) != len(whole) {
			t.Fatalf("re-encoded commands: %d back of %d, err %v", len(again), len(whole), aerr)
		}
		for i := range whole {
			for j := range whole[i] {
				if !bytes.Equal(whole[i][j], again[i][j]) {
					t.Fatalf("re-encoded command %d arg %d: %q became %q", i, j, whole[i][j], again[i][j])
				}
			}
		}
	})
}

// newReaderSize is NewReader whose buffer starts at size bytes (a small
// one makes the fuzzers grow it).
func newReaderSize(src io.Reader, limits Limits, size int) *Reader {
	r := NewReader(src, limits)
	r.buf = make([]byte, size)
	return r
}

// errNothingYet is what loopSource returns once its bytes are read: the
// event loop's socket with nothing more to read now.
var errNothingYet = errors.New("nothing more yet")

// loopSource gives its bytes in reads of at most most bytes (all at once
// when most is 0), then errNothingYet, as a non-blocking socket does.
type loopSource struct {
	b    []byte
	rng  *rand.Rand
	most int
}

func (s *loopSource) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, errNothingYet
	}
	n := min(len(p), len(s.b))
	if s.most > 0 {
		n = min(n, 1+s.rng.IntN(s.most))
	}
	copy(p, s.b[:n])
	s.b = s.b[n:]
	return n, nil
}

// frameAll frames src as the event loop does (loop.go's serveLoop): Frame,
// and when it wants more, one read, until the source has nothing more or
// Frame fails. It returns the requests (copied), the bytes left
// buffered, and Frame's error.
func frameAll(r *Reader) ([][][]byte, []byte, error) {
	var cmds [][][]byte
	for {
		args, err := r.Frame()
		if err != nil {
			return cmds, nil, err
		}
		if args == nil {
			if r.Fill() != nil {
				return cmds, bytes.Clone(r.buf[r.r:r.w]), nil
			}
			continue
		}
		cp := make([][]byte, len(args))
		for i, a := range args {
			cp[i] = bytes.Clone(a)
		}
		cmds = append(cmds, cp)
	}
}

// sameError compares Frame's errors: the same protocol error text, both
// the query buffer limit, or both none.
func sameError(a, b error) bool {
	var pa, pb *ProtocolError
	if errors.As(a, &pa) && errors.As(b, &pb) {
		return pa.Error() == pb.Error()
	}
	return a == b
}

func sameCommands(t *testing.T, what string, a, b [][][]byte) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d requests against %d: %q, %q", what, len(a), len(b), a, b)
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			t.Fatalf("%s: request %d: %q against %q", what, i, a[i], b[i])
		}
		for j := range a[i] {
			if !bytes.Equal(a[i][j], b[i][j]) {
				t.Fatalf("%s: request %d arg %d: %q against %q", what, i, j, a[i][j], b[i][j])
			}
		}
	}
}

// FuzzFramerChunks checks the one request framer (Reader.Frame): the
// first `have` bytes of the input, fed to it in reads of arbitrary sizes,
// as the event loop feeds it, give the same requests and the same error
// as fed in one read, and as the goroutine's ReadCommand gives; what is
// left when the bytes run out is the beginning of a request (the loop
// waits for the rest); and well-formed requests cut anywhere are framed
// whole up to the cut, never refused. small starts the buffer at 16
// bytes, so that requests grow it.
func FuzzFramerChunks(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
		"*2\r\n$3\r\nGET\r\n$1\r\nk",
		"*1\r\n$4\r\nPINGxy*1\r\n$4\r\nPING\r\n", // Redis does not check a bulk's CRLF either
		"PING\r\nSET a \"b c\" 'd e'\r\n\r\n",
		"*0\r\n*1\r\n$4\r\nPING\r\n",
		"*-1\r\n",
		"*1\n$4\r\nPING\r\n",
		"*11\n$4\r\nPING\r\n", // a header ended by a bare LF
		"*1\r\n$4\nPING\r\n",
		"*1\r\n:4\r\nPING\r\n",
		"*17\r\n",
		"*1\r\n$1025\r\n",
		"*1\r\n$-1\r\n",
		"*2\r\n$200\r\n" + strings.Repeat("a", 200) + "\r\n$100\r\n" + strings.Repeat("b", 100) + "\r\n",
		"*" + strings.Repeat("1", 70) + "\r\n",
		"*1\r\n$" + strings.Repeat("0", 70) + "4\r\nPING\r\n",
		"*abc\r\n",
		"*\r\n",
		"*1\r\n$\r\n\r\n",
		"*1\r\n$+4\r\nPING\r\n",
		strings.Repeat("a", 70) + "\r\n",
		"SET \"unterminated\r\n",
		"P\x00\x00\xff\xff\n",
	} {
		f.Add([]byte(s), uint16(len(s)), false)
		f.Add([]byte(s), uint16(len(s)/2), true)
	}
	// Small limits, the query buffer one too, so the fuzzer meets them.
	limits := fuzzLimits
	limits.MaxQueryBuf = 256
	f.Fuzz(func(t *testing.T, in []byte, have uint16, small bool) {
		if len(in) > 16<<10 {
			t.Skip()
		}
		canonicalPrefixes(t, in, int(have), limits)
		in = in[:min(int(have), len(in))]
		size := readBufferSize
		if small {
			size = 16
		}
		whole, wrest, werr := frameAll(newReaderSize(&loopSource{b: in}, limits, len(in)+1))
		h := fnv.New64a()
		h.Write(in)
		src := &loopSource{b: in, rng: rand.New(rand.NewPCG(h.Sum64(), 2)), most: 32}
		split, srest, serr := frameAll(newReaderSize(src, limits, size))
		if !sameError(werr, serr) {
			t.Fatalf("fed whole, Frame ended with %v; in reads, with %v", werr, serr)
		}
		sameCommands(t, "whole against in reads", whole, split)
		if werr == nil && !bytes.Equal(wrest, srest) {
			t.Fatalf("left buffered: %q whole, %q in reads", wrest, srest)
		}

		// The goroutine's path: ReadCommand reads until a request is whole.
		read, rerr := parseAll(&chunkReader{b: in, rng: rand.New(rand.NewPCG(h.Sum64(), 3))}, limits, size)
		sameCommands(t, "Frame against ReadCommand", whole, read)
		if werr != nil && !sameError(werr, rerr) || werr == nil && !errors.Is(rerr, io.EOF) && rerr != io.ErrUnexpectedEOF {
			t.Fatalf("Frame ended with %v, ReadCommand with %v", werr, rerr)
		}
		if werr == nil && len(wrest) > 0 && wrest[0] != '*' {
			// An inline line not ended yet: no LF, within the limit.
			if bytes.IndexByte(wrest, '\n') >= 0 || len(wrest) >= limits.MaxInlineLen+2 {
				t.Fatalf("left %q buffered, which is not the beginning of a request", wrest)
			}
		}
	})
}

// canonicalPrefixes checks that the loop keeps a client that sends only
// well-formed requests within the limits: the requests ReadCommand finds
// in `in`, sent as multibulk and cut after `have` bytes, are framed whole,
// whole, ... and then Frame wants more, never fails.
func canonicalPrefixes(t *testing.T, in []byte, have int, limits Limits) {
	cmds, _ := parseAll(bytes.NewReader(in), limits, 4096)
	kept := cmds[:0]
	var total int64
	for _, args := range cmds {
		total = 0
		for _, a := range args {
			total += int64(len(a))
		}
		if len(args) <= limits.MaxArgs && total <= limits.MaxQueryBuf {
			kept = append(kept, args) // an inline request may have more
		}
	}
	wire := encode(kept)
	wire = wire[:min(have, len(wire))]
	got, _, err := frameAll(newReaderSize(&loopSource{b: wire}, limits, 16))
	if err != nil {
		t.Fatalf("well-formed requests %q cut after %d bytes: %v", encode(kept), have, err)
	}
	if len(got) > len(kept) {
		t.Fatalf("well-formed requests %q cut after %d bytes: %d framed", encode(kept), have, len(got))
	}
	sameCommands(t, "well-formed requests cut", got, kept[:len(got)])
}
