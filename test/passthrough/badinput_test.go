package passthrough

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// closeWait bounds the wait for a peer to reply and close after bad input.
const closeWait = 5 * time.Second

// TestBadInputLikeRedis sends the same malformed bytes to the proxy and to
// Redis B: the reply bytes must match, both must close the connection, and
// the proxy must go on serving.
func TestBadInputLikeRedis(t *testing.T) {
	pr := startPair(t)
	long := strings.Repeat("x", 70<<10)
	digits := strings.Repeat("1", 70<<10)
	cases := []struct {
		name, in string
	}{
		{"multibulk count not a number", "*abc\r\n"},
		{"multibulk count with a plus", "*+1\r\n$4\r\nPING\r\n"},
		{"multibulk count with leading zero", "*01\r\n$4\r\nPING\r\n"},
		{"multibulk count overflows", "*99999999999999999999\r\n"},
		{"multibulk count empty", "*\r\n"},
		{"negative bulk length", "*1\r\n$-5\r\n"},
		{"null bulk length", "*1\r\n$-1\r\n"},
		{"bulk length not a number", "*1\r\n$abc\r\n"},
		{"bulk length with leading zero", "*1\r\n$04\r\nPING\r\n"},
		{"bulk length empty", "*1\r\n$\r\n"},
		{"integer where a bulk belongs", "*1\r\n:5\r\n"},
		{"inline where a bulk belongs", "*1\r\nPING\r\n"},
		{"second argument not a bulk", "*2\r\n$3\r\nGET\r\n+k\r\n"},
		{"bulk over proto-max-bulk-len", "*1\r\n$600000000\r\n"},
		{"bulk length overflows", "*1\r\n$99999999999999999999\r\n"},
		{"inline of 70 KB without newline", long},
		{"multibulk count line of 70 KB", "*" + digits},
		{"bulk length line of 70 KB", "*1\r\n$" + digits},
		{"unbalanced double quote", "SET \"k v\r\n"},
		{"unbalanced single quote", "SET 'k v\r\n"},
		{"closing quote followed by a letter", "SET \"k\"v x\r\n"},
		{"valid requests then a bad one", "PING\r\n*1\r\n$4\r\nPING\r\n*x\r\nPING\r\n"},
		{"bad one after a forwarded request", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*1\r\n$-2\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			compareBad(t, pr, []byte(tc.in))
		})
	}
}

// TestBadInputErrorByte: Redis quotes the offending byte as it is (a CR or
// LF mapped to a space); the proxy must send the same bytes.
func TestBadInputErrorByte(t *testing.T) {
	pr := startPair(t)
	for _, in := range []string{
		"*1\r\n\r\n",     // empty line where "$" belongs: Redis says got ' '
		"*1\r\n\xff\r\n", // a byte over 0x7f: Redis sends the byte itself
		"*1\r\n\x80abc\r\n",
		"*1\r\n\t\r\n",
		// Not "*1\r\n\x00\r\n": Redis looks for the CR with strchr, stops at
		// the NUL and waits forever, which is no reference to copy.
	} {
		t.Run(strconv.Quote(in), func(t *testing.T) { compareBad(t, pr, []byte(in)) })
	}
}

// TestBadInputLFOnlyMultibulk: Redis frames multibulk headers by CR, so a
// header ended by a bare LF is malformed; the proxy must not accept what
// Redis refuses.
func TestBadInputLFOnlyMultibulk(t *testing.T) {
	pr := startPair(t)
	for _, in := range []string{
		"*1\n$4\r\nPING\r\n",
		"*1\r\n$4\nPING\r\n",
	} {
		t.Run(strconv.Quote(in), func(t *testing.T) { compareBad(t, pr, []byte(in)) })
	}
}

// compareBad sends in to the proxy and to B on new connections and compares
// what came back and whether each closed.
func compareBad(t *testing.T, pr *pair, in []byte) {
	t.Helper()
	got, gotClosed := exchange(t, pr.Proxy.Addr, in, closeWait)
	want, wantClosed := exchange(t, pr.B.Addr, in, closeWait)
	if !bytes.Equal(got, want) {
		t.Errorf("reply:\n proxy  %s\n redis  %s", testenv.ShowReply(got), testenv.ShowReply(want))
	}
	if gotClosed != wantClosed {
		t.Errorf("closed: proxy %v, redis %v", gotClosed, wantClosed)
	}
	pr.alive(t)
}

// TestBadInputProxyLimits: limits where the proxy is stricter than Redis
// (it bounds the argument count to allocate safely).
func TestBadInputProxyLimits(t *testing.T) {
	pr := startPair(t)
	for _, in := range []string{"*2000000\r\n", "*1048577\r\n", "*2147483648\r\n"} {
		got, closed := exchange(t, pr.Proxy.Addr, []byte(in), closeWait)
		if string(got) != "-ERR Protocol error: invalid multibulk length\r\n" || !closed {
			t.Errorf("%q: got %q closed=%v, want invalid multibulk length and a close", in, got, closed)
		}
		pr.alive(t)
	}
	// At the limit the request is accepted and waits for its arguments.
	c := testenv.Dial(t, pr.Proxy.Addr)
	c.WriteRaw([]byte("*1048576\r\n$4\r\nPING\r\n"))
	c.SetTimeout(200 * time.Millisecond)
	if got, err := c.ReadReply(); err == nil {
		t.Errorf("*1048576 with one argument sent: answered %q before the rest arrived", got)
	}
	pr.alive(t)
}

// TestBadInputRandomGarbage sends seeded random bytes, alone and after a
// valid command. Whatever the proxy answers must be well-formed RESP, and
// it must go on serving.
func TestBadInputRandomGarbage(t *testing.T) {
	pr := startPair(t)
	rng := rand.New(rand.NewPCG(42, 4242))
	alphabet := []byte("*$:+-\r\n0123456789 \"'\\xabPINGSET\x00\xff")
	for i := range 60 {
		n := 1 + rng.IntN(600)
		b := make([]byte, n)
		for j := range b {
			if i%2 == 0 {
				b[j] = byte(rng.Uint32())
			} else {
				b[j] = alphabet[rng.IntN(len(alphabet))]
			}
		}
		if i%3 == 0 {
			b = append(testenv.AppendCommand(nil, "PING"), b...)
		}
		got, _ := exchange(t, pr.Proxy.Addr, b, 150*time.Millisecond)
		if err := wellFormed(got); err != nil {
			t.Errorf("garbage %d %q: reply %q is not RESP: %v", i, b, testenv.ShowReply(got), err)
		}
	}
	pr.alive(t)
}

// wellFormed reports whether b is a sequence of whole RESP2 replies.
func wellFormed(b []byte) error {
	for i := 0; len(b) > 0; i++ {
		n, err := oneReply(b, 0)
		if err != nil {
			return fmt.Errorf("reply %d: %w", i, err)
		}
		b = b[n:]
	}
	return nil
}

// oneReply returns the length of the RESP2 reply at the start of b.
func oneReply(b []byte, depth int) (int, error) {
	if depth > 64 {
		return 0, fmt.Errorf("nested too deep")
	}
	end := bytes.Index(b, []byte("\r\n"))
	if end < 1 {
		return 0, fmt.Errorf("no CRLF-terminated line in %q", testenv.ShowReply(b))
	}
	line := b[:end]
	switch line[0] {
	case '+', '-', ':':
		if bytes.ContainsAny(line, "\r\n") {
			return 0, fmt.Errorf("CR or LF inside %q", line)
		}
		return end + 2, nil
	case '$':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil || n < -1 {
			return 0, fmt.Errorf("bad bulk header %q", line)
		}
		if n == -1 {
			return end + 2, nil
		}
		total := end + 2 + n + 2
		if len(b) < total || string(b[total-2:total]) != "\r\n" {
			return 0, fmt.Errorf("short bulk %q", testenv.ShowReply(b))
		}
		return total, nil
	case '*':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil || n < -1 {
			return 0, fmt.Errorf("bad array header %q", line)
		}
		at := end + 2
		for range max(n, 0) {
			m, err := oneReply(b[at:], depth+1)
			if err != nil {
				return 0, err
			}
			at += m
		}
		return at, nil
	}
	return 0, fmt.Errorf("unknown type %q", line[0])
}

// TestBadInputHalfCommand: a client that sends part of a request and goes
// away must not leave anything behind: no half-run command, no dead proxy.
func TestBadInputHalfCommand(t *testing.T) {
	pr := startPair(t)
	full := testenv.AppendCommand(nil, "SET", "half:k", strings.Repeat("v", 1000))
	for _, cut := range []int{1, 4, 10, 14, 20, 500, len(full) - 2, len(full) - 1} {
		nc, err := net.Dial("tcp", pr.Proxy.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(full[:cut]); err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	// A header that claims 500 MB, a little of it, then gone.
	nc, err := net.Dial("tcp", pr.Proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.Write([]byte("*3\r\n$3\r\nSET\r\n$6\r\nhalf:k\r\n$500000000\r\n" + strings.Repeat("x", 100000)))
	nc.Close()
	pr.alive(t)
	c := testenv.Dial(t, pr.Proxy.Addr)
	if got := c.Do("EXISTS", "half:k"); string(got) != ":0\r\n" {
		t.Errorf("EXISTS half:k after only partial SETs: %q", got)
	}
	// An inline half line is dropped too.
	nc2, err := net.Dial("tcp", pr.Proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	nc2.Write([]byte("SET half:k v"))
	nc2.Close()
	pr.alive(t)
	if got := c.Do("EXISTS", "half:k"); string(got) != ":0\r\n" {
		t.Errorf("EXISTS half:k after a half inline SET: %q", got)
	}
}

// TestInlineSplitLikeRedis sends inline requests whose arguments come back in
// the reply (EVAL "return ARGV") to the proxy and to Redis B: the proxy's
// splitting must match sdssplitargs.
func TestInlineSplitLikeRedis(t *testing.T) {
	pr := startPair(t)
	fixed := []string{
		`a b c`,
		`  a   b  `,
		"a\tb",
		`"a b" 'c d'`,
		`"\x41\x6a\x4A" "\x4g" "\xZZ" "\x4"`,
		`"\n\r\t\b\a\\\"\q"`,
		`'it\'s' 'a\b' 'x\'`,
		`"" ''`,
		`"a"b`,
		`'a'b`,
		`a"b"c`,
		`a'b`,
		`"unterminated`,
		`'unterminated`,
		`"ends with backslash\`,
		"a\vb c\fd", // \v and \f do not end an unquoted argument in Redis
		"\"q\"\va",  // but they do count as space after a closing quote
		"\v\f a",    // and as leading space
		"\xff\x80 \xc3",
	}
	rng := rand.New(rand.NewPCG(9, 99))
	alphabet := []byte(" \t\v\f\"'\\xA0fgqnab")
	for range 150 {
		b := make([]byte, 1+rng.IntN(12))
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		fixed = append(fixed, string(b))
	}
	failures := 0
	for _, tail := range fixed {
		// The PING marks the end; after a protocol error both close instead.
		in := []byte("EVAL \"return ARGV\" 0 " + tail + "\r\nPING\r\n")
		got := untilPong(t, pr.Proxy.Addr, in)
		want := untilPong(t, pr.B.Addr, in)
		if !bytes.Equal(got, want) {
			if failures++; failures <= 10 {
				t.Errorf("inline %q:\n proxy  %s\n redis  %s", tail, testenv.ShowReply(got), testenv.ShowReply(want))
			}
		}
	}
	if failures > 10 {
		t.Errorf("… and %d more inline requests split differently", failures-10)
	}
	pr.alive(t)
}
