// Package locks is fenceproxy's lock manager: it grants, renews and releases
// leases on named resources and issues their fencing tokens.
//
// A grant takes three steps before its reply is sent:
//
//  1. A Lua script on the resource's master sets the owner record (owner,
//     token, lease) only if the resource is free or already the caller's:
//     one atomic compare-and-set.
//  2. WAIT on the same connection until --min-replicas replicas hold the
//     record. On a shortfall the record is deleted again (compare-and-delete
//     on owner and token) and the caller gets -NOREPLICAS: nothing granted.
//  3. While step 2 is under way, the token is reserved in the fence store
//     and fsynced (group-committed with concurrent grants); once the
//     replicas have acknowledged, it is confirmed as the resource's newest
//     (no second fsync: the reservation is durable). The two slow waits,
//     replicas and disk, overlap: the script and its WAIT travel in one
//     pipeline, and Redis answers the script before the WAIT.
//
// A refused grant's reservation is cancelled, so FENCE.CHECK and LOCK.INFO
// only ever see tokens issued. Only a crash between a reservation and its
// cancel can make a refused token count as issued, which errs on the safe
// side. (Recording the token itself during step 2 was tried and dropped: a
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
// Options.MaxWaiters acquires wait per resource, a release wakes only the
// head of the line, and only the head ever tries (serial.go).
//
// What operators see: the owner record also carries when its token was
// granted, when the lease was last armed and the client it was granted for
// (scripts.go), so LOCK.INFO is right whichever proxy asks. The proxy
// remembers the leases it granted (bounded, leases.go) to notice one that
// runs out unreleased, and keeps a slow-lock log of long waits, long holds
// and expiries (slowlog.go).
//
// Invariants:
//
//   - Every token a reply carries is strictly greater than every token
//     replied before for that resource, except a same-owner retry, which
//     gets the token it already holds.
//   - A reply carrying a token is sent only after that token is synced to
//     disk as the resource's newest, and after the owner record has the
//     required replica acknowledgements.
//   - Owner records are changed only by scripts that compare the owner (and
//     for an undo, the token), so a stale holder never touches a newer lease.
//   - A lapsed lease is never revived: renew needs the record to exist.
//   - One token authority (authority.go): commands that issue or judge
//     tokens run only while Options.Admit says no other fenceproxy with
//     another fence store is live on the backend; no token below the
//     store's floor is current, and a record carrying a token this store
//     never issued, at or above the candidate, is adopted before any grant
//     of its resource, so no grant gets a lower token nor overwrites it.
package locks
