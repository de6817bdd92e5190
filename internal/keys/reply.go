package keys

import (
	"errors"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// value is one element of the COMMAND reply, as resp.Parse decodes it,
// with its kind beside it so that the table reads like the reply.
type value struct {
	kind  byte // '-' an error, ':' an integer, '$' a string (status or bulk), '*' an array; 0 a null
	str   string
	num   int64
	elems []value
}

// parseReply decodes b, which must be exactly one RESP2 reply.
func parseReply(b []byte) (value, error) {
	v, err := resp.Parse(b)
	var re resp.Error
	switch {
	case errors.As(err, &re):
		return value{kind: '-', str: re.Error()}, nil
	case err != nil:
		return value{}, errorf("%v", err)
	}
	return valueOf(v), nil
}

// valueOf is v, one of resp.Parse's values, as a value.
func valueOf(v any) value {
	switch v := v.(type) {
	case string:
		return value{kind: '$', str: v}
	case int64:
		return value{kind: ':', num: v}
	case resp.Error:
		return value{kind: '-', str: v.Error()}
	case []any:
		elems := make([]value, len(v))
		for i, e := range v {
			elems[i] = valueOf(e)
		}
		return value{kind: '*', elems: elems}
	}
	return value{}
}

// isString reports whether v is a status or bulk string.
func (v value) isString() bool { return v.kind == '$' }

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
