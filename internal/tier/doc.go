// Package tier makes this process one node of a tier of fenceproxy nodes
// that share one token authority: a Raft group (hashicorp/raft, its log and
// stable store on Pebble, or raft-boltdb, under --data-dir/raft, the newest
// entries also kept in memory (raft.LogCache), snapshots beside it, a TCP
// transport on --raft-listen) whose replicated state machine is the token
// state. The leader is the token authority; Store is its side of the lock
// manager's TokenStore seam, and Leadership its side of the backend's
// token authority (internal/authority, leadership.go). Any other node
// refuses tokens and reads with an UnavailableError, which clients get as
// -TRYAGAIN (or, in fenceproxy, the command is relayed to the leader).
//
// # The state (fsm.go, state.go, snapshot.go)
//
// Every node applies the same entries to the same state: the window bound
// (every token ever handed out is at or below it), the floor, each
// resource's newest confirmed token, the reservations not yet confirmed or
// cancelled (with the term of the leader that made them), the tier's id and
// the current leader's node id and client address. The state lives in a
// local Pebble database (Options.Dir/state, beside the log store), with the
// index of the last entry applied; memory holds its small fields, the
// pending reservations (the grants in flight when a leader changed, folded
// at the next LeaderStart) and a bounded cache of newest tokens
// (internal/tokencache, Options.CacheEntries), however many resources the
// state holds. Entries:
//
//	LeaderStart{term, node, addr, tier id}  a new leader's first entry: the
//	                 fold (every pending reservation counts as issued), a
//	                 fresh window above the bound, where followers forward
//	Window{}         a new window above the bound (once per Window tokens)
//	Reserve{r, t, term}  before a grant is replied; awaited
//	Confirm{r, t}    after its replica acks; not awaited
//	Cancel{r, t}     a refused grant whose record is certainly gone; not awaited
//	Adopt{t}         the floor and the bound rise to t: the proposer
//	                 sends one above the token it adopts
//	Batch{ops}       Reserves, Confirms and Cancels of many grants, applied
//	                 in order: how the leader proposes them (propose.go)
//
// The leader's Reserves, Confirms and Cancels share entries: while one
// Batch is in flight (proposed, not yet committed), the ops of every grant
// queue, and the next Batch carries them all. Raft's own group commit
// (BatchApplyCh) shares log writes between entries; the Batch also shares
// the work per entry on every node (encoding, a log record, an FSM call),
// and bounds the log writes per second. A Confirm or Cancel rides in the
// next Batch, not awaited. An op queued during an earlier leadership of
// this node is never proposed (its Reserve fails, Lost). LeaderStart,
// Window and Adopt are never in a Batch (the decoder refuses them there):
// they are proposed alone, by the code that waits for them.
//
// Windows are computed by the state as it applies them (from the bound,
// not from what the proposer believed), and returned to the leader through
// its ApplyFuture, so a window never overlaps one committed before it.
//
// The entries raft hands over at once (BatchingFSM) are applied in one
// Pebble batch that also writes m/applied, the last one's index, and is
// not synced: the Raft log is the durable record (every entry was fsynced
// into a majority's logs before it was applied), so an fsync per batch
// would buy nothing a replay does not. A Confirm or a fold merges its
// token into t/<resource> (the maximum of every token merged: persist's
// merge operator), so applying reads nothing. Reads go to the cache, then
// Pebble; the FSM goroutine is the only writer, and raises cached entries
// after each commit, so a cached entry is the state's value (tokencache's
// rule). An apply never makes a cache entry: only a read can tell the
// maximum (a Confirm that a deposed leader sent late, after it led again,
// may be below it; the maximum keeps it harmless). A Batch is one entry
// here too: its ops go, in order, into the same Pebble batch as the
// entries raft handed over with it, under the Batch's one index, so a
// Batch is applied whole or (after a crash) not at all and replayed
// whole, and a Reserve and the Confirm of the same grant, which always
// ride in different Batches, are applied in log order whichever batches
// raft hands them over in.
//
// The leader's own Confirms are visible to its reads at once through an
// overlay; an entry leaves the overlay when the state (Pebble and its
// cache) has applied it. With Batches a Confirm waits in the proposer's
// queue, then for its Batch's commit, before it is applied: the overlay
// covers that time. NewestCached (the acquire's offer, without I/O)
// answers only when the state's cache has the resource, the overlay then
// adding this leader's Confirms not yet applied: an overlay entry alone is
// a maximum over this leadership's Confirms only. Reads never count
// pending reservations (as persist ignores p/ while it lives), but a new
// leader folds them.
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
//     it (2), because no node votes with a log that lost entries (9).
//     Losing the disks of a majority loses the guarantee; so does wiping
//     a node within an election of its last vote (it may vote twice in
//     one term), or while a leader that was deposed behind a partition
//     still counts its acknowledgements (a lost disk is safest as a new
//     identity: TIER.REMOVE the old id, TIER.ADD a new one).
//  7. Every node's state is its committed entries applied once each, in
//     order: a state on disk is the state as of its m/applied index A (a
//     batch and its A are one Pebble batch), ApplyBatch skips entries at
//     or below A, and Restore replaces a state only with a snapshot of a
//     later A (below). So every node computes the same windows from the
//     same bound. A Batch is one entry with one index: its ops are all
//     applied with it, or all skipped.
//  8. With Options.Shared (fenceproxy), no token is above the backend's
//     bound either. A leader issues no token before Leadership.Join, and
//     every window it issues from (Join's, and each one NextToken commits
//     later) is committed to the log first, then written to the backend
//     by Join's share function (Redis, with WAIT for --min-replicas), and
//     only then handed out, as persist's Shared store does with its fsync
//     (persist's invariant 9). A backend bound found above the window was
//     raised by another store: Adopt (the floor above it) and a new
//     window. So every token is at most both the tier's and Redis's
//     bound, and losing Redis's copy, or the tier's, alone loses no bound.
//     Batches change nothing here: a Reserve records a token NextToken
//     handed out (from a shared window), it never makes one, and it is
//     refused before it is queued for a Batch while the window is not
//     shared, or for a token above the window's end; the Window and
//     Adopt entries that move the bound and the floor are proposed alone,
//     under windowMu, never queued in a Batch.
//  9. A node that lost its Raft state never votes before it has caught up
//     (rejoin.go). Opened without Raft state (or with the synced
//     Dir/rejoining mark of an earlier such start), its transport answers
//     every RequestVote and RequestPreVote "not granted" and refuses
//     TimeoutNow, and it sends no RequestVote, until its applied index
//     reaches the commit index a ready leader answered its report with
//     after a VerifyLeader round (every entry committed before the node
//     restarted is at or below it), or until every other node of --peers
//     has asked it for a vote with no more than the bootstrap entry (a
//     new tier: nothing was ever committed). hashicorp/raft alone would
//     grant an empty node's vote to any candidate (its log is the
//     shortest; with no configuration it grants whoever asks), so a
//     follower that missed what a majority committed could be elected by
//     it. Such a node does not bootstrap once a node with a longer log
//     asked it for a vote. The leader demotes a rejoining voter to a
//     non-voter while it is behind (when the other voters make a quorum
//     without it) and promotes it at its target; TIER.ADD adds a node as
//     a non-voter, promoted the same way, and refuses an address where
//     nothing listens.
//
// # The token authority (leadership.go)
//
// The ready leader runs the backend's token authority (internal/authority,
// started by fenceproxy through Options.OnLeading) on its Leadership while
// it lasts: the heartbeat under the tier's id as authority id, the tier's
// id as the store id of the bound it shares, and a live member of the
// node's own (its node id and run id). So a single fenceproxy with another
// fence store on the same backend and key prefix is a conflict both ways
// (each refuses lock commands while the other lives), the tier's nodes are
// each other's peers (a new leader's heartbeat runs beside the old
// leader's member until it leaves or runs out), a bound in Redis written
// by any leader of the tier is the tier's own (PreviousRun: every such
// bound was committed first, 8, so the tier's bound covers it), and one
// written by another store is adopted: the tier's floor goes above it. The
// Leadership's methods fail once it is over, and Done tells the
// authority to stop (its member then leaves Redis).
//
// # Restarts and snapshots
//
// At every start raft restores its newest snapshot into the state
// (Restore) and then applies the log after the snapshot's index. The state
// is already on disk, so:
//
//   - A batch and its m/applied reach Pebble's WAL together, and a crash
//     loses a suffix of unsynced batches at most: the state on disk is the
//     state as of some applied index A. ApplyBatch skips every entry at or
//     below A, so a replay applies each entry exactly once (a Window applied
//     twice would move this node's bound away from the others').
//   - A snapshot carries the applied index of its state. Restore keeps the
//     state, and reads no further, when the state has applied at least as
//     much (every restart, and InstallSnapshot to a node already past it);
//     otherwise it wipes the state (one range deletion, m/applied with it),
//     streams the snapshot in by batches, and syncs once at the end with
//     the snapshot's applied index. A crash in the middle leaves no
//     m/applied, and the next start restores again.
//   - Persist syncs the state's WAL before it writes the snapshot: raft
//     drops the log a snapshot covers, and the state on disk must then be
//     at least as new as the snapshot, or the next start would need the
//     whole snapshot restored (correct, only slow).
//   - A node without Raft state (a wiped or new node) starts its state
//     empty, whatever its state dir held, and is caught up by the leader;
//     it does not vote until then (invariant 9).
//   - The state dir lost alone (the log kept) reads as applied 0: the
//     snapshot is restored and the log after it applied.
//   - Raft takes a snapshot between two ApplyBatch calls, so it holds
//     every op of a Batch or none. A grant whose Reserve is in the
//     snapshot and whose Confirm rides in a later Batch is pending in it;
//     the Confirm, applied after a Restore, drops the reservation as it
//     would have without the snapshot.
//
// Dropped: raft's Config.NoSnapshotRestoreOnStart. At v1.7.2 it skips the
// Restore at start but still sets raft's applied index to the snapshot's
// (api.go, restoreSnapshot), so a state that lost batches before the
// snapshot's index would never see them again; the applied index in the
// snapshot lets Restore decide instead. Dropped too: a state that rebuilds
// at every start (wiped, then restored): 10 million resources is a
// restore of about 11 s on the project's machine, at every restart.
//
// Snapshots stream (snapshot.go): Persist reads a Pebble snapshot of the
// state (taken on the FSM goroutine, cheap, Apply goes on) record by
// record, and Restore writes records in batches of about 1 MiB, so neither
// holds the state in memory (10 million resources: a 267 MB snapshot,
// written in 2 s and restored in 11 s here). Restore also reads the earlier in-memory
// state's snapshots (version 1) for an upgrade. A Pebble error while
// applying or restoring stops the node (panic: fail-stop); the restart
// resumes from what reached the disk.
//
// # Leadership changes
//
// On losing leadership (raft's NotifyCh) the node stops being ready at
// once: every later call refuses, a Reserve in flight ends with raft's
// ErrLeadershipLost (UnavailableError with Lost), OnLeadershipLost runs,
// so the lock layer can end its waiters -TRYAGAIN, and the Leadership's
// Done closes, so the token authority stops. Ops still queued in the
// proposer are dropped when their turn comes (a Reserve among them fails,
// Lost).
//
// # Followers (forward.go)
//
// A follower relays lock commands to the leader's client port (Relay), one
// command per connection at a time, each wrapped in TIER.RELAY with the
// time it has already spent on the follower, so the leader counts a lease
// from when the follower read it. The follower judges every grant and
// renewal again by its own clock, which alone sees the time on the link
// (commands.relayLock): the leader answers a grant with when its lease
// started relative to the request (relay version 3; a grant after waiting
// in line started when the leader armed it), and a reply that leaves less
// than the safety margin is answered -TRYAGAIN, the grant undone on the
// leader (TIER.UNDO). A command whose reply the link lost after it was
// sent has an unknown outcome (ErrRelayLost): the client gets -ERR saying
// so, never -TRYAGAIN, which clients retry by themselves. A pooled link is
// checked before a command is written on it (a non-blocking peek at its
// socket, and an idle limit), so one that died while idle (a leader
// restarted) costs a dial, not a command of unknown outcome.
// A follower reports its applied index to the leader every second and at
// once when it learns of a new leader; the leader's view of a peer's lag
// is that report (PeerStatus), unknown until the peer has reported in
// this leadership: hashicorp/raft keeps each follower's progress in its
// replication state, which a new leader builds from nothing and which it
// does not expose.
//
// # Concurrency
//
// Every exported method is safe for concurrent use. Node.mu guards the
// leader's side and is never held across I/O. The proposer's mu is held
// while it takes a Batch from its queue and hands it to raft (so entries
// reach the log in the order their ops queued), and it takes Node.mu
// inside, to read the epoch: the proposer's mu, then Node.mu. windowMu
// serializes what commits a Window or an Adopt and moves the counter
// after it (NextToken past a window's end, Adopt, Join), held across the
// commit and the backend share, then Node.mu. The proposer's mu and
// windowMu are never held together (Windows and Adopts do not go through
// the proposer), and raft's FSM goroutine takes none of the three. The
// state's mu (its published small fields), overlayMu, the cache's shard
// mutexes and the verifier's mu are leaves: ApplyBatch takes them one
// after the other, never nested.
package tier
