package authority

import "github.com/redis/go-redis/v9"

// Every script SELECTs the authority's database (ARGV's db) before it
// touches the authority's keys. A script's SELECT ends with the script: the
// connection that ran it stays in its database (Redis 2.8.12 and later).

// heartbeatScript: KEYS[1] live set, KEYS[2] bound hash; ARGV member,
// live-for ms, most members returned, db, probe, sent (the sender's clock
// when it sent this call, Unix ms). Drops expired members (and their sent
// fields), (re)writes member with a score of now + live-for (Redis TIME)
// and its field "sent:<member>" in the bound hash with ARGV sent, unless
// probe is "1" (a process that has not started yet only looks:
// probeLive), and returns {live members with their scores, bound, store,
// run, legacy members with their scores, legacy bound, store, run, the
// live members' sent (false where none)} (false for a missing field). The
// set itself expires when nobody has written it for twice the longest
// live-for; the hash's sent fields whose member is gone (expired, or the
// whole set with it) are dropped once the hash has more fields than the
// bound's three and one a member.
//
// The sent field is how a process tells a dead predecessor's heartbeat
// that reached Redis late (it sat in a socket, or in a stalled Redis's
// input, while that process died) from one of a live copy (classify): the
// score says when Redis ran it, only the sender can say when it was sent.
//
// When db is not 0 it reads database 0 first: an earlier fenceproxy
// kept both keys there (legacyKeys in doc.go). Its live members other than
// this one are returned, and while there are any this member is written
// there too (without a sent field: that process reads none), so that such
// a process, which reads only database 0, sees this one as well; once
// there are none this member leaves it.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = tonumber(ARGV[2])
local db = tonumber(ARGV[4])
local probe = ARGV[5] == '1'
local function beat(stamp)
  if probe then return end
  redis.call('ZADD', KEYS[1], now + live, ARGV[1])
  if redis.call('PTTL', KEYS[1]) < 2 * live then
    redis.call('PEXPIRE', KEYS[1], 2 * live)
  end
  if stamp then redis.call('HSET', KEYS[2], 'sent:' .. ARGV[1], ARGV[6]) end
end
local legacy, lb = {}, {false, false, false}
if db ~= 0 then
  redis.call('SELECT', 0)
  local all = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #all, 2 do
    if all[i] ~= ARGV[1] and #legacy < 2 * tonumber(ARGV[3]) then
      legacy[#legacy + 1] = all[i]
      legacy[#legacy + 1] = all[i + 1]
    end
  end
  if #legacy > 0 then
    beat(false)
  elseif #all > 0 and not probe then
    redis.call('ZREM', KEYS[1], ARGV[1])
  end
  lb = redis.call('HMGET', KEYS[2], 'bound', 'store', 'run')
  redis.call('SELECT', db)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
beat(true)
if redis.call('HLEN', KEYS[2]) > 3 + redis.call('ZCARD', KEYS[1]) then
  for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do
    if string.sub(f, 1, 5) == 'sent:' and not redis.call('ZSCORE', KEYS[1], string.sub(f, 6)) then
      redis.call('HDEL', KEYS[2], f)
    end
  end
end
local members = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1, 'WITHSCORES')
local sent = {}
for i = 1, #members, 2 do
  sent[#sent + 1] = redis.call('HGET', KEYS[2], 'sent:' .. members[i])
end
local b = redis.call('HMGET', KEYS[2], 'bound', 'store', 'run')
return {members, b[1], b[2], b[3], legacy, lb[1], lb[2], lb[3], sent}
`)

// shareScript: KEYS[1] bound hash; ARGV bound, store id, run id, db.
// Raises the bound to ARGV[1] (naming the store and process that raised
// it), never lowers it, and returns the bound after. Bounds are compared as
// decimal strings: a Lua number is a double, exact only up to 2^53. When
// db is not 0, a legacy bound in database 0 that the bound now covers is
// deleted: it says nothing the bound does not.
const shareScript = `
local function above(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local db = tonumber(ARGV[4])
if db ~= 0 then redis.call('SELECT', db) end
local cur = redis.call('HGET', KEYS[1], 'bound')
if not cur or above(ARGV[1], cur) then
  redis.call('HSET', KEYS[1], 'bound', ARGV[1], 'store', ARGV[2], 'run', ARGV[3])
  cur = ARGV[1]
end
if db ~= 0 then
  redis.call('SELECT', 0)
  local old = redis.call('HGET', KEYS[1], 'bound')
  if old and not above(old, cur) then redis.call('DEL', KEYS[1]) end
end
return cur
`

// leaveScript: KEYS[1] live set, KEYS[2] bound hash; ARGV member, db. A
// clean stop leaves at once, so that another process need not wait for the
// member to expire (in database 0 too, where the heartbeat may have
// written it), and takes its sent field with it.
var leaveScript = redis.NewScript(`
local db = tonumber(ARGV[2])
if db ~= 0 then
  redis.call('SELECT', db)
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], 'sent:' .. ARGV[1])
  redis.call('SELECT', 0)
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
redis.call('HDEL', KEYS[2], 'sent:' .. ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
`)

// topDBScript finds the highest database SELECT accepts, when CONFIG GET
// databases is refused (renamed, or not in the proxy's ACL): SELECT n up
// from 15, doubling, until Redis refuses one, then halving between the
// last it took and the first it refused. 0 if SELECT is refused
// altogether. Each refusal counts in Redis's error statistics, so this runs
// only when CONFIG cannot say.
var topDBScript = redis.NewScript(`
local function ok(n) return redis.pcall('SELECT', n).err == nil end
local max = 2147483647
if not ok(0) then return 0 end
local lo, hi = 0, 15
while ok(hi) do
  if hi == max then return hi end
  lo, hi = hi, math.min(2 * hi + 1, max)
end
while hi - lo > 1 do
  local mid = math.floor((lo + hi) / 2)
  if ok(mid) then lo = mid else hi = mid end
end
return lo
`)
