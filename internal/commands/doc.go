// Package commands is fenceproxy's command table and dispatch: what each
// request name means and who answers it. The long form (a request's path
// step by step, each kind of command file by file): docs/design/commands.md.
//
// A request goes connection -> command -> backend -> reply: package protocol
// reads it and calls ServeCommand; the table (table.go) names its serve
// function, which answers it itself, forwards it (passthrough.go, to the
// backend's Forwarder) or, for the lock family, hands it to package lockcmd;
// protocol writes the reply. Forwarding does not know the topology: package
// upstream's Forwarder picks the master, splits, merges and follows
// redirects.
//
// The table is one declarative list of every command the proxy does more
// with than forward it. An entry gives its name, arity, flags (Redis's
// write/readonly/admin/fast, and the proxy's own: lock family, runs at once
// inside MULTI, blocks in Redis, opens a pub/sub tunnel), the argument
// naming a lock resource and whether the command changes that resource's
// lease, a refusal text, the serve function, and for a lock command its
// result counter and INFO lines. Everything that has to know a command
// reads it from its entry:
//
//   - ServeCommand: the lookup, arity errors, what runs at once inside
//     MULTI rather than being queued;
//   - the ACL checks (acl.go): a lock command's resource against the user's
//     key patterns, read, and written for the commands that change a lease;
//   - the ACL universe (ACLCommands): the proxy's own commands with their
//     categories, which the flags give as Redis's do, plus @lock;
//   - COMMAND (command.go): the proxy's own commands beside Redis's;
//   - INFO's "# locks" section and the counters' results (lockcmd's
//     lockobs.go).
//
// A new lock command is its entry, its serve function (in lockcmd) and
// what the lock manager does for it.
//
// Five kinds of command:
//
//   - local: answered by the proxy itself because they describe the client's
//     own connection (ECHO, HELLO, CLIENT ID/SETNAME/GETNAME/SETINFO,
//     CLIENT INFO/LIST/KILL/REPLY/UNBLOCK, AUTH, SELECT, RESET, QUIT) or the
//     proxy (INFO adds its own sections to Redis's, COMMAND its own
//     commands);
//   - PING, SCRIPT KILL, FUNCTION KILL and FUNCTION STATS, which Redis
//     answers while a script is busy: on the backend's control connection
//     (Forwarder.Control, control.go), so none waits behind the script;
//   - the lock family (LOCK.*, FENCE.*, TIER.*), and EVAL, EVALSHA and SET,
//     which may be a client's own lock recipe: served by package lockcmd,
//     given the connection as a lockcmd.Conn;
//   - commands that need a backend connection of the client's own: MULTI,
//     EXEC, WATCH and blocking commands (pinned.go), pub/sub, SYNC and
//     MONITOR (a tunnel to Redis, which answers everything on it), WAIT (on
//     every master) and CLIENT TRACKING (tracking.go);
//   - everything else, forwarded to Redis, reply bytes untouched
//     (passthrough.go). PSYNC, REPLCONF, SHUTDOWN and the CLIENT
//     subcommands that would act on a connection other clients share are
//     refused with an error that says what to do instead.
//
// A request that switches the client's backend connection or state
// (SELECT, AUTH as another user, MULTI's and WATCH's pin, CLIENT TRACKING
// ON) goes on once its earlier replies are in (protocol's AfterReplies): on
// the serve loop a continuation, never a wait.
//
// Before any of it (after the ACL check), a request that writes or deletes
// one of the proxy's own keys (every key under --key-prefix: owner records,
// guards, fence marks, the token authority's keys), as its declared keys
// say, is refused, inside MULTI and FENCE.EXEC too (ownwrites.go); reads
// are served. What a tunnel or a tracking connection relays leaves out
// Redis's messages about those keys (ownkeys.go).
//
// In a tier (Options.Locks.Tier) a node that does not lead relays every
// lock-family command but the TIER.* ones to the leader (lockcmd's
// RelayLock), after its own ACL check, over links the leader accepts with
// the tier secret (TIER.PEER, tierlink.go, served before any ACL check); a
// relay link's own commands are never relayed again.
//
// Each connection's state is a session (session.go), one part per concern,
// reached only by sessionOf. Most of it is touched only while a request of
// that connection is served or its batch ends (BatchDone, ClientGone,
// Closed), which protocol never runs at the same time (see its Handler
// interface); what lock requests and backend readers reach while the
// connection goes on serving is under a lock of its part (the running lock
// requests', the Forwarder's Client's), or captured when the request is
// served. The lock order is in docs/lock-order.md.
//
// A request is answered through its resp.Reply: with bytes (Redis's reply,
// or one the proxy builds), or with an error value in Err (the backend's
// failures, a refused node, lockcmd's answer for a lock-manager failure),
// which protocol writes as the client's reply.
package commands
