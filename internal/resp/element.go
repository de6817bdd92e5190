package resp

import (
	"bytes"
	"strconv"
)

// BulkString reads a bulk or simple string reply (or element).
func BulkString(raw []byte) (string, bool) {
	v, err := Parse(raw)
	str, ok := v.(string)
	return str, err == nil && ok
}

// Integer reads an integer reply (or element).
func Integer(raw []byte) (int64, bool) {
	v, err := Parse(raw)
	n, ok := v.(int64)
	return n, err == nil && ok
}

// FlatElements splits an array, set or map reply into its elements (a
// map's as key, value, key, value ...); isMap says it was a RESP3 map.
func FlatElements(raw []byte) (elems [][]byte, isMap, ok bool) {
	if len(raw) > 0 && raw[0] == '%' {
		end := bytes.IndexByte(raw, '\n')
		n, err := strconv.Atoi(string(bytes.TrimSpace(raw[1:max(end, 1)])))
		if end < 0 || err != nil || n < 0 {
			return nil, false, false
		}
		fake := append([]byte("*"+strconv.Itoa(2*n)+"\r\n"), raw[end+1:]...)
		elems, ok = Elements(fake)
		if !ok {
			return nil, false, false
		}
		// The elements are slices of fake: copies of raw's bytes, fine to keep.
		return elems, true, true
	}
	elems, ok = Elements(raw)
	return elems, false, ok
}
