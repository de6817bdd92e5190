// Package tier makes this process one node of a tier of fenceproxy nodes
// that share one token authority: a Raft group (hashicorp/raft, its log and
// stable store on Pebble, or raft-boltdb, under --data-dir/raft, snapshots
// beside it, a TCP transport on --raft-listen) whose replicated state
// machine is the token state. The leader is the token authority; Store is
// its side of the lock manager's TokenStore seam, and Leadership its side of
// the backend's token authority (internal/authority, leadership.go). Any
// other node refuses tokens and reads with an UnavailableError, which
// clients get as -TRYAGAIN (or, in fenceproxy, the command is relayed to the
// leader: Relay, forward.go).
//
// The state (fsm.go, state.go, snapshot.go) is the window bound, the floor,
// each resource's newest confirmed token, the pending reservations, the
// tier's id and the current leader, in a local Pebble (Options.Dir/state)
// with the index of the last entry applied (its keys, token encoding, max
// merge and floor and window rules are internal/tokenstate's, shared with
// a single node's fence store), and a bounded cache of newest tokens
// (internal/tokencache). Its entries are LeaderStart (a new leader's
// first: the fold and a fresh window), Window, Reserve, Confirm, Cancel,
// Adopt, and Batch (many grants' Reserves, Confirms and Cancels, applied in
// order under one index: how the leader proposes them, propose.go).
// LeaderStart, Window and Adopt are proposed alone, never in a Batch.
// docs/design/tier.md has the whole story: batching, the overlay of the
// leader's own Confirms, restarts and snapshots, leadership changes, the
// follower's relay, and the alternatives dropped.
//
// # Invariants
//
//  1. A reply carrying a token follows its Reserve's commit: Reserve
//     returns nil only once the entry is in the logs of a majority, each
//     fsynced, and applied here (a Reserve in a Batch is told the Batch's
//     outcome).
//  2. A leader's tokens are above every bound committed before its
//     LeaderStart: it serves nothing until Barrier and its LeaderStart are
//     committed, and the LeaderStart's window starts at the state's bound,
//     which Raft's election rule makes at least every earlier leader's.
//  3. The fold: applying a LeaderStart counts every pending reservation as
//     issued, so a token a deposed leader replied without its Confirm
//     committing is never called never issued.
//  4. No stale read: Newest (FENCE.CHECK, FENCE.EXEC, LOCK.INFO, every
//     renewal's judgement) answers only after a VerifyLeader round that
//     began after the call, and only if the node was the ready leader of
//     the same leadership throughout.
//  5. Owner records carry the granting leader's term (Term), and the
//     scripts refuse writes from an older term (internal/locks).
//  6. Tokens never regress while a majority keeps its disk (1, 2, 9).
//     Losing a majority's disks loses the guarantee; so does wiping a node
//     within an election of its last vote (a lost disk is safest as a new
//     identity: TIER.REMOVE the old id, TIER.ADD a new one).
//  7. Every node's state is its committed entries applied once each, in
//     order: a state on disk is the state as of its applied index A (one
//     Pebble batch with its entries), ApplyBatch skips entries at or below
//     A, Restore replaces a state only with a snapshot of a later A, and a
//     Batch is applied whole or skipped whole.
//  8. With Options.Shared (fenceproxy), no token is above the backend's
//     bound either: every window is committed to the log, then written to
//     the backend (Redis, WAIT for --min-replicas), and only then handed
//     out; a backend bound above the window was raised by another store
//     and is adopted (the floor above it, a new window). Reserve never
//     makes a token, and is refused while the window is not shared.
//  9. A node that lost its Raft state never votes before it has caught up
//     (rejoin.go): its transport grants no vote and sends none until its
//     applied index reaches the commit index a verified leader gave it, or
//     every other node of --peers asked it for a vote with no more than the
//     bootstrap entry (a new tier). The leader keeps a rejoining voter a
//     non-voter while it is behind; TIER.ADD adds a non-voter, promoted
//     the same way.
//
// # The token authority (leadership.go)
//
// The ready leader runs the backend's token authority (internal/authority,
// through Options.OnLeading) on its Leadership while it lasts: the tier's
// id as authority id and as the store id of the bound it shares, and a live
// member of the node's own. A fenceproxy with another fence store on the
// same backend and key prefix is a conflict both ways; the tier's nodes are
// each other's peers. The Leadership's methods fail once it is over, and
// Done tells the authority to stop.
//
// On losing leadership the node stops being ready at once: every later call
// refuses, a Reserve in flight ends Lost (UnavailableError),
// OnLeadershipLost runs so the lock layer can end its waiters, and ops still
// queued in the proposer are dropped. A Pebble error while applying or
// restoring stops the node (panic: fail-stop).
//
// # Concurrency
//
// Every exported method is safe for concurrent use. Node.mu guards the
// leader's side and is never held across I/O. The proposer's mu is held
// while it takes a Batch from its queue and hands it to raft, and takes
// Node.mu inside: the proposer's mu, then Node.mu. windowMu serializes what
// commits a Window or an Adopt and moves the counter after it, held across
// the commit and the backend share, then Node.mu. The proposer's mu and
// windowMu are never held together, and raft's FSM goroutine takes none of
// the three. The state's mu, overlayMu, the cache's shard mutexes and the
// verifier's mu are leaves, never nested.
package tier
