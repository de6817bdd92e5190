// Package tier makes this process one node of a tier of fenceproxy nodes
// that share one token authority: a Raft group (hashicorp/raft, its log and
// stable store on Pebble, or raft-boltdb, under --data-dir/raft, the newest
// entries also kept in memory (raft.LogCache), snapshots beside it, a TCP
// transport on --raft-listen) whose replicated state machine is the token
// state. The leader is the token authority; Store is its side of the lock
// manager's TokenStore seam. Any other node refuses tokens and reads with
// an UnavailableError, which clients get as -TRYAGAIN (or, in fenceproxy,
// the command is relayed to the leader).
//
// # The state (fsm.go)
//
// Every node applies the same entries to the same state: the window bound
// (every token ever handed out is at or below it), the floor, each
// resource's newest confirmed token, the reservations not yet confirmed or
// cancelled (with the term of the leader that made them), the tier's id and
// the current leader's node id and client address. Entries:
//
//	LeaderStart{term, node, addr, tier id}  a new leader's first entry: the
//	                 fold (every pending reservation counts as issued), a
//	                 fresh window above the bound, where followers forward
//	Window{}         a new window above the bound (once per Window tokens)
//	Reserve{r, t, term}  before a grant is replied; awaited
//	Confirm{r, t}    after its replica acks; not awaited
//	Cancel{r, t}     a refused grant whose record is certainly gone; not awaited
//	Adopt{t}         the floor (and the bound) go above t
//	Batch{ops}       Reserves, Confirms and Cancels of many grants, applied
//	                 in order: how the leader proposes them (propose.go)
//
// The leader's Reserves, Confirms and Cancels share entries: while one
// Batch is in flight (proposed, not yet committed), the ops of every grant
// queue, and the next Batch carries them all. Raft's own group commit
// (BatchApplyCh) shares log writes between entries; the Batch also shares
// the work per entry on every node (encoding, a Pebble record, an FSM
// call), and bounds the log writes per second. A Confirm or Cancel rides
// in the next Batch, not awaited. An op queued during an earlier
// leadership of this node is never proposed (its Reserve fails, Lost).
//
// Windows are computed by the state as it applies them (from the bound,
// not from what the proposer believed), and returned to the leader through
// its ApplyFuture, so a window never overlaps one committed before it.
//
// The leader's own Confirms are visible to its reads at once through an
// overlay; an entry leaves the overlay when the state has applied it.
// Reads never count pending reservations (as persist ignores p/ while it
// lives), but a new leader folds them.
//
// # Invariants
//
//  1. A reply carrying a token follows its Reserve's commit. Reserve
//     returns nil only when raft's ApplyFuture says the entry is committed
//     (in the logs of a majority, each fsynced: a synced Pebble batch, or a bbolt commit) and applied here.
//     The lock manager replies a token only after Reserve returned nil.
//     A Reserve in a Batch is told the Batch's outcome, so this holds for
//     every op of it.
//  2. A leader's tokens are above every bound committed before its
//     LeaderStart. A leader serves nothing until Barrier (every entry of
//     earlier terms applied here) and its LeaderStart are committed; the
//     LeaderStart's window starts at the state's bound as applied, which
//     is the maximum of every window ever committed. Raft's election rule
//     (a leader holds every committed entry) makes that bound at least
//     every earlier leader's: so every token it hands out is above every
//     token any earlier leader could have handed out. Within a leadership
//     the counter only rises, and a new window starts at the bound again.
//  3. The fold. Applying a LeaderStart counts every pending reservation as
//     issued (raises its resource's newest to it). A deposed leader may
//     have replied a token whose Confirm never committed; its Reserve did
//     (1), so the next leader counts it, and FENCE.CHECK never calls a
//     replied token never issued. A Reserve whose future failed after it
//     was sent may also be folded: a token counted that was never replied,
//     the safe side.
//  4. No stale read. Newest (FENCE.CHECK, FENCE.EXEC, LOCK.INFO and every
//     renewal's judgement) answers only after a VerifyLeader round that
//     began after the call (verifier: one round serves every reader that
//     arrived before it began) and only if the node was the ready leader
//     of the same leadership throughout. A leader that has been deposed
//     cannot complete a round (a majority no longer answers it as leader).
//     The state it then reads holds every committed entry of earlier
//     terms (2) and its own Confirms (overlay), so it is at least as new
//     as anything a newer leader could have confirmed before the round.
//  5. Owner records carry the granting leader's term (Term), and the
//     scripts refuse writes from an older term (internal/locks).
//  6. Tokens never regress while a majority keeps its disk: every entry a
//     reply depended on (1) is in a majority's logs, and any leader holds
//     it (2). A node that lost its disk comes back empty; it bootstraps
//     only if no leader contacts it within Options.BootstrapWait (the
//     leader catches it up with a snapshot instead). Losing the disks of
//     a majority loses the guarantee, as does wiping a node within an
//     election of its vote (it may vote twice in one term).
//
// # Leadership changes
//
// On losing leadership (raft's NotifyCh) the node stops being ready at
// once: every later call refuses, a Reserve in flight ends with raft's
// ErrLeadershipLost (UnavailableError with Lost), and OnLeadershipLost runs,
// so the lock layer can end its waiters -TRYAGAIN.
//
// # Followers (forward.go)
//
// A follower relays lock commands to the leader's client port (Relay), one
// command per connection at a time, each wrapped in TIER.RELAY with the
// time it has already spent on the follower, so the leader counts a lease
// from when the follower read it; the follower judges the reply by its own
// clock too, which alone sees the time on the link (commands.relayLock).
// A follower reports its applied index to the leader every second and at
// once when it learns of a new leader; the leader's view of a peer's lag
// is that report (PeerStatus), unknown until the peer has reported in
// this leadership: hashicorp/raft keeps each follower's progress in its
// replication state, which a new leader builds from nothing and which it
// does not expose.
//
// # What it does not do yet
//
// The state lives in memory (one map entry per resource ever granted) and
// a snapshot writes it whole; a state kept in a local Pebble and streamed
// would bound memory for tens of millions of resources.
//
// # Concurrency
//
// Every exported method is safe for concurrent use. Lock order: the
// proposer's mu, then Node.mu (it reads the epoch while it proposes);
// Node.mu, then the state's mu (NextToken commits a Window while holding mu, and
// the state's Apply runs on raft's goroutine without mu); the state's mu,
// then overlayMu (Apply drops overlay entries). The verifier's mu is a
// leaf.
package tier
