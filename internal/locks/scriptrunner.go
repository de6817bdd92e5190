package locks

import (
	"context"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// ScriptRunner is how the Manager reaches Redis: it runs the lock scripts
// (scripts.go) on the master that owns a record's key. lockwriter.Writer,
// the batched writer over the masters' lock connections, is the one
// fenceproxy runs.
//
// The contract the Manager relies on:
//
//   - Start runs call on the master of key's slot and returns once its
//     reply is in (Write.Reply then does not wait); with wantAcks a WAIT
//     for the minimum replicas travels right behind it on the same
//     connection, and Write.Acks waits for it. Reply comes before Acks:
//     the Manager does its fsync in between. A call that did not run
//     (NOSCRIPT, a cluster redirect, no reachable master) is retried
//     within a bound or answered upstream.ErrUnavailable: Start never
//     reports a script that did not run as run, nor retries one that may
//     have run.
//   - Every error of a Write is the script's own (Redis refused it: a
//     resp.Error), upstream.ErrUnavailable (it was not sent: nothing
//     happened), a refused node's error (a resp.Error with its NotMaster
//     reply: it was not sent), upstream.ErrOutcomeUnknown (the connection
//     was lost with it or its WAIT in flight: it may or may not have run,
//     on any number of replicas; Raw reports that as backend.ErrLost), or
//     the context's error (it was not sent). An Acks error is always an
//     unknown outcome.
//   - RunAfter runs call, with no WAIT, on the master that ran prev (an
//     undo goes where its grant went, not where the key is now).
//   - Read runs a read-only script on key's master, no WAIT, following
//     the slot as Start does.
//   - MemoryPolicy is key's master's last maxmemory-policy reading, with
//     no I/O; ok false if no master is reachable (the write then says so).
type ScriptRunner interface {
	Start(ctx context.Context, key string, call lockwriter.ScriptCall, wantAcks bool) *lockwriter.Write
	RunAfter(ctx context.Context, prev *lockwriter.Write, call lockwriter.ScriptCall) (any, error)
	Read(ctx context.Context, key string, call lockwriter.ScriptCall) (any, error)
	MemoryPolicy(key string) (policy upstream.MemoryPolicy, ok bool)
	// RoutesByKey reports whether scripts go to the master of their keys'
	// slot (a Redis Cluster), whose keys must then share one slot.
	RoutesByKey() bool
}

var _ ScriptRunner = (*lockwriter.Writer)(nil)
