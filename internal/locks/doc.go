// Package locks is fenceproxy's lock manager: it grants, renews and releases
// leases on named resources, issues their fencing tokens, and runs the
// clients' own lock recipes (Redisson's, redis-py's, redsync's...) with the
// same rules. The long form, with the designs tried and dropped, is
// docs/design/locks.md.
//
// A grant, before its reply: (1) one call of opsScript on the resource's
// master sets the owner record only if the resource is free or the
// caller's, with the operations of many clients batched into that call
// (scripts.go; the batching is internal/lockwriter's); (2) one WAIT
// behind the batch, on the same connection, for --min-replicas
// acknowledgements; (3) meanwhile the token is reserved in the fence
// store, fsynced in a group commit, and confirmed once the replicas have
// answered. A shortfall or a reply too late for the lease's safety margin
// (replyBy) undoes the record (compare-and-delete)
// and cancels the reservation once the undo showed Redis holds nothing;
// an outcome that cannot be known counts as issued. A grant to a waiter
// uses a token its line reserved ahead (handoff.go).
//
// Waiting is first come, first served and bounded (serial.go, handoff.go);
// an evicting master gets no grants (evict.go); LOCK.INFO, LOCK.TOP and the
// slow-lock log read what the records and leases.go keep. Recipes
// (recipes.go, fair.go, rwlock.go, setnx.go and their *ops.go) run a twin
// of the recognised script as an opsScript operation, undone exactly from
// the pre-image it returns.
//
// # Seams
//
//   - TokenStore (tokenstore.go): where tokens come from and where each
//     resource's newest is recorded; PersistStore adapts internal/persist,
//     the tier plugs its replicated store in here.
//   - ScriptRunner (scriptrunner.go): runs scripts on a key's master, a
//     write optionally followed by its batch's WAIT. lockwriter.Writer is
//     fenceproxy's (its package doc has the rounds, what a WAIT
//     acknowledges and the outcomes); a lock operation is a
//     lockwriter.ScriptCall with an Op (lockOp) of opsScript. A failure
//     arrives as the reply's typed error, never as reply text.
//   - Runner (runner.go, workers.go): the command layer hands it the lock
//     requests that wait on each step: a connection's requests for one
//     resource in order, on bounded workers, cancelled when the client
//     goes away. The usual course of LOCK.ACQUIRE without WAIT, LOCK.RENEW,
//     LOCK.RELEASE, Redisson's RLock acquire, unlock and watchdog renewal
//     needs no worker, nor does a release that hands the lock to the head
//     of the line: AcquireNow and its kind (now.go) run each step as a
//     callback where the one before completes (the lock writer's reply, the fence
//     store's group commit, the shared WAIT), through the same functions
//     the blocking course uses from that step on.
//
// Lock order: a resource's serializer, then leases.mu. A resource's turn
// may end on another goroutine (a release handing the resource to the head
// of its line). Every other mutex here is a leaf, never held across I/O
// (docs/lock-order.md).
//
// # Invariants
//
//   - Every token a reply carries is strictly greater than every token
//     replied before for that resource (a same-owner retry gets the one it
//     holds).
//   - A token is replied only after it is synced as the resource's newest,
//     the owner record has its replica acknowledgements, and at least the
//     safety margin of its lease is left.
//   - The scripts honour a record (re-arm, renew) only if its token is the
//     newest the fence store knows as issued: no reply carries a token
//     FENCE.CHECK would call never issued.
//   - Records change only by scripts that compare the owner (and, to undo,
//     the token); a lapsed lease is never revived.
//   - No stale leader (terms.go): every write carries the caller's term and
//     a record or guard of a higher term refuses it (ErrDeposed).
//   - Fenced writes are checked where they land (fencemark.go): every grant
//     raises the resource's fence mark in Redis; FENCE.EXEC's script runs
//     its command only at or above it, within half the mark's life.
//   - One token authority (authority.go): tokens are issued or judged only
//     while no other fence store is live on the backend, and a record
//     carrying a token this store never issued is adopted before any grant
//     of its resource.
package locks
