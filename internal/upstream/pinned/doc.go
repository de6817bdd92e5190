// Package pinned is a client's connection of its own to one Redis master:
// what MULTI/EXEC and WATCH (state kept on the connection), a blocking
// command (which would stall every client sharing a connection) and a
// tracking client (whose reads Redis tracks per connection) need.
//
// A Conn comes from its Home, the master's node, which keeps a few clean
// connections idle for the next client (upstream's Node), or is lent by a
// Lender, a tracking client's tracker in front of a Redis Cluster
// (package tracking), which keeps its connections for the client's
// tracking and takes them back (Release).
//
// Contracts:
//   - a Conn never reconnects by itself: a client's transaction is never
//     carried on half-applied over a fresh connection; after a break Up is
//     false and every request fails;
//   - only a clean connection (no MULTI, WATCH or blocked command pending)
//     goes back to be reused, and in database 0, where the next client's
//     pinning starts;
//   - in front of a Redis Cluster (keyed) no MOVED or ASK reaches the
//     client: the connection is bound to one master, so a key that lives on
//     another is answered with -CROSSSLOT and a hint.
package pinned
