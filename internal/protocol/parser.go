package protocol

import (
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

// maxRetainedBuffer is the largest read buffer a Reader keeps once it is
// drained: a buffer grown for one long request goes back to readBufferSize
// before the client's next read, so an idle client stays small.
const maxRetainedBuffer = 64 << 10

// Reader frames client requests, multibulk or inline, from a byte stream.
//
// Its one parser is Frame, which works from the bytes already read only
// and never reads: it returns a whole request, or nothing (the buffered
// bytes are the beginning of one: nothing is consumed), or the protocol
// error Redis gives. Both transports use it: a goroutine through
// ReadCommand, which reads more and frames again while a request is not
// whole; the event loop by calling Frame after each read that does not
// wait (loop.go). A request longer than the buffer grows it, within the
// bounds the Limits set on a request's lines and arguments; a grown
// buffer is let go once drained (maxRetainedBuffer).
//
// Arguments returned stay valid until the next request is framed: they
// are copied out of the read buffer, which the next read may overwrite
// while the request is still being served (by a lock worker, a backend's
// reader). Whoever keeps one longer must copy it.
type Reader struct {
	src    io.Reader
	limits Limits
	buf    []byte // buf[r:w] is read and not yet framed
	r, w   int
	err    error // a read's error that came with bytes, returned by the next read
	args   [][]byte
	arena  []byte // the last request's arguments (keep)
	f      frameState
}

// maxRetainedArena is the largest argument arena a Reader keeps for the
// next request: one grown for a long request is let go after it.
const maxRetainedArena = 64 << 10

// keep copies the arguments of the request just framed (args, which point
// into the read buffer) into the arena, and returns them there.
func (r *Reader) keep(args [][]byte) [][]byte {
	if cap(r.arena) > maxRetainedArena {
		r.arena = nil
	}
	a := r.arena[:0]
	for _, arg := range args {
		a = append(a, arg...)
	}
	r.arena = a
	at := 0
	for i, arg := range args {
		n := len(arg)
		args[i] = a[at : at+n : at+n]
		at += n
	}
	return args
}

// frameState is how far Frame got through the request at buf[r:] when it
// last found it incomplete, so that a request arriving in many reads is
// scanned once (offsets are from r, which a compaction moves to 0).
type frameState struct {
	at    int   // where framing resumes
	count int64 // multibulk: the arguments its header claims; 0 before it
	bulk  int64 // the length of the argument whose bytes begin at at; -1 at a header
	total int64 // argument bytes claimed so far (MaxQueryBuf)
	spans []int // start and end of each argument framed so far
	scan  int   // the line being framed has no LF before this
	need  int   // bytes from r the request needs at least (growth), 0 if unknown
}

// NewReader returns a Reader of src with the given limits.
func NewReader(src io.Reader, limits Limits) *Reader {
	return &Reader{src: src, limits: limits, f: frameState{bulk: -1}}
}

// Buffered reports how many bytes are already read from the socket but not
// yet framed: zero means the next ReadCommand will read the network.
func (r *Reader) Buffered() int { return r.w - r.r }

// Peek waits until at least one byte is buffered (or the read fails)
// without consuming anything: a way to notice the client closing.
func (r *Reader) Peek() error {
	if r.w > r.r {
		return nil
	}
	return r.Fill()
}

// ReadCommand returns the next non-empty request, reading until one is
// whole. Empty requests (a bare newline, "*0", "*-1") are skipped as Redis
// skips them. A *ProtocolError or ErrQueryBufferLimit means the stream is
// unusable; any other error is the connection's.
func (r *Reader) ReadCommand() ([][]byte, error) {
	for {
		args, err := r.Frame()
		if args != nil || err != nil {
			return args, err
		}
		if err := r.Fill(); err != nil {
			if err == io.EOF && r.w > r.r {
				err = io.ErrUnexpectedEOF // a request cut short
			}
			return nil, err
		}
	}
}

// Fill makes one read of the source into the buffer, after what is
// buffered, growing the buffer when a request fills it. It returns the
// read's error (io.EOF at the end of the stream).
func (r *Reader) Fill() error {
	if err := r.err; err != nil {
		r.err = nil
		return err
	}
	r.makeRoom()
	for range 100 { // as bufio: a source that keeps returning nothing is broken
		n, err := r.src.Read(r.buf[r.w:])
		r.w += n
		if n > 0 && err != nil {
			r.err = err // the bytes first, as bufio does
			return nil
		}
		if n > 0 || err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// makeRoom readies free space after the buffered bytes: it lets a grown
// buffer go once drained, moves a partial request to the front, and grows
// the buffer when the request fills it (the framer has checked its lines
// and claimed lengths against the limits, which so bound the growth).
func (r *Reader) makeRoom() {
	if r.r == r.w {
		r.r, r.w = 0, 0
		if len(r.buf) > maxRetainedBuffer {
			r.buf = nil
		}
	}
	if r.buf == nil {
		r.buf = make([]byte, readBufferSize)
	}
	if r.w < len(r.buf) {
		return
	}
	if r.r > 0 {
		r.w = copy(r.buf, r.buf[r.r:r.w])
		r.r = 0
		if r.w < len(r.buf) {
			return
		}
	}
	size := 2 * len(r.buf)
	if need := r.f.need + readBufferSize; need > len(r.buf) && need < size {
		size = need // a long argument: what it needs, and room for the next header
	}
	grown := make([]byte, size)
	copy(grown, r.buf[:r.w])
	r.buf = grown
}

// Frame returns the next non-empty request from the buffered bytes alone:
// its arguments; or nil and nil when the bytes are only the beginning of
// one (nothing is consumed); or nil and the error that ends the stream (a
// *ProtocolError, with Redis's text, or ErrQueryBufferLimit). Empty
// requests are consumed and skipped.
func (r *Reader) Frame() ([][]byte, error) {
	for r.r < r.w {
		b := r.buf[r.r:r.w]
		var args [][]byte
		var n int
		var err error
		if b[0] == '*' {
			args, n, err = r.frameMultibulk(b)
		} else {
			args, n, err = r.frameInline(b)
		}
		if err != nil || n == 0 {
			return nil, err
		}
		r.r += n
		r.f = frameState{bulk: -1, spans: r.f.spans[:0]}
		if len(args) > 0 {
			return r.keep(args), nil
		}
	}
	return nil, nil
}

// line finds the line that begins at b[at:]: its end (after the LF), or 0
// while it has not ended, and tooBig for a line longer than MaxInlineLen
// (with its CRLF), ended or not.
func (r *Reader) line(b []byte, at int, tooBig error) (int, error) {
	from := max(at, r.f.scan) // bytes already scanned hold no LF
	nl := bytes.IndexByte(b[from:], '\n')
	if nl < 0 {
		r.f.scan = len(b)
		if len(b)-at >= r.limits.MaxInlineLen+2 {
			return 0, tooBig
		}
		return 0, nil
	}
	end := from + nl + 1
	r.f.scan = 0
	if end-at > r.limits.MaxInlineLen+2 {
		return 0, tooBig
	}
	return end, nil
}

// frameInline frames an inline request: one line, LF- or CRLF-ended, split
// as Redis's sdssplitargs splits it.
func (r *Reader) frameInline(b []byte) ([][]byte, int, error) {
	end, err := r.line(b, 0, errTooBigInline)
	if end == 0 {
		return nil, 0, err
	}
	line := b[: end-1 : end-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	args, err := splitArgs(line, r.args[:0])
	return args, end, err
}

// header parses the header line at b[at:] ("*3\r\n", "$5\r\n"), once
// ended: the line without its terminator, whether that was CRLF, and where
// the next line begins (0 while the line has not ended). Unlike an inline
// request, a header must end in CRLF: Redis finds its end by the CR, so
// after a bare LF the number does not parse.
func (r *Reader) header(b []byte, at int, tooBig error) (line []byte, crlf bool, next int, err error) {
	end, err := r.line(b, at, tooBig)
	if end == 0 {
		return nil, false, 0, err
	}
	if end-at >= 2 && b[end-2] == '\r' {
		return b[at : end-2], true, end, nil
	}
	return b[at : end-1], false, end, nil
}

// frameMultibulk frames a multibulk request, resuming where r.f says the
// last call stopped.
func (r *Reader) frameMultibulk(b []byte) ([][]byte, int, error) {
	f := &r.f
	if f.count == 0 {
		line, crlf, next, err := r.header(b, 0, errTooBigMbulkCount)
		if next == 0 {
			return nil, 0, err
		}
		count, ok := resp.ParseInt(line[1:])
		if !ok || !crlf || count > int64(r.limits.MaxArgs) {
			return nil, 0, errInvalidMbulkLen
		}
		if count <= 0 {
			return nil, next, nil // empty: skipped
		}
		f.count, f.at = count, next
	}
	for int64(len(f.spans)/2) < f.count {
		if f.bulk < 0 {
			if err := r.bulkHeader(b); err != nil || f.bulk < 0 {
				return nil, 0, err
			}
		}
		end := int64(f.at) + f.bulk
		if end+2 > int64(len(b)) {
			f.need = int(end + 2)
			return nil, 0, nil
		}
		// The two bytes after an argument are skipped unchecked, as Redis
		// skips them.
		f.spans = append(f.spans, f.at, int(end))
		f.at, f.bulk, f.need = int(end)+2, -1, 0
	}
	args := r.args[:0]
	for i := 0; i < len(f.spans); i += 2 {
		args = append(args, b[f.spans[i]:f.spans[i+1]:f.spans[i+1]])
	}
	r.args = args
	return args, f.at, nil
}

// bulkHeader parses the header of the next argument at b[r.f.at:], if it
// has ended, into r.f.bulk (and moves r.f.at past it), checking the
// argument's claimed length against the limits before a byte of it is
// stored.
func (r *Reader) bulkHeader(b []byte) error {
	f := &r.f
	line, crlf, next, err := r.header(b, f.at, errTooBigBulkCount)
	if next == 0 {
		return err
	}
	if len(line) == 0 || line[0] != '$' {
		// Redis names the offending byte as is, but its error replies
		// turn CR and LF into spaces.
		got := byte(' ')
		if len(line) > 0 && line[0] != '\r' && line[0] != '\n' {
			got = line[0]
		}
		return &ProtocolError{"expected '$', got '" + string([]byte{got}) + "'"}
	}
	n, ok := resp.ParseInt(line[1:])
	if !ok || !crlf || n < 0 || n > r.limits.MaxBulkLen {
		return errInvalidBulkLen
	}
	if r.limits.MaxQueryBuf > 0 && f.total+n > r.limits.MaxQueryBuf {
		// Redis closes a client whose query buffer outgrows the limit;
		// refused on the header, a request that cannot fit never holds
		// more than the limit.
		return ErrQueryBufferLimit
	}
	f.total += n
	f.bulk, f.at = n, next
	return nil
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
