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
//  3. The token is recorded as the resource's newest in the fence store and
//     fsynced (group-committed with concurrent grants).
//
// Steps 1 and 2 travel as one pipeline per batch of grants: one round trip,
// one WAIT. Two designs that overlap step 3 with step 2 were tried and
// dropped. Recording the token during step 2 leaves a never-issued newest
// token when the replicas fall short, and FENCE.CHECK then calls the previous
// holder stale. Reserving it during step 2 (persist.Store.Reserve, confirmed
// after the acknowledgements) is correct but needs the script's reply before
// the WAIT, a second round trip; measured with scripts/lockbench (50 clients,
// 2 cores) it was 5-15% slower than doing the steps in order.
//
// The token itself comes from the fence store's counter, which a durable
// reservation keeps ahead of every token ever handed out, so tokens rise
// even if Redis forgets every record. Requests for one resource are
// serialized here, so token order equals grant order.
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
package locks
