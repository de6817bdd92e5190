package locks

import "github.com/fenceproxy/fenceproxy/internal/cluster"

// The owner record is a string at recordKey(resource), expiring with the
// lease (SET ... PX): one key and one command, where it was a hash of five
// fields with its own PEXPIRE (see "Leaner owner records" in
// docs/performance.md for what that saved). Its value packs, separated by
// spaces,
//
//	token term acquired renewed addr-length addr owner
//
// token and term as decimal strings (tokens travel as strings: Lua numbers
// are doubles); acquired, the unix ms of the grant of this token by the
// granting proxy's clock, renewed, when the lease was last armed (the grant,
// a renewal or a same-owner re-acquire), 0 for unknown; then the ip:port of
// the client connection the grant was made for, and last the owner, whose
// bytes run to the end (binary-safe, as owners are). They ride in the
// scripts that already run (no extra round trip), so LOCK.INFO is right for
// a lock granted through another fenceproxy or before a restart.
//
// Records written before this layout are hashes (fields owner, token and,
// when they had them, acquired, renewed, addr and term): every script reads
// both (load, below: a GET that meets a hash reads it with HMGET), and what
// it writes is the string, so an older record is converted by its first
// re-arm or renewal. An older proxy cannot read the new records (its HMGET
// meets a string: WRONGTYPE, an error reply, never a grant); a tier is
// upgraded whole, not node by node (README, "Upgrading").
//
// With a lock-delay, a guard key beside it (same hash tag) outlives every
// lease by the delay; a clean release deletes both, so only a lease that ran
// out leaves the guard standing, and nobody is granted the resource until it
// is gone.
//
// Terms (terms.go): every operation that writes carries the caller's term
// as its last argument. The record keeps the term it was written in (0 for
// a single node); the guard's value is its writer's term plus one ("1" for
// a single node). A record or guard of a higher term than the caller's
// refuses the operation with an error reply NEWERTERM <term>, before it
// decides or writes anything, so a deposed leader touches no newer lease.
// The guard is read for it only when a guard can be there: with a
// lock-delay, or in a tier (term above 0); a single node without a
// lock-delay writes none.
//
// # One script for every lock write
//
// The four operations that write (acquire, renew, release and undo) are
// functions of one script, opsScript, which runs a list of them in order,
// each on its own record, and returns the list of their replies: the
// Writer puts every operation that is ready when a lock connection is free
// into one call (per hash slot in front of a Redis Cluster, whose scripts
// must declare their keys, all in one slot), so that Redis parses, looks up
// and runs one script, and replicates one transaction, for many grants.
// Each operation runs under pcall: an error (a key of another type, a write
// refused) answers that operation alone, as its own error reply, and the
// others' replies stand. KEYS are two per operation (record, guard); ARGV
// holds, per operation, its letter (opAcquire ...) and then its arguments,
// as many as opArgs says.
//
// Replies are tables so the manager can tell the outcomes apart.

// recordLua is load(key): the record's owner (false if there is none),
// token, term, acquired, renewed and addr, from either layout; parse(key,
// value) is the same for a string already read.
const recordLua = `
local function parse(k, v)
  local tok, term, acq, ren, alen, rest = string.match(v, '^(%d+) (%d+) (%d+) (%d+) (%d+) (.*)$')
  if not tok then
    error('WRONGTYPE ' .. k .. ' is not a fenceproxy owner record')
  end
  alen = tonumber(alen)
  return string.sub(rest, alen + 1), tok, tonumber(term), acq, ren, string.sub(rest, 1, alen)
end
local function load(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    local h = redis.call('HMGET', k, 'owner', 'token', 'term', 'acquired', 'renewed', 'addr')
    return h[1], h[2], tonumber(h[3]) or 0, h[4] or '0', h[5] or '0', h[6] or ''
  end
  if not v then
    return false
  end
  return parse(k, v)
end
`

// opsScript: see above. Each function's arguments are documented with the
// ScriptCall that carries them (opAcquire and so on).
const opsScript = recordLua + `
local function pack(owner, tok, term, acq, ren, addr)
  return tok .. ' ' .. term .. ' ' .. acq .. ' ' .. ren .. ' ' .. #addr .. ' ' .. addr .. owner
end
local function store(k, owner, tok, term, acq, ren, addr, ttl)
  redis.call('SET', k, pack(owner, tok, term, acq, ren, addr), 'PX', ttl)
end
local function newer(recTerm, g, term, delay)
  local stored = recTerm or 0
  if delay > 0 or term > 0 then
    stored = math.max(stored, (tonumber(redis.call('GET', g)) or 1) - 1)
  end
  if stored > term then
    return redis.error_reply('NEWERTERM ' .. stored)
  end
end
local function guard(g, term, ttl, delay)
  if delay > 0 then
    redis.call('SET', g, term + 1, 'PX', tonumber(ttl) + delay)
  end
end
local function acquire(k, g, owner, ttl, cand, newest, others, delay, now, addr, term)
  delay, term = tonumber(delay), tonumber(term)
  local cowner, ctok, cterm, cacq, _, caddr
  if others ~= '1' and delay == 0 then
    -- The common case in one command: take the resource if it is free.
    -- A record that is there is left as it is (NX) and judged below.
    local refused = newer(0, g, term, 0)
    if refused then
      return refused
    end
    local old = redis.pcall('SET', k, pack(owner, cand, term, now, now, addr), 'NX', 'GET', 'PX', ttl)
    if not old then
      return {2, cand}
    elseif type(old) == 'string' then
      cowner, ctok, cterm, cacq, _, caddr = parse(k, old)
    else
      cowner, ctok, cterm, cacq, _, caddr = load(k) -- a hash: an older record
    end
  else
    cowner, ctok, cterm, cacq, _, caddr = load(k)
  end
  local refused = newer(cterm, g, term, delay)
  if refused then
    return refused
  end
  if ctok and tonumber(ctok) and tonumber(ctok) >= tonumber(cand) then
    return {4, ctok}
  end
  if cowner then
    if cowner ~= owner then
      return {0, redis.call('PTTL', k)}
    end
    if newest == '' then
      return {3, 0}
    end
    if ctok == newest then
      store(k, owner, ctok, term, cacq, now, caddr, ttl)
      guard(g, term, ttl, delay)
      return {1, ctok}
    end
  elseif delay > 0 then
    local left = redis.call('PTTL', g)
    if left > 0 then
      return {0, left}
    end
  end
  if others == '1' then
    return {0, redis.call('PTTL', k)}
  end
  store(k, owner, cand, term, now, now, addr, ttl)
  guard(g, term, ttl, delay)
  return {2, cand}
end
local function renew(k, g, owner, ttl, newest, delay, now, term)
  delay, term = tonumber(delay), tonumber(term)
  local cowner, ctok, cterm, cacq, _, caddr = load(k)
  local refused = newer(cterm, g, term, delay)
  if refused then
    return refused
  end
  if cowner == owner and ctok == newest then
    store(k, owner, ctok, term, cacq, now, caddr, ttl)
    guard(g, term, ttl, delay)
    return ctok
  end
  return false
end
local function release(k, g, owner, delay, term)
  local cowner, ctok, cterm, cacq, _, caddr = load(k)
  local refused = newer(cterm, g, tonumber(term), tonumber(delay))
  if refused then
    return refused
  end
  if cowner == owner then
    redis.call('DEL', k, g)
    return {ctok, cacq, caddr}
  end
  return 0
end
local function undo(k, g, owner, token, delay, term)
  local cowner, ctok, cterm = load(k)
  local refused = newer(cterm, g, tonumber(term), tonumber(delay))
  if refused then
    return refused
  end
  if cowner == owner and ctok == token then
    redis.call('DEL', k, g)
    return 1
  end
  return 0
end
local function handoff(k, g, owner, delay, term, howner, ttl, cand, now, addr)
  local rel = release(k, g, owner, delay, term)
  if type(rel) ~= 'table' or rel.err then
    return rel
  end
  if tonumber(rel[1]) and tonumber(rel[1]) >= tonumber(cand) then
    return {rel, {4, rel[1]}}
  end
  delay, term = tonumber(delay), tonumber(term)
  store(k, howner, cand, term, now, now, addr, ttl)
  guard(g, term, ttl, delay)
  return {rel, {2, cand}}
end
local ops = {a = {acquire, 9}, r = {renew, 6}, l = {release, 3}, u = {undo, 4}, h = {handoff, 8}}
local out, a, k, n = {}, 1, 1, #ARGV
while a <= n do
  local op = ops[ARGV[a]]
  if not op then
    return redis.error_reply('ERR fenceproxy: unknown lock operation ' .. tostring(ARGV[a]))
  end
  local ok, r = pcall(op[1], KEYS[k], KEYS[k + 1], unpack(ARGV, a + 1, a + op[2]))
  if not ok and type(r) ~= 'table' then
    r = redis.error_reply(tostring(r))
  end
  out[#out + 1] = r
  a, k = a + 1 + op[2], k + 2
end
return out
`

// opsSHA is opsScript's name for EVALSHA.
var opsSHA = cluster.ScriptSHA(opsScript)

// lockOp names one of opsScript's operations: the letter that starts its
// arguments in a batch. A ScriptCall with an Op carries that operation's
// two keys (record, guard) and its arguments, in the order below; the
// Writer runs it through opsScript, alone or with others.
type lockOp byte

const (
	// opAcquire: owner, ttl-ms, new token, newest token known to the
	// fence store ("" if the caller did not read it), "1" if others wait
	// in line (then only the owner's own re-arm is allowed: no barging),
	// lock-delay-ms, now (unix ms), client addr, term. Returns {kind,
	// value} (replyKind below). The owner's own record is re-armed only if
	// its token is the newest the fence store knows as issued: a token
	// above it was never issued (a grant whose reservation was cancelled,
	// or whose outcome was lost in a crash before it was recorded) and one
	// below it is stale (a record resurrected by a failover, or written by
	// a proxy with another data dir). Such a record is replaced by a new
	// grant, its token never handed out. Tokens are compared as the
	// strings they are stored as: exact, where Lua's doubles are not above
	// 2^53. Only that judgement needs the newest token: a new grant's token
	// is above every token ever issued.
	opAcquire lockOp = 'a'
	// opRenew: owner, ttl-ms, newest token, lock-delay-ms, now (unix ms),
	// term. Returns the token, or nil if owner does not hold a current
	// record (expired records are gone, so a lapsed lease is never
	// revived) whose token is the newest issued (as acquire's re-arm).
	opRenew lockOp = 'r'
	// opRelease: owner, lock-delay-ms, term. If it deleted owner's record
	// (and the guard: a clean release applies no lock-delay) it returns the
	// record's {token, acquired, addr} ("0" and "" for what an older
	// record lacks), for the slow-lock log; else 0.
	opRelease lockOp = 'l'
	// opUndo: owner, token, lock-delay-ms, term. Deletes the record (and
	// guard) only if it is exactly the grant being undone: returns 1, else
	// 0.
	opUndo lockOp = 'u'
	// opHandoff: owner, lock-delay-ms, term, as opRelease; then the head
	// of the line's owner, ttl-ms, reserved token, now (unix ms) and client
	// addr. A release that, if it freed the resource, grants it to the
	// head at once (handoff.go). Returns opRelease's reply if nothing was
	// released (0, or the error), else {that reply, {kind, value}}: {2,
	// token} granted, or {4, the released record's token} if that was at
	// or above the head's (kindTokenAhead: not granted).
	opHandoff lockOp = 'h'
)

// replyKind is the first element of opAcquire's {kind, value} reply.
type replyKind int64

// opAcquire's reply kinds; the value that comes with each is named
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

// execScript runs the command in ARGV inside a script, so that it runs
// whole with nothing between the fence check and it. pcall hands back the
// command's own error as an error reply. KEYS, if any, are the command's
// keys again (also in ARGV), declared so that Redis Cluster redirects the
// script to their slot's master rather than running it where it landed.
const execScript = `return redis.pcall(unpack(ARGV))`

// infoScript: KEYS[1] record. Returns {owner, token, pttl, acquired,
// renewed, addr}: false for owner and token when the resource is free,
// "0" for a time an older record lacks.
const infoScript = recordLua + `
local owner, tok, _, acq, ren, addr = load(KEYS[1])
if not owner then
  return {false, false, redis.call('PTTL', KEYS[1]), false, false, false}
end
return {owner, tok, redis.call('PTTL', KEYS[1]), acq, ren, addr}
`

// The hot scripts go by EVALSHA (see Writer.Start): an EVAL sends about a
// kilobyte of source that Redis hashes on every call. So does infoScript
// (Writer.Read).
var infoSHA = cluster.ScriptSHA(infoScript)
