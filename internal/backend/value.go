package backend

import (
	"errors"
	"strconv"
)

// RedisError is an error reply from Redis, such as "WRONGTYPE Operation
// against a key holding the wrong kind of value". It satisfies go-redis's
// redis.Error interface, so callers can treat both alike.
type RedisError string

func (e RedisError) Error() string { return string(e) }

// RedisError marks the type for go-redis's redis.Error interface.
func (RedisError) RedisError() {}

// Errors for the replies this package writes itself when a request could not
// be carried through (see Conn.Do).
var (
	// ErrUnavailable: Redis was unreachable; the request was not sent.
	ErrUnavailable = errors.New("backend: Redis is unreachable; the request was not sent")
	// ErrLost: the connection broke with the request on it; it may or may
	// not have run.
	ErrLost = errors.New("backend: connection to Redis lost; the request may or may not have run")
)

// ParseValue decodes one whole RESP2 reply into Go values: int64 for an
// integer, string for a status or bulk string, nil for a null, []any for an
// array, and a RedisError (or ErrUnavailable, ErrLost) for an error. It is
// for the proxy's own small replies (lock scripts, WAIT), not for relaying.
func ParseValue(raw []byte) (any, error) {
	v, rest, err := parseValue(raw, 0)
	if err == nil && len(rest) != 0 {
		err = ErrBadReply
	}
	return v, err
}

func parseValue(b []byte, depth int) (any, []byte, error) {
	if depth > maxReplyDepth || len(b) < 3 {
		return nil, nil, ErrBadReply
	}
	end := 1 // after the type byte
	for end < len(b)-1 && !(b[end] == '\r' && b[end+1] == '\n') {
		end++
	}
	if end >= len(b)-1 {
		return nil, nil, ErrBadReply
	}
	line, rest := b[1:end], b[end+2:]
	switch b[0] {
	case '+':
		return string(line), rest, nil
	case '-':
		switch msg := string(line); {
		case msg+"\r\n" == ReplyUnavailable[1:]:
			return nil, rest, ErrUnavailable
		case msg+"\r\n" == replyLost[1:]:
			return nil, rest, ErrLost
		default:
			return nil, rest, RedisError(msg)
		}
	case ':':
		n, err := strconv.ParseInt(string(line), 10, 64)
		if err != nil {
			return nil, nil, ErrBadReply
		}
		return n, rest, nil
	case '$':
		n, ok := atoi(line)
		if !ok || n < -1 || (n >= 0 && len(rest) < n+2) {
			return nil, nil, ErrBadReply
		}
		if n < 0 {
			return nil, rest, nil
		}
		return string(rest[:n]), rest[n+2:], nil
	case '*':
		n, ok := atoi(line)
		if !ok || n < -1 {
			return nil, nil, ErrBadReply
		}
		if n < 0 {
			return nil, rest, nil
		}
		arr := make([]any, 0, min(n, len(rest)/3)) // n is from the wire
		for i := 0; i < n; i++ {
			v, r, err := parseValue(rest, depth+1)
			if err != nil {
				if _, ok := err.(RedisError); !ok {
					return nil, nil, err
				}
				v = err // an error inside an array is an element
			}
			arr = append(arr, v)
			rest = r
		}
		return arr, rest, nil
	}
	return nil, nil, ErrBadReply
}
