package keys

import "strconv"

// value is one decoded RESP2 element of the COMMAND reply. The package has
// its own small decoder (rather than backend.ParseValue) so that it depends on
// nothing in the proxy and keeps status and bulk strings apart for error
// messages.
type value struct {
	kind  byte // '+', '-', ':', '$', '*'; 0 for a null
	str   string
	num   int64
	elems []value
}

// maxDepth bounds nesting. COMMAND nests seven deep (reply, command,
// subcommands, subcommand, key specs, spec, begin_search spec).
const maxDepth = 16

// parseReply decodes b, which must be exactly one RESP2 reply.
func parseReply(b []byte) (value, error) {
	v, rest, err := parseValue(b, 0)
	if err != nil {
		return value{}, err
	}
	if len(rest) != 0 {
		return value{}, errorf("%d bytes after the reply", len(rest))
	}
	return v, nil
}

func parseValue(b []byte, depth int) (value, []byte, error) {
	if depth > maxDepth {
		return value{}, nil, errorf("nested deeper than %d", maxDepth)
	}
	end := -1
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '\r' && b[i+1] == '\n' {
			end = i
			break
		}
	}
	if end < 1 {
		return value{}, nil, errorf("truncated or empty line")
	}
	line, rest := b[1:end], b[end+2:]
	switch b[0] {
	case '+', '-':
		return value{kind: b[0], str: string(line)}, rest, nil
	case ':':
		n, err := strconv.ParseInt(string(line), 10, 64)
		if err != nil {
			return value{}, nil, errorf("bad integer %q", line)
		}
		return value{kind: ':', num: n}, rest, nil
	case '$':
		n, err := strconv.Atoi(string(line))
		if err != nil || n < -1 || n > len(rest)-2 {
			return value{}, nil, errorf("bad bulk length %q", line)
		}
		if n < 0 {
			return value{}, rest, nil
		}
		if rest[n] != '\r' || rest[n+1] != '\n' {
			return value{}, nil, errorf("bulk string not followed by CRLF")
		}
		return value{kind: '$', str: string(rest[:n])}, rest[n+2:], nil
	case '*':
		// Every element takes at least 3 bytes: bound the count by what is
		// left before allocating.
		n, err := strconv.Atoi(string(line))
		if err != nil || n < -1 || n > len(rest)/3 {
			return value{}, nil, errorf("bad array length %q", line)
		}
		if n < 0 {
			return value{}, rest, nil
		}
		v := value{kind: '*', elems: make([]value, n)}
		for i := range v.elems {
			v.elems[i], rest, err = parseValue(rest, depth+1)
			if err != nil {
				return value{}, nil, err
			}
		}
		return v, rest, nil
	}
	return value{}, nil, errorf("unexpected type byte %q", b[0])
}

// isString reports whether v is a status or bulk string.
func (v value) isString() bool { return v.kind == '+' || v.kind == '$' }

// field returns the value after the string name in v, an array of
// alternating names and values (a key spec and its parts), matching the
// name case-insensitively.
func (v value) field(name string) (value, bool) {
	for i := 0; i+1 < len(v.elems); i += 2 {
		if k := v.elems[i]; k.isString() && equalFold([]byte(k.str), name) {
			return v.elems[i+1], true
		}
	}
	return value{}, false
}
