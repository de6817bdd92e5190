package locks

import (
	"bytes"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// The lock operations' usual replies are read straight from their bytes,
// without building a value (resp.Parse's strings and []any, each boxed,
// were about five allocations of every lock cycle); anything else goes
// through Write.Reply, which reads it and its errors.

// bulkReply is w's script's reply if it is a bulk string, which it waits
// for; ok is false for any other reply or error.
func bulkReply(w *lockwriter.Write) (body []byte, ok bool) {
	raw, err := w.Raw()
	if err != nil {
		return nil, false
	}
	body, rest, ok := bulkOf(raw)
	return body, ok && len(rest) == 0
}

// bulkOf reads a bulk string (not null) off the front of b.
func bulkOf(b []byte) (body, rest []byte, ok bool) {
	head := bytes.IndexByte(b, '\n')
	if head < 3 || b[0] != '$' || b[head-1] != '\r' {
		return nil, nil, false
	}
	n, ok := resp.ParseInt(b[1 : head-1])
	if !ok || n < 0 || int64(len(b)-head-1) < n+2 {
		return nil, nil, false
	}
	body, rest = b[head+1:head+1+int(n)], b[head+1+int(n):]
	if rest[0] != '\r' || rest[1] != '\n' {
		return nil, nil, false
	}
	return body, rest[2:], true
}

// intOf reads an integer reply off the front of b.
func intOf(b []byte) (n int64, rest []byte, ok bool) {
	head := bytes.IndexByte(b, '\n')
	if head < 3 || b[0] != ':' || b[head-1] != '\r' {
		return 0, nil, false
	}
	n, ok = resp.ParseInt(b[1 : head-1])
	return n, b[head+1:], ok
}
