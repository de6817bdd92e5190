// Package auth is fenceproxy's own client authentication: users with
// passwords and permissions in a subset of Redis's ACL syntax, checked by
// the proxy before a request goes anywhere.
//
// The model is Redis 7.0's, so an operator can reuse what they know:
//
//   - A user has a name, an on/off switch, passwords (kept only as SHA-256
//     digests, compared in constant time) or nopass, a set of commands it
//     may run, key patterns (~pattern for read and write, %R~ and %W~ for
//     one of them, allkeys) and channel patterns (&pattern, allchannels).
//   - Users come from an ACL file (--aclfile), one "user <name> <rules…>"
//     per line as in Redis's aclfile, blank lines and lines starting with
//     '#' ignored; and/or from --requirepass, which sets the password of
//     the "default" user as Redis's requirepass does. The "default" user
//     exists always: "on nopass ~* &* +@all" unless the file or
//     --requirepass says otherwise. A connection starts as "default" when
//     that user is on and needs no password, and unauthenticated otherwise.
//   - Rules apply left to right, as ACL SETUSER applies them: "+@all
//     -flushall" allows everything but FLUSHALL, "-@all +get" only GET.
//     Command categories are the backend's own, read from its COMMAND reply
//     (@read, @write, @admin, @dangerous, ...), plus fenceproxy's @lock for
//     the lock family, whose commands and categories Compile is given with
//     the backend's (the command table, package commands, has them).
//     "+cmd|sub" allows one subcommand.
//   - Patterns are Redis globs with Redis's exact semantics (Match): '*'
//     crosses '/', '\' escapes, '[a-z]', '[^...]'.
//
// Parsing is in two steps so that a typo stops the proxy before it touches
// the backend: Parse checks every rule's syntax and names the file, line and
// rule it cannot read; Compile then resolves categories and command names
// against the backend's command table into per-user sets that the hot path
// reads without allocating (CanRun, CanKey, CanChannel).
//
// What this package does not do, and why:
//
//   - ACL SETUSER, ACL LOAD, ACL SAVE: the users are the file's, fixed for
//     the process's life; one source of truth an operator can review.
//   - Selectors ("(~x +get)"), first-argument rules ("+select|0"),
//     sanitize-payload: refused at start, never half-applied or ignored.
//   - Scripts: Redis checks each command a script runs against the calling
//     user; fenceproxy's backend connections run scripts as the proxy's own
//     backend user, so EVAL, EVALSHA and FCALL are checked only on the keys
//     they declare. Deny @scripting to users confined to key patterns
//     (ScriptingUsers names those who are not, for a warning at start).
//
// Redis's aclfile has no comments; '#' lines are fenceproxy's addition.
// Everything else a Redis 7.0 aclfile of these rules says means the same
// here, and the tests compare the replies with a redis-server given the
// same file.
package auth
