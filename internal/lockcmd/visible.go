package lockcmd

import (
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/locks"
)

// What a client sees of other users' locks with authentication on.

// hiddenOwner is what LOCK.INFO shows as the owner of a lock held by
// another user than the caller's: the owner string is a credential (it
// renews and releases), so it is never shown across users.
const hiddenOwner = "(held by another user)"

// visibleOwner is the owner LOCK.INFO shows a connection whose
// holderPrefix is prefix: the stored owner with authentication off; the
// client's own owner string for its user's locks, hiddenOwner for anyone
// else's.
func visibleOwner(prefix, stored string) string {
	if prefix == "" {
		return stored
	}
	if strings.HasPrefix(stored, prefix) {
		return stored[len(prefix):]
	}
	return hiddenOwner
}

// visibleTop is LOCK.TOP for the connection's user: only resources its key
// patterns let it read, so one tenant does not learn another's resource
// names.
func (fam *Family) visibleTop(c Conn, n int) ([]locks.Contended, []int) {
	top, waiters := fam.opts.Manager.Top(1024) // every counter the sketch keeps
	kept := 0
	for i, t := range top {
		if kept == n {
			break
		}
		if c.CanRead([]byte(t.Resource)) {
			top[kept], waiters[kept] = t, waiters[i]
			kept++
		}
	}
	return top[:kept], waiters[:kept]
}

// visibleSlowLog is LOCK.SLOWLOG GET for a user: the newest n entries (all
// for -1) of resources the user may read, as LOCK.TOP.
func (fam *Family) visibleSlowLog(c Conn, n int) []locks.SlowEntry {
	all := fam.opts.Manager.SlowLog(-1)
	kept := all[:0]
	for _, e := range all {
		if n >= 0 && len(kept) == n {
			break
		}
		if c.CanRead([]byte(e.Resource)) {
			kept = append(kept, e)
		}
	}
	return kept
}
