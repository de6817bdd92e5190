// Package authority keeps fenceproxy's token authority honest on the
// backend: it shares the token store's bound with Redis, so that losing
// either copy alone never makes a token go back, and it finds a second
// token authority (another fenceproxy with another fence store, or on a
// copy of this one, or another tier) live in front of the same Redis, and
// refuses lock commands while it lasts. The token store (Store) is a single
// node's fence store (internal/persist), or a tier's replicated state on
// its leader (internal/tier's Leadership). docs/design/authority.md has the
// long form: why the keys live where they do, what was tried, and how an
// upgrade from database 0 is read.
//
// # What is kept in Redis
//
// Two keys, under the lock records' --key-prefix and one hash tag (one
// master on a Redis Cluster; neither can be mistaken for an owner record,
// whose keys end in "}"):
//
//	<prefix>{authority}:bound  hash: bound (the highest token bound any
//	                           fence store reserved), store (the id of the
//	                           store that raised it last), and per live
//	                           member "sent:<member>" (when its last
//	                           heartbeat was sent, its sender's clock, ms)
//	<prefix>{authority}:live   sorted set: one member per live process,
//	                           "<member>/<run id>/<authority id>", scored
//	                           by when it stops serving (Redis TIME, ms)
//
// In front of a standalone Redis both live in its highest database (the
// database count is read from Redis, never a flag, so every fenceproxy in
// front of one Redis uses the same one); in front of a Redis Cluster, in
// database 0. Keys an earlier fenceproxy left in database 0 are read too
// until none is left.
//
// # Invariants
//
//  1. The bound only rises. shareScript raises it to a new window's bound
//     (never lowers it) and a WAIT for --min-replicas follows on the same
//     connection; the fence store publishes the window only after both,
//     and after its own sync (persist's invariant 9). So every token ever
//     returned is at most the local bound and at most the bound in Redis.
//  2. A store that is behind adopts. At Join and at every heartbeat, a
//     Redis bound above the store's synced bound, or raised by another
//     store, is adopted (persist.Store.Adopt: the floor goes above it;
//     older tokens are stale, never current), even before the join. With
//     no Redis bound at Join, the owner records' tokens are scanned
//     instead. A lower or missing Redis bound is rewritten from the store's.
//  3. One authority at a time. Lock commands (those that issue or judge
//     tokens) are admitted only while the last heartbeat round found no
//     other live authority and began less than validFor ago (monotonic
//     clock); a round scores this process's member Redis TIME + validFor +
//     grace (the replica timeout and clock drift), so when another process
//     sees it expired, this one has stopped granting, and a paused process
//     stops by itself. A command that may wait and finds the last round
//     late asks for a round and waits for its verdict (AdmitWithin, up to
//     validFor), never admitted by an older one. A store joins after a
//     clean round (two after a conflict). A starting fenceproxy
//     (Options.StartAlone) does not start while another authority's member
//     is seen renewing; a member that does not renew is waited out.
//  4. Conflict rules. A live member with another authority id is a
//     conflict: both processes refuse. One with this store's id and the
//     run id of an earlier process on this directory is a dead predecessor
//     (ignored: a restart after kill -9 serves at once) until it renews
//     with a heartbeat sent after this process began (a late one, sent
//     before its death and run by Redis after this process started, is
//     not a renewal); with any other run id, or renewing, it runs on a copy
//     of the directory: a conflict. A member with this authority id and
//     another <member> is a peer (a tier's nodes).
//
// LOCK.RELEASE and LOCK.INFO are not refused: a release compares the
// owner and touches no token, and INFO is how an operator looks.
//
// # In a tier
//
// A tier (internal/tier) is one token authority: its ready leader runs an
// Authority while it leads (Leader, leader.go: one per Leadership, started
// once the backend is up, published while it serves, closed when the
// leadership ends), with the tier's id as authority id and as the
// store id of the bound it shares, and a member of its own
// (Options.Member: "<node id>@<run>"). A single fenceproxy with another
// fence store is a conflict (3, 4); tier nodes, a deposed leader included,
// are peers; a bound written by any leader of the tier is the tier's own
// (Store.PreviousRun), one written by another store is adopted; and the
// leader shares every window's bound, with WAIT, before it issues from it.
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
