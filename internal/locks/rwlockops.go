package locks

// The twins of Redisson's RReadWriteLock scripts (internal/recipes,
// rwlock.go): operations of opsScript, as the RLock twins are
// (recipeops.go), with the effect of Redisson's own read and write
// scripts on the lock's hash and timeout keys, plus the lock's side
// record and the pre-image an undo needs.
//
// The hash: field "mode" ("read" or "write"), a field per holder with its
// re-entry count (a reader's <uuid>:<threadId>, the writer's
// <uuid>:<threadId>:write); per read hold n, a timeout key
// <timeoutPrefix>:<n> ({name}:<lockName>:rwlock_timeout:<n>) that expires
// with that hold's lease. What the scripts do, and so the twins:
//
//   - read acquire: mode absent: mode read, my count 1, timeout key 1 and
//     the hash armed with the lease. Mode read, or write held by my own
//     write field: my count +1 as n, timeout key n armed with the lease,
//     the hash's expiry set to max(its pttl, the lease). Else the pttl.
//   - write acquire: mode absent: mode write, my count 1, the hash armed
//     with the lease. Mode write and mine: count +1 and the expiry set to
//     pttl + lease (added, not set). Else the pttl.
//   - read unlock: the latch answers a retry; mode absent: publish, latch
//     1, nil; not a holder: nil; else my count -1 (the field removed at 0)
//     and timeout key count+1 deleted; if another field than mode is
//     left, the hash lives as long as the longest timeout key left (0), or
//     stays as it is when the mode is write (0); else it is deleted, the
//     message published, 1.
//   - write unlock: the latch; mode absent: publish, latch 1, nil; mode
//     write and mine: count -1, re-armed with the lease while above 0 (0);
//     at 0 the field goes, and the hash is deleted and published if only
//     mode is left, else its mode becomes read (1). Otherwise nil.
//   - force unlocks delete the hash if its mode is theirs (1), else 0.
//
// The side record (one per lock, at recordKey(name)) stands for the
// lock's current epoch, not for one holder: the grant that found the lock
// free (or its record gone) writes it with a new token, owner that
// grant's holder field, client address ending with rwAddrMark; every
// grant that joins the epoch (another reader, a re-entry, the writer
// taking the read lock) keeps that token and re-arms the record with the
// hash. Its expiry follows the hash's; it goes when the hash goes.
const rwlockOpsLua = `
local RWMARK = '` + rwAddrMark + `'
local RW = {}
-- A side record of a read-write lock (its address ends with RWMARK).
function RW.side(saddr)
  return saddr and sub(saddr, -#RWMARK) == RWMARK
end
-- Re-arms the epoch's side record for ms, or makes it anew.
function RW.keep(s, sowner, stok, sacq, saddr, term, now, ms)
  local swas = call('PEXPIRETIME', s)
  call('SET', s, pack(sowner, stok, term, sacq, now, saddr), 'PX', ms)
  return swas
end
function RW.acquire(k, s, mk, a)
  local mode, holder, wholder, tprefix, lease, cand, newest, now, value, term, life =
    A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4], A[a + 5], A[a + 6], A[a + 7], A[a + 8], A[a + 9], A[a + 10]
  local sowner, stok, sterm, sacq, _, saddr = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  local cur = call('HGET', k, 'mode')
  if sowner then
    if sub(saddr, -#RECIPE) ~= RECIPE then
      return {0, call('PTTL', s)} -- a lock-family holder of the same name
    end
    if not RW.side(saddr) and call('EXISTS', k) == 1 then
      return {0, call('PTTL', k)} -- another recipe's lock (an RLock) by this name
    end
    if not cur or not RW.side(saddr) then
      sowner, stok = false, false -- its lock is gone: stale
    end
  end
  local join
  if not cur then
    join = false
  elseif mode == 'r' and (cur == 'read' or (cur == 'write' and call('HEXISTS', k, wholder) == 1)) then
    join = true
  elseif mode == 'w' and cur == 'write' and call('HEXISTS', k, holder) == 1 then
    join = true
  else
    return {0, call('PTTL', k)}
  end
  local st = stok and tonumber(stok)
  if st and st >= tonumber(cand) then
    return {4, stok}
  end
  local was, count, tw, ms = call('PEXPIRETIME', k), 0, '', tonumber(lease)
  if not join then
    call('HSET', k, 'mode', mode == 'r' and 'read' or 'write')
    call('HSET', k, holder, 1)
    if mode == 'r' then
      tw = call('PEXPIRETIME', tprefix .. ':1')
      call('SET', tprefix .. ':1', 1)
      call('PEXPIRE', tprefix .. ':1', lease)
    end
    call('PEXPIRE', k, lease)
  elseif mode == 'r' then
    local n = call('HINCRBY', k, holder, 1)
    count = n - 1
    local tk = tprefix .. ':' .. n
    tw = call('PEXPIRETIME', tk)
    call('SET', tk, 1)
    call('PEXPIRE', tk, lease)
    ms = math.max(call('PTTL', k), ms)
    call('PEXPIRE', k, ms)
  else
    count = call('HINCRBY', k, holder, 1) - 1
    ms = call('PTTL', k) + ms
    call('PEXPIRE', k, ms)
  end
  local added = join and 0 or 1
  if sowner and stok == newest then
    local sold = call('GET', s)
    return {1, stok, count, was, RW.keep(s, sowner, stok, sacq, saddr, term, now, ms), added, ms, tw, sold}
  end
  call('SET', s, value, 'PX', ms)
  raise(mk, cand, term, life)
  return {2, cand, count, was, '', added, ms, tw, ''}
end
function RW.undo(k, s, mk, a)
  local mode, holder, tprefix, tok, count, was, swas, added, tw, term =
    A[a], A[a + 1], A[a + 2], A[a + 3], tonumber(A[a + 4]), A[a + 5], A[a + 6], A[a + 7], A[a + 8], A[a + 9]
  local sowner, stok, sterm = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  if tonumber(call('HGET', k, holder)) == count + 1 then
    if count == 0 then
      call('HDEL', k, holder)
    else
      call('HINCRBY', k, holder, -1)
    end
    if mode == 'r' then
      local tk = tprefix .. ':' .. (count + 1)
      if tonumber(tw) == -2 then
        call('DEL', tk)
      else
        restore(tk, tw)
      end
    end
    if added == '1' and call('HLEN', k) == 1 then
      call('DEL', k) -- only the mode the grant set is left
    else
      if added == '1' then
        call('HDEL', k, 'mode')
      end
      restore(k, was)
    end
  end
  if sowner and stok == tok then
    if swas == '' then
      call('DEL', s)
      lower(mk, tok, A[a + 10], A[a + 11])
    else
      call('SET', s, A[a + 12])
      restore(s, swas)
    end
  end
  return 1
end
-- RW.renew: Redisson's read renewal of one lock, by style (352, 400,
-- 470: recipes.RenewStyle). Timeout keys it re-arms are listed with their
-- PEXPIRETIME before, for the undo.
function RW.renew(k, s, _, a)
  local style, holders, prefix, batch, lease, newest, now, term =
    A[a], unpackStrings(A[a + 1]), A[a + 2], unpackStrings(A[a + 3]), A[a + 4], A[a + 5], A[a + 6], A[a + 7]
  local sowner, stok, sterm, sacq, _, saddr = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  local touched, seen = {}, {}
  local function rearm(tk)
    if not seen[tk] then
      seen[tk] = true
      local at = call('PEXPIRETIME', tk)
      if at ~= -2 then
        touched[#touched + 1], touched[#touched + 2] = tk, at
      end
    end
    call('PEXPIRE', tk, lease)
  end
  local was
  if style == '470' then
    local alive = false
    for _, h in ipairs(holders) do
      local c = call('HGET', k, h)
      if c then
        alive = true
        for i = tonumber(c) or 0, 1, -1 do
          rearm(prefix .. ':' .. h .. ':rwlock_timeout:' .. i)
        end
      end
    end
    if not alive then
      return 0
    end
    was = call('PEXPIRETIME', k)
    call('PEXPIRE', k, lease)
  else
    if not call('HGET', k, holders[1]) then
      return 0
    end
    local fields = {}
    if call('HLEN', k) > 1 then
      for _, f in ipairs(call('HKEYS', k)) do
        local c = tonumber(call('HGET', k, f))
        if type(c) == 'number' then
          if style == '352' and c + 1 > #batch then
            return {5} -- Redisson's own body fails on it: the proxy lets Redis run it
          end
          fields[#fields + 1], fields[#fields + 2] = f, c
        end
      end
    end
    was = call('PEXPIRETIME', k)
    call('PEXPIRE', k, lease)
    for j = 1, #fields, 2 do
      for i = fields[j + 1], 1, -1 do
        local p = prefix
        if style == '352' then
          p = batch[i + 1] -- the shadowed index of 3.52.0's body
        end
        rearm(p .. ':' .. fields[j] .. ':rwlock_timeout:' .. i)
      end
    end
  end
  local swas = ''
  if RW.side(saddr) and stok == newest then
    swas = RW.keep(s, sowner, stok, sacq, saddr, term, now, lease)
  end
  return {1, was, swas, stok or '', touched}
end
function RW.renewUndo(k, s, _, a)
  local was, swas, tok, touched, term = A[a], A[a + 1], A[a + 2], unpackStrings(A[a + 3]), A[a + 4]
  local _, stok, sterm = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  if call('EXISTS', k) == 1 then
    restore(k, was)
  end
  for j = 1, #touched, 2 do
    if call('EXISTS', touched[j]) == 1 then
      restore(touched[j], touched[j + 1])
    end
  end
  if swas ~= '' and stok == tok then
    restore(s, swas)
  end
  return 1
end
-- The released side record's value (false if none), when it is the
-- lock's.
function RW.drop(s, sowner, stok, sterm, sacq, sren, saddr)
  if not RW.side(saddr) then
    return false
  end
  return dropSide(s, sowner, stok, sterm, sacq, sren, saddr)
end
function RW.unlock(k, s, _, a)
  local mode, holder, lease, channel, latch, pub, msg, lttl, tprefix, kprefix, term =
    A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4], A[a + 5], A[a + 6], A[a + 7], A[a + 8], A[a + 9], A[a + 10]
  local sowner, stok, sterm, sacq, sren, saddr = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  local v = call('GET', latch)
  if v then
    return {1, tonumber(v)}
  end
  local cur = call('HGET', k, 'mode')
  if not cur then
    call(pub, channel, msg)
    call('SET', latch, 1, 'PX', lttl)
    return {0}
  end
  local function left(ms) -- the lock stays, for ms (or as it is)
    if ms and RW.side(saddr) then
      call('PEXPIRE', s, ms)
    end
    call('SET', latch, 0, 'PX', lttl)
    return {1, 0}
  end
  local function gone()
    call('DEL', k)
    call(pub, channel, msg)
    call('SET', latch, 1, 'PX', lttl)
    return {1, 1, RW.drop(s, sowner, stok, sterm, sacq, sren, saddr)}
  end
  if mode == 'w' then
    if cur ~= 'write' or call('HEXISTS', k, holder) == 0 then
      return {0}
    end
    if call('HINCRBY', k, holder, -1) > 0 then
      call('PEXPIRE', k, lease)
      return left(lease)
    end
    call('HDEL', k, holder)
    if call('HLEN', k) == 1 then
      return gone()
    end
    call('HSET', k, 'mode', 'read') -- the writer's own read holds stay
    call('SET', latch, 1, 'PX', lttl)
    return {1, 1}
  end
  if call('HEXISTS', k, holder) == 0 then
    return {0}
  end
  local n = call('HINCRBY', k, holder, -1)
  if n == 0 then
    call('HDEL', k, holder)
  end
  call('DEL', tprefix .. ':' .. (n + 1))
  if call('HLEN', k) > 1 then
    local most = -3
    for _, f in ipairs(call('HKEYS', k)) do
      local c = tonumber(call('HGET', k, f))
      if type(c) == 'number' then
        for i = c, 1, -1 do
          most = math.max(call('PTTL', kprefix .. ':' .. f .. ':rwlock_timeout:' .. i), most)
        end
      end
    end
    if most > 0 then
      call('PEXPIRE', k, most)
      return left(most)
    end
    if cur == 'write' then
      return left(nil)
    end
  end
  return gone()
end
function RW.forceUnlock(k, s, _, a)
  local mode, channel, pub, msg, term = A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4]
  local sowner, stok, sterm, sacq, sren, saddr = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  if call('HGET', k, 'mode') ~= (mode == 'r' and 'read' or 'write') then
    return {1, 0}
  end
  call('DEL', k)
  call(pub, channel, msg)
  return {1, 1, RW.drop(s, sowner, stok, sterm, sacq, sren, saddr)}
end
recipeOps['1'] = {RW.acquire, 11}
recipeOps['2'] = {RW.undo, 13}
recipeOps['3'] = {RW.renew, 8}
recipeOps['4'] = {RW.renewUndo, 5}
recipeOps['5'] = {RW.unlock, 11}
recipeOps['6'] = {RW.forceUnlock, 5}
`

// rwAddrMark ends a read-write lock's side record's client address: a
// recipe's record (it ends with recipeAddrMark too) that stands for the
// lock's epoch, whose holders are the hash's fields (LOCK.TOKEN asks the
// hash).
const rwAddrMark = " (rwlock)" + recipeAddrMark

// The read-write twins' operation letters (digits, apart from the other
// twins' letters) and arguments. KEYS, as every twin's: the lock's hash,
// its side record and the side record's fence mark.
const (
	// opRWAcquire: 'r' or 'w', holder (the lockName field; the writer's
	// ends with :write), the reader's own write field ("" for a write),
	// the read hold's timeout prefix ("" for a write), lease-ms,
	// candidate token, newest token, now (unix ms), the new side record
	// (a recordValue), term, fence-mark-life-ms. Returns {0, pttl} busy;
	// {4, token} kindTokenAhead; {1, epoch token, count before, the hash's
	// PEXPIRETIME before, the side record's before, 0, the hash's new pttl,
	// the timeout key's PEXPIRETIME before ("" for a write), the side
	// record's value before} a grant that joined the epoch; {2, candidate,
	// count before, PEXPIRETIME before, "", 1 if it set the mode (the lock
	// was free) else 0, new pttl, timeout key's before, ""} a grant under a
	// new token.
	opRWAcquire lockOp = '1'
	// opRWAcquireUndo: 'r' or 'w', holder, timeout prefix, token, count
	// before, PEXPIRETIME before, side record's before ("" if the grant
	// wrote it), 1 if the grant set the mode, the timeout key's
	// PEXPIRETIME before, term, newest token issued without this one (""
	// unknown), fence-mark-life-ms, the side record's value before (a
	// joining grant's: put back with its expiry). Returns 1.
	opRWAcquireUndo lockOp = '2'
	// opRWRenew: style ("352", "400", "470"), the holders named for the
	// lock (packStrings), the timeout keys' prefix ({name}), the call's
	// keys (packStrings; 352 only), lease-ms, newest token, now, term.
	// Returns 0 (not held), {5} (3.52.0's body fails on this lock: nothing
	// done) or {1, PEXPIRETIME before, side record's before ("" not
	// re-armed), side token or "", {timeout key, PEXPIRETIME before, ...}}.
	opRWRenew lockOp = '3'
	// opRWRenewUndo: PEXPIRETIME before, side record's before (or ""), its
	// token, the timeout keys and their PEXPIRETIMEs (packStrings), term.
	opRWRenewUndo lockOp = '4'
	// opRWUnlock: 'r' or 'w', holder, lease-ms (write), channel, latch,
	// publish command, message, latch ttl-ms, timeout prefix (read), key
	// prefix {name} (read), term. Returns {0} for the recipe's nil, {1, n}
	// for its n, {1, 1, released side record or false} when the lock went.
	opRWUnlock lockOp = '5'
	// opRWForceUnlock: 'r' or 'w', channel, publish command, message,
	// term. Returns {1, 0} or {1, 1, released side record or false}.
	opRWForceUnlock lockOp = '6'
)

// rwOpLetters are the operations rwlockOpsLua registers: opsScript defines that
// family the first time a call names one of them (scripts.go, opOf).
const rwOpLetters = string(opRWAcquire) + string(opRWAcquireUndo) + string(opRWRenew) + string(opRWRenewUndo) + string(opRWUnlock) + string(opRWForceUnlock)

// kindScriptFails: opRWRenew found that Redisson 3.52.0's own read
// renewal fails on the lock (a count at or above the call's key count).
const kindScriptFails replyKind = 5
