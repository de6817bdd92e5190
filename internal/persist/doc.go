// Package persist is fenceproxy's fence store: it issues fencing tokens and
// remembers, for each resource, the newest token granted on it. It keeps both
// in a Pebble database under --data-dir, so that neither kill -9 of fenceproxy
// nor the loss of every Redis key can make a token go back. A Shared store
// (Options.Shared, as fenceproxy opens it) also keeps its bound on the
// backend, so that losing the directory alone (an empty, new or restored
// --data-dir) cannot either: see shared.go and internal/authority.
//
// What survives a crash, what it costs in memory, how it grows, and the
// designs tried and dropped: docs/design/persist.md.
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
// Three key families in Pebble, whose schema, token encoding and max merge
// are internal/tokenstate's (shared with the tier's state): m/ for the
// store's own state (m/bound, m/floor, and its identity m/id, m/run, m/dir),
// t/<resource> for the resource's newest token, p/<token><resource> (empty)
// for a token reserved and not yet confirmed or cancelled.
//
// m/id names the store on the backend; m/run and m/dir let the next process
// tell a dead predecessor from a live copy of the directory (shared.go).
// A grant is recorded in two steps (reserve.go): Reserve syncs
// p/<token><resource> while the caller waits for Redis's replicas, then
// Confirm makes it t/<resource> (or Cancel drops the reservation), in
// memory at once and on disk with the next Reserve's batch.
//
// In memory it keeps last (the counter), bound (the published bound: m/bound
// as synced and, for a Shared store, shared), synced (m/bound as last
// synced), floor (m/floor as synced), the newest-token cache, and the
// confirmations not yet written (deferred).
//
// # Invariants
//
//  1. No token above the durable bound. NextToken returns t only if t <= a value
//     of m/bound whose pebble.Sync commit has returned success. m/bound only
//     grows, so every token ever returned is <= the m/bound on disk.
//  2. Open starts above the bound. Open reads m/bound = B, durably writes
//     B+ReserveWindow (a Shared store: Join, before its first token), and
//     sets last = B before it returns. By (1) every token
//     an earlier process returned is <= B < every token this one returns.
//     Within a process last is an atomic counter. (1) and (2) give the fencing
//     invariant. When last reaches bound, the caller that crossed it writes a
//     new bound (last+ReserveWindow) with pebble.Sync before returning: one
//     fsync per ReserveWindow tokens, not one per token (Hi/Lo allocation).
//  3. A record is a max. t/ is written with a Pebble merge operator
//     whose result is the maximum of its operands, so the stored value is the
//     max of every write ever applied, whatever the order of concurrent
//     commits or of WAL replay (a caller that vouches a token is above all
//     before it, Grant.AboveAll, gets a plain Set, which reads faster).
//     Reserve returns nil only after its batch is synced; no read is needed
//     and no lock is held across the commit, so concurrent Reserves share
//     one batch and one synced commit (commit.go: a group commit).
//  4. Recorded <= issued. Reserve and Confirm reject a token above the last
//     issued one, so every t/ and p/ value is <= m/bound and, by (2), below
//     every later token.
//  5. The cache never hides a confirmed token. A cached entry starts as a
//     value read from Pebble and is raised (max) by every Confirm. A Pebble
//     read races with a Confirm only through a per-shard write epoch: a miss
//     fills the cache only if no Confirm touched that shard during the read.
//     A miss reads the deferred confirmations before Pebble, and one leaves
//     them only once a commit has put it in Pebble, so whichever is read
//     second has it. So Newest(r) >= the token of every Confirm(r) that
//     returned nil before Newest was called.
//  6. Fail-stop. If any synced commit fails (disk full, I/O error) or Pebble
//     reports a fatal error, the failing call returns an error whose outcome
//     is unknown (its write may or may not be on disk), the cache is not
//     updated, and every later NextToken, Reserve, Confirm and Newest returns
//     ErrUnhealthy. After a failed fsync the page cache and Pebble's memtable
//     may hold data that is not on disk; answering from them could regress a
//     token after a crash. Restarting the process recovers: Open re-reserves
//     above whatever bound did reach the disk.
//  7. A reservation counts after a crash. Reserve syncs p/<token><resource> before
//     the caller knows whether the token will be issued; Confirm (no write
//     of its own: the reservation already is durable) moves it to
//     t/<resource> with the next Reserve's batch (by max-merge: batches
//     may commit in either order), Cancel drops it (unsynced). Open folds
//     every p/ left by a crash into t/ before serving, so a token that may
//     have been replied is never forgotten, nor one confirmed but not yet
//     written. While the process lives, reads ignore p/: a cancelled token
//     never counts.
//  8. The floor is a token issued to every resource and to no owner. Adopt
//     (a token or bound issued without this store: a new, empty or
//     restored directory, another store on the backend) and
//     Options.TokenFloor raise m/floor, synced, before it is published and
//     the counter raised to it; it never falls. NextToken returns only
//     tokens above it and Newest is never below it, so every token below
//     it is stale, never current again, and none at or below it is issued
//     after Adopt returns (a call already past its counter increment may
//     still return one: it is stale at once, the safe side). The floor
//     itself was replied to nobody; the lock manager calls it never issued.
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
// them; calls after Close return ErrClosed. Lock order: reserveMu (token
// reservations) and the cache shard mutexes are never held together; shard
// mutexes and the deferred writes' mutex are leaves and are never held
// during I/O (the whole proxy's order is in docs/lock-order.md).
//
// The merge operator's name ("fenceproxy.max_u64_be.v1") is stored in the
// database: Pebble refuses to open the directory with any other merger.
package persist
