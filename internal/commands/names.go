package commands

// lowerInto appends b in lower case to dst (for map lookups that do not
// allocate).
func lowerInto(dst, b []byte) []byte {
	for _, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// lowerName is b in lower case (a command or subcommand name).
func lowerName(b []byte) string {
	var buf [32]byte
	return string(lowerInto(buf[:0], b))
}
