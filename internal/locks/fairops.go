package locks

// The twins of Redisson's RFairLock scripts (internal/recipes, fair.go),
// operations of opsScript like the other recipes' (recipeops.go). The
// lock is RLock's hash; beside it a FIFO of waiters (a list, the queue)
// and each waiter's deadline (a zset, the timeout set, scored in ms on
// the client's clock). Both travel in ARGV, as an unlock's latch does:
// Redisson names them prefix:{name}, in the lock key's slot.
//
// What the client's scripts do, and so the twins:
//
//   - Every script first drops the queue's stale heads: while the head's
//     deadline is at or before the client's clock (its ARGV), it leaves the
//     queue and the timeout set. Nobody else's deadline changes.
//   - acquire: the lock is granted when it is free and the queue is empty
//     or headed by the caller: the head is popped, the caller's deadline
//     removed, every other deadline lowered by wait, and the hash set to
//     {caller: 1} with the lease. A holder re-enters (count +1, lease
//     re-armed). Otherwise fair.acquire enqueues the caller (deadline: the
//     last waiter's, or the lock's pttl, plus wait, on the client's clock)
//     and answers the time to wait; an already queued caller is answered
//     max(0, pttl). fair.tryonce enqueues nobody and answers 1.
//   - unlock and force-unlock are RLock's, except that the wake-up goes to
//     the queue head's own channel (channel:<head>), only if there is a
//     head, and an unlock of a lock that is no longer there answers 1.
//   - dequeue: the caller leaves the queue and the timeout set, and every
//     waiter behind it has its deadline lowered by wait.
//
// The grant's hold and side record are hashAcquire's (the same function
// runs), so a fair lock's grant is settled, tokened and undone as RLock's
// is; the undo also puts the queue back: the caller at the head again
// with its deadline, and wait added back to every deadline the grant
// lowered, so the caller's next try finds the queue as it was. (Stale
// heads the grant dropped stay dropped: any script would drop them.)
const fairOpsLua = `
local function dropStale(q, t, cnow)
  while true do
    local head = call('LINDEX', q, 0)
    if not head then
      return
    end
    local d = call('ZSCORE', t, head)
    if d and tonumber(d) <= tonumber(cnow) then
      call('ZREM', t, head)
      call('LPOP', q)
    else
      return
    end
  end
end
-- fairEnqueue is fair.acquire's answer when the lock is not granted.
local function fairEnqueue(k, q, t, holder, wait, cnow)
  if call('ZSCORE', t, holder) then
    return {0, math.max(0, call('PTTL', k))}
  end
  local last, ttl = call('LINDEX', q, -1), nil
  if last and last ~= holder and call('ZSCORE', t, last) then
    ttl = tonumber(call('ZSCORE', t, last)) - tonumber(cnow)
  else
    ttl = call('PTTL', k)
  end
  if call('ZADD', t, ttl + tonumber(wait) + tonumber(cnow), holder) == 1 then
    call('RPUSH', q, holder)
  end
  return {0, ttl}
end
local function fairAcquire(k, s, mk, a)
  local holder, term = A[a], A[a + 6]
  local q, t, wait, cnow, once = A[a + 9], A[a + 10], A[a + 11], A[a + 12], A[a + 13] == '1'
  local _, _, sterm = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  dropStale(q, t, cnow)
  local free = call('EXISTS', k) == 0
  if (free and call('EXISTS', q) == 1 and call('LINDEX', q, 0) ~= holder)
      or (not free and call('HEXISTS', k, holder) == 0) then
    if once then
      return {0, 1}
    end
    return fairEnqueue(k, q, t, holder, wait, cnow)
  end
  local qwas, twas = call('PEXPIRETIME', q), call('PEXPIRETIME', t)
  local r = hashAcquire(k, s, mk, a)
  if type(r) ~= 'table' or (r[1] ~= 1 and r[1] ~= 2) then
    if once and type(r) == 'table' and r[1] == 0 then
      return {0, 1}
    end
    return r -- a lock-family holder of the same name (busy), or kindTokenAhead
  end
  if not free then
    return r -- a re-entry: the queue is not touched
  end
  local popped = 0
  if call('LPOP', q) then
    popped = 1
  end
  local d = call('ZSCORE', t, holder) or ''
  call('ZREM', t, holder)
  local others, lowered = call('ZRANGE', t, 0, -1), {}
  for i = 1, #others do
    call('ZINCRBY', t, -tonumber(wait), others[i])
    lowered[i] = #others[i] .. ':' .. others[i]
  end
  local j = #r
  r[j + 1], r[j + 2], r[j + 3], r[j + 4], r[j + 5] = popped, d, qwas, twas, table.concat(lowered)
  return r
end
local function fairAcquireUndo(k, s, mk, a)
  local holder, count = A[a], tonumber(A[a + 2])
  local q, t, wait, popped, d, qwas, twas, lowered =
    A[a + 10], A[a + 11], A[a + 12], A[a + 13], A[a + 14], A[a + 15], A[a + 16], A[a + 17]
  -- The queue goes back with a fresh grant that is still there, or that
  -- expired (nobody holds the lock since): not under another's hold.
  local ours = count == 0 and (tonumber(call('HGET', k, holder)) == 1 or call('EXISTS', k) == 0)
  local r = hashAcquireUndo(k, s, mk, a)
  if r ~= 1 or not ours then
    return r
  end
  if popped == '1' and not call('LPOS', q, holder) then
    call('LPUSH', q, holder)
  end
  if d ~= '' and not call('ZSCORE', t, holder) then
    call('ZADD', t, d, holder)
  end
  local p = 1
  while p <= #lowered do
    local n, from = match(lowered, '^(%d+):()', p)
    local w = sub(lowered, from, from + tonumber(n) - 1)
    if w ~= holder and call('ZSCORE', t, w) then
      call('ZINCRBY', t, tonumber(wait), w)
    end
    p = from + tonumber(n)
  end
  if tonumber(qwas) > 0 then
    restore(q, qwas)
  end
  if tonumber(twas) > 0 then
    restore(t, twas)
  end
  return 1
end
-- fairWake publishes the wake-up to the queue head's own channel.
local function fairWake(q, channel, pub, msg)
  local head = call('LINDEX', q, 0)
  if head and pub ~= '' then
    call(pub, channel .. ':' .. head, msg)
  end
end
local function fairUnlock(k, s, _, a)
  local holder, lease, channel, latch, pub, msg, lttl, term, q, t, cnow =
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
  dropStale(q, t, cnow)
  if call('EXISTS', k) == 0 then
    fairWake(q, channel, pub, msg)
    call('SET', latch, 1, 'PX', lttl)
    if sowner == holder then
      return {1, 1, dropSide(s, sowner, stok, sterm, sacq, sren, saddr)}
    end
    return {1, 1}
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
  call('SET', latch, 1, 'PX', lttl)
  fairWake(q, channel, pub, msg)
  if sowner == holder then
    return {1, 1, dropSide(s, sowner, stok, sterm, sacq, sren, saddr)}
  end
  return {1, 1}
end
local function fairForceUnlock(k, s, _, a)
  local channel, pub, msg, term, q, t, cnow = A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4], A[a + 5], A[a + 6]
  local sowner, stok, sterm, sacq, sren, saddr = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  dropStale(q, t, cnow)
  if call('DEL', k) == 0 then
    return {1, 0}
  end
  fairWake(q, channel, pub, msg)
  return {1, 1, dropSide(s, sowner, stok, sterm, sacq, sren, saddr)}
end
local function fairDequeue(_, s, _, a)
  local holder, q, t, wait, term = A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4]
  local _, _, sterm = load(s)
  local refused = newer(sterm, s, term, num(term), false)
  if refused then
    return refused
  end
  local queue = call('LRANGE', q, 0, -1)
  local i = 1
  while i <= #queue and queue[i] ~= holder do
    i = i + 1
  end
  for j = i + 1, #queue do
    call('ZINCRBY', t, -tonumber(wait), queue[j])
  end
  call('ZREM', t, holder)
  call('LREM', q, 0, holder)
  return 1
end
recipeOps.j = {fairAcquire, 14}
recipeOps.k = {fairAcquireUndo, 18}
recipeOps.p = {fairUnlock, 11}
recipeOps.g = {fairForceUnlock, 7}
recipeOps.d = {fairDequeue, 5}
`

// The fair twins' operation letters and arguments. KEYS, as every
// recipe twin's: the lock key, its side record and the side record's
// fence mark.
const (
	// opFairAcquire: opHashAcquire's nine arguments (token key ""), then
	// the queue, the timeout set, wait-ms, the client's clock (unix ms) and
	// "1" for fair.tryonce ("0" for fair.acquire). Returns {0, n} not
	// granted, n the recipe's reply (fair.acquire's wait, fair.tryonce's
	// 1); {4, token} (kindTokenAhead); a re-entry as opHashAcquire; a fresh
	// grant as opHashAcquire, then: 1 if it popped the caller off the
	// queue's head (else 0), the caller's deadline before ("" none), the
	// queue's and the timeout set's PEXPIRETIME before, and the waiters
	// whose deadlines it lowered (each as <length>:<name>).
	opFairAcquire lockOp = 'j'
	// opFairAcquireUndo: opHashAcquireUndo's ten arguments (token key and
	// its value ""), then the queue, the timeout set, wait-ms and the
	// fresh grant's five queue values above ("0", "", "-2", "-2", "" for a
	// re-entry). Undoes the hold as opHashAcquireUndo does; a fresh grant
	// that is still there (or expired) also puts the caller back at the
	// queue's head with its deadline, and wait back on each deadline it
	// lowered. Returns 1.
	opFairAcquireUndo lockOp = 'k'
	// opFairUnlock: opHashUnlock's eight arguments, then the queue, the
	// timeout set and the client's clock. Replies as opHashUnlock.
	opFairUnlock lockOp = 'p'
	// opFairForceUnlock: opHashForceUnlock's four arguments, then the
	// queue, the timeout set and the client's clock. Replies as
	// opHashForceUnlock.
	opFairForceUnlock lockOp = 'g'
	// opFairDequeue: holder, queue, timeout set, wait-ms, term. Returns 1.
	opFairDequeue lockOp = 'd'
)

// fairOpLetters are the operations fairOpsLua registers: opsScript defines that
// family the first time a call names one of them (scripts.go, opOf).
const fairOpLetters = string(opFairAcquire) + string(opFairAcquireUndo) + string(opFairUnlock) + string(opFairForceUnlock) + string(opFairDequeue)
