// Package commands is fenceproxy's command table: what each request name
// means and who answers it.
//
// Four kinds of command live here:
//
//   - local: answered by the proxy itself because they describe the client's
//     own connection (PING, ECHO, HELLO, CLIENT ID/SETNAME/GETNAME/SETINFO/
//     INFO/LIST, SELECT 0, RESET, QUIT), or the proxy (INFO adds its own
//     sections to Redis's); AUTH too when fenceproxy's own users are on
//     (acl.go);
//   - the lock family (LOCK.ACQUIRE, LOCK.RENEW, LOCK.RELEASE, FENCE.CHECK,
//     FENCE.EXEC, LOCK.INFO, LOCK.TOP, LOCK.SLOWLOG), served by the lock
//     manager on workers (workers.go), so the connection goes on
//     dispatching while a lock request waits on Redis, its replicas and the
//     disk;
//   - commands that need a backend connection of the client's own: MULTI,
//     EXEC, DISCARD, WATCH and blocking commands (BLPOP, WAIT, XREAD BLOCK,
//     ...) on a connection pinned to the client (pinned.go), pub/sub on a
//     Redis connection whose stream is relayed to the client (pubsub.go;
//     subscriber.go in front of a Redis Cluster);
//   - everything else, forwarded to the master that owns it, reply bytes
//     untouched (passthrough.go); in front of a Redis Cluster, routed by
//     slot, split per slot and merged where Redis's semantics allow
//     (route.go), or run on every master (broadcast.go).
//
// What cannot work through a proxy that shares its backend connections
// (MONITOR, replication, SHUTDOWN, the CLIENT subcommands that would act
// on a connection other clients share) is refused with an error that says what to do instead,
// never forwarded where it would answer wrongly.
//
// A request is answered through its resp.Reply: with bytes (Redis's reply,
// or one the proxy builds), or with an error value in Err (the backend's
// failures, a refused node, lockError's answer for a lock-manager failure),
// which protocol writes as the client's reply.
//
// The Handler's per-connection state is its session (local.go). Most of it
// is touched only while a request of that connection is served or its batch
// ends (BatchDone, ClientGone, Closed), which protocol never runs at the
// same time (see its Handler interface); the parts that lock workers and
// backend readers reach while the connection goes on serving are under
// session.mu. The lock order is in docs/lock-order.md.
package commands
