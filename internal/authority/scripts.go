package authority

import "github.com/redis/go-redis/v9"

// heartbeatScript: KEYS[1] live set, KEYS[2] bound hash; ARGV member,
// live-for ms, most members returned. Drops expired members, (re)writes
// member with a score of now + live-for (Redis TIME), and returns {live
// members with their scores, bound, store, run} (false for a missing
// field). The set itself expires when nobody has written it for twice the
// longest live-for.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + live, ARGV[1])
if redis.call('PTTL', KEYS[1]) < 2 * live then
  redis.call('PEXPIRE', KEYS[1], 2 * live)
end
local members = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1, 'WITHSCORES')
local b = redis.call('HMGET', KEYS[2], 'bound', 'store', 'run')
return {members, b[1], b[2], b[3]}
`)

// shareScript: KEYS[1] bound hash; ARGV bound, store id, run id. Raises
// the bound to ARGV[1] (naming the store and process that raised it),
// never lowers it, and
// returns the bound after. Bounds are compared as decimal strings: a Lua
// number is a double, exact only up to 2^53.
const shareScript = `
local function above(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local cur = redis.call('HGET', KEYS[1], 'bound')
if not cur or above(ARGV[1], cur) then
  redis.call('HSET', KEYS[1], 'bound', ARGV[1], 'store', ARGV[2], 'run', ARGV[3])
  return ARGV[1]
end
return cur
`

// leaveScript: KEYS[1] live set; ARGV member. A clean stop leaves at once,
// so that another process need not wait for the member to expire.
var leaveScript = redis.NewScript(`return redis.call('ZREM', KEYS[1], ARGV[1])`)
