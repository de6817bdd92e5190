package upstream

import "bytes"

// Keyspace notifications in front of a Redis Cluster.
//
// A node publishes a key's __keyspace@<db>__:<key> and __keyevent@<db>__:<event>
// messages only to its own subscribers (they are not sent over the cluster
// bus as PUBLISH is), so a client that hears them through one connection
// hears only the keys of one master. A subscribed client's channels that are
// keyspace channels, and patterns that could match one, are therefore
// "mirrored": subscribed on a connection to every master besides the home
// connection (subscriber.go). From those mirror connections only keyspace
// messages are relayed (every other message reaches the home connection
// too, through the cluster bus, and would arrive twice), and only while the
// mirror's node is a master (a demoted master's replica stream would repeat
// its new master's events); their confirmations are swallowed, and the home
// connection's confirmation of a mirrored name waits until every mirror has
// confirmed it, so that a client told it is subscribed hears every master
// from then on. The home connection's own keyspace messages are relayed
// while its node is a master.
//
// What remains of the difference: a message PUBLISHed by a client to a
// channel named like a keyspace channel reaches the client once per master
// (each node relays it), and when a master fails over, the events of its
// slots between the promotion and the proxy's subscription on the new
// master (it checks every mirrorCheckEvery) are not heard.

//
// __redis__:invalidate is mirrored too: each master sends a redirected
// client-side caching invalidation (CLIENT TRACKING ... REDIRECT) only to
// the connection named on it, and a tracking client's connection to each
// master redirects to the target's connection there (tracker.go).

var (
	keyspacePrefix = []byte("__keyspace@")
	keyeventPrefix = []byte("__keyevent@")
)

// invalidateChannel is where Redis sends redirected invalidations (RESP2).
const invalidateChannel = "__redis__:invalidate"

// Mirrored reports whether channel is a keyspace notification channel,
// which each master publishes for its own keys only, or
// __redis__:invalidate, which each master writes to its own connections.
func Mirrored(channel []byte) bool {
	return bytes.HasPrefix(channel, keyspacePrefix) || bytes.HasPrefix(channel, keyeventPrefix) ||
		string(channel) == invalidateChannel
}

// mirroredPattern reports whether a PSUBSCRIBE pattern could match a
// keyspace notification channel (Redis's glob: *, ?, [...] with ^ and
// ranges, \ escapes).
func mirroredPattern(pattern []byte) bool {
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
