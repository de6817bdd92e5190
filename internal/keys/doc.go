// Package keys says where a command's keys are, so the proxy can route every
// keyed command of Redis Cluster by hash slot.
//
// The answer comes from the backend itself: Load reads the reply to COMMAND,
// whose Redis 7 key specifications describe, per command and per
// subcommand, how to find the keys in a request (begin at an index or after
// a keyword, then a range or a count-prefixed list). Redis Cluster routes with
// these same specs, so following them keeps the proxy in step with the server
// it fronts, including commands and subcommands added after this code was
// written, modules' commands, and renamed versions. A hand-written table was
// the alternative and was dropped: it is a second copy of facts Redis already
// publishes, and it goes stale silently (a missing entry routes a command to
// the wrong node, where it fails with MOVED or, worse, CROSSSLOT).
//
// Invariants:
//
//  1. Keys never panics and never reads outside args, whatever the request:
//     short, a malformed or negative or huge numkeys, a missing keyword.
//     Each spec that cannot be applied to a malformed request contributes no
//     keys, the others still do; Redis rejects such a request itself.
//  2. Every index Keys returns is in [1, len(args)), and the indexes it
//     appends are in ascending order (equal indexes may repeat only if two
//     specs name the same argument).
//  3. Keys allocates nothing beyond growing dst; Lookup and LookupBytes
//     allocate nothing. All parsing of specs happens once, in Load.
//
// Where this differs from COMMAND GETKEYS: for a few commands Redis marks
// the specs "unknown" or "incomplete" and falls back to C code of its own
// (a getkeys procedure) that this package cannot run. Then:
//
//   - A command with a spec of type unknown (SORT, SORT_RO, whose BY, GET and
//     STORE arguments can appear anywhere) uses the legacy first/last/step
//     triple of COMMAND. For SORT that is the sorted key only: the
//     destination of SORT ... STORE dst is not returned. Routing by the
//     sorted key is still right; the node itself answers CROSSSLOT if dst is
//     in another slot.
//   - For a command with a spec flagged incomplete (MIGRATE's KEYS list),
//     an empty key found beside others is a placeholder and left out, as
//     Redis's own code does: MIGRATE host port "" db timeout KEYS a b yields
//     a and b.
//   - Keys of specs flagged not_key (the shard channels of SPUBLISH,
//     SSUBSCRIBE, SUNSUBSCRIBE) are returned, because Redis Cluster routes
//     them by slot too; COMMAND GETKEYS leaves them out. Command.NotKey
//     reports such commands.
//   - A malformed count (EVAL s 01 k, ZUNIONSTORE d 5 a b) yields the keys
//     of the other specs only; Redis's fallback may parse the count more
//     leniently, but the command itself rejects it.
//
// Against a Redis 6 backend, whose COMMAND has no key specs, every command
// uses the legacy triple: correct for fixed-position commands, incomplete for
// the movable-key ones (Command.Movable).
package keys
