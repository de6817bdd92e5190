// Package cluster is fenceproxy's view of the Redis it fronts: which masters
// exist, which master owns a key, and which replicas each master has.
//
// A Backend is either a standalone master with its replicas or a Redis
// Cluster (Cluster: a slot map read from CLUSTER SLOTS and kept fresh, and
// Send, which carries a request to its slot's master through MOVED, ASK,
// TRYAGAIN and failovers).
// A standalone master is given by --backend or named by Redis Sentinel
// (sentinel.go: the Sentinel with the newest config-epoch decides; a
// +switch-master announcement or the check every second swaps in the new
// master's Node without a restart).
//
// A standalone master's Node is guarded, so that nothing is ever written to
// a node that is not the master: each connection to it asks ROLE before it
// carries anything (and, with Sentinel, after one broke, the Sentinels must
// still name it: an old master restarted empty reports itself a master),
// and while it is not the master a gate shared by all its connections
// answers every request with an error instead of sending it (its refusal, a
// resp.Error, in the request's resp.Reply.Err).
//
// Failures travel as errors, never as reply text: a request no master could
// take gets ErrUnavailable (the backend's own) in its Reply's Err, a broken
// connection backend.ErrLost; the client's reply is written from them by the
// connection that owes it. Redis's own MOVED, ASK, TRYAGAIN and CLUSTERDOWN
// are Redis's bytes: Send reads them to follow the slot, and the client
// never sees MOVED or ASK.
//
// Each master is a Node with two ways in: a backend.Pool that forwards client
// requests byte for byte, and connections kept for lock writes, which the
// Node dials, guards and closes but hands to the lock writer to serve
// (Node.ServeLockWrites; the writer, internal/locks, runs lock scripts in
// batches, each followed by one WAIT on the same connection).
//
// Each Node also keeps its master's last maxmemory-policy reading
// (memory.go), read at connect, on topology refreshes and periodically, so
// the lock path can refuse grants that Redis could evict without asking
// Redis first.
package cluster
