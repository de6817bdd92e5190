// Package authority keeps fenceproxy's token authority honest on the
// backend: it shares the token store's bound with Redis, so that losing
// either copy alone never makes a token go back, and it finds a second
// token authority (another fenceproxy with another fence store, or on a
// copy of this one, or another tier) live in front of the same Redis, and
// refuses lock commands while it lasts. The token store (Store) is a single
// node's fence store (internal/persist), or a tier's replicated state on
// its leader (internal/tier's Leadership: see "In a tier" below).
//
// # What is kept in Redis
//
// Two keys, under the lock records' --key-prefix and one hash tag, so that
// on a Redis Cluster both live on one master (neither can be mistaken for
// an owner record, whose keys end in "}"):
//
//	<prefix>{authority}:bound  hash: bound (the highest token bound any
//	                           fence store reserved), store (the id of the
//	                           store that raised it last)
//	<prefix>{authority}:live   sorted set: one member per live process,
//	                           "<member>/<run id>/<authority id>", scored
//	                           by when it stops serving (Redis TIME, ms);
//	                           <member> is the store id (Options.Member
//	                           for a tier's leader)
//
// # Which database
//
// In front of a standalone Redis both keys live in its highest database
// (databases - 1: 15 by default), not in database 0 where clients work.
// A client's database is then the keyspace it wrote: DBSIZE, SCAN, KEYS,
// RANDOMKEY, INFO keyspace and FLUSHDB count and see only its keys,
// inside MULTI and Lua scripts too, with nothing for the proxy to rewrite.
// Tried and dropped: subtracting the two keys where the proxy answers
// (DBSIZE, INFO keyspace, SCAN, KEYS, RANDOMKEY), which a script's
// redis.call('DBSIZE'), a transaction, DEBUG or OBJECT would still show,
// and which FLUSHDB would still empty. The owner records
// (<prefix>{resource}) stay in database 0: they are the lock family's
// data, visible to clients by design (LOCK.INFO describes them, and
// clients may read them).
//
// Nothing of the guarantees depends on the database: Redis persists,
// replicates and fails over every database alike, and a WAIT counts the
// connection's writes in any of them, so the bound is as safe there
// (invariant 1). The database is what Redis says (CONFIG GET databases,
// or, when CONFIG is refused, the highest index SELECT accepts), never a
// flag, so that every fenceproxy in front of one Redis writes its member
// in one set (invariant 3 holds only if they all read the same one). The
// scripts SELECT it themselves; a script's SELECT ends with the script,
// so the connections that run them stay in database 0. In front of a
// Redis Cluster, which has only database 0, both keys stay there, and the
// proxy's own merged answers (DBSIZE, KEYS, SCAN) count them.
//
// An earlier fenceproxy kept both keys in database 0. Until none is left,
// every round reads those too: their live members count as live (and
// while there are any, this process writes its member there as well, so
// that an earlier process, which reads only database 0, sees it and
// refuses), and their bound counts as the Redis bound if it is higher
// (so an upgrade that also loses the fence store does not go back);
// sharing a bound deletes the old one once it is covered.
//
// # Invariants
//
//  1. The bound only rises. shareScript raises it to a new window's bound
//     (never lowers it) and a WAIT for --min-replicas follows on the same
//     connection; the fence store publishes the window only after both,
//     and after its own sync (persist's invariant 9). So every token ever
//     returned is at most the local bound and at most the bound in Redis.
//  2. A store that is behind adopts. At Join, and at every heartbeat after
//     it, the bound in Redis is compared with the store's synced bound,
//     read after it: a Redis bound above it, or raised by another store,
//     means tokens up to it may have been issued without this store (its
//     directory is new, empty or restored, or another store ran), so the
//     store adopts it (persist.Store.Adopt: the floor goes above it; older
//     tokens are stale, never current). A store not joined yet adopts it
//     at its first round, even while another authority is live (only its
//     floor rises; nothing is written to Redis), so that Redis losing its
//     copy before the join cannot take it away. When the Redis bound is missing
//     at Join (a first start, or Redis lost its data), the owner records
//     are scanned for their tokens instead, and one above the store's
//     bound is adopted. A lower or missing Redis bound is rewritten from
//     the store's.
//  3. One authority at a time. Lock commands (those that issue or judge
//     tokens) are admitted only while the last heartbeat round found no
//     other live authority and began less than validFor ago (monotonic
//     clock); a round writes this process's member with a score of Redis
//     TIME + validFor + grace, where grace covers a grant in flight (the
//     replica timeout) and clock drift. So when another process sees the
//     member expired, this one has stopped granting; a paused process
//     stops by itself. A store waiting to Join needs a clean round (two
//     after a conflict) and joins before its first token. A single
//     fenceproxy that is starting (Options.StartAlone) first reads the
//     live set without writing its member: another authority's member seen
//     renewing makes it not start at all, so the process already serving
//     never sees it and keeps granting; a member that does not renew (a
//     process killed) is waited out. Both refuse only when both are live
//     anyway (they started at once, or one was paused past its member).
//  4. Conflict rules. A live member with another authority id is a
//     conflict: both processes see each other and both refuse. One with
//     this store's id and a run id of a process that opened this
//     directory before is a dead predecessor (the directory lock held it):
//     ignored, so a restart after kill -9 serves at once. One with this
//     store's id and any other run id runs on a copy of the directory: a
//     conflict. A member with this authority id and another <member> is a
//     peer: a tier's nodes share one authority id, each leader with a
//     member of its own.
//
// LOCK.RELEASE and LOCK.INFO are not refused: a release compares the
// owner and touches no token, and INFO is how an operator looks.
//
// # In a tier
//
// A tier of fenceproxy nodes (internal/tier) is one token authority: its
// ready leader runs an Authority for as long as it leads, with the tier's
// id as authority id and as the store id of the bound it shares, and a
// member of its own node and process (Options.Member: "<node id>@<run>").
// So:
//
//   - A single fenceproxy with another fence store on the same backend and
//     key prefix has another authority id: it does not start while the
//     tier's leader is live; if both are live all the same, each sees the
//     other's member, and both refuse lock commands (invariant 3, 4).
//   - Tier nodes are peers: a new leader's heartbeat runs while the old
//     leader's member leaves (a clean stop, or the leadership lost: Close)
//     or runs out (kill -9, a partition), without a conflict; a deposed
//     leader that still reaches Redis is a peer too (it cannot commit).
//   - The bound in Redis written by any leader of the tier is the tier's
//     own (Store.PreviousRun is true for every other run: a leader shares
//     only windows committed to the tier's log, which every later leader
//     holds), so a leader change adopts nothing; one written by another
//     store is adopted (the tier's floor goes above it), and a lower or
//     missing one is rewritten from the tier's bound (invariant 2).
//   - The leader writes every window's bound here, with WAIT, before it
//     issues from it (Store.Join's share function, as persist's Shared
//     store does): so every token is at most both the tier's bound and
//     this one (invariant 1), and a single fenceproxy that starts on the
//     same backend after the tier is gone starts above every tier token.
//
// # What survives what
//
// The fence store lost alone (an empty, new or restored data dir): the
// bound in Redis puts every new token above every one issued, and the
// floor makes every older token stale. Redis's data lost alone: the local
// bound does, and the heartbeat rewrites the Redis bound within a round.
// Both lost at once: tokens may go back; --token-floor (above every token
// issued) is the operator's way out. In a tier, "the fence store lost" is
// the disks of a majority of its nodes; a minority's loss loses nothing.
package authority
