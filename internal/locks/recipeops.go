package locks

// The twins of clients' own lock scripts (internal/recipes): operations of
// opsScript, so that a recipe's grant shares its batch and its WAIT with
// the lock family's. A twin has the client script's effect on the
// recipe's own keys, and also:
//
//   - keeps a side record beside the lock, the family's owner record of the
//     resource (recordKey(lock key), the layout at the top of scripts.go,
//     owner = the recipe's holder), so that a recipe lock and a LOCK.ACQUIRE
//     of the same name exclude each other, and LOCK.INFO, FENCE.EXEC and
//     LOCK.TOKEN read it;
//   - returns the pre-image an undo needs (the holder's count before, the
//     keys' absolute expiry times before, PEXPIRETIME: -1 none), so that a
//     grant or renewal the replicas did not acknowledge is undone exactly.
//
// A side record's client address ends with recipeAddrMark, so that a
// twin can tell a recipe's record from a lock-family grant of the same
// name: a recipe's record whose lock is gone is stale (its unlock ran
// where the proxy did not see it, inside a client's MULTI for instance,
// as Redisson's RTransaction commits), while a family grant stands.
//
// Every twin takes three KEYS, like the family's operations: the lock
// key, its side record (in place of the lock-delay guard, which recipes do
// not use) and the side record's fence mark (fencemark.go), which a grant
// of a new token raises as the family's grants do, and its undo lowers. An unlock's latch key and channel travel in ARGV: they share
// the lock key's hash tag. A twin checks terms on the side record.
//
// Redisson's RLock is a hash: field the holder (<uuid>:<threadId>), value
// its re-entry count, expiring with the lease. RFencedLock is the same
// hash plus a token key that Redisson INCRs on every grant; its twin
// raises that key to the grant's fence-store token instead (SET to the
// larger of the two), so the token never goes back with Redis's data.
const recipeOpsLua = `
local RECIPE = '` + recipeAddrMark + `'
local function restore(k, at)
  at = tonumber(at)
  if at == -1 then
    call('PERSIST', k)
  elseif at and at > 0 then
    call('PEXPIREAT', k, at) -- a time already past deletes the key
  end
end
-- A token-key value below tok (decimal strings compared exactly; anything
-- that is not a positive integer counts as below).
local function below(v, tok)
  if not v or not string.match(v, '^[1-9]%d*$') then
    return true
  end
  if #v ~= #tok then
    return #v < #tok
  end
  return v < tok
end
-- The strings packed in one argument, each as <length>:<bytes> (the value
-- locks' and read-write locks' twins use it).
local function unpackStrings(blob)
  local out, p = {}, 1
  while p <= #blob do
    local c = string.find(blob, ':', p, true)
    local l = tonumber(sub(blob, p, c - 1))
    out[#out + 1] = sub(blob, c + 1, c + l)
    p = c + l + 1
  end
  return out
end
-- Raises a fenced recipe's token key to the grant's token (never lowers
-- it) and returns its value before ('' if absent), or '' for no token key.
local function raiseTokenKey(t, tok)
  if t == '' then
    return ''
  end
  local v = call('GET', t)
  if below(v, tok) then
    call('SET', t, tok)
  end
  return v or ''
end
local function hashAcquire(k, s, mk, a)
  local holder, lease, cand, newest, now, value, term, life, tkey =
    A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4], A[a + 5], A[a + 6], A[a + 7], A[a + 8]
  local sowner, stok, sterm, sacq, _, saddr = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  local count, was = 0, -2 -- was: the lock's PEXPIRETIME before (-2: no key)
  if call('EXISTS', k) == 1 then
    count = tonumber(call('HGET', k, holder))
    if not count then
      return {0, call('PTTL', k)}
    end
    was = false -- read below, once the grant is decided
  end
  if sowner and sowner ~= holder then
    if count ~= 0 or sub(saddr, -#RECIPE) ~= RECIPE then
      return {0, call('PTTL', s)} -- a lock-family holder of the same name
    end
    -- A recipe's record whose lock is gone: unlocked where the proxy did
    -- not see it (inside MULTI, or a DEL). It is stale: replaced below.
    sowner, stok = false, false
  end
  local st = stok and tonumber(stok)
  if st and st >= tonumber(cand) then
    return {4, stok}
  end
  if sowner and newest == '' then
    return {3, 0} -- a re-entry judged by the newest token, not sent: asked again with it
  end
  if not was then
    was = call('PEXPIRETIME', k)
  end
  call('HINCRBY', k, holder, 1)
  call('PEXPIRE', k, lease)
  if sowner and stok == newest then
    local swas = call('PEXPIRETIME', s)
    call('SET', s, pack(holder, stok, term, sacq, now, saddr), 'PX', lease)
    return {1, stok, count, was, swas, raiseTokenKey(tkey, stok)}
  end
  call('SET', s, value, 'PX', lease)
  raise(mk, cand, term, life)
  return {2, cand, count, was, '', raiseTokenKey(tkey, cand)}
end
local function hashAcquireUndo(k, s, mk, a)
  local holder, tok, count, was, swas, term = A[a], A[a + 1], tonumber(A[a + 2]), A[a + 3], A[a + 4], A[a + 5]
  local tkey, twas = A[a + 8], A[a + 9]
  local sowner, stok, sterm = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  if tkey ~= '' and call('GET', tkey) == tok then
    if twas == '' then
      call('DEL', tkey)
    else
      call('SET', tkey, twas)
    end
  end
  if tonumber(call('HGET', k, holder)) == count + 1 then
    if count == 0 then
      call('HDEL', k, holder)
    else
      call('HINCRBY', k, holder, -1)
      restore(k, was)
    end
  end
  if sowner == holder and stok == tok then
    if swas == '' then
      call('DEL', s)
      lower(mk, tok, A[a + 6], A[a + 7])
    else
      restore(s, swas)
    end
  end
  return 1
end
local function hashRenew(k, s, _, a)
  local holder, lease, newest, now, term = A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4]
  local sowner, stok, sterm, sacq, _, saddr = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  if call('HEXISTS', k, holder) == 0 then
    return 0
  end
  local was, swas = call('PEXPIRETIME', k), ''
  call('PEXPIRE', k, lease)
  if sowner == holder and stok == newest then
    swas = call('PEXPIRETIME', s)
    call('SET', s, pack(holder, stok, term, sacq, now, saddr), 'PX', lease)
  end
  return {1, was, swas, stok or ''}
end
local function hashRenewUndo(k, s, _, a)
  local holder, was, swas, tok, term = A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4]
  local sowner, stok, sterm = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  if call('HEXISTS', k, holder) == 1 then
    restore(k, was)
  end
  if swas ~= '' and sowner == holder and stok == tok then
    restore(s, swas)
  end
  return 1
end
-- The released side record's value, or false. Only a recipe's record is
-- dropped: a lock-family grant of the same name (a hash a client wrote at
-- that name, then force-unlocked, does not end it) stands.
local function dropSide(s, sowner, stok, sterm, sacq, sren, saddr)
  if not sowner or sub(saddr or '', -#RECIPE) ~= RECIPE then
    return false
  end
  call('DEL', s)
  return pack(sowner, stok or '0', sterm, sacq, sren, saddr)
end
local function hashUnlock(k, s, _, a)
  local holder, lease, channel, latch, pub, msg, lttl, term =
    A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4], A[a + 5], A[a + 6], A[a + 7]
  local sowner, stok, sterm, sacq, sren, saddr = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  local v = call('GET', latch)
  if v then
    return {1, tonumber(v)}
  end
  if call('HEXISTS', k, holder) == 0 then
    return {0}
  end
  if call('HINCRBY', k, holder, -1) > 0 then
    call('PEXPIRE', k, lease)
    if sowner == holder then
      call('PEXPIRE', s, lease)
    end
    call('SET', latch, 0, 'PX', lttl)
    return {1, 0}
  end
  call('DEL', k)
  if pub ~= '' then
    call(pub, channel, msg)
  end
  call('SET', latch, 1, 'PX', lttl)
  if sowner == holder then
    return {1, 1, dropSide(s, sowner, stok, sterm, sacq, sren, saddr)}
  end
  return {1, 1}
end
local function hashForceUnlock(k, s, _, a)
  local channel, pub, msg, term = A[a], A[a + 1], A[a + 2], A[a + 3]
  local sowner, stok, sterm, sacq, sren, saddr = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  if call('DEL', k) == 0 then
    return {1, 0}
  end
  if pub ~= '' then
    call(pub, channel, msg)
  end
  return {1, 1, dropSide(s, sowner, stok, sterm, sacq, sren, saddr)}
end
local recipeOps = {
  H = {hashAcquire, 9}, I = {hashAcquireUndo, 10},
  N = {hashRenew, 5}, O = {hashRenewUndo, 5},
  U = {hashUnlock, 8}, F = {hashForceUnlock, 4},
}
`

// recipeAddrMark ends a recipe side record's client address (LOCK.INFO's
// client-addr shows it).
const recipeAddrMark = " (recipe)"

// The twins' operation letters and arguments (all strings or numbers, in
// this order). Replies are {kind, ...}: kind 0 busy, 1 the holder's
// current side record kept (re-entry), 2 a new token, 4 the side record's
// token is at or above the candidate (kindTokenAhead): the numbers of
// replyKind.
const (
	// opHashAcquire: holder, lease-ms, candidate token, newest token ("" if
	// unknown: a re-entry then answers {3, 0}, kindNeedNewest), now (unix ms), the new side record (a recordValue), term,
	// fence-mark-life-ms, token key ("" for none: RFencedLock's
	// redisson_lock_token:{name}, which a grant raises to its token, never
	// lowers; Redisson INCRs it). A grant under a new token raises the
	// fence mark to it. Returns {0,
	// pttl} busy (pttl of the lock, or of a lock-family holder's record);
	// {1, token, count before, lock's PEXPIRETIME before, side record's
	// PEXPIRETIME before, token key's value before} a grant under the
	// holder's current token; {2, candidate, count before, PEXPIRETIME
	// before, "", token key's before} a grant under a new token; {4, token}
	// (kindTokenAhead). A token key's value before is "" when it was
	// absent or there is none.
	opHashAcquire lockOp = 'H'
	// opHashAcquireUndo: holder, token, count before, lock's PEXPIRETIME
	// before, side record's ("" if the grant wrote a new one), term, the
	// resource's newest token issued without this one ("" if unknown),
	// fence-mark-life-ms, token key (or ""), its value before ("" absent).
	// Puts the count and the expiry back (a fresh
	// grant's field removed) if the count is still the grant's, and deletes
	// or restores the side record if it is still the grant's; a new
	// token's side record deleted, the fence mark goes back as opUndo's
	// does; the token key goes back to its value before if it still holds
	// the grant's token. Returns 1.
	opHashAcquireUndo lockOp = 'I'
	// opHashRenew: holder, lease-ms, newest token, now, term. Returns 0 if
	// the holder does not hold the lock, else {1, PEXPIRETIME before, the
	// side record's before ("" if it was not re-armed: absent, another's,
	// or not current), the side record's token or ""}.
	opHashRenew lockOp = 'N'
	// opHashRenewUndo: holder, lock's PEXPIRETIME before, side record's
	// (or ""), its token, term. Returns 1.
	opHashRenewUndo lockOp = 'O'
	// opHashUnlock: holder, lease-ms, channel, latch key, publish command
	// ("" for none), message, latch ttl-ms, term. Returns {0} for the
	// recipe's nil (not the holder), {1, n} for its integer n, and {1, 1,
	// released side record's value or false} when the lock was released.
	opHashUnlock lockOp = 'U'
	// opHashForceUnlock: channel, publish command ("" for none), message,
	// term. Returns {1, 0} (nothing to delete) or {1, 1, released side
	// record's value or false}.
	opHashForceUnlock lockOp = 'F'
)
