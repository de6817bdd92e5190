package locks

import "github.com/fenceproxy/fenceproxy/internal/cluster"

// The owner record is a hash at recordKey(resource), expiring with the
// lease: owner, token, and since LOCK.INFO's acquired-at and client-addr,
// acquired (unix ms of the grant of this token, by the granting proxy's
// clock), renewed (unix ms the lease was last armed: the grant, a renewal or
// a same-owner re-acquire) and addr (ip:port of the client connection the
// grant was made for). Records written before those fields existed lack
// them; every script and reader treats a missing one as unknown. They ride in
// the scripts that already run (no extra round trip), so they are right for
// a lock granted through another fenceproxy or before a restart. With a lock-delay, a guard key beside it (same hash tag)
// outlives every lease by the delay; a clean release deletes both, so only a
// lease that ran out leaves the guard standing, and nobody is granted the
// resource until it is gone. Tokens travel as strings: Lua numbers are
// doubles.
//
// Replies are tables so the manager can tell the outcomes apart.
//
// Terms (terms.go): every script that writes carries the caller's term as
// its last argument and starts with termCheck. A record written in a term
// above 0 keeps it in a field term (a single node's records, term 0, have
// none: as before terms); the guard's value is its writer's term plus one
// ("1" for a single node, as before). A record or guard of a higher term
// than the caller's refuses the whole script with an error reply
// NEWERTERM <term>, before anything is read for the decision or written,
// so a deposed leader touches no newer lease. A caller of a higher term
// than the record's acts on it as the owner checks allow and stamps its
// own term on what it writes.

// termCheck opens every script that writes (see above): it refuses the
// script if the record or the guard was written in a term above the
// caller's. stampTerm puts the caller's term on the record, if it has one.
const termCheck = `
local term = tonumber(ARGV[#ARGV])
local stored = math.max(tonumber(redis.call('HGET', KEYS[1], 'term')) or 0, (tonumber(redis.call('GET', KEYS[2])) or 1) - 1)
if stored > term then
  return redis.error_reply('NEWERTERM ' .. stored)
end
local function stampTerm()
  if term > 0 then
    redis.call('HSET', KEYS[1], 'term', ARGV[#ARGV])
  end
end
`

// acquireScript: KEYS[1] record, KEYS[2] guard; ARGV owner, ttl-ms, new
// token, newest token known to the fence store ("" if the caller did not
// read it), "1" if others wait in line (then only the owner's own re-arm is
// allowed: no barging), lock-delay-ms, now (unix ms), client addr, term. Returns
// {0, pttl} busy, {1, token} the owner's existing grant (re-armed), {2,
// token} a new grant, {3, 0} the owner's own record is there but the newest
// token is needed to judge it (ask again with it; nothing was written),
// {4, token} a record, anyone's, carries a token at or above the new one:
// this store never issued it (kindTokenAhead, authority.go; nothing was
// written). The owner's own record is re-armed only if its token is the
// newest the fence store knows as issued: a token above it was never
// issued (a grant whose reservation was cancelled, or whose outcome was
// lost in a crash before it was recorded) and one below it is stale (a
// record resurrected by a failover, or written by a proxy with another
// data dir). Such a record is replaced by a new grant, its token never
// handed out. Tokens are compared as the strings they are stored as:
// exact, where Lua's doubles are not above 2^53. Only that judgement needs
// the newest token: a new grant's token is above every token ever issued.
const acquireScript = termCheck + `
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
if cur[2] and tonumber(cur[2]) and tonumber(cur[2]) >= tonumber(ARGV[3]) then
  return {4, cur[2]}
end
if cur[1] then
  if cur[1] ~= ARGV[1] then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  if ARGV[4] == '' then
    return {3, 0}
  end
  -- only the newest token issued is honoured (see above)
  if cur[2] == ARGV[4] then
    redis.call('HSET', KEYS[1], 'renewed', ARGV[7])
    stampTerm()
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    if tonumber(ARGV[6]) > 0 then
      redis.call('SET', KEYS[2], term + 1, 'PX', tonumber(ARGV[2]) + tonumber(ARGV[6]))
    end
    return {1, cur[2]}
  end
elseif tonumber(ARGV[6]) > 0 then
  local left = redis.call('PTTL', KEYS[2])
  if left > 0 then
    return {0, left}
  end
end
if ARGV[5] == '1' then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', ARGV[3], 'acquired', ARGV[7], 'renewed', ARGV[7], 'addr', ARGV[8])
stampTerm()
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if tonumber(ARGV[6]) > 0 then
  redis.call('SET', KEYS[2], term + 1, 'PX', tonumber(ARGV[2]) + tonumber(ARGV[6]))
end
return {2, ARGV[3]}
`

// replyKind is the first element of acquireScript's {kind, value} reply.
type replyKind int64

// acquireScript's reply kinds; the value that comes with each is named
// after the colon.
const (
	// kindBusy: value, the holder's lease left (ms; -1 or -2 if unknown).
	// Another owner holds the resource, its lock-delay guard stands, or it
	// is free but others wait in line for it. Nothing was written.
	kindBusy replyKind = 0
	// kindRearmed: value, the owner's token. The owner's own current grant
	// was re-armed.
	kindRearmed replyKind = 1
	// kindGranted: value, the candidate token. A new grant.
	kindGranted replyKind = 2
	// kindNeedNewest: the owner's own record is there, but judging it needs
	// the resource's newest token, which the call did not carry. Nothing
	// was written: ask again with it.
	kindNeedNewest replyKind = 3
	// kindTokenAhead: value, the record's token, at or above the candidate
	// (see authority.go). Nothing was written.
	kindTokenAhead replyKind = 4
)

// renewScript: KEYS[1] record, KEYS[2] guard; ARGV owner, ttl-ms, newest
// token, lock-delay-ms, now (unix ms), term. Returns the
// token, or nil if owner does not hold a current record (expired records are
// gone, so a lapsed lease is never revived) whose token is the newest issued
// (as acquireScript's re-arm: a record with any other token is not honoured).
const renewScript = termCheck + `
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
if cur[1] == ARGV[1] and cur[2] == ARGV[3] then
  redis.call('HSET', KEYS[1], 'renewed', ARGV[5])
  stampTerm()
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if tonumber(ARGV[4]) > 0 then
    redis.call('SET', KEYS[2], term + 1, 'PX', tonumber(ARGV[2]) + tonumber(ARGV[4]))
  end
  return cur[2]
end
return false
`

// releaseScript: KEYS[1] record, KEYS[2] guard; ARGV owner, term. If it deleted
// owner's record (and the guard: a clean release applies no lock-delay) it
// returns the record's {token, acquired, addr} (false for a field an older
// record lacks), for the slow-lock log; else 0.
const releaseScript = termCheck + `
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'acquired', 'addr')
if cur[1] == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return {cur[2], cur[3], cur[4]}
end
return 0
`

// undoScript: KEYS[1] record, KEYS[2] guard; ARGV owner, token, term. Deletes the
// record (and guard) only if it is exactly the grant being undone.
const undoScript = termCheck + `
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
`

// execScript runs the command in ARGV inside a script, so that it runs
// whole with nothing between the fence check and it. pcall hands back the
// command's own error as an error reply. KEYS, if any, are the command's
// keys again (also in ARGV), declared so that Redis Cluster redirects the
// script to their slot's master rather than running it where it landed.
const execScript = `return redis.pcall(unpack(ARGV))`

// infoScript: KEYS[1] record. Returns {owner, token, pttl, acquired,
// renewed, addr}, false for a field not there (free, or an older record).
const infoScript = `
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'acquired', 'renewed', 'addr')
return {cur[1], cur[2], redis.call('PTTL', KEYS[1]), cur[3], cur[4], cur[5]}
`

// The hot scripts go by EVALSHA (see Writer.Start): an EVAL sends about a
// kilobyte of source that Redis hashes on every call. So does infoScript
// (Writer.Read).
var (
	acquireSHA = cluster.ScriptSHA(acquireScript)
	renewSHA   = cluster.ScriptSHA(renewScript)
	releaseSHA = cluster.ScriptSHA(releaseScript)
	infoSHA    = cluster.ScriptSHA(infoScript)
)
