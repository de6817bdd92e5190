package locks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// Clients' own lock recipes (internal/recipes recognises them): the
// Manager runs their twins (recipeops.go) with the lock family's rules. The
// resource is the recipe's lock key; its side record is the resource's
// owner record (recordKey), owner = the recipe's holder. A grant, fresh or
// a re-entry, is settled as LOCK.ACQUIRE's is: a new token is reserved
// while the replicas acknowledge and confirmed after; a shortfall, or a
// reply that would leave less than the safety margin of the lease, is
// undone exactly (the count stepped back, the expiry restored, a fresh
// grant's field and side record deleted). A renewal the replicas did not
// acknowledge has its old expiry restored. Unlocks wait for no replica (a
// lost unlock only delays the next grant until the lease ends) and end the
// side record, so the fence store's lease bookkeeping and LOCK.INFO see
// the release.

// hashGrant is one run of opHashAcquire: what it offered and what came
// back, including the pre-image its undo needs.
type hashGrant struct {
	call      lockwriter.ScriptCall
	write     *lockwriter.Write
	start     time.Time
	candidate uint64
	kind      replyKind
	busy      int64  // kindBusy: the holder's pttl as the recipe replies it
	token     uint64 // kindGranted, kindRearmed: the grant's; kindTokenAhead: the record's
	count     int64  // the holder's count before
	was, swas any    // PEXPIRETIME before: the lock's, the side record's ("" if new)
	tokenKey  string // a fenced recipe's token key, or ""
	twas      any    // the token key's value before ("" absent or none)

	fair *fairGrant // a fair lock's queue and its pre-image (fair.go), or nil
}

// recipeKeys are a recipe twin's KEYS: the lock key, its side record
// (the resource's owner record) and the side record's fence mark.
func recipeKeys(key, side string) []string { return []string{key, side, markKey(side)} }

// RecipeAcquire runs a recipe's acquire of the hash lock key for holder
// (Redisson's RLock, RSpinLock and RFencedLock): it grants, re-enters, or
// finds the lock held. It returns the grant's fence-store token once the
// grant is acknowledged and its token recorded; ErrBusy with the holder's
// pttl (as the recipe replies it); a NoReplicasError or ErrLate when the
// grant was undone; another error when the outcome is unknown or nothing
// was tried.
//
// tokenKey is RFencedLock's token key ("" for the others): the grant
// raises it to the returned token (never lowers it), in place of
// Redisson's INCR, so the token the client reads comes from the fence
// store and never goes back after a kill -9, a flush or a failover. A
// re-entry keeps its grant's token, as LOCK.ACQUIRE's re-arm does (where
// Redisson's INCR would hand out a new one): the lock's token is the
// grant's, which FENCE.CHECK accepts while the grant stands.
func (m *Manager) RecipeAcquire(ctx context.Context, key, tokenKey, holder, clientAddr string, lease time.Duration, received time.Time) (token uint64, pttl int64, err error) {
	return m.recipeAcquire(ctx, key, tokenKey, holder, clientAddr, lease, received, nil)
}

// recipeAcquire is RecipeAcquire, and RecipeFairAcquire's with the fair
// lock's queue q.
func (m *Manager) recipeAcquire(ctx context.Context, key, tokenKey, holder, clientAddr string, lease time.Duration, received time.Time, q *FairQueue) (token uint64, pttl int64, err error) {
	if err := m.AdmitWithin(ctx); err != nil {
		return 0, 0, err
	}
	side := m.recordKey(key)
	evictable, err := m.evictionGuard(side)
	if err != nil {
		return 0, 0, err
	}
	turn := m.serial.lock(key)
	defer m.serial.unlock(key, turn)
	g, err := m.sendHashAcquire(ctx, key, side, tokenKey, holder, clientAddr, lease, q)
	return m.hashAttempted(ctx, &g, err, key, side, tokenKey, holder, clientAddr, lease, received, q, evictable)
}

// hashAttempted finishes recipeAcquire's attempt g, whose script has
// answered (err: sendHashAcquire's), in the lock's turn: it asks again
// above a record's token ahead of the store's, and settles a grant.
func (m *Manager) hashAttempted(ctx context.Context, g *hashGrant, err error, key, side, tokenKey, holder, clientAddr string, lease time.Duration, received time.Time, q *FairQueue, evictable bool) (token uint64, pttl int64, _ error) {
	if err == nil && g.kind == kindNeedNewest {
		// A re-entry, and the newest token was not cached
		// (RecipeAcquireNow): read it and ask again (nothing was
		// written).
		*g, err = m.sendHashAcquire(ctx, key, side, tokenKey, holder, clientAddr, lease, q)
	}
	if err == nil && g.kind == kindTokenAhead {
		// The side record carries a token this store never issued (see
		// authority.go): adopt it, then ask again above it.
		if err = m.judgeRecordToken(key, side, int64(g.token)); err == nil {
			*g, err = m.sendHashAcquire(ctx, key, side, tokenKey, holder, clientAddr, lease, q)
		}
	}
	if err != nil {
		if errors.Is(err, upstream.ErrOutcomeUnknown) && g.candidate != 0 {
			m.countIssued(key, g.candidate) // it may stand in a side record
		}
		return 0, 0, err
	}
	switch g.kind {
	case kindBusy:
		m.hot.add(key)
		return 0, g.busy, ErrBusy
	case kindGranted, kindRearmed:
		return g.token, 0, m.settleHashGrant(ctx, g, key, holder, clientAddr, lease, received, evictable)
	}
	return 0, 0, fmt.Errorf("locks: unexpected recipe acquire reply kind %d", g.kind)
}

// sendHashAcquire runs one opHashAcquire with a fresh candidate token and
// reads its reply.
func (m *Manager) sendHashAcquire(ctx context.Context, key, side, tokenKey, holder, clientAddr string, lease time.Duration, q *FairQueue) (g hashGrant, err error) {
	newest, err := m.opts.Store.Newest(key)
	if err != nil {
		return g, err
	}
	if err := m.hashAcquireCall(&g, key, side, tokenKey, holder, clientAddr, lease, q, newest, true, false); err != nil {
		return g, err
	}
	g.write = m.opts.Scripts.Start(ctx, key, g.call, true)
	return g, twinReply(g.write, g.readReply)
}

// hashAcquireCall builds g's opHashAcquire call with a fresh candidate
// token; newest is the resource's newest token, if known (sent as "" if
// not: RecipeAcquireNow). With now, only a token the store hands out
// without I/O (else errWouldWait). The arguments are added by type, as
// the lock family's are: through lockwriter.ArgsOf, each boxed, they were
// a fifth of a Redisson lock cycle's allocations.
func (m *Manager) hashAcquireCall(g *hashGrant, key, side, tokenKey, holder, clientAddr string, lease time.Duration, q *FairQueue, newest uint64, known, now bool) (err error) {
	g.tokenKey = tokenKey
	if g.candidate, err = m.nextToken(now); err != nil {
		return err
	}
	g.start = time.Now()
	term := m.term()
	g.call = lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opHashAcquire, Keys: recipeKeys(key, side)}
	args := g.call.Args.Str(holder).Int(lease.Milliseconds()).Uint(g.candidate)
	addNewest(args, newest, known).Int(g.start.UnixMilli())
	addRecord(args, recordValue{token: g.candidate, term: term, at: g.start.UnixMilli(), addr: clientAddr + recipeAddrMark, owner: holder}).
		Uint(term).Int(m.markLife()).Str(tokenKey)
	if q != nil {
		g.fair = q.grant(&g.call) // fair.go
	}
	return nil
}

// readReply decodes the script's reply (a fair lock's first through its
// queue) into g.
func (g *hashGrant) readReply(reply any) error {
	if g.fair != nil {
		reply = g.fair.read(reply)
	}
	return g.read(reply)
}

// readKindReply decodes the {kind, ...} reply of a recipe's twin (what names
// the operation for the error): the array, at least min long, and its
// kind.
func readKindReply(reply any, min int, what string) ([]any, replyKind, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr) < max(min, 1) {
		return nil, 0, fmt.Errorf("locks: unexpected %s reply %v", what, reply)
	}
	kind, err := toInt(arr[0])
	if err != nil {
		return nil, 0, fmt.Errorf("locks: unexpected %s reply %v", what, reply)
	}
	return arr, replyKind(kind), nil
}

// read decodes opHashAcquire's reply into g.
func (g *hashGrant) read(reply any) error {
	arr, kind, err := readKindReply(reply, 2, "recipe acquire")
	if err != nil {
		return err
	}
	g.kind = kind
	v, err := toInt(arr[1])
	if err != nil {
		return err
	}
	switch g.kind {
	case kindBusy:
		g.busy = v
		return nil
	case kindNeedNewest:
		return nil
	case kindTokenAhead:
		g.token = uint64(v)
		return nil
	}
	if len(arr) != 5 && len(arr) != 6 {
		return fmt.Errorf("locks: unexpected recipe acquire reply %v", reply)
	}
	g.token = uint64(v)
	if g.count, err = toInt(arr[2]); err != nil {
		return err
	}
	g.was, g.swas, g.twas = arr[3], arr[4], ""
	if len(arr) == 6 {
		g.twas = arr[5]
	}
	return nil
}

// settleHashGrant finishes a recipe grant whose script has answered, in
// the resource's turn, as settle does a LOCK.ACQUIRE's.
func (m *Manager) settleHashGrant(ctx context.Context, g *hashGrant, key, holder, clientAddr string, lease time.Duration, received time.Time, evictable bool) error {
	var reserveErr error
	if g.kind == kindGranted {
		reserveErr = m.opts.Store.Reserve(key, g.token)
	}
	verdict := m.grantVerdict(g.write, g.start, reserveErr, m.replyBy(received, lease))
	return m.settleHashVerdict(ctx, g, verdict, reserveErr == nil, key, holder, clientAddr, lease, evictable)
}

// settleHashVerdict is settleHashGrant's end, once the grant is judged
// (verdict; reserved: a new token's reservation did not fail): it
// confirms the token and records the lease, or undoes the grant. Only
// undoing waits (on Redis).
func (m *Manager) settleHashVerdict(ctx context.Context, g *hashGrant, verdict error, reserved bool, key, holder, clientAddr string, lease time.Duration, evictable bool) error {
	fresh := g.kind == kindGranted // a new token; else the holder's current one
	err := verdict
	if err == nil && fresh {
		err = m.opts.Store.Confirm(key, g.token)
	}
	if err != nil {
		return m.abandonHashGrant(ctx, g, key, holder, fresh && reserved, err)
	}
	if fresh {
		if old := m.leases.granted(key, g.token, g.start, g.start.Add(lease), clientAddr); old != nil {
			m.logExpired(old)
		}
	} else {
		m.leases.rearmed(key, g.token, g.start.Add(lease))
	}
	if evictable {
		m.evictableGranted(g.call.Keys[1], key, g.token)
	}
	return nil
}

// abandonHashGrant undoes a recipe grant that will not be replied (unless
// its outcome is already unknown) and settles its reserved token as
// abandon does: cancelled only if the undo ran, else counted as issued.
func (m *Manager) abandonHashGrant(ctx context.Context, g *hashGrant, key, holder string, reserved bool, err error) error {
	undone := false
	if !errors.Is(err, upstream.ErrOutcomeUnknown) {
		// The newest token issued besides this one, for the fence mark, as
		// undo has it ("" if unknown: the mark stays up, the safe side).
		var newest any = ""
		if n, err := m.opts.Store.Newest(key); err == nil && n < g.token {
			newest = n
		}
		undo := lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opHashAcquireUndo, Keys: g.call.Keys,
			Args: lockwriter.ArgsOf(holder, strconv.FormatUint(g.token, 10), g.count, g.was, g.swas, m.term(), newest, m.markLife(), g.tokenKey, g.twas)}
		if g.fair != nil {
			g.fair.undo(&undo) // fair.go: the queue goes back too
		}
		_, uerr := m.opts.Scripts.RunAfter(ctx, g.write, undo)
		if uerr != nil {
			m.opts.Logger.Warn("could not undo an unacknowledged recipe grant; it expires with its lease", "err", uerr)
		} else {
			undone = true
			if g.count == 0 {
				m.waiting.wakeHead(key)
			}
		}
	}
	if reserved {
		if undone {
			m.opts.Store.Cancel(key, g.token)
		} else if cerr := m.opts.Store.Confirm(key, g.token); cerr != nil {
			m.opts.Logger.Warn("could not record a token whose grant may stand", "err", cerr)
		}
	}
	var nr *NoReplicasError
	if !undone && (err == ErrLate || errors.As(err, &nr)) {
		return fmt.Errorf("%w: a refused grant could not be undone (%v)", upstream.ErrOutcomeUnknown, err)
	}
	return err
}

// RecipeLock is one lock of a recipe's renewal batch.
type RecipeLock struct{ Key, Holder string }

// RecipeRenew re-arms each lock of a recipe's renewal batch (Redisson's
// watchdog) that its holder still holds, and reports which. Each lock is
// renewed in its own resource's turn, all at once, so their writes share
// the writer's batches and WAITs. A renewal the replicas did not
// acknowledge has its old expiry restored; then the error is a
// NoReplicasError (the others stand: they were acknowledged).
func (m *Manager) RecipeRenew(ctx context.Context, locks []RecipeLock, lease time.Duration, received time.Time) ([]bool, error) {
	if err := m.AdmitWithin(ctx); err != nil {
		return nil, err
	}
	held := make([]bool, len(locks))
	errs := make([]error, len(locks))
	var wg sync.WaitGroup
	for i := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held[i], errs[i] = m.renewHash(ctx, locks[i], lease, received)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return held, err
		}
	}
	return held, nil
}

// renewHash renews one lock of a batch, received when the batch reached
// the proxy (zero: now).
func (m *Manager) renewHash(ctx context.Context, l RecipeLock, lease time.Duration, received time.Time) (bool, error) {
	side := m.recordKey(l.Key)
	evictable, err := m.evictionGuard(side)
	if err != nil {
		return false, err
	}
	turn := m.serial.lock(l.Key)
	defer m.serial.unlock(l.Key, turn)
	newest, err := m.opts.Store.Newest(l.Key)
	if err != nil {
		return false, err
	}
	now := time.Now()
	call := m.hashRenewCall(l.Key, side, l.Holder, lease, newest, now)
	w := m.opts.Scripts.Start(ctx, l.Key, call, true)
	arr, err := hashRenewReplied(w)
	if err != nil || arr == nil {
		return false, err
	}
	acked, err := w.Acks()
	if err != nil {
		return false, err // the renewal may stand: nothing to undo
	}
	if acked < m.opts.MinReplicas {
		return false, m.undoHashRenewal(ctx, w, call.Keys, l.Holder, arr, acked)
	}
	m.rearmedSide(l.Key, side, arr[3], now.Add(lease), evictable)
	return m.renewalInTime(received, now, lease)
}

// hashRenewCall is one lock's renewal (opHashRenew) at now, for both
// courses (renewHash, RecipeRenewNow).
func (m *Manager) hashRenewCall(key, side, holder string, lease time.Duration, newest uint64, now time.Time) lockwriter.ScriptCall {
	call := lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opHashRenew, Keys: recipeKeys(key, side)}
	call.Args.Str(holder).Int(lease.Milliseconds()).Uint(newest).Int(now.UnixMilli()).Uint(m.term())
	return call
}

// hashRenewReplied reads a renewal's script reply: the lease's state
// before it (undo's arguments) and its token, or nil if the holder does not
// hold the lock.
func hashRenewReplied(w *lockwriter.Write) ([]any, error) {
	reply, err := w.Reply()
	if err != nil {
		return nil, deposed(err)
	}
	if n, ok := reply.(int64); ok && n == 0 {
		return nil, nil
	}
	arr, ok := reply.([]any)
	if !ok || len(arr) != 4 {
		return nil, fmt.Errorf("locks: unexpected recipe renewal reply %v", reply)
	}
	return arr, nil
}

// undoHashRenewal puts back what a renewal short of replicas changed
// (opHashRenewUndo, after w on its connection; it waits on Redis) and
// returns the renewal's error.
func (m *Manager) undoHashRenewal(ctx context.Context, w *lockwriter.Write, keys []string, holder string, arr []any, acked int) error {
	m.opts.Metrics.ReplicaShortfalls.Inc()
	if _, err := m.opts.Scripts.RunAfter(ctx, w, lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opHashRenewUndo, Keys: keys,
		Args: lockwriter.ArgsOf(holder, arr[1], arr[2], arr[3], m.term())}); err != nil {
		m.opts.Logger.Warn("could not undo an unacknowledged recipe renewal; the lease stands as Redis has it", "err", err)
	}
	return &NoReplicasError{Acked: acked, Wanted: m.opts.MinReplicas}
}

// renewalInTime is a recipe renewal's outcome once its re-arm stands:
// renewed, or ErrLate if the reply can no longer leave enough of the lease
// counted from when the request was received (as LOCK.RENEW's; the
// re-arm cannot be undone, so its holder is told so and retries).
func (m *Manager) renewalInTime(received, now time.Time, lease time.Duration) (bool, error) {
	if received.IsZero() {
		received = now
	}
	if time.Now().After(m.replyBy(received, lease)) {
		return false, ErrLate
	}
	return true, nil
}

// rearmedSide records a recipe renewal the replicas acknowledged: the
// lease of its side record's token (tok, as the twin replied it: "" for
// none) now ends at ends, and on an evictable master the grant is noted.
func (m *Manager) rearmedSide(key, side string, tok any, ends time.Time, evictable bool) {
	s, _ := tok.(string)
	t, err := strconv.ParseUint(s, 10, 64)
	if s == "" || err != nil {
		return
	}
	m.leases.rearmed(key, t, ends)
	if evictable {
		m.evictableGranted(side, key, t)
	}
}

// RecipeUnlock is a recipe's unlock or force-unlock (Force: whoever holds
// it), with what the recipe's own script would publish and latch.
type RecipeUnlock struct {
	Key, Holder               string
	Lease                     time.Duration // re-armed while the holder's count stays above 0
	Channel, Publish, Message string        // Publish: "publish", "spublish" or "" (none)
	Latch                     string
	LatchTTL                  int64 // ms
	Force                     bool
	Fair                      *FairQueue // a fair lock's queue (fair.go), or nil
}

// RecipeUnlock runs a recipe's unlock in the resource's turn, with no
// replica wait, and returns the recipe's integer reply, or null when the
// recipe answers nil (not the holder). A release ends the side record and
// the lease the proxy tracks.
func (m *Manager) RecipeUnlock(ctx context.Context, u RecipeUnlock) (n int64, null bool, err error) {
	turn := m.serial.lock(u.Key)
	defer m.serial.unlock(u.Key, turn)
	call := m.recipeUnlockCall(u)
	return m.recipeUnlocked(u, m.opts.Scripts.Start(ctx, u.Key, call, false))
}

// recipeUnlockCall is u's opHashUnlock (or force-unlock) call.
func (m *Manager) recipeUnlockCall(u RecipeUnlock) lockwriter.ScriptCall {
	side := m.recordKey(u.Key)
	call := lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opHashUnlock, Keys: recipeKeys(u.Key, side)}
	if u.Force {
		call.Op = opHashForceUnlock
		call.Args.Str(u.Channel).Str(u.Publish).Str(u.Message).Uint(m.term())
	} else {
		call.Args.Str(u.Holder).Int(u.Lease.Milliseconds()).Str(u.Channel).Str(u.Latch).Str(u.Publish).Str(u.Message).
			Int(u.LatchTTL).Uint(m.term())
	}
	if u.Fair != nil {
		u.Fair.unlock(&call) // fair.go
	}
	return call
}

// recipeUnlocked reads an unlock's reply (w, in) as RecipeUnlock answers
// it, in the lock's turn. It never waits.
func (m *Manager) recipeUnlocked(u RecipeUnlock, w *lockwriter.Write) (n int64, null bool, err error) {
	reply, err := w.Reply()
	if err != nil {
		return 0, false, deposed(err)
	}
	arr, ok := reply.([]any)
	if !ok || len(arr) == 0 {
		return 0, false, fmt.Errorf("locks: unexpected recipe unlock reply %v", reply)
	}
	if kind, err := toInt(arr[0]); err != nil || kind == 0 {
		return 0, true, err
	}
	if len(arr) < 2 {
		return 0, false, fmt.Errorf("locks: unexpected recipe unlock reply %v", reply)
	}
	if n, err = toInt(arr[1]); err != nil {
		return 0, false, err
	}
	if len(arr) == 3 {
		if v, ok := arr[2].(string); ok {
			if rec, ok := parseReleased(v); ok {
				m.released(u.Key, rec)
			}
		}
		m.waiting.wakeHead(u.Key)
	}
	return n, false, nil
}

// HolderToken returns the token of holder's current grant of resource, a
// recipe's lock or the lock family's (a read-write lock's: its epoch's,
// for any of its holders): ok is false when holder does not hold it, or its record's token is not the newest issued (a stale
// record).
func (m *Manager) HolderToken(ctx context.Context, resource, holder string) (token uint64, ok bool, err error) {
	if err := m.AdmitWithin(ctx); err != nil {
		return 0, false, err
	}
	newest, err := m.opts.Store.Newest(resource)
	if err != nil {
		return 0, false, err
	}
	rec, held, err := m.readRecord(ctx, resource)
	if err != nil || !held {
		return 0, false, err
	}
	if rec.Owner != holder {
		// A read-write lock's record is its epoch's, every holder's
		// (rwlock.go).
		if ok, err := m.holdsRW(ctx, resource, holder, rec); err != nil || !ok {
			return 0, false, err
		}
	}
	token, perr := strconv.ParseUint(rec.Token, 10, 64)
	if perr != nil || token != newest {
		return 0, false, nil
	}
	return token, true, nil
}
