// Package commands is fenceproxy's command table and dispatch: what each
// request name means and who answers it.
//
// A request goes connection -> command -> backend -> reply: protocol reads
// it and calls ServeCommand; the table (table.go) names its serve function;
// that one answers it itself, forwards it (the backend's Forwarder, package
// cluster) or, for the lock family, hands it to package lockcmd, whose
// reply protocol writes. A GET goes ServeCommand -> serve -> forward
// (passthrough.go) -> Forwarder. A LOCK.ACQUIRE goes ServeCommand -> serve
// -> its entry's serve (lockServe) -> lockcmd's Family.Acquire -> the lock
// manager. An EVAL goes through its entry to lockcmd's Family.Eval, which
// runs a Redisson script it recognises as the lock manager's twin and
// hands any other back to forward (lockcmd's Options.Forward).
//
// The table (table.go) is one declarative list of every command the proxy
// does more with than forward it. An entry gives its name, arity, flags
// (Redis's write/readonly/admin/fast, and the proxy's own: lock family,
// runs at once inside MULTI, blocks in Redis, opens a pub/sub tunnel), the
// argument naming a lock resource and whether the command changes that
// resource's lease, a refusal text, the serve function, and for a lock
// command its result counter and INFO lines. Everything that has to know a
// command reads it from its entry:
//
//   - ServeCommand: the lookup, arity errors, what runs at once inside
//     MULTI rather than being queued;
//   - the ACL checks (acl.go): a lock command's resource against the user's
//     key patterns, read, and written for the commands that change a lease;
//   - the ACL universe (ACLCommands): the proxy's own commands with their
//     categories, which the flags give as Redis's do (@write, @read, @fast
//     or @slow, @admin and @dangerous) plus @lock;
//   - COMMAND (command.go): the proxy's own commands described beside
//     Redis's, in Redis 7's shapes (INFO, DOCS, COUNT, LIST);
//   - INFO's "# locks" section and the counters' results (lockobs.go).
//
// A new lock command is its entry, its serve function (in lockcmd) and
// what the lock manager does for it.
//
// In a tier (Options.Locks.Tier) a node that does not lead relays every
// lock-family command but the TIER.* ones to the leader (lockcmd's
// RelayLock), after its own ACL check, over links the leader accepts with
// the tier secret (TIER.PEER, tierlink.go, served before any ACL check); a
// relay link's own commands are never relayed again.
//
// Five kinds of command:
//
//   - local: answered by the proxy itself because they describe the client's
//     own connection (ECHO, HELLO, CLIENT ID/SETNAME/GETNAME/SETINFO,
//     CLIENT INFO/LIST/KILL (clients.go: the proxy's clients, in Redis's
//     format), AUTH (checked by Redis; a client of another Redis user than
//     the proxy's gets a connection of its own as that user, users.go),
//     SELECT (select.go: the database the Forwarder routes
//     by; it switches once the client's earlier replies are in, through
//     protocol's AfterReplies, as do AUTH as another user, MULTI's and
//     WATCH's pin and CLIENT TRACKING ON: on the serve loop a
//     continuation, never a wait), RESET, QUIT; CLIENT REPLY, whose replies the client's
//     connection drops (reply.go); CLIENT UNBLOCK, mapped to the
//     connection the named client's blocking command waits on
//     (unblock.go)), or the proxy (INFO adds its own sections to Redis's,
//     COMMAND its own commands); AUTH too when fenceproxy's own users are
//     on (acl.go);
//   - PING, SCRIPT KILL, FUNCTION KILL and FUNCTION STATS, which Redis answers while a
//     script is busy: on the backend's control connection
//     (Forwarder.Control, control.go), so none waits behind the script;
//   - the lock family (LOCK.ACQUIRE, LOCK.RENEW, LOCK.RELEASE, FENCE.CHECK,
//     FENCE.EXEC, LOCK.INFO, LOCK.TOKEN, LOCK.TOP, LOCK.SLOWLOG, TIER.*),
//     and EVAL, EVALSHA and SET, which may be a client's own lock recipe:
//     served by package lockcmd, given the connection as a lockcmd.Conn
//     (the session is its lockcmd.Client);
//   - commands that need a backend connection of the client's own: MULTI,
//     EXEC, WATCH and blocking commands keep the one Forwarder.Pin gave
//     them while their state lasts (pinned.go); pub/sub makes the
//     connection a tunnel to Redis (pubsub.go, Forwarder.Subscribe), where
//     Redis answers everything, a RESP3 client's CLIENT ID included (sent
//     as a script that returns the client's proxy id), and so do SYNC
//     (replication.go) and MONITOR (monitor.go); WAIT
//     goes to every master (Forwarder.WaitReplicas); a client that turns
//     on CLIENT TRACKING keeps one for all its requests while it tracks
//     (tracking.go, Forwarder.Track; in front of a Redis Cluster one per
//     master, cluster's tracker.go); what a tunnel or a tracking
//     connection relays leaves out Redis's messages about the proxy's own
//     keys (ownkeys.go), and a tunnel keeps the counts CLIENT LIST shows;
//   - everything else, forwarded to Redis, reply bytes untouched
//     (passthrough.go). PSYNC, REPLCONF, SHUTDOWN and the CLIENT
//     subcommands that would act on a connection other clients share are
//     refused with an error that says what to do instead.
//
// Before any of it (after the ACL check), a request that writes or
// deletes one of the proxy's own keys (every key under --key-prefix: owner
// records, guards, fence marks, the token authority's keys), as its
// declared keys say, is refused, inside MULTI and FENCE.EXEC too
// (ownwrites.go); reads are served.
//
// Forwarding does not know the topology: forward hands a request to the
// backend's Forwarder (package upstream), which picks the connection of a
// standalone master or, in front of a Redis Cluster, routes by slot,
// splits per slot and merges where Redis's semantics allow, runs
// keyspace-wide commands on every master and follows redirects itself.
//
// Each connection's state is a session (session.go), one part per concern
// (what the Forwarder keeps of the client, CLIENT SETINFO, the transaction,
// the tunnel, authentication, the lock family's lockcmd.ConnState), reached only by
// sessionOf. Most of it is touched only while a request of that connection
// is served or its batch ends (BatchDone, ClientGone, Closed), which
// protocol never runs at the same time (see its Handler interface); what
// lock requests and backend readers reach while the connection goes on
// serving is under a lock of its part (the running lock requests', the
// Forwarder's Client's), or captured when the request is served. The lock
// order is in docs/lock-order.md.
//
// A request is answered through its resp.Reply: with bytes (Redis's reply,
// or one the proxy builds), or with an error value in Err (the backend's
// failures, a refused node, lockcmd's answer for a lock-manager failure),
// which protocol writes as the client's reply.
package commands
