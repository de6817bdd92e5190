package fanout

import "bytes"

// Mirrored names: the channels, and patterns, that a client subscribed
// through the proxy must hear from every master of a Redis Cluster, not
// from one (keyspace notifications, which a node publishes only to its own
// subscribers, and redirected client-side caching invalidations). PUBSUB
// NUMSUB counts such a channel's subscribers once (merge.go); package
// package pubsub (mirror.go) subscribes them on every master, and says why.

var (
	keyspacePrefix = []byte("__keyspace@")
	keyeventPrefix = []byte("__keyevent@")
)

// InvalidateChannel is where Redis sends redirected invalidations (RESP2).
const InvalidateChannel = "__redis__:invalidate"

// Mirrored reports whether channel is a keyspace notification channel,
// which each master publishes for its own keys only, or
// __redis__:invalidate, which each master writes to its own connections.
func Mirrored(channel []byte) bool {
	return bytes.HasPrefix(channel, keyspacePrefix) || bytes.HasPrefix(channel, keyeventPrefix) ||
		string(channel) == InvalidateChannel
}

// mirroredPattern reports whether a PSUBSCRIBE pattern could match a
// keyspace notification channel (Redis's glob: *, ?, [...] with ^ and
// ranges, \ escapes).
func MirroredPattern(pattern []byte) bool {
	return globMayMatchPrefix(pattern, keyspacePrefix) || globMayMatchPrefix(pattern, keyeventPrefix)
}

// globMayMatchPrefix reports whether some string that starts with prefix
// matches pattern: the pattern is matched against the prefix, and whatever
// is left of it once the prefix is used up can match some ending.
func globMayMatchPrefix(pat, prefix []byte) bool {
	for len(prefix) > 0 {
		if len(pat) == 0 {
			return false
		}
		switch pat[0] {
		case '*':
			return true // it takes the rest of the prefix
		case '?':
			pat = pat[1:]
		case '[':
			in, rest := globClass(pat[1:], prefix[0])
			if !in {
				return false
			}
			pat = rest
		case '\\':
			if len(pat) >= 2 {
				pat = pat[1:]
			}
			fallthrough
		default:
			if pat[0] != prefix[0] {
				return false
			}
			pat = pat[1:]
		}
		prefix = prefix[1:]
	}
	return true
}

// globClass matches c against a [...] class whose body starts at pat (just
// after '['), as Redis's stringmatchlen does; rest is the pattern after it.
func globClass(pat []byte, c byte) (in bool, rest []byte) {
	not := len(pat) > 0 && pat[0] == '^'
	if not {
		pat = pat[1:]
	}
	match := false
	for len(pat) > 0 && pat[0] != ']' {
		switch {
		case pat[0] == '\\' && len(pat) >= 2:
			match = match || pat[1] == c
			pat = pat[2:]
		case len(pat) >= 3 && pat[1] == '-':
			lo, hi := pat[0], pat[2]
			if lo > hi {
				lo, hi = hi, lo
			}
			match = match || (c >= lo && c <= hi)
			pat = pat[3:]
		default:
			match = match || pat[0] == c
			pat = pat[1:]
		}
	}
	if len(pat) > 0 {
		pat = pat[1:] // the ']'
	}
	return match != not, pat
}
