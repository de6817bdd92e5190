package authority

import (
	"fmt"
	"strings"
)

// ErrUnconfirmed means this process is not confirmed as the backend's only
// token authority right now: its heartbeat round is overdue (Redis slow or
// unreachable, or the process was paused), or its token bound is not yet
// written to Redis. Retry shortly.
var ErrUnconfirmed error = unconfirmed{}

// unconfirmed is ErrUnconfirmed's type. It implements resp.CodedError (a
// lock command's client is answered with TRYAGAIN), and marks itself
// AuthorityUnconfirmed: while the backend refuses the proxy's writes, the
// command layer answers with that refusal instead, which says why.
type unconfirmed struct{}

func (unconfirmed) Error() string {
	return "authority: the token authority is not confirmed on Redis right now"
}

// RESPError is the client's error reply (resp.CodedError).
func (unconfirmed) RESPError() (code, msg string) {
	return "TRYAGAIN", "fenceproxy: this proxy is not confirmed as the backend's token authority right now " +
		"(its heartbeat to Redis is late, or the token bound is not yet written there with the required replicas); nothing was done, retry shortly"
}

// AuthorityUnconfirmed marks the error as the token authority's not being
// confirmed on the backend right now.
func (unconfirmed) AuthorityUnconfirmed() {}

// NoReplicasError means a token bound reached the master but fewer
// replicas than --min-replicas acknowledged it in time: no token of its
// window is issued. Before the first bound is acknowledged (a master
// without enough replicas at start), every lock command that issues or
// judges a token is refused with it.
type NoReplicasError struct {
	Acked, Wanted int
	// Connected is how many replicas the master had connected when last
	// looked at (INFO replication).
	Connected int
}

// RESPError is the client's error reply (resp.CodedError).
func (e *NoReplicasError) RESPError() (code, msg string) {
	return "NOREPLICAS", "fenceproxy: " + e.Reason()
}

func (e *NoReplicasError) Error() string {
	return fmt.Sprintf("authority: %d of %d required replicas acknowledged the token bound", e.Acked, e.Wanted)
}

// Reason says what is wrong and what to do, for a client's error reply
// and /readyz. What has to be acknowledged is the token bound: every
// window of tokens has its bound written to Redis with a WAIT for
// --min-replicas before any token of it is handed out (doc.go, invariant
// 1), so until one is, no lock command can be served.
func (e *NoReplicasError) Reason() string {
	const what = "lock commands wait until fenceproxy's token bound, written to Redis before any token is issued, has them; nothing was done"
	switch {
	case e.Connected == 0:
		return fmt.Sprintf("%d of %d required replicas acknowledged; the master has no replica: add one, or start with --min-replicas 0 "+
			"(a grant then dies with the master if it fails over before replicating); %s", e.Acked, e.Wanted, what)
	case e.Connected < e.Wanted:
		return fmt.Sprintf("%d of %d required replicas acknowledged; the master has %d connected: add replicas, or start with --min-replicas %d; %s",
			e.Acked, e.Wanted, e.Connected, e.Connected, what)
	}
	return fmt.Sprintf("%d of %d required replicas (--min-replicas) acknowledged in time (--replica-timeout); %s, retry shortly",
		e.Acked, e.Wanted, what)
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

// RESPError is the client's error reply (resp.CodedError).
func (e *ConflictError) RESPError() (code, msg string) { return "ERR", "fenceproxy: " + e.Reason() }

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
