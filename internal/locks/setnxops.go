package locks

import "strconv"

// The twins of value locks (internal/recipes, setnx.go: SET NX and the
// release and extend scripts of redis-py's Lock, redsync, redislock and
// node-redlock): a string key holding the holder's random value, expiring
// with the lease. They are operations of opsScript, like the hash twins
// (recipeops.go), whose helpers they use: a side record at
// recordKey(key) (owner = the value, the client address ending with
// recipeAddrMark) carries the grant's fence-store token, and a write's
// reply carries the exact pre-image its undo restores: the key's value and
// PEXPIRETIME before, and the side record's raw value and PEXPIRETIME
// before ("" and -2 for a key that was absent).
const valueOpsLua = `
local function setx(k, v, lease)
  if lease == '0' then
    call('SET', k, v)
  else
    call('SET', k, v, 'PX', lease)
  end
end
local function valueWrite(k, s, mk, a)
  local holder, mode, lease, cand, newest, now, value, term, prefix, life =
    A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4], A[a + 5], A[a + 6], A[a + 7], tonumber(A[a + 8]), A[a + 9]
  local sowner, stok, sterm, sacq, _, saddr = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  local cur = redis.pcall('GET', k)
  if type(cur) == 'table' then -- not a string: not a value lock
    if mode == 'g' then
      return {0, call('PTTL', k)}
    end
    return {5}
  end
  local was = -2 -- the key's PEXPIRETIME before: -2 when GET found none
  if cur then
    was = call('PEXPIRETIME', k)
  end
  local sold, swas = '', -2
  if cur and (cur == holder and mode ~= 'g' or
      mode == 'g' and prefix > 0 and sub(cur, 1, prefix) == sub(holder, 1, prefix)) then
    -- The holder's own key: extend it (or redislock's re-obtain).
    if mode == 'a' then
      local left = call('PTTL', k)
      if left < 0 then
        return {5} -- redis-py: a lock with no expiry is not extended
      end
      lease = tostring(tonumber(lease) + left)
    end
    local tok, wrote = '', ''
    if sowner == cur and stok == newest and sub(saddr, -#RECIPE) == RECIPE then
      sold, swas, tok = call('GET', s), call('PEXPIRETIME', s), stok
      wrote = pack(holder, stok, term, sacq, now, saddr)
      setx(s, wrote, lease)
    end
    -- A re-obtain with no current record is a new grant (below).
    if tok ~= '' or mode ~= 'g' then
      if cur ~= holder then
        setx(k, holder, lease)
      else
        call('PEXPIRE', k, lease)
      end
      return {1, tok, cur, was, sold, swas, wrote, lease}
    end
  elseif cur then
    if mode == 'g' then
      return {0, call('PTTL', k)}
    end
    return {5}
  elseif mode == 'e' or mode == 'a' then
    return {5}
  end
  -- A grant: the key is free (or re-obtained without a current record).
  if sowner and sub(saddr, -#RECIPE) ~= RECIPE then
    return {0, call('PTTL', s)} -- a lock-family holder of the same name
  end
  -- A recipe's record whose key is gone (released or expired where the
  -- proxy did not see it) is stale: replaced.
  local st = stok and tonumber(stok)
  if st and st >= tonumber(cand) then
    return {4, stok}
  end
  if sowner then
    sold, swas = call('GET', s), call('PEXPIRETIME', s)
  end
  setx(k, holder, lease)
  setx(s, value, lease)
  raise(mk, cand, term, life)
  return {2, cand, cur or '', was, sold, swas, value, lease}
end
local function valueUndo(k, s, mk, a)
  local holder, oldval, was, sold, swas, wrote, term, tok, newest, life =
    A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4], A[a + 5], A[a + 6], A[a + 7], A[a + 8], A[a + 9]
  local _, _, sterm = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  if call('GET', k) == holder then
    if oldval == '' then
      call('DEL', k)
    else
      if oldval ~= holder then
        call('SET', k, oldval)
      end
      restore(k, was)
    end
  end
  if wrote ~= '' and redis.pcall('GET', s) == wrote then
    if sold == '' then
      call('DEL', s)
    else
      call('SET', s, sold)
      restore(s, swas)
    end
    if tok ~= '' then
      lower(mk, tok, newest, life) -- a new token's grant: its mark goes back
    end
  end
  return 1
end
local function valueRelease(k, s, _, a)
  local holder, term = A[a], A[a + 1]
  local sowner, stok, sterm, sacq, sren, saddr = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  local cur = call('GET', k)
  if not cur then
    return {0}
  elseif cur ~= holder then
    return {1}
  end
  call('DEL', k)
  if sowner == holder and sub(saddr, -#RECIPE) == RECIPE then
    return {2, dropSide(s, sowner, stok, sterm, sacq, sren, saddr)}
  end
  return {2}
end
-- valueMulti is redlock's acquire or extend of several keys at once: all
-- of them or none. Its keys travel in ARGV (recipes run in front of one
-- master only, where a script may name keys beyond KEYS).
local function valueMulti(_, _, _, a)
  local holder, mode, lease, cand, now, value, term, life, items =
    A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4], A[a + 5], A[a + 6], A[a + 7], unpackStrings(A[a + 8])
  local n, st = #items / 4, {}
  for i = 1, n do
    local k, s, mk, newest = items[4 * i - 3], items[4 * i - 2], items[4 * i - 1], items[4 * i]
    local sowner, stok, sterm, sacq, _, saddr = load(s)
    local refused = newer(sterm, s, term, num(term), false)
    if refused then
      return refused
    end
    local cur = redis.pcall('GET', k)
    if mode == 'g' then
      if cur then
        return {0, call('PTTL', k)}
      end
      if sowner and sub(saddr, -#RECIPE) ~= RECIPE then
        return {0, call('PTTL', s)}
      end
      local t = stok and tonumber(stok)
      if t and t >= tonumber(cand) then
        return {4, stok}
      end
    elseif cur ~= holder then
      return {5}
    end
    st[i] = {k, s, mk, newest, cur, sowner, stok, sacq, saddr}
  end
  local out = {2, cand, lease}
  if mode ~= 'g' then
    out[1] = 1
  end
  for i = 1, n do
    local k, s, mk, newest, cur, sowner, stok, sacq, saddr = unpack(st[i])
    local was, sold, swas, wrote, tok = call('PEXPIRETIME', k), '', -2, '', ''
    if mode == 'g' then
      if sowner then
        sold, swas = call('GET', s), call('PEXPIRETIME', s)
      end
      wrote, tok = value, cand
      setx(s, value, lease)
      raise(mk, cand, term, life)
    elseif sowner == cur and stok == newest and sub(saddr, -#RECIPE) == RECIPE then
      sold, swas, tok = call('GET', s), call('PEXPIRETIME', s), stok
      wrote = pack(holder, stok, term, sacq, now, saddr)
      setx(s, wrote, lease)
    end
    setx(k, holder, lease)
    local j = #out
    out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6] = cur or '', was, sold, swas, wrote, tok
  end
  return out
end
recipeOps.V = {valueWrite, 10}
recipeOps.Q = {valueMulti, 9}
recipeOps.Y = {valueUndo, 10}
recipeOps.Z = {valueRelease, 2}
`

// The value twins' operation letters and arguments.
const (
	// opValueWrite: holder (the value), mode, lease-ms ("0": none),
	// candidate token, newest token, now (unix ms), the new side record
	// (a recordValue), term, prefix length (redislock's re-obtain; 0 for
	// none), fence-mark-life-ms. KEYS: the key, its side record and the
	// side record's fence mark, which a new token's grant raises. Modes: 'g' grant a free key (SET NX; with a prefix, also
	// re-obtain a key whose value starts with the holder's); 'e' extend
	// the holder's key; 'E' extend it, or grant it if free (redsync's
	// touchWithSetNX); 'a' extend by adding the lease to the key's pttl
	// (redis-py). Returns {0, pttl} held by another (a grant); {5} not the
	// holder's (an extend; or redis-py's key without expiry); {4, token}
	// kindTokenAhead; {1, side token or "", value before, PEXPIRETIME
	// before, side record before or "", its PEXPIRETIME before, side record
	// written or "", lease armed} an extend or re-obtain under the current
	// token (or no side record); {2, candidate, value before or "",
	// PEXPIRETIME before, side record before or "", its PEXPIRETIME
	// before, side record written, lease armed} a new grant.
	opValueWrite lockOp = 'V'
	// opValueUndo: holder, value before ("" absent), PEXPIRETIME before,
	// side record before ("" absent), its PEXPIRETIME before, the side
	// record written ("" none), term, the new token the write granted (""
	// none), the resource's newest token issued without it ("" unknown),
	// fence-mark-life-ms. Restores the key if it still holds holder, and
	// the side record if it is still the one written; a new token's fence
	// mark goes back as opUndo's does. Returns 1.
	opValueUndo lockOp = 'Y'
	// opValueRelease: holder, term. Deletes the key if it holds holder,
	// and its side record if it is holder's recipe record. Returns {0} no
	// key, {1} another's value, {2, released side record or false}.
	opValueRelease lockOp = 'Z'
	// opValueMulti: holder, mode ('g' or 'e' only), lease-ms, candidate
	// token (mode 'g'), now, the new side record, term,
	// fence-mark-life-ms, and the keys as one argument: for each, its key,
	// its side record, the side record's fence mark and its newest token,
	// packed as <length>:<bytes> (packStrings). Its own KEYS (the first
	// key's) are for routing only. All of the keys or
	// none: {0, pttl} one is held (a grant); {5} one is not the holder's
	// (an extend); {4, token} kindTokenAhead; else {2 (grant) or 1
	// (extend), candidate, lease armed, then for each key: value before
	// or "", PEXPIRETIME before, side record before or "", its
	// PEXPIRETIME before, side record written or "", its token or ""}.
	opValueMulti lockOp = 'Q'
)

// valueOpLetters are the operations valueOpsLua registers: opsScript defines that
// family the first time a call names one of them (scripts.go, opOf).
const valueOpLetters = string(opValueWrite) + string(opValueMulti) + string(opValueUndo) + string(opValueRelease)

// packStrings packs strings as one argument of opValueMulti.
func packStrings(ss ...string) string {
	var b []byte
	for _, s := range ss {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
	}
	return string(b)
}

// kindNotHeld: opValueWrite's extend found the key not the holder's.
const kindNotHeld replyKind = 5
