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
