// Package commands is fenceproxy's command table: what each request name
// means and who answers it.
//
// Three kinds of command live here:
//
//   - local: answered by the proxy itself because they describe the client's
//     own connection (PING, ECHO, HELLO, CLIENT ID/SETNAME/GETNAME/INFO/LIST,
//     SELECT 0, RESET, AUTH, INFO's own sections);
//   - the lock family (LOCK.ACQUIRE, LOCK.RENEW, LOCK.RELEASE, FENCE.CHECK,
//     FENCE.EXEC, LOCK.INFO, ...), served by the lock manager;
//   - everything else, forwarded to Redis, reply bytes untouched.
//
// Forwarding does not know the topology: forward hands a request to the
// backend's Forwarder (package cluster), which picks the connection of a
// standalone master or, in front of a Redis Cluster, the slot's master, and
// splits, merges, broadcasts and follows redirects itself. What stays here
// is the client's state: a client that needs a connection of its own keeps
// the one Forwarder.Pin gave it while its MULTI/EXEC, WATCH or blocking
// command lasts (pinned.go), and one that used pub/sub has a tunnel to
// Redis for the rest of its connection (pubsub.go). WAIT goes to every
// master (Forwarder.WaitReplicas).
//
// Each connection's state is a session (session.go), one part per concern
// (what the Forwarder keeps of the client, CLIENT SETINFO, the transaction,
// the tunnel, authentication, the running lock requests), reached only by
// sessionOf.
//
// A request is answered through its resp.Reply: with bytes (Redis's reply,
// or one the proxy builds), or with an error value in Err (the backend's
// failures, a refused node, lockError's answer for a lock-manager failure),
// which protocol writes as the client's reply.
//
// What cannot run on a shared backend connection and has no connection of
// its own here (MONITOR, replication, SHUTDOWN) is refused with a clear
// error, never forwarded where it would answer wrongly.
package commands
