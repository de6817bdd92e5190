package locks

import (
	"strconv"
	"strings"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// The owner record is a string at recordKey(resource), expiring with the
// lease (SET ... PX): one key and one command, where it was a hash of five
// fields with its own PEXPIRE (see "Why the lock path is built as it is"
// in docs/performance.md for what that saved). Its value packs, separated by
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
// upgraded whole, not node by node (docs/operating.md, "Upgrading").
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
// lock writer (internal/lockwriter) puts every operation that is ready when a lock connection is free
// into one call (per hash slot in front of a Redis Cluster, whose scripts
// must declare their keys, all in one slot), so that Redis parses, looks up
// and runs one script, and replicates one transaction, for many grants.
// Each operation runs under pcall: an error (a key of another type, a write
// refused) answers that operation alone, as its own error reply, and the
// others' replies stand. KEYS are three per operation (record, guard,
// fence mark: fencemark.go); ARGV holds, per operation, its letter
// (opAcquire ...) and then its arguments, as many as opArgs says.
//
// Replies are tables so the manager can tell the outcomes apart.

// recordLua is load(key): the record's owner (false if there is none),
// token, term, acquired, renewed and addr, from either layout, each as the
// string it is stored as; parse(key, value) is the same for a string
// already read. Its pattern captures positions, not the rest of the
// record, so the owner and addr are cut from the value once.
const recordLua = `
local call, tonumber, match, sub = redis.call, tonumber, string.match, string.sub
local function parse(k, v)
  local tok, term, acq, ren, alen, p = match(v, '^(%d+) (%d+) (%d+) (%d+) (%d+) ()')
  if not tok then
    error('WRONGTYPE ' .. k .. ' is not a fenceproxy owner record')
  end
  local e = p + tonumber(alen)
  return sub(v, e), tok, term, acq, ren, sub(v, p, e - 1)
end
local function load(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    local h = call('HMGET', k, 'owner', 'token', 'term', 'acquired', 'renewed', 'addr')
    return h[1], h[2], h[3] or '0', h[4] or '0', h[5] or '0', h[6] or ''
  end
  if not v then
    return false
  end
  return parse(k, v)
end
`

// markLua reads and compares fence marks (fencemark.go): a mark's value is
// "token term", decimal strings compared exactly (above) rather than as
// Lua's doubles. readMark(mk) is the mark's token and term, or nothing if
// there is none, or what is there is not a mark (then the next raise
// writes over it).
const markLua = `
local function above(a, b)
  return #a > #b or (#a == #b and a > b)
end
local function readMark(mk)
  local m = redis.pcall('GET', mk)
  if type(m) == 'string' then
    return string.match(m, '^(%d+) (%d+)$')
  end
end
`

// opsScript: see above. Each function's arguments are documented with the
// lockOp that names them (opAcquire and so on); each reads them from ARGV
// at its own offset a.
//
// What it spends in Redis is mostly not its commands (GET, SET, DEL: about
// 2 µs of a cycle's 17 on the master before this shape) but building and
// converting Lua values, so the script is written for that ("A leaner
// opsScript" in docs/performance.md has the measurements):
//
//   - A new grant's record value comes ready from the proxy (recordValue):
//     the script stores it as it is, with no concatenation and no number
//     formatted (Lua formats every number with sprintf).
//   - Terms and the lock-delay stay the strings they came as; they are
//     converted only when they are not "0" (the term check compares the
//     record's term string to the caller's first).
//   - Replies are one value where they can be: a grant is its token alone,
//     a release the released record's value (the proxy reads its token,
//     acquired and addr from it). Redis converts each Lua table of a reply
//     by looking up six special fields in it (err, ok, double ...); two
//     tables per cycle cost more than the lock's commands.
//   - The guard is read once per operation at most: acquire's fast path
//     reads it before its SET NX GET and not again after (nothing in
//     between writes it).
//   - Every call runs the whole chunk, and each local function it defines
//     is a closure made anew, so the value locks', read-write locks' and
//     fair locks' twins (some 60 closures and tables) are defined only by a
//     call that names one of their operations (opOf, lazyOps): an
//     EVALSHA with no operation cost the master 12-18 µs with them
//     defined up front, 6.3-6.9 defined on first use (redis-benchmark -c
//     10, INFO commandstats; an empty script: 2).
const opsScript = recordLua + markLua + `
local A = ARGV
local function pack(owner, tok, term, acq, ren, addr)
  return tok .. ' ' .. term .. ' ' .. acq .. ' ' .. ren .. ' ' .. #addr .. ' ' .. addr .. owner
end
local function num(s)
  if s == '0' then
    return 0
  end
  return tonumber(s)
end
local function newer(cterm, g, term, tn, guarded)
  local stored = 0
  if cterm and cterm ~= term then
    stored = tonumber(cterm) or 0
  end
  if guarded then
    local gt = (tonumber(call('GET', g)) or 1) - 1
    if gt > stored then
      stored = gt
    end
  end
  if stored > tn then
    return redis.error_reply('NEWERTERM ' .. stored)
  end
end
local function arm(k, g, value, ttl, tn, delay)
  call('SET', k, value, 'PX', ttl)
  if delay > 0 then
    call('SET', g, tn + 1, 'PX', tonumber(ttl) + delay)
  end
end
-- raise is a new grant's: the fence mark mk goes up to its token, of its
-- term, for life ms, unless it already shows this token or a newer one.
local function raise(mk, tok, term, life)
  local mt = readMark(mk)
  if mt and not above(tok, mt) then
    return
  end
  call('SET', mk, tok .. ' ' .. term, 'PX', life)
end
local function acquire(k, g, mk, a)
  local owner, ttl, cand, newest, others, delay, now, value, term, life =
    A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4], A[a + 5], A[a + 6], A[a + 7], A[a + 8], A[a + 9]
  local dn, tn = num(delay), num(term)
  local guarded = dn > 0 or tn > 0
  local cowner, ctok, cterm, cacq, _, caddr
  if others ~= '1' and dn == 0 then
    -- The common case in one command: take the resource if it is free.
    -- A record that is there is left as it is (NX) and judged below.
    local refused = newer(false, g, term, tn, guarded)
    if refused then
      return refused
    end
    local old = redis.pcall('SET', k, value, 'NX', 'GET', 'PX', ttl)
    if not old then
      raise(mk, cand, term, life)
      return cand
    elseif type(old) == 'string' then
      cowner, ctok, cterm, cacq, _, caddr = parse(k, old)
    else
      cowner, ctok, cterm, cacq, _, caddr = load(k) -- a hash: an older record
    end
    guarded = false -- read above; nothing has written it since
  else
    cowner, ctok, cterm, cacq, _, caddr = load(k)
  end
  local refused = newer(cterm, g, term, tn, guarded)
  if refused then
    return refused
  end
  local ct = ctok and tonumber(ctok)
  if ct and ct >= tonumber(cand) then
    return {4, ctok}
  end
  if cowner then
    if cowner ~= owner then
      return {0, call('PTTL', k)}
    end
    if newest == '' then
      return {3, 0}
    end
    if ctok == newest then
      arm(k, g, pack(owner, ctok, term, cacq, now, caddr), ttl, tn, dn)
      return {1, ctok}
    end
  elseif dn > 0 then
    local left = call('PTTL', g)
    if left > 0 then
      return {0, left}
    end
  end
  if others == '1' then
    return {0, call('PTTL', k)}
  end
  arm(k, g, value, ttl, tn, dn)
  raise(mk, cand, term, life)
  return cand
end
local function renew(k, g, mk, a)
  local owner, ttl, newest, delay, now, term = A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4], A[a + 5]
  local dn, tn = num(delay), num(term)
  local cowner, ctok, cterm, cacq, _, caddr = load(k)
  local refused = newer(cterm, g, term, tn, dn > 0 or tn > 0)
  if refused then
    return refused
  end
  if cowner == owner and ctok == newest then
    arm(k, g, pack(owner, ctok, term, cacq, now, caddr), ttl, tn, dn)
    return ctok
  end
  return false
end
-- release returns the released record's value (an older hash record's
-- fields packed as one) and its token, or 0.
local function release(k, g, mk, a)
  local owner, delay, term = A[a], A[a + 1], A[a + 2]
  local v = redis.pcall('GET', k)
  local cowner, ctok, cterm
  if type(v) == 'string' then
    local tok, t, alen, p = match(v, '^(%d+) (%d+) %d+ %d+ (%d+) ()')
    if not tok then
      error('WRONGTYPE ' .. k .. ' is not a fenceproxy owner record')
    end
    cowner, ctok, cterm = sub(v, p + tonumber(alen)), tok, t
  elseif v then -- a hash: an older record
    local cacq, caddr, _
    cowner, ctok, cterm, cacq, _, caddr = load(k)
    v = cowner and pack(cowner, ctok or '0', cterm, cacq, '0', caddr)
  end
  local dn, tn = num(delay), num(term)
  local refused = newer(cterm, g, term, tn, dn > 0 or tn > 0)
  if refused then
    return refused
  end
  if cowner == owner then
    call('DEL', k, g)
    return v, ctok
  end
  return 0
end
-- lower takes an undone grant's token back out of the fence mark: if the
-- mark still shows it (nothing newer raised it since), it goes back to
-- newest, the resource's newest token issued ('0': none, the mark goes;
-- '': unknown, it stays, the safe side).
local function lower(mk, token, newest, life)
  local mt, mterm = readMark(mk)
  if mt ~= token or newest == '' then
    return
  end
  if newest == '0' then
    call('DEL', mk)
  else
    call('SET', mk, newest .. ' ' .. mterm, 'PX', life)
  end
end
local function undo(k, g, mk, a)
  local owner, token, delay, term, armed = A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 4]
  local cowner, ctok, cterm, _, cren = load(k)
  local tn = num(term)
  local refused = newer(cterm, g, term, tn, num(delay) > 0 or tn > 0)
  if refused then
    return refused
  end
  local ours = cowner == owner and ctok == token
  if ours and armed ~= '' and cren ~= armed then
    return 0 -- re-armed (and replied) by a same-owner retry since: it stands
  end
  lower(mk, token, A[a + 5], A[a + 6])
  if ours then
    call('DEL', k, g)
    return 1
  end
  return 0
end
local function handoff(k, g, mk, a)
  local rel, rtok = release(k, g, mk, a)
  if type(rel) ~= 'string' then
    return rel
  end
  local ttl, cand, value = A[a + 3], A[a + 4], A[a + 5]
  if tonumber(rtok) and tonumber(rtok) >= tonumber(cand) then
    return {rel, {4, rtok}}
  end
  arm(k, g, value, ttl, num(A[a + 2]), num(A[a + 1]))
  raise(mk, cand, A[a + 2], A[a + 6])
  return {rel, cand}
end
` + recipeOpsLua + `
local function defineValueOps()
` + valueOpsLua + `
end
local function defineRWOps()
` + rwlockOpsLua + `
end
local function defineFairOps()
` + fairOpsLua + `
end
local lazyOps = {['` + valueOpLetters + `'] = defineValueOps, ['` + rwOpLetters + `'] = defineRWOps,
  ['` + fairOpLetters + `'] = defineFairOps}
-- recipeOps[op], defining op's family first if it is a lazy one.
local function opOf(op)
  local known = recipeOps[op]
  if known or #op ~= 1 then
    return known
  end
  for letters, define in pairs(lazyOps) do
    if string.find(letters, op, 1, true) then
      lazyOps[letters] = nil
      define()
      return recipeOps[op]
    end
  end
end
local out, a, k, n, i = {}, 1, 1, #A, 0
while a <= n do
  local op, f, size = A[a], nil, 0
  if op == 'a' then
    f, size = acquire, 10
  elseif op == 'l' then
    f, size = release, 3
  elseif op == 'h' then
    f, size = handoff, 7
  elseif op == 'r' then
    f, size = renew, 6
  elseif op == 'u' then
    f, size = undo, 7
  else
    local known = opOf(op)
    if not known then
      return redis.error_reply('ERR fenceproxy: unknown lock operation ' .. tostring(op))
    end
    f, size = known[1], known[2]
  end
  local ok, r = pcall(f, KEYS[k], KEYS[k + 1], KEYS[k + 2], a + 1)
  if not ok and type(r) ~= 'table' then
    r = redis.error_reply(tostring(r))
  end
  i = i + 1
  out[i] = r
  a, k = a + 1 + size, k + 3
end
return out
`

// opsSHA is opsScript's name for EVALSHA.
var opsSHA = resp.ScriptSHA(opsScript)

// lockOp names one of opsScript's operations: the letter that starts its
// arguments in a batch. A lockwriter.ScriptCall with an Op carries that
// operation's three keys (record, guard, fence mark: Manager.keys) and its
// arguments, in the order below, and opsScript as its Source and SHA: the
// lock writer runs it through opsScript, alone or with others.
type lockOp = lockwriter.Op

const (
	// opAcquire: owner, ttl-ms, new token, newest token known to the
	// fence store ("" if the caller did not read it), "1" if others wait
	// in line (then only the owner's own re-arm is allowed: no barging),
	// lock-delay-ms, now (unix ms), the new grant's record (a
	// recordValue: this token, term, now, the client's addr and owner),
	// term, fence-mark-life-ms. Returns the token alone (a bulk string)
	// for a new grant (kindGranted), which raises the resource's fence
	// mark to it (fencemark.go), else {kind, value} (replyKind below);
	// pair reads both. The owner's own record is re-armed only if
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
	// record's value as it was (an older hash record's fields packed the
	// same way, "0" and "" for what it lacks), from which the proxy reads
	// the token, acquired and addr for the slow-lock log
	// (parseReleased); else 0.
	opRelease lockOp = 'l'
	// opUndo: owner, token, lock-delay-ms, term, armed, the resource's
	// newest token issued without this one ("" if unknown),
	// fence-mark-life-ms. Deletes the record (and guard) only if it is
	// exactly the grant being undone: owner and token, and, unless armed
	// is "", last armed at armed (unix ms: a grant that a same-owner retry
	// re-armed since, and replied, is not undone: 0, and nothing else is
	// touched). Returns 1, else 0. Unless re-armed, a fence mark that still
	// shows the token goes back to that newest (the token will not be
	// issued: a mark left above every token issued would refuse the
	// current holder's FENCE.EXEC as stale).
	opUndo lockOp = 'u'
	// opHandoff: owner, lock-delay-ms, term, as opRelease; then the head
	// of the line's ttl-ms, its reserved token, and its record (a
	// recordValue: that token, term, now, the head's client addr and
	// owner), and fence-mark-life-ms. A release that, if it freed the
	// resource, grants it to the head at once (handoff.go), raising the
	// fence mark as opAcquire's grant does. Returns opRelease's reply if nothing was
	// released (0, or the error), else {that reply, grant}: the token
	// alone if granted, or {4, the released record's token} if that was
	// at or above the head's (kindTokenAhead: not granted).
	opHandoff lockOp = 'h'
)

// recordValue is a new grant's owner record, in the layout at the top of
// this file, for opAcquire and opHandoff: addRecord encodes it straight
// into the request, and the script stores it as it came (building it in
// Lua cost the master about 0.8 µs per cycle: a concatenation of eleven
// pieces and a number formatted with sprintf).
type recordValue struct {
	token, term uint64
	at          int64 // unix ms: both acquired and renewed
	addr, owner string
}

// addRecord adds v to args, encoded through a buffer on the stack (the
// lock path's way: no boxing, no allocation of its own).
func addRecord(args *lockwriter.ScriptArgs, v recordValue) *lockwriter.ScriptArgs {
	var buf [128]byte
	return args.Bulk(v.appendTo(buf[:0]))
}

// addNewest adds a resource's newest token to args, or "" if it is not
// known: the scripts then answer kindNeedNewest where they need it (a
// re-entry, a renewal's fence mark).
func addNewest(args *lockwriter.ScriptArgs, newest uint64, known bool) *lockwriter.ScriptArgs {
	if known {
		return args.Uint(newest)
	}
	return args.Str("")
}

// AppendArg appends r to b as one RESP bulk string (lockwriter.Arg): how
// a record travels in arguments built with lockwriter.ArgsOf.
func (r recordValue) AppendArg(b []byte) []byte {
	var buf [128]byte
	return redcon.AppendBulk(b, r.appendTo(buf[:0]))
}

// appendTo appends the record's value to b.
func (r recordValue) appendTo(b []byte) []byte {
	b = strconv.AppendUint(b, r.token, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, r.term, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.at, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.at, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(r.addr)), 10)
	b = append(b, ' ')
	b = append(b, r.addr...)
	return append(b, r.owner...)
}

// releasedRecord is what the proxy reads of a released record: its
// token, and for the slow-lock log when it was granted (unix ms; 0 if an
// older record lacks it) and to whom.
type releasedRecord struct {
	token    uint64
	acquired int64
	addr     string
}

// parseReleased reads opRelease's reply, the released record's value. ok
// is false for anything that is not a record's value (then the reply was
// not a release's).
func parseReleased(v string) (rec releasedRecord, ok bool) {
	// token term acquired renewed addr-length addr owner, cut in place
	// (no allocation: one release per lock cycle)
	var f [5]string
	for i := range f {
		if f[i], v, ok = strings.Cut(v, " "); !ok {
			return rec, false
		}
	}
	var err error
	if rec.token, err = strconv.ParseUint(f[0], 10, 64); err != nil {
		return rec, false
	}
	if rec.acquired, err = strconv.ParseInt(f[2], 10, 64); err != nil {
		return rec, false
	}
	n, err := strconv.Atoi(f[4])
	if err != nil || n < 0 || n > len(v) {
		return rec, false
	}
	rec.addr = v[:n]
	return rec, true
}

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

// execScript is FENCE.EXEC's write, checked where it lands
// (fencemark.go): KEYS[1] is the fence mark of the slot it writes, the
// other KEYS the command's own keys (declared so that Redis Cluster
// redirects the script to their slot's master rather than running it
// where it landed); ARGV: token, term, checked-at (unix ms, by the proxy's
// clock, taken before the proxy judged the token), the mark's life (ms),
// then the command. Atomically, it refuses the command when the mark
// shows a newer token (FENCESTALE <token>) or a newer term (NEWERTERM
// <term>), or when Redis's own clock is past checked-at plus half the
// mark's life (FENCELATE <ms since checked-at>: a write so late that a
// newer token's mark may have expired before it arrived); otherwise it
// raises the mark to its token and term for the mark's life and runs the
// command, whose own error pcall hands back as an error reply. The
// refusals' codes are the script's own: a command run inside a script
// cannot answer with one (EVAL and FCALL cannot be called from a script).
const execScript = markLua + `
local A = ARGV
local mk, tok, term, checked, life = KEYS[1], A[1], A[2], tonumber(A[3]), A[4]
local mt, mterm = readMark(mk)
if mt then
  if above(mt, tok) then
    return redis.error_reply('FENCESTALE ' .. mt)
  end
  if above(mterm, term) then
    return redis.error_reply('NEWERTERM ' .. mterm)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > checked + tonumber(life) / 2 then
  return redis.error_reply('FENCELATE ' .. string.format('%d', now - checked))
end
redis.call('SET', mk, tok .. ' ' .. term, 'PX', life)
return redis.pcall(unpack(A, 5))
`

// execSHA is execScript's name for EVALSHA.
var execSHA = resp.ScriptSHA(execScript)

// execScript's refusals (error codes), each before anything was written.
const (
	fenceStaleCode = "FENCESTALE"
	fenceLateCode  = "FENCELATE"
)

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

// The hot scripts go by EVALSHA (see lockwriter.Writer.Start): an EVAL sends about a
// kilobyte of source that Redis hashes on every call. So does infoScript
// (lockwriter.Writer.Read).
var infoSHA = resp.ScriptSHA(infoScript)
