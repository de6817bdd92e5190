package protocol

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Limits on what one request may claim before a byte of it is stored. The
// defaults are Redis's own (proto-max-bulk-len 512 MB, PROTO_INLINE_MAX_SIZE
// 64 KB); the argument count is bounded lower than Redis's INT_MAX because an
// argument vector is allocated from it.
type Limits struct {
	MaxBulkLen   int64 // longest single argument, bytes
	MaxArgs      int   // most arguments in one multibulk request
	MaxInlineLen int   // longest inline request or header line, bytes
	// MaxQueryBuf bounds the bytes of one request's arguments held while it
	// is read (Redis's client-query-buffer-limit); 0 means no bound.
	MaxQueryBuf int64
}

// DefaultLimits are Redis's defaults, with MaxArgs at 1M arguments.
var DefaultLimits = Limits{
	MaxBulkLen:   512 << 20,
	MaxArgs:      1 << 20,
	MaxInlineLen: 64 << 10,
	MaxQueryBuf:  1 << 30,
}

// ProtocolError is a malformed request. Its text is the one Redis gives
// (after "ERR "); the connection must be closed after replying, as Redis does,
// because the rest of the stream can no longer be framed.
type ProtocolError struct{ msg string }

func (e *ProtocolError) Error() string { return "Protocol error: " + e.msg }

var (
	errTooBigInline     = &ProtocolError{"too big inline request"}
	errUnbalancedQuotes = &ProtocolError{"unbalanced quotes in request"}
	errTooBigMbulkCount = &ProtocolError{"too big mbulk count string"}
	errInvalidMbulkLen  = &ProtocolError{"invalid multibulk length"}
	errTooBigBulkCount  = &ProtocolError{"too big bulk count string"}
	errInvalidBulkLen   = &ProtocolError{"invalid bulk length"}
	// Redis never answers an inline request holding a NUL (strchr stops at
	// it, so the newline is never found and the client waits forever);
	// refusing it is the closest behaviour that does not hang.
	errInlineNUL = &ProtocolError{"NUL byte in inline request (send binary arguments in a multibulk request)"}
)

// ErrQueryBufferLimit means a request's arguments outgrew Limits.MaxQueryBuf.
// Redis closes such a client without a reply (and logs it), and so does the
// server.
var ErrQueryBufferLimit = errors.New("protocol: request over the query buffer limit")

// maxRetainedArena is the largest argument arena a Reader keeps between
// requests.
const maxRetainedArena = 1 << 20

// Reader parses client requests, multibulk or inline, from a buffered stream.
//
// Arguments returned by ReadCommand point into the Reader's own storage and
// stay valid only until the next ReadCommand: whoever keeps one must copy it.
type Reader struct {
	rd     *bufio.Reader
	limits Limits
	args   [][]byte
	arena  []byte
	long   []byte
}

// NewReader returns a Reader over rd with the given limits.
func NewReader(rd *bufio.Reader, limits Limits) *Reader {
	return &Reader{rd: rd, limits: limits}
}

// Buffered reports how many bytes are already read from the socket but not
// yet parsed: zero means the next ReadCommand will block on the network.
func (r *Reader) Buffered() int { return r.rd.Buffered() }

// Peek waits until at least one byte is buffered (or the read fails)
// without consuming anything: a way to notice the client closing.
func (r *Reader) Peek() error {
	_, err := r.rd.Peek(1)
	return err
}

// ReadCommand returns the next non-empty request. Empty requests (a bare
// newline, "*0", "*-1") are skipped as Redis skips them. A *ProtocolError
// means the stream is unusable; any other error is the connection's.
func (r *Reader) ReadCommand() ([][]byte, error) {
	for {
		b, err := r.rd.Peek(1)
		if err != nil {
			return nil, err
		}
		var args [][]byte
		if b[0] == '*' {
			args, err = r.readMultibulk()
		} else {
			args, err = r.readInline()
		}
		if err != nil {
			return nil, err
		}
		if len(args) > 0 {
			return args, nil
		}
	}
}

// readLine returns one CRLF- or LF-terminated line without its terminator,
// refusing lines longer than MaxInlineLen with tooBig. The line is valid until
// the next read; a line longer than the socket buffer is gathered in r.long.
func (r *Reader) readLine(tooBig error) ([]byte, error) {
	line, err := r.readRawLine(tooBig)
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readRawLine returns one line with its terminating LF (and CR, if any).
func (r *Reader) readRawLine(tooBig error) ([]byte, error) {
	line, err := r.rd.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		r.long = append(r.long[:0], line...)
		for err == bufio.ErrBufferFull && len(r.long) <= r.limits.MaxInlineLen {
			line, err = r.rd.ReadSlice('\n')
			r.long = append(r.long, line...)
		}
		line = r.long
	}
	if len(line) > r.limits.MaxInlineLen+2 || err == bufio.ErrBufferFull {
		return nil, tooBig
	}
	if err != nil {
		return nil, err
	}
	return line, nil
}

// readHeader reads a multibulk or bulk header line without its terminator
// and says whether it ended in CRLF. Unlike an inline request, a header must:
// Redis finds its end by the CR, so after a bare LF the number does not parse.
func (r *Reader) readHeader(tooBig error) (line []byte, crlf bool, err error) {
	raw, err := r.readRawLine(tooBig)
	if err != nil {
		return nil, false, err
	}
	if n := len(raw); n >= 2 && raw[n-2] == '\r' {
		return raw[:n-2], true, nil
	}
	return raw[:len(raw)-1], false, nil
}

func (r *Reader) readMultibulk() ([][]byte, error) {
	line, crlf, err := r.readHeader(errTooBigMbulkCount)
	if err != nil {
		return nil, err
	}
	count, ok := resp.ParseInt(line[1:])
	if !ok || !crlf || count > int64(r.limits.MaxArgs) {
		return nil, errInvalidMbulkLen
	}
	if count <= 0 {
		return nil, nil
	}
	r.args = r.args[:0]
	r.arena = r.arena[:0]
	if cap(r.arena) > maxRetainedArena {
		// One big request must not pin its memory for the client's life
		// (Redis likewise shrinks an idle client's query buffer).
		r.arena = nil
	}
	// Arguments are appended to one arena and sliced out afterwards, so a
	// request costs no allocation once the arena has grown to fit.
	ends := make([]int, 0, min(count, 64))
	for i := int64(0); i < count; i++ {
		line, crlf, err := r.readHeader(errTooBigBulkCount)
		if err != nil {
			return nil, err
		}
		if len(line) == 0 || line[0] != '$' {
			// Redis names the offending byte as is, but its error replies
			// turn CR and LF into spaces.
			got := byte(' ')
			if len(line) > 0 && line[0] != '\r' && line[0] != '\n' {
				got = line[0]
			}
			return nil, &ProtocolError{"expected '$', got '" + string([]byte{got}) + "'"}
		}
		n, ok := resp.ParseInt(line[1:])
		if !ok || !crlf || n < 0 || n > r.limits.MaxBulkLen {
			return nil, errInvalidBulkLen
		}
		if err := r.readBulk(int(n)); err != nil {
			return nil, err
		}
		ends = append(ends, len(r.arena))
	}
	start := 0
	for _, end := range ends {
		r.args = append(r.args, r.arena[start:end:end])
		start = end
	}
	return r.args, nil
}

// readBulk appends n bytes of payload to the arena and skips the two bytes
// after it (Redis does not check that they are CRLF either). It grows the arena
// as data arrives, so a header that claims 512 MB costs nothing until sent.
func (r *Reader) readBulk(n int) error {
	const chunk = 1 << 20
	for n > 0 {
		step := min(n, chunk)
		at := len(r.arena)
		if r.limits.MaxQueryBuf > 0 && int64(at+step) > r.limits.MaxQueryBuf {
			// Checked before the chunk is allocated: a request that cannot
			// fit never holds more than the limit.
			return ErrQueryBufferLimit
		}
		r.arena = append(r.arena, make([]byte, step)...)
		if _, err := io.ReadFull(r.rd, r.arena[at:]); err != nil {
			return eofToUnexpected(err)
		}
		n -= step
	}
	if _, err := r.rd.Discard(2); err != nil {
		return eofToUnexpected(err)
	}
	return nil
}

func eofToUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (r *Reader) readInline() ([][]byte, error) {
	line, err := r.readLine(errTooBigInline)
	if err != nil {
		return nil, err
	}
	r.args = r.args[:0]
	r.arena = append(r.arena[:0], line...)
	return splitArgs(r.arena, r.args)
}

// splitArgs splits an inline request the way Redis's sdssplitargs does:
// spaces separate arguments; "double quotes" allow \n \r \t \b \a \\ \" and
// \xHH escapes; 'single quotes' allow \'. A closing quote must be followed by
// a space or the end. It rewrites line in place.
//
// A line holding a NUL byte is refused: sdssplitargs sees a C string, and an
// argument ending at a NUL that is not skipped as a space would otherwise
// make the loop below append empty arguments forever (a client could take
// all memory with one short line).
func splitArgs(line []byte, args [][]byte) ([][]byte, error) {
	if bytes.IndexByte(line, 0) >= 0 {
		return nil, errInlineNUL
	}
	p := 0
	for {
		for p < len(line) && isSpace(line[p]) {
			p++
		}
		// (Between arguments any isspace() byte is skipped; an unquoted
		// argument ends only at one of the bytes endsArg names.)
		if p == len(line) {
			return args, nil
		}
		start, w := p, p // w writes the unescaped argument over the input
		inDouble, inSingle := false, false
		for done := false; !done; {
			switch {
			case inDouble:
				if p == len(line) {
					return nil, errUnbalancedQuotes
				}
				c := line[p]
				if c == '\\' && p+3 < len(line) && line[p+1] == 'x' && isHex(line[p+2]) && isHex(line[p+3]) {
					line[w] = unhex(line[p+2])<<4 | unhex(line[p+3])
					p += 3
				} else if c == '\\' && p+1 < len(line) {
					p++
					line[w] = unescape(line[p])
				} else if c == '"' {
					if p+1 < len(line) && !isSpace(line[p+1]) {
						return nil, errUnbalancedQuotes
					}
					done = true
					p++
					continue
				} else {
					line[w] = c
				}
				w++
				p++
			case inSingle:
				if p == len(line) {
					return nil, errUnbalancedQuotes
				}
				c := line[p]
				if c == '\\' && p+1 < len(line) && line[p+1] == '\'' {
					p++
					line[w] = '\''
				} else if c == '\'' {
					if p+1 < len(line) && !isSpace(line[p+1]) {
						return nil, errUnbalancedQuotes
					}
					done = true
					p++
					continue
				} else {
					line[w] = c
				}
				w++
				p++
			default:
				if p == len(line) || endsArg(line[p]) {
					done = true
					continue
				}
				switch line[p] {
				case '"':
					inDouble = true
				case '\'':
					inSingle = true
				default:
					line[w] = line[p]
					w++
				}
				p++
			}
		}
		args = append(args, line[start:w:w])
	}
}

// isSpace is C's isspace, which sdssplitargs uses to skip between arguments
// and to check what follows a closing quote.
func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f'
}

// endsArg reports whether c ends an unquoted argument in sdssplitargs.
func endsArg(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == 0
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	case 'b':
		return '\b'
	case 'a':
		return '\a'
	default:
		return c
	}
}

// What the bytes a Reader has buffered hold, for a reader that must not
// wait for more (the event loop, loop.go).
const (
	// reqPartial: nothing, or the beginning of a multibulk request.
	reqPartial = iota
	// reqWhole: a whole multibulk request, within the limits: ReadCommand
	// returns it without reading.
	reqWhole
	// reqOther: anything else (an inline request, a malformed or empty
	// one, one over a limit), for ReadCommand on a goroutine, which
	// answers it as always.
	reqOther
)

// bufferedRequest tells whether a whole request is buffered. It accepts
// only what readMultibulk parses into arguments (headers ended by CRLF,
// a count of at least 1, bulk lengths within the limits), so that
// ReadCommand never reads, nor fails, on a request it calls whole.
func (r *Reader) bufferedRequest() int {
	b, _ := r.rd.Peek(r.rd.Buffered())
	if len(b) == 0 {
		return reqPartial
	}
	if b[0] != '*' {
		return reqOther
	}
	count, at, st := r.bufferedHeader(b, 0)
	if st != reqWhole {
		return st
	}
	if count < 1 || count > int64(r.limits.MaxArgs) {
		return reqOther
	}
	var total int64
	for range count {
		if at == len(b) {
			return reqPartial
		}
		if b[at] != '$' {
			return reqOther
		}
		n, next, st := r.bufferedHeader(b, at)
		if st != reqWhole {
			return st
		}
		total += n
		if n < 0 || n > r.limits.MaxBulkLen || (r.limits.MaxQueryBuf > 0 && total > r.limits.MaxQueryBuf) {
			return reqOther
		}
		if int64(len(b)-next) < n+2 {
			return reqPartial
		}
		at = next + int(n) + 2
	}
	return reqWhole
}

// bufferedHeader reads the header line at b[at:] ("*3\r\n", "$5\r\n"): its
// number, where the next line begins, and reqWhole; or reqPartial for a
// line not ended yet, reqOther for one readHeader refuses or whose number
// does not parse.
func (r *Reader) bufferedHeader(b []byte, at int) (int64, int, int) {
	nl := bytes.IndexByte(b[at:], '\n')
	if nl < 0 {
		if len(b)-at > r.limits.MaxInlineLen+2 {
			return 0, 0, reqOther
		}
		return 0, 0, reqPartial
	}
	line := b[at : at+nl+1]
	if len(line) > r.limits.MaxInlineLen+2 || len(line) < 3 || line[len(line)-2] != '\r' {
		return 0, 0, reqOther
	}
	n, ok := resp.ParseInt(line[1 : len(line)-2])
	if !ok {
		return 0, 0, reqOther
	}
	return n, at + nl + 1, reqWhole
}
