package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

const (
	// MaxDepth bounds nesting, so that a hostile or broken peer cannot
	// exhaust the stack; Redis itself never nests this deep.
	MaxDepth = 64
	// MaxBulk is the longest bulk string, and the longest status or error
	// line, accepted (Redis's proto-max-bulk-len).
	MaxBulk = 512 << 20
	// maxCount keeps an aggregate's element count (doubled for a map or
	// an attribute) from overflowing; no real reply comes near it.
	maxCount = 1 << 48
)

// ErrBadReply means bytes that are not RESP: a peer out of step, or not
// Redis. The reader wraps it with what it found.
var ErrBadReply = errors.New("resp: malformed reply")

func badReply(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadReply}, args...)...)
}

// lineEnd returns the index just past the first line of b (its "\n"), or
// 0 if b holds no whole, well-formed line: one ends with CRLF, and has a
// type byte and CRLF at least.
func lineEnd(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 2 || b[i-1] != '\r' {
		return 0
	}
	return i + 1
}

// length reads the count of a length line ("$5\r\n", "*-1\r\n"): -1 is the
// RESP2 null, which only '$' and '*' have. A map's or an attribute's
// count is of pairs; length returns it as is.
func length(line []byte) (int, bool) {
	n, ok := ParseInt(line[1 : len(line)-2])
	if !ok || n < -1 || n > maxCount || (n == -1 && line[0] != '$' && line[0] != '*') {
		return 0, false
	}
	return int(n), true
}

// AppendReply reads one whole reply from rd and appends its exact bytes to
// dst, RESP2 or RESP3: nested at most MaxDepth deep, no bulk or line longer
// than MaxBulk, an attribute together with the reply it annotates. It
// returns io.EOF if the stream ended before the reply began,
// io.ErrUnexpectedEOF if it ended in the middle, and an error wrapping
// ErrBadReply for bytes that are not RESP. RESP3's streamed strings and
// aggregates ("$?") are not supported (Redis never sends them).
//
// The reply is copied without allocating beyond dst's growth: a reused dst
// makes a forwarded reply cost nothing.
func AppendReply(dst []byte, rd *bufio.Reader) ([]byte, error) {
	start := len(dst)
	out, err := appendReply(dst, rd, 0)
	if err == io.EOF && len(out) > start {
		err = io.ErrUnexpectedEOF
	}
	return out, err
}

func appendReply(dst []byte, rd *bufio.Reader, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return dst, badReply("nested deeper than %d", MaxDepth)
	}
	start := len(dst)
	line, err := rd.ReadSlice('\n')
	for err == bufio.ErrBufferFull {
		// A status or error line longer than the buffer (a script can
		// return one of any size): gather it in dst.
		dst = append(dst, line...)
		if len(dst)-start > MaxBulk {
			return dst, badReply("a line longer than %d bytes", MaxBulk)
		}
		line, err = rd.ReadSlice('\n')
	}
	dst = append(dst, line...)
	if err != nil {
		return dst, err
	}
	line = dst[start:]
	if lineEnd(line) != len(line) {
		return dst, badReply("%.40q is not a line ended by CRLF", line)
	}
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return dst, nil
	case '$', '!', '=':
		n, ok := length(line)
		if !ok || n > MaxBulk {
			return dst, badReply("bad length in %.40q", line)
		}
		if n < 0 {
			return dst, nil
		}
		at := len(dst)
		dst = append(dst, make([]byte, n+2)...)
		if _, err := io.ReadFull(rd, dst[at:]); err != nil {
			return dst, err
		}
		if dst[len(dst)-2] != '\r' || dst[len(dst)-1] != '\n' {
			return dst, badReply("a bulk of %d bytes not followed by CRLF", n)
		}
		return dst, nil
	case '*', '~', '>', '%', '|':
		n, ok := length(line)
		if !ok {
			return dst, badReply("bad count in %.40q", line)
		}
		attribute := line[0] == '|'
		if line[0] == '%' || attribute {
			n *= 2
		}
		for range n {
			if dst, err = appendReply(dst, rd, depth+1); err != nil {
				return dst, err
			}
		}
		if attribute {
			// An attribute annotates the reply that follows it: the two
			// are one reply.
			return appendReply(dst, rd, depth+1)
		}
		return dst, nil
	}
	return dst, badReply("unknown type byte %q", line[0])
}

// Size returns the length of the first whole reply in b, by AppendReply's
// rules; ok is false if b does not begin with one.
func Size(b []byte) (n int, ok bool) { return size(b, 0) }

func size(b []byte, depth int) (int, bool) {
	head := lineEnd(b)
	if depth > MaxDepth || head == 0 {
		return 0, false
	}
	line := b[:head]
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return head, true
	case '$', '!', '=':
		n, ok := length(line)
		switch {
		case !ok || n > MaxBulk:
			return 0, false
		case n < 0:
			return head, true
		case len(b)-head < n+2 || b[head+n] != '\r' || b[head+n+1] != '\n':
			return 0, false
		}
		return head + n + 2, true
	case '*', '~', '>', '%', '|':
		n, ok := length(line)
		if !ok {
			return 0, false
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		if line[0] == '|' {
			n++ // the reply the attribute annotates
		}
		at := head
		for range n {
			s, ok := size(b[at:], depth+1)
			if !ok {
				return 0, false
			}
			at += s
		}
		return at, true
	}
	return 0, false
}

// Elements splits a whole array reply (RESP2 '*' or RESP3 '*', '~', '>')
// into the exact bytes of its elements, for merging the replies of a
// request split across Redis Cluster masters. ok is false for anything
// else: a null array, an error reply, or malformed input, or bytes after
// the array.
func Elements(raw []byte) (elems [][]byte, ok bool) {
	if len(raw) == 0 || (raw[0] != '*' && raw[0] != '~' && raw[0] != '>') {
		return nil, false
	}
	head := lineEnd(raw)
	if head == 0 {
		return nil, false
	}
	n, ok := length(raw[:head])
	if !ok || n < 0 {
		return nil, false
	}
	rest := raw[head:]
	// n comes from the wire: every element takes at least 3 bytes.
	elems = make([][]byte, 0, min(n, len(rest)/3))
	for range n {
		size, ok := size(rest, 1)
		if !ok {
			return nil, false
		}
		elems = append(elems, rest[:size])
		rest = rest[size:]
	}
	if len(rest) != 0 {
		return nil, false
	}
	return elems, true
}
