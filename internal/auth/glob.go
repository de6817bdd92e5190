package auth

// Match reports whether s matches the glob pattern as Redis's
// stringmatchlen (util.c, Redis 7.0, case-sensitive) decides it, byte for
// byte, which is how Redis matches ACL key and channel patterns and KEYS:
//
//   - '*' matches any bytes, '/' included (unlike path.Match), and '?' any
//     one byte;
//   - '[abc]', '[a-z]' (also '[z-a]'), '[^...]' match one byte; '\' escapes
//     inside brackets; an unterminated '[' matches up to the pattern's end;
//   - '\x' matches x literally; a trailing lone '\' matches a '\';
//   - everything is bytes: no UTF-8, no case folding.
//
// Like Redis it gives up (no match) beyond 1000 nested '*' and stops
// retrying longer matches for an earlier '*' once a later one has failed
// everywhere, so a pattern costs at most O(len(pattern)·len(s)) steps for
// the common cases. It allocates nothing.
func Match(pattern, s []byte) bool {
	skip := false
	return match(pattern, s, &skip, 0)
}

// MatchString is Match for strings.
func MatchString(pattern, s string) bool {
	return Match([]byte(pattern), []byte(s))
}

// at returns b[i], or 0 past the end: Redis's strings end in a NUL byte
// that its matcher reads as the byte after the last.
func at(b []byte, i int) byte {
	if i < len(b) {
		return b[i]
	}
	return 0
}

// match is stringmatchlen_impl: p and s are the rest of the pattern and the
// string; skipLonger is shared by every level of one match.
func match(p, s []byte, skipLonger *bool, nesting int) bool {
	if nesting > 1000 {
		return false // Redis's protection against abusive patterns
	}
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for len(s) > 0 {
				if match(p[1:], s, skipLonger, nesting+1) {
					return true
				}
				if *skipLonger {
					return false
				}
				s = s[1:]
			}
			// The rest of the pattern matches nowhere in the rest of
			// the string: an earlier '*' cannot help by matching more.
			*skipLonger = true
			return false
		case '?':
			s = s[1:]
		case '[':
			p = p[1:]
			not := at(p, 0) == '^'
			if not {
				p = p[1:]
			}
			matched := false
			for {
				if at(p, 0) == '\\' && len(p) >= 2 {
					p = p[1:]
					if p[0] == s[0] {
						matched = true
					}
				} else if at(p, 0) == ']' {
					break
				} else if len(p) == 0 {
					// Unterminated: step back so the common p = p[1:]
					// below leaves the pattern empty.
					p = p[len(p):]
					break
				} else if len(p) >= 3 && p[1] == '-' {
					// Redis compares C chars, signed on the x86-64 and
					// common builds: [a-\xff] is the range \xff..a.
					start, end, c := int8(p[0]), int8(p[2]), int8(s[0])
					if start > end {
						start, end = end, start
					}
					p = p[2:]
					if c >= start && c <= end {
						matched = true
					}
				} else if p[0] == s[0] {
					matched = true
				}
				p = p[1:]
			}
			if not {
				matched = !matched
			}
			if !matched {
				return false
			}
			s = s[1:]
		case '\\':
			if len(p) >= 2 {
				p = p[1:]
			}
			fallthrough
		default:
			if p[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		// The bracket case may have consumed the whole pattern (an
		// unterminated '['); Redis steps back one byte for that and then
		// forward here.
		if len(p) > 0 {
			p = p[1:]
		}
		if len(s) == 0 {
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			break
		}
	}
	return len(p) == 0 && len(s) == 0
}
