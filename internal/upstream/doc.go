// Package upstream is fenceproxy's view of the Redis it fronts: which masters
// exist, which master owns a key, which replicas each master has, and how a
// client's request gets to Redis and its reply back. The long form (each
// method's mechanics, file by file): docs/design/upstream.md.
//
// A Backend is either a standalone master with its replicas (standalone.go)
// or a Redis Cluster (topology.go: a slot map read from CLUSTER SLOTS and
// kept fresh). A standalone master is given by --backend or named by Redis
// Sentinel (sentinel.go: the Sentinel with the newest config-epoch decides,
// and a new master's Node is swapped in without a restart).
//
// # The request path
//
// Every Backend is a Forwarder (forward.go), the request path's one way to
// Redis: the caller hands it a request and the client's Client and never
// asks which topology it has.
//
//   - Forward: a standalone master sends the request on the client's
//     connection of the master's pool, picked by the client's id and
//     protocol (Node.pool). A Redis Cluster sends it to the master of its
//     keys' slot (route.go) through MOVED, ASK, TRYAGAIN and failovers, and
//     holds it while the client's requests routed by an older view of the
//     slots are still out, so it never overtakes them. A request whose keys
//     span slots is cut into a request per slot, and a command about the
//     whole keyspace runs on every master, by package fanout's tables,
//     which merge their replies into one; SCAN walks the masters in turn;
//     anything else that spans slots gets Redis Cluster's -CROSSSLOT.
//     Forward never waits on the serve loop: a Redis Cluster's request
//     routed by a view of the slots that changed since the client's last
//     one goes on once the client's earlier replies are in (AfterReplies,
//     a continuation there). Ready says whether the connections a client's requests go on are
//     open (its database's; a tracking client's own to each master of a
//     Redis Cluster), and Open, off the loop, opens them first.
//   - Pin: a connection of the client's own (MULTI, WATCH, blocking
//     commands: package pinned) to the master of the request's first key;
//     on it, a MOVED or ASK becomes a -CROSSSLOT that says the key is on
//     another master. RoutesByKey tells a transaction to wait for its first
//     command to know its master.
//   - Select: the client's database (databases.go); a Redis Cluster only 0.
//   - Track: client-side caching (tracking.go): a tracking client gets a
//     connection of its own (in a Redis Cluster, one to each master it reads
//     from: package tracking), its pushes merged into one stream.
//   - WaitReplicas: WAIT (and WAITAOF) on every master, each after a write
//     of the proxy's own on the same connection, answering the smallest
//     count (wait.go).
//   - Control: PING, SCRIPT KILL and FUNCTION KILL on a connection of each
//     master that carries nothing else (Node.control), so that a busy
//     script answers PING with -BUSY and can be killed.
//   - Subscribe: a pub/sub tunnel (a standalone master's: tunnel.go; a
//     Redis Cluster's, which follows shard channels' slots and mirrors
//     keyspace notifications from every master: package pubsub).
//
// The connections a client has to itself have rooms of their own beneath
// upstream, each knowing a master and the cluster only through the small
// interfaces it asks for: pinned (a transaction's, a blocking command's),
// tracking (a tracking client's, in front of a Redis Cluster) and pubsub
// (a subscriber's, in front of a Redis Cluster); fanout cuts and merges
// requests over masters.
//
// In front of a Redis Cluster the proxy shows itself as a cluster of one
// node (view.go). The proxy's own requests (lock scripts, the token
// authority's heartbeat, INFO) go to the Node that MasterForKey names;
// RetryAfterRefresh and Refusal answer what they need to know of the
// topology.
//
// # Guarded masters
//
// A standalone master's Node is guarded, so that nothing is ever written to
// a node that is not the master: each connection to it asks ROLE before it
// carries anything (and, with Sentinel, after one broke, the Sentinels must
// still name it: an old master restarted empty reports itself a master),
// and while it is not the master a gate shared by all its connections
// answers every request with an error instead of sending it (its refusal, a
// resp.Error, in the request's resp.Reply.Err).
//
// # Errors
//
// Failures travel as errors, never as reply text: a request no master could
// take gets ErrUnavailable in its Reply's Err, a broken connection
// backend.ErrLost; the connection that owes the reply writes it from them.
// Redis's own MOVED, ASK, TRYAGAIN and CLUSTERDOWN are Redis's bytes: the
// cluster's Forward follows the slot, and no client sees MOVED or ASK.
//
// # Nodes
//
// Each master is a Node with two ways in: pools of shared connections that
// forward client requests byte for byte (served by the serve loop with
// Options.Loop), and connections kept for lock writes, which the Node dials,
// guards and closes but hands to the lock writer (internal/lockwriter) to
// serve (Node.ServeLockWrites). Each Node also keeps its master's last
// maxmemory-policy reading (memory.go), so the lock path refuses grants
// Redis could evict without asking Redis first.
package upstream
