// Package persist is fenceproxy's fence store: it issues fencing tokens and
// remembers, for each resource, the newest token granted on it, in a Pebble
// database under --data-dir, so that neither kill -9 of fenceproxy nor the
// loss of every Redis key can make a token go back. A Shared store
// (Options.Shared, as fenceproxy opens it) also keeps its bound on the
// backend, so that losing the directory alone (an empty, new or restored
// --data-dir) cannot either (shared.go, internal/authority). The long form,
// with what survives a crash: docs/design/persist.md.
//
// # The fencing invariant
//
// Every token NextToken returns is strictly greater than every token returned
// before it, by this process or by any earlier process on the same directory.
// Tokens are global (one counter for all resources), so per-resource
// monotonicity follows: the lock manager asks for a fresh token on every grant.
//
// # What it keeps
//
// Pebble keys (schema, encoding and max merge: internal/tokenstate): m/ for
// the store's own state (m/bound, m/floor; its identity m/id, m/run, m/dir),
// t/<resource> for the resource's newest token, p/<token><resource> (empty)
// for a token reserved and not yet confirmed or cancelled. In memory: last
// (the counter), bound (the published bound) and a newest-token cache.
//
// # Invariants
//
//  1. No token above the durable bound. NextToken returns t only if t <= a
//     value of m/bound whose pebble.Sync commit has returned success. m/bound
//     only grows, so every token ever returned is <= the m/bound on disk.
//  2. Open starts above the bound. Open reads m/bound = B, durably writes
//     B+ReserveWindow (a Shared store: Join, before its first token), and
//     sets last = B before it returns. By (1) every token an earlier process
//     returned is <= B < every token this one returns. Within a process last
//     is an atomic counter. (1) and (2) give the fencing invariant. When last
//     reaches bound, the caller that crossed it syncs a new bound
//     (last+ReserveWindow) before returning: one fsync per ReserveWindow.
//  3. A record is a max. t/ is written with a Pebble merge operator whose
//     result is the max of its operands ("fenceproxy.max_u64_be.v1": Pebble
//     opens the database with no other merger), so the stored value is the
//     max of every write ever applied, whatever the order of concurrent
//     commits or of WAL replay (Grant.AboveAll, a caller's word that a token
//     is above all before it, gets a plain Set). Reserve returns nil only
//     after its batch is synced; it reads nothing and holds no lock across
//     the commit, so concurrent Reserves share one synced commit (commit.go).
//  4. Recorded <= issued. Reserve and Confirm reject a token above the last
//     issued one, so every t/ and p/ value is <= m/bound and, by (2), below
//     every later token.
//  5. The cache never hides a confirmed token. A cached entry starts as a
//     value read from Pebble and is raised (max) by every Confirm. A miss
//     fills the cache only if no Confirm touched its shard during the read
//     (a per-shard write epoch). A miss reads the deferred confirmations
//     before Pebble, and one leaves them only once a commit put it in Pebble,
//     so whichever is read second has it. So Newest(r) >= the token of every
//     Confirm(r) that returned nil before Newest was called.
//  6. Fail-stop. If any synced commit fails (disk full, I/O error) or Pebble
//     reports a fatal error, the failing call returns an error whose outcome
//     is unknown (its write may or may not be on disk), the cache is not
//     updated, and every later NextToken, Reserve, Confirm and Newest returns
//     ErrUnhealthy. Restarting the process recovers: Open re-reserves above
//     whatever bound did reach the disk.
//  7. A reservation counts after a crash. Reserve syncs p/<token><resource>
//     before the caller knows whether the token will be issued; Confirm
//     (no write of its own) moves it to t/<resource> with the next Reserve's
//     batch (by max-merge: batches may commit in either order); Cancel
//     drops it (unsynced). Open folds every p/ left by a crash into t/
//     before serving, so a token that may have been replied is never
//     forgotten, nor one confirmed but not yet written. While the process
//     lives, reads ignore p/: a cancelled token never counts.
//  8. The floor is a token issued to every resource and to no owner. Adopt
//     (a token or bound issued without this store: a new, empty or restored
//     directory, another store on the backend) and Options.TokenFloor raise
//     m/floor, synced, before it is published and the counter raised to it;
//     it never falls. NextToken returns only tokens above it and Newest is
//     never below it: every token below it is stale for good, and none at or
//     below it is issued after Adopt returns (a call already past its counter
//     increment may still return one: stale at once, the safe side). The
//     floor was replied to nobody; the lock manager calls it never issued.
//  9. A Shared store issues nothing before Join, and publishes a bound only
//     after it is synced locally AND the backend's copy holds it (Join's
//     share function, with WAIT in fenceproxy). So every token returned is
//     at most both copies' bound, and losing one copy loses no bound. A
//     backend copy found above a new bound was written by another store:
//     the floor goes above it (8) and the reservation is made again. A
//     failed share refuses tokens (ErrNotShared) without making the store
//     unhealthy: the next NextToken tries again.
//
// # Concurrency
//
// NextToken, Reserve, Confirm, Cancel, Newest, Adopt, Join and Stats are
// safe for concurrent use. Join's share function runs under reserveMu and
// must not call back into the store. Close must not run concurrently with
// them; calls after Close return ErrClosed. Lock order: reserveMu and the
// cache shard mutexes are never held together; shard mutexes and the
// deferred writes' mutex are leaves, never held during I/O (the whole
// proxy's order is in docs/lock-order.md).
package persist
