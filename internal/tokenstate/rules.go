package tokenstate

// MaxToken is the largest token ever issued, 2^53: the lock scripts
// compare a record's token with a candidate in Lua, whose numbers are
// doubles, exact only up to 2^53 (above it, a record's token just above
// the candidate could compare equal or below, and be overwritten). At a
// million tokens a second that is 285 years.
const MaxToken = 1 << 53

// FloorAbove is the floor that makes every token up to foreign stale
// (invariant 3): foreign+1, at most MaxToken.
func FloorAbove(foreign uint64) uint64 { return min(foreign, MaxToken-1) + 1 }

// NextBound is the bound of a window of window tokens above above, at
// most MaxToken (invariant 2). window must be at most MaxToken.
func NextBound(above, window uint64) uint64 {
	if above < MaxToken-window {
		return above + window
	}
	return MaxToken
}

// Newest is a resource's newest token given the one stored for it and the
// floor: never below the floor (invariant 3).
func Newest(stored, floor uint64) uint64 { return max(stored, floor) }

// Issuable reports whether t may be handed out under floor and bound
// (invariant 4).
func Issuable(t, floor, bound uint64) bool { return t > floor && t <= bound }
