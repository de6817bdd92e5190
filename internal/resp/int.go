package resp

import "math"

// ParseInt parses a decimal integer the way Redis's string2ll does: no sign
// but a leading '-', no spaces, no leading zeros, no empty string. Lengths
// in replies and requests, and integer arguments, are read with it.
func ParseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) > 1 && (b[0] == '0' || (b[0] == '-' && b[1] == '0')) {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxUint64-9)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if neg {
		if n > math.MaxInt64+1 {
			return 0, false
		}
		return -int64(n), true
	}
	if n > math.MaxInt64 {
		return 0, false
	}
	return int64(n), true
}
