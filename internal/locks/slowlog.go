package locks

import (
	"log/slog"
	"sync"
	"time"
)

// Kinds of slow-lock log entries.
const (
	SlowWait    = "wait"    // an acquire waited in line longer than the threshold
	SlowHeld    = "held"    // a lease was released after being held longer than the threshold
	SlowExpired = "expired" // a lease ran out without a release (always logged)
)

// SlowEntry is one slow-lock log entry. It names the lease by resource and
// token, never by owner: owner strings are often host names, PIDs or
// secrets-adjacent identifiers that an operator's log should not spread.
type SlowEntry struct {
	ID       uint64
	Time     time.Time     // when it happened: end of the wait, the release, the lease's end
	Duration time.Duration // time waited, or time held
	Kind     string        // SlowWait, SlowHeld or SlowExpired
	Resource string
	Token    uint64 // the lease's token; 0 for a wait that was not granted
	// ClientAddr is the ip:port of the client connection: the waiting one,
	// or the one the lease was granted for ("" if unknown: a record written
	// before the field existed).
	ClientAddr string
}

// slowLog keeps the newest entries, like Redis's SLOWLOG: a bounded ring,
// newest first when read. Each entry is also logged at info level, at most
// slowLogLinesPerSec lines a second; lines dropped by that limit are counted
// in the next one.
type slowLog struct {
	mu      sync.Mutex
	max     int
	entries []SlowEntry // ring of at most max
	next    int         // where the next entry goes once the ring is full
	nextID  uint64

	logger     *slog.Logger
	windowFrom time.Time
	lines      int // logged in the current second
	suppressed int // not logged since the last line
}

const slowLogLinesPerSec = 10

func newSlowLog(max int, logger *slog.Logger) *slowLog {
	return &slowLog{max: max, logger: logger}
}

// add records e (its ID is assigned here) and logs it.
func (l *slowLog) add(e SlowEntry) {
	l.mu.Lock()
	e.ID = l.nextID
	l.nextID++
	switch {
	case l.max <= 0:
	case len(l.entries) < l.max:
		l.entries = append(l.entries, e)
	default:
		l.entries[l.next] = e
		l.next = (l.next + 1) % l.max
	}
	now := time.Now()
	if now.Sub(l.windowFrom) >= time.Second {
		l.windowFrom, l.lines = now, 0
	}
	log := l.lines < slowLogLinesPerSec
	suppressed := 0
	if log {
		l.lines++
		suppressed, l.suppressed = l.suppressed, 0
	} else {
		l.suppressed++
	}
	l.mu.Unlock()
	if !log {
		return
	}
	attrs := []any{"id", e.ID, "kind", e.Kind, "resource", e.Resource, "token", e.Token,
		"duration_ms", e.Duration.Milliseconds(), "client_addr", e.ClientAddr}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed_before", suppressed)
	}
	l.logger.Info("slow lock", attrs...)
}

// get returns up to n entries, newest first; n < 0 means all.
func (l *slowLog) get(n int) []SlowEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n < 0 || n > len(l.entries) {
		n = len(l.entries)
	}
	out := make([]SlowEntry, 0, n)
	// The newest is just before next (or last, while the ring fills).
	newest := len(l.entries) - 1
	if len(l.entries) == l.max {
		newest = (l.next - 1 + l.max) % l.max
	}
	for i := 0; i < n; i++ {
		out = append(out, l.entries[(newest-i+len(l.entries))%len(l.entries)])
	}
	return out
}

func (l *slowLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// reset empties the log; IDs keep rising, as Redis's do.
func (l *slowLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries, l.next = nil, 0
}
