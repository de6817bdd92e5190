package protocol

import (
	"bufio"
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
	r := NewReader(bufio.NewReaderSize(rd, bufSize), limits)
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
		// The smallest buffer bufio allows, so long lines take the slow path.
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

// errNothingYet is what loopSource returns once its bytes are read: the
// event loop's socket with nothing more to read now.
var errNothingYet = errors.New("nothing more yet")

// loopSource gives its bytes in small reads, then errNothingYet, as a
// non-blocking socket does; with forbid set, a read fails the test (a
// request called whole must be parsed from the buffer alone).
type loopSource struct {
	t      *testing.T
	b      []byte
	rng    *rand.Rand
	forbid bool
}

func (s *loopSource) Read(p []byte) (int, error) {
	if s.forbid {
		s.t.Fatalf("ReadCommand read the socket for a request bufferedRequest called whole")
	}
	if len(s.b) == 0 {
		return 0, errNothingYet
	}
	n := min(len(p), len(s.b), 1+s.rng.IntN(32))
	copy(p, s.b[:n])
	s.b = s.b[n:]
	return n, nil
}

// FuzzBufferedRequest checks the event loop's parser path (loop.go's
// serveLoop): Reader.bufferedRequest, given what a socket had so far,
// must call a request whole exactly when ReadCommand would parse it from
// those bytes alone (then ReadCommand returns it without reading), partial
// exactly when those bytes are the beginning of one (the loop waits for
// more: a request called partial that is whole, or malformed, would leave
// the client waiting for ever), and anything else other (a goroutine's
// ReadCommand answers it). The input is the bytes, how many of them the
// socket has, and the Reader's buffer size (the smallest bufio allows, or
// 4 KB).
func FuzzBufferedRequest(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
		"*2\r\n$3\r\nGET\r\n$1\r\nk",
		"*1\r\n$4\r\nPINGxy*1\r\n$4\r\nPING\r\n", // Redis does not check a bulk's CRLF either
		"PING\r\n",
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
		size := 4096
		if small {
			size = 16 // bufio's least: requests longer than the buffer
		}
		h := fnv.New64a()
		h.Write(in)
		src := &loopSource{t: t, b: in, rng: rand.New(rand.NewPCG(h.Sum64(), 2))}
		r := NewReader(bufio.NewReaderSize(src, size), limits)
		for served := 0; ; served++ {
			// Read what the socket has, as serveLoop does, until it has
			// nothing more or the buffer is full.
			for r.Buffered() < r.rd.Size() {
				if _, err := r.rd.Peek(r.Buffered() + 1); err != nil {
					break
				}
			}
			b, _ := r.rd.Peek(r.Buffered())
			b = bytes.Clone(b)
			got := r.bufferedRequest()
			// Other for what ReadCommand still reads as partial is right
			// too: bytes that cannot begin a request (":4\r" where a bulk
			// header must be) are refused before their line ends, and a
			// goroutine's ReadCommand answers them when it does.
			if want := classify(b, limits); got != want && (got != reqOther || want != reqPartial) {
				t.Fatalf("request %d: bufferedRequest(%q) = %s, ReadCommand says %s", served, b, reqNames[got], reqNames[want])
			}
			if got != reqWhole {
				return
			}
			src.forbid = true
			args, err := r.ReadCommand()
			src.forbid = false
			if err != nil || len(args) == 0 {
				t.Fatalf("request %d: bufferedRequest(%q) called it whole; ReadCommand: %q, %v", served, b, args, err)
			}
			alone, _ := NewReader(bufio.NewReaderSize(bytes.NewReader(b), len(b)+16), limits).ReadCommand()
			if len(alone) != len(args) {
				t.Fatalf("request %d: %q from the loop's buffer, %q from its bytes alone", served, args, alone)
			}
			for i := range args {
				if !bytes.Equal(args[i], alone[i]) {
					t.Fatalf("request %d arg %d: %q from the loop's buffer, %q from its bytes alone", served, i, args[i], alone[i])
				}
			}
		}
	})
}

// classify is what ReadCommand's multibulk parser makes of the first
// request in b, read alone (b is all there is): reqWhole for one it
// returns, reqPartial for the beginning of one (or nothing), reqOther for
// anything else: an inline request, an empty one it skips, an error.
func classify(b []byte, limits Limits) int {
	if len(b) == 0 {
		return reqPartial
	}
	if b[0] != '*' {
		return reqOther
	}
	r := NewReader(bufio.NewReaderSize(bytes.NewReader(b), len(b)+16), limits)
	args, err := r.readMultibulk()
	switch {
	case err == nil && len(args) > 0:
		return reqWhole
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return reqPartial
	default:
		return reqOther
	}
}

var reqNames = map[int]string{reqPartial: "partial", reqWhole: "whole", reqOther: "other"}

// canonicalPrefixes checks that the loop keeps a client that sends only
// well-formed requests within the limits: the requests ReadCommand finds
// in `in`, sent as multibulk and cut after `have` bytes, are whole, whole,
// ... and then partial, never other.
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
	r := NewReader(bufio.NewReaderSize(bytes.NewReader(wire), len(wire)+16), limits)
	r.rd.Peek(len(wire))
	for {
		switch st := r.bufferedRequest(); st {
		case reqWhole:
			if _, err := r.ReadCommand(); err != nil {
				t.Fatalf("ReadCommand of a whole request in %q: %v", wire, err)
			}
		case reqPartial:
			return
		default:
			b, _ := r.rd.Peek(r.Buffered())
			t.Fatalf("well-formed requests %q cut after %d bytes: %q called other", encode(kept), have, b)
		}
	}
}
