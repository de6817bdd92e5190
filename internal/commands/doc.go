// Package commands is fenceproxy's command table: what each request name
// means and who answers it.
//
// Three kinds of command live here:
//
//   - local: answered by the proxy itself because they describe the client's
//     own connection (PING, ECHO, HELLO, CLIENT ID/SETNAME/GETNAME, SELECT 0);
//   - the lock family (LOCK.ACQUIRE, LOCK.RENEW, LOCK.RELEASE, FENCE.CHECK,
//     LOCK.INFO), served by the lock manager;
//   - everything else, forwarded to the master that owns it, reply bytes
//     untouched.
//
// A request is answered through its resp.Reply: with bytes (Redis's reply,
// or one the proxy builds), or with an error value in Err (the backend's
// failures, a refused node, lockError's answer for a lock-manager failure),
// which protocol writes as the client's reply.
//
// Commands that need a connection of their own (pub/sub, MULTI, blocking
// pops) are refused with a clear error until they are built, never forwarded
// on a shared connection where they would answer wrongly.
package commands
