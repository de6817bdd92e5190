package backend

import "bytes"

// Elements splits a whole array reply (RESP2 '*' or RESP3 '*', '~', '>')
// into the exact bytes of its elements, for merging the replies of a
// request split across Redis Cluster masters. ok is false for anything
// else: a null array, an error reply, or malformed input.
func Elements(raw []byte) (elems [][]byte, ok bool) {
	if len(raw) == 0 || (raw[0] != '*' && raw[0] != '~' && raw[0] != '>') {
		return nil, false
	}
	n, rest, ok := header(raw)
	if !ok || n < 0 {
		return nil, false
	}
	// n comes from the wire: every element takes at least 3 bytes.
	elems = make([][]byte, 0, min(n, len(rest)/3))
	for range n {
		size, ok := replySize(rest, 0)
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

// header parses a "<type><n>\r\n" line.
func header(b []byte) (n int, rest []byte, ok bool) {
	end := bytes.Index(b, []byte("\r\n"))
	if end < 1 {
		return 0, nil, false
	}
	n, ok = atoi(b[1:end])
	return n, b[end+2:], ok
}

// replySize returns the length of the first whole reply in b.
func replySize(b []byte, depth int) (int, bool) {
	if depth > maxReplyDepth || len(b) < 3 {
		return 0, false
	}
	n, rest, ok := header(b)
	head := len(b) - len(rest)
	switch b[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		end := bytes.Index(b, []byte("\r\n"))
		return end + 2, end > 0
	case '$', '!', '=':
		if !ok || n < -1 {
			return 0, false
		}
		if n < 0 {
			return head, true
		}
		if len(rest) < n+2 {
			return 0, false
		}
		return head + n + 2, true
	case '*', '~', '>', '%', '|':
		if !ok || n < -1 {
			return 0, false
		}
		if b[0] == '%' || b[0] == '|' {
			n *= 2
		}
		size := head
		for range max(n, 0) {
			s, ok := replySize(b[size:], depth+1)
			if !ok {
				return 0, false
			}
			size += s
		}
		return size, true
	}
	return 0, false
}
