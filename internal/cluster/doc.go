// Package cluster is fenceproxy's view of the Redis it fronts: which masters
// exist, which master owns a key, which replicas each master has, and how a
// lock write is made to wait for their acknowledgements.
//
// A Backend is either a standalone master with its replicas or a Redis
// Cluster (Cluster: a slot map read from CLUSTER SLOTS and kept fresh, and
// Send, which carries a request to its slot's master through MOVED, ASK,
// TRYAGAIN and failovers).
// Each master is a Node with two ways in: a backend.Pool that forwards client
// requests byte for byte, and a replicated writer that runs lock scripts in
// batches, each batch followed by one WAIT on the same connection, so that one
// round of replica acknowledgements covers every grant in the batch.
//
// Each Node also keeps its master's last maxmemory-policy reading
// (memory.go), read at connect, on topology refreshes and periodically, so
// the lock path can refuse grants that Redis could evict without asking
// Redis first.
package cluster
