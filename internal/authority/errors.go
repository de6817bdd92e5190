package authority

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnconfirmed means this process is not confirmed as the backend's only
// token authority right now: its heartbeat round is overdue (Redis slow or
// unreachable, or the process was paused), or its token bound is not yet
// written to Redis. Retry shortly.
var ErrUnconfirmed = errors.New("authority: the token authority is not confirmed on Redis right now")

// NoReplicasError means a token bound reached the master but fewer
// replicas than --min-replicas acknowledged it in time: no token of its
// window is issued.
type NoReplicasError struct{ Acked, Wanted int }

func (e *NoReplicasError) Error() string {
	return fmt.Sprintf("authority: %d of %d required replicas acknowledged the token bound", e.Acked, e.Wanted)
}

// ConflictError means another token authority is live on the backend.
type ConflictError struct {
	// Stores are the other live members' fence store ids.
	Stores []string
	// Copy is set when one of them runs on a copy of this store's
	// directory (same store id, another process).
	Copy bool

	members map[string]string // the conflicting live members and their scores
}

func (e *ConflictError) Error() string { return "authority: " + e.Reason() }

// StartReason says why a process that is starting does not start
// (Options.StartAlone), and what to do, in one line; backend names the
// backend (the flags that chose it).
func (e *ConflictError) StartReason(backend string) string {
	ids := strings.Join(e.Stores, ", ")
	if e.Copy {
		return fmt.Sprintf("another fenceproxy runs on a copy of this data dir (fence store id %s) in front of %s; "+
			"two copies of one fence store would hand out the same tokens, so this one does not start. Stop that one first", ids, backend)
	}
	return fmt.Sprintf("another fenceproxy with another fence store (store id %s) is live in front of %s; "+
		"tokens from two fence stores would interleave, so this one does not start. Stop that one first (this one then "+
		"starts above every token it issued), or give this one another --key-prefix if its resources are others", ids, backend)
}

// Reason says what is wrong and what to do, for a client's error reply
// (store ids are random, not secrets).
func (e *ConflictError) Reason() string {
	ids := strings.Join(e.Stores, ", ")
	if e.Copy {
		return fmt.Sprintf("another fenceproxy runs on a copy of this fence store's data dir (store id %s) on this backend; "+
			"tokens from two copies would interleave, so lock commands are refused until one of them stops", ids)
	}
	return fmt.Sprintf("another fenceproxy with another fence store (store id %s) is live on this backend; "+
		"tokens from two fence stores would interleave, so lock commands are refused until one of them stops", ids)
}
