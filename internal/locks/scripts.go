package locks

import "github.com/redis/go-redis/v9"

// The owner record is a hash {owner, token} at recordKey(resource), expiring
// with the lease. Tokens travel as strings: Lua numbers are doubles.
//
// Replies are tables so the manager can tell the three outcomes apart.

// acquireScript: KEYS[1] record; ARGV owner, ttl-ms, new token, newest token
// known to the fence store, and "1" if others wait in line (then only the
// owner's own re-arm is allowed: no barging). Returns {0, pttl} busy, {1, token} the owner's
// existing grant (re-armed), {2, token} a new grant. The owner's own record is
// re-armed only if its token lies between the newest recorded and the new
// one; any other (resurrected by a failover, or written by a proxy with
// another data dir) is replaced by a new grant, never handed out again.
const acquireScript = `
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
if cur[1] then
  if cur[1] ~= ARGV[1] then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  local t = tonumber(cur[2])
  if t and t >= tonumber(ARGV[4]) and t < tonumber(ARGV[3]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, cur[2]}
  end
end
if ARGV[5] == '1' then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {2, ARGV[3]}
`

// renewScript: KEYS[1] record; ARGV owner, ttl-ms, newest token. Returns the
// token, or nil if owner does not hold a current record (expired records are
// gone, so a lapsed lease is never revived).
const renewScript = `
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
if cur[1] == ARGV[1] and tonumber(cur[2]) >= tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return cur[2]
end
return false
`

// releaseScript: KEYS[1] record; ARGV owner. Returns 1 if it deleted owner's
// record, else 0.
const releaseScript = `
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`

// undoScript: KEYS[1] record; ARGV owner, token. Deletes the record only if
// it is exactly the grant being undone.
const undoScript = `
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`

// infoScript: KEYS[1] record. Returns {owner or false, token or false, pttl}.
const infoScript = `
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
return {cur[1], cur[2], redis.call('PTTL', KEYS[1])}
`

// infoRead runs infoScript through go-redis: a read needs no batching.
var infoRead = redis.NewScript(infoScript)
