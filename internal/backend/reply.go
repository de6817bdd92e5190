package backend

import (
	"bufio"
	"errors"
	"io"
)

// maxReplyDepth bounds nesting so a hostile or broken peer cannot exhaust the
// stack; Redis itself never nests this deep.
const maxReplyDepth = 64

// maxBulkReply is the largest bulk reply accepted from a backend (Redis's
// proto-max-bulk-len).
const maxBulkReply = 512 << 20

// ErrBadReply means the backend sent something that is not RESP.
var ErrBadReply = errors.New("backend: malformed reply from Redis")

// AppendReply reads one whole reply from rd and appends its exact bytes to
// dst. It understands RESP2 and RESP3 framing.
func AppendReply(dst []byte, rd *bufio.Reader) ([]byte, error) {
	return appendReply(dst, rd, 0)
}

func appendReply(dst []byte, rd *bufio.Reader, depth int) ([]byte, error) {
	if depth > maxReplyDepth {
		return dst, ErrBadReply
	}
	start := len(dst)
	line, err := rd.ReadSlice('\n')
	for err == bufio.ErrBufferFull {
		// A status or error line longer than the buffer (a script can
		// return one of any size): gather it in dst.
		dst = append(dst, line...)
		if len(dst)-start > maxBulkReply {
			return dst, ErrBadReply
		}
		line, err = rd.ReadSlice('\n')
	}
	if err != nil {
		return dst, err
	}
	dst = append(dst, line...)
	line = dst[start:]
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return dst, ErrBadReply
	}
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return dst, nil
	case '$', '!', '=':
		n, ok := atoi(line[1 : len(line)-2])
		if !ok || n > maxBulkReply {
			return dst, ErrBadReply
		}
		if n < 0 {
			return dst, nil
		}
		at := len(dst)
		dst = append(dst, make([]byte, n+2)...)
		_, err := io.ReadFull(rd, dst[at:])
		return dst, err
	case '*', '~', '>', '%', '|':
		n, ok := atoi(line[1 : len(line)-2])
		if !ok {
			return dst, ErrBadReply
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for i := 0; i < n; i++ {
			if dst, err = appendReply(dst, rd, depth+1); err != nil {
				return dst, err
			}
		}
		return dst, nil
	}
	return dst, ErrBadReply
}

func atoi(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		return -n, true
	}
	return n, true
}
