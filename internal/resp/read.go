package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

const (
	// MaxDepth bounds the nesting Parse accepts (it decodes recursively,
	// and only the proxy's own small replies). AppendReply and Size frame
	// replies of any depth: Redis nests a script's reply as deep as Lua's
	// stack allows, thousands of levels, and every level is relayed.
	MaxDepth = 64
	// MaxBulk is the longest bulk string, and the longest status or error
	// line, relayed (Redis's default proto-max-bulk-len).
	MaxBulk = 512 << 20
	// maxCount keeps an aggregate's element count (doubled for a map or
	// an attribute) from overflowing; no real reply comes near it.
	maxCount = 1 << 48
	// maxPending bounds the elements a reply still owes while it is read
	// (the sum of its open aggregates' counts), so that the sum cannot
	// overflow.
	maxPending = 1 << 60
)

// bulkLimit is MaxBulk, lowered by tests so that a reply over it is cheap.
var bulkLimit = MaxBulk

// ErrBadReply means bytes that are not RESP: a peer out of step, or not
// Redis. The reader wraps it with what it found. The stream cannot be
// read further: where the next reply begins is unknown.
var ErrBadReply = errors.New("resp: malformed reply")

// ErrTooLarge means a well-formed reply with a bulk string or a line
// longer than MaxBulk: AppendReply read it to its end without keeping it,
// so the stream is still in step and the next reply can be read. The
// request it answers fails; the connection it came on does not.
var ErrTooLarge = errors.New("resp: reply too large to relay")

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

// owed is how many more replies a header line starts: the elements of an
// aggregate (pairs doubled for a map or an attribute, plus the reply an
// attribute annotates), none for a simple type or a bulk. ok is false for
// a type byte that is not RESP or a bad count.
func owed(line []byte) (n int, bulk, ok bool) {
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return 0, false, true
	case '$', '!', '=':
		return 0, true, true
	case '*', '~', '>', '%', '|':
		n, ok := length(line)
		if !ok {
			return 0, false, false
		}
		if n < 0 {
			return 0, false, true
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		if line[0] == '|' {
			// An attribute annotates the reply that follows it: the two
			// are one reply.
			n++
		}
		return n, false, true
	}
	return 0, false, false
}

// AppendReply reads one whole reply from rd and appends its exact bytes to
// dst, RESP2 or RESP3: nested to any depth, an attribute together with the
// reply it annotates. It returns io.EOF if the stream ended before the
// reply began, io.ErrUnexpectedEOF if it ended in the middle, an error
// wrapping ErrBadReply for bytes that are not RESP, and ErrTooLarge for a
// reply with a bulk or line longer than MaxBulk (read to its end, dst as it
// was: the next reply can be read). RESP3's streamed strings and
// aggregates ("$?") are not supported (Redis never sends them).
//
// The reply is copied without allocating beyond dst's growth: a reused dst
// makes a forwarded reply cost nothing.
func AppendReply(dst []byte, rd *bufio.Reader) ([]byte, error) {
	start := len(dst)
	out, err := appendReply(dst, rd)
	if err == io.EOF && len(out) > start {
		err = io.ErrUnexpectedEOF
	}
	if errors.Is(err, ErrTooLarge) {
		out = out[:start]
	}
	return out, err
}

// appendReply reads element after element, counting the replies still
// owed rather than recursing: a reply nested thousands deep costs no
// stack. Once something is too large to keep, the rest is read and
// dropped (skip) so that the stream stays in step.
func appendReply(dst []byte, rd *bufio.Reader) ([]byte, error) {
	start := len(dst)
	skip := false
	for pending := 1; pending > 0; pending-- {
		at := len(dst)
		line, err := rd.ReadSlice('\n')
		for err == bufio.ErrBufferFull {
			// A status or error line longer than the buffer (a script can
			// return one of any size): gather it in dst.
			dst = append(dst, line...)
			if len(dst)-at > bulkLimit {
				break
			}
			line, err = rd.ReadSlice('\n')
		}
		if err == bufio.ErrBufferFull || len(dst)-at+len(line) > bulkLimit+3 {
			// Too long to keep (its type byte, bulkLimit bytes and CRLF at
			// most): read past it, and the rest of the reply.
			if err == bufio.ErrBufferFull {
				if err := discardLine(rd); err != nil {
					return dst, err
				}
			}
			skip = true
			dst = dst[:start]
			continue
		}
		dst = append(dst, line...)
		if err != nil {
			return dst, err
		}
		line = dst[at:]
		if lineEnd(line) != len(line) {
			return dst, badReply("%.40q is not a line ended by CRLF", line)
		}
		n, bulk, ok := owed(line)
		if !ok {
			if line[0] == '*' || line[0] == '~' || line[0] == '>' || line[0] == '%' || line[0] == '|' {
				return dst, badReply("bad count in %.40q", line)
			}
			return dst, badReply("unknown type byte %q", line[0])
		}
		if bulk {
			size, ok := length(line)
			if !ok {
				return dst, badReply("bad length in %.40q", line)
			}
			if size >= 0 {
				if dst, err = appendBulk(dst, rd, size, &skip); err != nil {
					return dst, err
				}
			}
		}
		if pending+n > maxPending {
			return dst, badReply("more elements than any reply has")
		}
		pending += n
		if skip {
			dst = dst[:start]
		}
	}
	if skip {
		return dst, ErrTooLarge
	}
	return dst, nil
}

// appendBulk reads a bulk's n bytes and its CRLF into dst, or past them if
// n is over MaxBulk (setting *skip: the reply cannot be relayed).
func appendBulk(dst []byte, rd *bufio.Reader, n int, skip *bool) ([]byte, error) {
	if n > bulkLimit || *skip {
		*skip = true
		if _, err := rd.Discard(n); err != nil {
			return dst, unexpected(err)
		}
		var crlf [2]byte
		if _, err := io.ReadFull(rd, crlf[:]); err != nil {
			return dst, unexpected(err)
		}
		if crlf != [2]byte{'\r', '\n'} {
			return dst, badReply("a bulk of %d bytes not followed by CRLF", n)
		}
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
}

// discardLine reads past the rest of a line too long to keep.
func discardLine(rd *bufio.Reader) error {
	for {
		_, err := rd.ReadSlice('\n')
		if err != bufio.ErrBufferFull {
			return unexpected(err)
		}
	}
}

// unexpected is err, with io.EOF turned into io.ErrUnexpectedEOF: the
// stream ended inside a reply.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Size returns the length of the first whole reply in b, by AppendReply's
// rules (any depth; no bulk or line over MaxBulk); ok is false if b does
// not begin with one.
func Size(b []byte) (n int, ok bool) {
	n, err := Frame(b)
	return n, err == nil && n > 0
}

// Frame returns the length of the first whole reply in b, by AppendReply's
// rules, for a reader that gets its bytes without waiting for them (an
// event loop): n > 0 for a whole reply; 0 and no error if b is only the
// beginning of one (wait for more bytes); an error wrapping ErrBadReply for
// bytes that are not RESP, and ErrTooLarge for a reply with a bulk longer
// than MaxBulk (read it with AppendReply, which reads past it). A line
// that has no end yet is the beginning of a reply, however long: AppendReply
// is the one to tell a line too long.
func Frame(b []byte) (n int, err error) {
	at := 0
	for pending := 1; pending > 0; pending-- {
		nl := bytes.IndexByte(b[at:], '\n')
		if nl < 0 {
			return 0, nil
		}
		head := lineEnd(b[at:])
		if head == 0 {
			return 0, badReply("%.40q is not a line ended by CRLF", b[at:at+nl+1])
		}
		line := b[at : at+head]
		owe, bulk, ok := owed(line)
		if !ok {
			return 0, badReply("bad type byte or count in %.40q", line)
		}
		at += head
		if bulk {
			n, ok := length(line)
			switch {
			case !ok:
				return 0, badReply("bad length in %.40q", line)
			case n > bulkLimit:
				return 0, ErrTooLarge
			case n >= 0:
				if len(b)-at < n+2 {
					return 0, nil
				}
				if b[at+n] != '\r' || b[at+n+1] != '\n' {
					return 0, badReply("a bulk of %d bytes not followed by CRLF", n)
				}
				at += n + 2
			}
		}
		if pending+owe > maxPending {
			return 0, badReply("more elements than any reply has")
		}
		pending += owe
	}
	return at, nil
}

// ArrayHeader reads the header of an array reply (RESP2 '*', or RESP3
// '*', '~', '>'): its element count and the bytes after the header, where
// its elements begin. ok is false for anything else, or a null array.
func ArrayHeader(raw []byte) (elems []byte, n int, ok bool) {
	if len(raw) == 0 || (raw[0] != '*' && raw[0] != '~' && raw[0] != '>') {
		return nil, 0, false
	}
	head := lineEnd(raw)
	if head == 0 {
		return nil, 0, false
	}
	n, ok = length(raw[:head])
	if !ok || n < 0 {
		return nil, 0, false
	}
	return raw[head:], n, true
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
		size, ok := Size(rest)
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

// ElementsLen is how many bytes elems (from Elements) take together: the
// array's header is the reply's first len(raw)-ElementsLen(elems) bytes,
// which a filter that rewrites some elements keeps.
func ElementsLen(elems [][]byte) int {
	n := 0
	for _, e := range elems {
		n += len(e)
	}
	return n
}
