// Package lockcmd serves fenceproxy's lock family and clients' own lock
// recipes: it reads their arguments, runs them on the lock manager
// (package locks) and answers them in the shape each client expects.
//
// Its one job is the command side of locking: the lock manager keeps the
// locks, and package commands decides which request is a lock command (its
// table) and keeps the connection's session. commands calls a Family
// method with the connection as a Conn: protocol's connection and the
// session as a Client (the connection's running lock requests and relay
// link state, the holder prefix, RESP3, the ACL user, what the user may
// read).
//
// The data path, connection -> command -> backend -> reply:
//
//   - LOCK.ACQUIRE: commands' table entry calls Family.Acquire (lock.go),
//     which checks the arguments (parseLock), binds the owner to the user
//     (lockOwner), and starts Manager.AcquireNow, whose last step appends
//     the token, null, or an error reply to the request's resp.Reply,
//     which protocol writes (runNow); when it cannot start so, it queues
//     the request behind the connection's earlier ones for the resource
//     (runLockTo: locks.Runner) and a lock worker runs
//     Manager.AcquireGrant. In a tier a node that does not lead sends it
//     to the leader instead (RelayLock, tier.go) and judges the leader's
//     grant by the lease left.
//   - EVAL or EVALSHA of a Redisson script: Family.Eval (recipes.go) looks
//     the script up (recipes.Lookup); one it recognises, whose keys share
//     its owner record's slot, runs as the lock manager's twin in the
//     lock's turn and is answered in the script's own reply shape (RLock,
//     RFencedLock, RSpinLock; RFairLock in fair.go, RReadWriteLock in
//     rwlock.go); value locks (SET NX on a --lock-keys key, and the scripts
//     of redis-py, redsync, redislock, node-redlock) in setnx.go. Any other
//     script, or one it cannot run as a twin, goes back to commands as it
//     came (Options.Forward), to Redis.
//
// Replies: a lock-manager failure is answered by lockError, which knows no
// package's error values but the backend's unavailability and lost
// contact: every error a client may see carries its own reply
// (resp.CodedError). Each grant, renewal, release and fence check counts
// its result in the lock metrics (package metrics), as INFO's "# locks"
// section (Section) and Prometheus show them.
//
// Tier: Tier is what this package needs of a tier node (internal/tier).
// TIER.INFO, TIER.ADD and TIER.REMOVE are served here; TIER.UNDO undoes a
// grant a follower got too late (TierUndo). The relay link itself
// (TIER.PEER, TIER.RELAY, TIER.APPLIED) is commands' (its tierlink.go).
package lockcmd
