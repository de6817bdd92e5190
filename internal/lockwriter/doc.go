// Package lockwriter is the batched, WAIT-acknowledged writer of lock
// records to a Redis master: it runs the lock scripts (and the token
// authority's share of its bound) on each master's lock connections, many
// callers' writes in one round, and tells each caller what Redis answered
// and how many replicas acknowledged it. internal/locks and
// internal/authority write through it; what the scripts mean is theirs.
//
// # Rounds
//
// For each master a Writer serves the connections its upstream.Node hands
// it (Node.ServeLockWrites) with writers of its own (writeLoop), each
// doing its own socket I/O on a backend.SyncConn. Writes that want
// acknowledgements and writes that do not (releases, undos, FENCE.EXEC)
// queue apart, on connections apart, so that the latter never wait behind
// a WAIT.
//
// A round is one batch on one connection: the writes queued when its
// writer came free (at most 256), sent in one write as their scripts,
// then, if they want acknowledgements and MinReplicas is above 0, one
// WAIT MinReplicas ReplicaTimeout. The writer sends nothing more on that
// connection until the round's last reply (the WAIT's) is in: what comes
// meanwhile is the next round, so the busier the master, the more writes
// share a round. With several connections of a kind (--lock-conns), their
// writers read the queue in turn: the next round is whatever came while
// the last was out, as with one, and a writer whose round ends keeps the
// turn (one connection does every round while rounds are short). A round
// whose WAIT is out longer than its share of a round (half with two
// writers, a quarter with four), between 150 µs and 10 ms (a replica a
// millisecond or more away), hands the turn on early, and the next
// writer's round overlaps it: a
// grant then waits for about one round, not for the round out and then
// its own.
//
// Operations of a batch script (ScriptCall.Op; locks' opsScript) go as
// one call of that script per hash slot (one in all in front of a master
// that does not route by key), in the order they came, each answered with
// its own element of the script's list; every other write is a script
// call of its own. The seam: every call with an Op carries the same batch
// script as its Source and SHA, its three keys and its arguments; the
// Writer knows the letters (Op) only as bytes to send.
//
// # What one WAIT acknowledges
//
// WAIT counts the replicas that have every write its connection sent
// before it, so one WAIT acknowledges its whole round: Write.Acks is that
// count for each write of the round. A write's script reply (Write.Reply,
// Raw) reaches its caller as soon as it is read, while the WAIT is still
// out: the caller does its own slow step (the token store's fsync) in
// between. Without a WAIT (none asked, or MinReplicas 0) Acks is 0 at
// once.
//
// # Outcomes
//
// Every error of a Write is one of: the script's own (Redis refused it: a
// resp.Error); upstream.ErrUnavailable, a refused node's error or the
// context's error (it was not sent: nothing happened); or
// upstream.ErrOutcomeUnknown, an unknown outcome: the connection was lost
// with the write or its WAIT in flight, or what came back was not a reply
// to it (not RESP; a batch script's list without one element per
// operation), so it may or may not have run, on any number of replicas
// (Raw reports the lost connection as backend.ErrLost). An Acks error is
// always an unknown outcome (Redis itself may end a WAIT: -UNBLOCKED when
// its master steps down).
//
// Start retries only what did not run: an EVALSHA answered NOSCRIPT goes
// again at once with EVAL (and a script's first call on a master goes
// with its source, so that no NOSCRIPT holds a round's WAIT for nothing);
// in front of a Redis Cluster, MOVED, ASK, TRYAGAIN, CLUSTERDOWN or no
// reachable master re-read the topology and retry within
// upstream.RetryWindow. StartOn and RunAfter never retry.
//
// # Invariants
//
//   - Every write is answered: replied, or failed. One queued for a node
//     that closes is answered ErrUnavailable (retire drains the queues
//     until no write is between its look at the node and its queue).
//   - A write that may have run is never reported as not sent, nor
//     retried.
//   - A write and the WAIT that counts it travel on one connection, the
//     WAIT behind it; a round's replies complete in the order sent.
//
// Use one Writer per backend: a master's lock connections are served
// once.
//
// Lock order: Writer.mu, then the cluster Node's mu (a master's writers
// start under it, through Node.ServeLockWrites, with its first write).
// The rest is atomic or a writer goroutine's own (docs/lock-order.md).
package lockwriter
