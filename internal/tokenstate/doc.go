// Package tokenstate is the token state's schema and its rules, in one
// place: the Pebble keys both token stores write (internal/persist, a
// single node's fence store; internal/tier, the state every tier node
// replicates), how a token is stored, the max merge that keeps a
// resource's newest token, and the floor and window rules. The stores
// apply it; it does no I/O and holds no state.
//
// # The keys
//
// Three families. m/ holds a store's small fields, t/ and p/ one entry per
// resource or reservation. Each store uses the m/ keys its table names.
//
//	m/bound         both: 8-byte big-endian, the token window's bound
//	m/floor         both: 8-byte big-endian, the token floor
//	m/id, m/run     persist: the store's id; the run ids of the last
//	                processes that opened it, newest first, comma-separated
//	m/dir           persist: the directory's inode when it was last opened
//	m/applied       tier: 8-byte big-endian, the last log index applied
//	m/tier          tier: the tier's id
//	m/leader        tier: the last LeaderStart's term, node and address
//	t/<resource>    both: 8-byte big-endian, the resource's newest token,
//	                written with MaxMerger (or a Set above every operand)
//	p/<token><resource>  both: token (8-byte big-endian) reserved for
//	                resource, not yet confirmed or cancelled; the value is
//	                the store's (persist: empty; tier: the reserving
//	                leader's term, a uvarint)
//
// # Contracts
//
//   - The formats are on disk in every deployed --data-dir: a key, a
//     value's encoding or MaxMerger's name never changes (Pebble refuses to
//     open a database whose merger name differs).
//   - A reservation key puts the fixed-width token before the resource, so
//     every resource's bytes parse back (ParseReservedKey) and one resource
//     may hold several reservations at once.
//
// # Invariants (the rules, as pure functions)
//
//  1. A t/ value is the maximum of every token merged into it, in any
//     order of commits or of WAL replay (MaxMerger): a token never goes
//     back.
//  2. No token is above MaxToken (2^53, the lock scripts' exact Lua
//     numbers): NextBound never passes it.
//  3. Raising the floor past a foreign token (FloorAbove) puts the floor
//     at foreign+1: the floor itself is issued to nobody, every token at
//     or below it is stale for every resource, and a resource's newest
//     token is never below the floor (Newest).
//  4. A token is issuable only above the floor and at most the bound
//     (Issuable).
package tokenstate
