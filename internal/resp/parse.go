package resp

// Parse decodes one whole RESP2 reply into Go values: int64 for an
// integer, string for a status or bulk string, nil for a null, []any for an
// array, and for an error reply an Error, returned as the error (or, inside
// an array, as the element). It is for the proxy's own small replies (lock
// scripts, WAIT, COMMAND), not for relaying; it returns ErrBadReply for
// anything else.
func Parse(raw []byte) (any, error) {
	v, rest, err := parse(raw, 0)
	if err == nil && len(rest) != 0 {
		err = ErrBadReply
	}
	return v, err
}

func parse(b []byte, depth int) (any, []byte, error) {
	head := lineEnd(b)
	if depth > MaxDepth || head == 0 {
		return nil, nil, ErrBadReply
	}
	line, rest := b[1:head-2], b[head:]
	switch b[0] {
	case '+':
		return string(line), rest, nil
	case '-':
		return nil, rest, NewError(string(line))
	case ':':
		n, ok := ParseInt(line)
		if !ok {
			return nil, nil, ErrBadReply
		}
		return n, rest, nil
	case '$':
		n, ok := length(b[:head])
		switch {
		case !ok || n > MaxBulk:
			return nil, nil, ErrBadReply
		case n < 0:
			return nil, rest, nil
		case len(rest) < n+2 || rest[n] != '\r' || rest[n+1] != '\n':
			return nil, nil, ErrBadReply
		}
		return string(rest[:n]), rest[n+2:], nil
	case '*':
		n, ok := length(b[:head])
		if !ok {
			return nil, nil, ErrBadReply
		}
		if n < 0 {
			return nil, rest, nil
		}
		arr := make([]any, 0, min(n, len(rest)/3)) // n is from the wire
		for range n {
			v, r, err := parse(rest, depth+1)
			if err != nil {
				e, ok := err.(Error)
				if !ok {
					return nil, nil, err
				}
				v = e // an error inside an array is an element
			}
			arr = append(arr, v)
			rest = r
		}
		return arr, rest, nil
	}
	return nil, nil, ErrBadReply
}
