// Package locks is fenceproxy's lock manager: it grants, renews and releases
// leases on named resources and issues their fencing tokens.
//
// A grant takes three steps before its reply is sent:
//
//  1. A Lua script on the resource's master sets the owner record (owner,
//     token, lease) only if the resource is free or already the caller's:
//     one atomic compare-and-set. Every lock write is an operation of one
//     script, opsScript, and the writer runs the operations of a batch,
//     many clients' grants, renewals or releases, in one call of it
//     (scripts.go, writer.go).
//  2. WAIT on the same connection until --min-replicas replicas hold the
//     record. On a shortfall the record is deleted again (compare-and-delete
//     on owner and token) and the caller gets -NOREPLICAS: nothing granted.
//  3. While step 2 is under way, the token is reserved in the fence store
//     and fsynced (group-committed with concurrent grants); once the
//     replicas have acknowledged, it is confirmed as the resource's newest
//     (no second fsync: the reservation is durable). The two slow waits,
//     replicas and disk, overlap: the script and its WAIT travel in one
//     pipeline, and Redis answers the script before the WAIT. A grant to
//     an acquire waiting in line uses a token its line reserved ahead, so
//     its fsync is already behind it (handoff.go).
//
// Before the reply, the time left of the lease is checked (replyBy): it
// runs from when the request was read, or for a grant after waiting in
// line from the attempt that made it, and the reply must leave at least
// Options.LeaseSafetyMargin of it after Redlock's drift allowance. A grant
// too late for that is undone and answered ErrLate, as a renewal is (a
// re-arm cannot be undone: the lease stands as Redis has it). A tier
// follower that relays a grant applies the same rule when the reply
// reaches it (ReplyBy, from the Grant's LeaseFrom that AcquireGrant
// returns), and has a grant too late for it undone here (UndoGrant: only
// if that grant is still armed as it was granted).
//
// A refused grant's reservation is cancelled only once the undo script has
// shown that the master holds no record of it, so FENCE.CHECK and LOCK.INFO
// see tokens issued and no others. An outcome that cannot be known (the
// connection lost during the script's reply or its WAIT, WAIT ended with an
// error, an undo that could not run) counts as issued: the token is
// recorded as the newest (reserved and confirmed after the fact if the
// script's reply itself was lost), because the record may stand in Redis
// and nothing answered later may contradict it. That can end the current
// holder's lease early: if the lost write found the resource held, its
// holder's token is called stale all the same and its renewals answer
// null. Only a crash between a reservation and its cancel can make a
// refused token count as issued, which errs on the safe side. (Recording
// the token itself during step 2 was tried and dropped: a
// refused grant then left a never-issued newest token, and FENCE.CHECK
// called the previous holder stale. Reserving it with go-redis, which hands
// back a pipeline's replies only all together, needed a second round trip
// and was slower than no overlap at all.)
//
// The token itself comes from the fence store's counter, which a durable
// reservation keeps ahead of every token ever handed out, so tokens rise
// even if Redis forgets every record. Requests for one resource are
// serialized here, so token order equals grant order.
//
// Before it writes, each acquire attempt and each renewal checks the
// resource's master's last maxmemory-policy reading (evict.go): Redis may
// evict an owner record under any policy but noeviction, so such a master
// gets no grants unless Options.AllowEvictable, and then each is counted.
//
// Waiting is first come, first served and bounded: at most
// Options.MaxWaiters acquires wait per resource, and only the head ever
// tries (serial.go). A release that finds the head asleep in its wait
// grants it the resource in the same script (a direct handoff,
// handoff.go: the head settles the grant in the turn the release passes
// on); otherwise it wakes the head alone to try. A tier node that loses
// leadership ends every waiter at once (EndWaiters, -TRYAGAIN): lines are
// not replicated, and a deposed leader must not grant; a waiter whose
// handoff was in flight undoes it.
//
// What operators see: the owner record also carries when its token was
// granted, when the lease was last armed and the client it was granted for
// (scripts.go), so LOCK.INFO is right whichever proxy asks. The proxy
// remembers the leases it granted (bounded, leases.go) to notice one that
// runs out unreleased, and keeps a slow-lock log of long waits, long holds
// and expiries (slowlog.go).
//
// Clients' own lock recipes (internal/recipes recognises them; recipes.go,
// recipeops.go): the Manager runs its own twin of a recognised script as
// an operation of opsScript, with the family's rules: a grant or renewal
// shares its batch's WAIT, a grant gets a token settled as above, and a
// shortfall or a late reply is undone exactly from the pre-image the twin
// returned. The recipe's lock key is the resource: its owner record (the
// side record) stands beside the recipe's own key. A recipe that hands its
// client a token (Redisson's RFencedLock) hands out the grant's token, and
// its twin raises the recipe's token key in Redis to it, never lowering it.
// Redisson's RFairLock (fair.go, fairops.go) is RLock's hash with a queue
// beside it: its grants take the same path, and an undo puts the queue
// back too. Value locks (SET NX and
// the scripts of redis-py, redsync, redislock and node-redlock) have their
// own twins and settling: setnx.go, setnxops.go. Redisson's RReadWriteLock
// has its own too (rwlock.go, rwlockops.go): its side record stands for
// the lock's epoch, whose one token every reader shares.
//
// # Seams
//
// The Manager reaches the world outside through two small interfaces, so
// that every outcome of a lock command can be set up and tested without a
// Redis or a disk (Pebble's commitEnv is the pattern):
//
//   - TokenStore (tokenstore.go): where tokens come from and where each
//     resource's newest is recorded. Its documented contract is exactly
//     what the invariants below need of a fence store. PersistStore adapts
//     internal/persist's Pebble store; a store replicated across a tier of
//     proxies is to plug in here.
//   - ScriptRunner (scriptrunner.go): runs the scripts on the master of a
//     record's key, a write optionally followed by the WAIT whose count
//     comes after the script's reply. Writer (writer.go) is fenceproxy's:
//     for each master it serves the lock connections the cluster Node
//     hands it (Node.ServeLockWrites) with batched writers, one WAIT per
//     batch, each writer writing a batch in one write and reading its
//     replies itself (backend.SyncConn), and it owns the NOSCRIPT and
//     cluster-redirect retries. A
//     failure on the way (not sent, connection lost, a refused node)
//     arrives as the reply slot's typed error (resp.Reply's Err), never
//     as reply text. The token authority (internal/authority) sends its
//     bound through it too.
//
// acquireScript's replies are named kinds (kindBusy, kindRearmed,
// kindGranted, kindNeedNewest, kindTokenAhead: scripts.go), and one
// attempt carries its call, tokens and reply in an attempt struct.
//
// # Where lock requests run
//
// Runner (runner.go, workers.go) is the lock path's concurrency policy,
// which the command layer hands every lock request to: a connection's
// requests for one resource in the order sent, on bounded workers, a
// request that may wait long (LOCK.ACQUIRE … WAIT, or one queued behind
// its predecessor) off them, and each cancelled when its client goes away
// (ConnRequests, one per client connection). Inside the Manager, the
// operations on one resource are serialized (serial.go).
//
// Lock order: a resource's serializer, then leases.mu (leases.go). A
// resource's turn may end on another goroutine than the one that took it:
// a release that hands the resource to the head of the line passes its
// turn to the head, which ends it once the grant is settled.
// Writer.mu, then the cluster Node's mu (a master's writers start under
// Writer.mu, through Node.ServeLockWrites). Every other mutex here
// (waitQueue's, the serializer's map, the slow log's, LOCK.TOP's,
// ConnRequests') is a leaf, never held across I/O.
//
// Invariants:
//
//   - Every token a reply carries is strictly greater than every token
//     replied before for that resource, except a same-owner retry, which
//     gets the token it already holds.
//   - A reply carrying a token is sent only after that token is synced to
//     disk as the resource's newest, and after the owner record has the
//     required replica acknowledgements, and only while at least the safety
//     margin of its lease is left.
//   - The scripts honour an owner record (re-arm, renew) only if its token
//     is the newest the fence store knows as issued, so no reply carries a
//     token FENCE.CHECK would call never issued.
//   - Owner records are changed only by scripts that compare the owner (and
//     for an undo, the token), so a stale holder never touches a newer lease.
//   - A lapsed lease is never revived: renew needs the record to exist.
//   - No stale leader (terms.go): every script that writes carries the
//     caller's term (Options.Term; 0 for a single node) and stamps it on
//     what it writes; a record or guard of a higher term refuses it
//     (ErrDeposed, -TRYAGAIN), so a deposed leader of a tier that has not
//     yet noticed never grants over, renews, releases nor undoes a lease
//     of a newer term.
//   - Fenced writes are checked where they land (fencemark.go): every new
//     grant raises the resource's fence mark in Redis to its token in the
//     script that grants, and FENCE.EXEC's script runs its command only if
//     its token and term are at or above the mark's, within half the mark's
//     life of its check, so a write delayed past a newer grant (a restart,
//     a new tier leader) is refused inside Redis.
//   - One token authority (authority.go): commands that issue or judge
//     tokens run only while Options.Admit says no other fenceproxy with
//     another fence store is live on the backend; no token below the
//     store's floor is current, and a record carrying a token this store
//     never issued, at or above the candidate, is adopted before any grant
//     of its resource, so no grant gets a lower token nor overwrites it.
package locks
