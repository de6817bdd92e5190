package locks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// Redisson's RReadWriteLock (twins in rwlockops.go). Its grants, read or
// write, fresh or a re-entry, are settled as RecipeAcquire's are: through
// the lock writer with the shared WAIT, a new token reserved meanwhile
// and confirmed once the replicas acknowledged, and a shortfall or a
// reply that would be late undone exactly (a count stepped back, a hold's
// timeout key deleted, the mode a fresh grant set removed, the hash's and
// the side record's expiries put back). Unlocks wait for no replica.
//
// # Tokens of a lock that many readers share
//
// The resource is the lock's key, and its side record (recordKey) stands
// for the lock's epoch, not for one holder: the grant that finds the lock
// free gets a new fence-store token and writes the record (owner: its
// holder field); every grant that joins the epoch (a second reader, a
// re-entry, the writer taking the read lock, the writer's read holds left
// when it unlocks the write lock) gets that same token, as a re-entry of
// RLock does. So:
//
//   - FENCE.CHECK key T answers 1 for every current reader's token: it is
//     the newest issued for the key while any of them holds. Had each
//     reader got a token of its own, the newest reader's would make every
//     earlier, still valid reader's token stale. Readers do not exclude
//     each other, so fencing among them protects nothing; a writer after
//     them gets a newer token, which makes all of theirs stale, as it
//     must.
//   - LOCK.TOKEN key holder answers the epoch's token to any holder the
//     hash has a field for (a reader's <uuid>:<threadId>, the writer's
//     ...:write), not only to the record's owner (HolderToken).
//   - LOCK.INFO shows the epoch's first holder as the owner, and the
//     lease the record has, which follows the hash's expiry.
//
// A record found missing (expired, or lost with a failover) while readers
// hold the lock is replaced by a new token's: the earlier readers' tokens
// turn stale, the safe side.
//
// # Leases
//
// The late-reply rule judges a grant by the lease the client asked for
// (what the client counts on). The hash's own expiry can be longer: a read
// grant sets it to max(pttl, lease), a write re-entry adds the lease to
// the pttl; the side record and the proxy's lease bookkeeping follow that
// expiry.

// RWAcquire is a read or write acquire of a read-write lock.
type RWAcquire struct {
	Key    string
	Holder string // the hash field: lockName, or lockName:write
	Write  bool
	// A read acquire's own write field (its writer may read) and its
	// holds' timeout-key prefix ({name}:<lockName>:rwlock_timeout).
	WriteHolder, TimeoutPrefix string
	Lease                      time.Duration
}

// rwGrant is one run of opRWAcquire and the pre-image its undo needs.
type rwGrant struct {
	call      lockwriter.ScriptCall
	write     *lockwriter.Write
	start     time.Time
	candidate uint64
	kind      replyKind
	busy      int64
	token     uint64
	count     int64
	was, swas any
	added     any // 1: the grant set the mode (the lock was free)
	tw        any // the hold's timeout key's PEXPIRETIME before
	sold      any // a joining grant's side record's value before
	lease     time.Duration
}

func rwMode(write bool) string {
	if write {
		return "w"
	}
	return "r"
}

// RWAcquire grants, joins or re-enters a read-write lock, or finds it
// held, as RecipeAcquire does for RLock: the epoch's token once the
// grant is acknowledged; ErrBusy with the pttl the recipe replies; a
// NoReplicasError or ErrLate when the grant was undone; another error when
// the outcome is unknown or nothing was tried.
func (m *Manager) RWAcquire(ctx context.Context, a RWAcquire, clientAddr string, received time.Time) (token uint64, pttl int64, err error) {
	if err := m.AdmitWithin(ctx); err != nil {
		return 0, 0, err
	}
	side := m.recordKey(a.Key)
	evictable, err := m.evictionGuard(side)
	if err != nil {
		return 0, 0, err
	}
	turn := m.serial.lock(a.Key)
	defer m.serial.unlock(a.Key, turn)
	g, err := m.sendRWAcquire(ctx, a, side, clientAddr)
	if err == nil && g.kind == kindTokenAhead {
		if err = m.judgeRecordToken(a.Key, side, int64(g.token)); err == nil {
			g, err = m.sendRWAcquire(ctx, a, side, clientAddr)
		}
	}
	if err != nil {
		if errors.Is(err, upstream.ErrOutcomeUnknown) && g.candidate != 0 {
			m.countIssued(a.Key, g.candidate)
		}
		return 0, 0, err
	}
	switch g.kind {
	case kindBusy:
		m.hot.add(a.Key)
		return 0, g.busy, ErrBusy
	case kindGranted, kindRearmed:
		return g.token, 0, m.settleRWGrant(ctx, &g, a, clientAddr, received, evictable)
	}
	return 0, 0, fmt.Errorf("locks: unexpected read-write lock reply kind %d", g.kind)
}

func (m *Manager) sendRWAcquire(ctx context.Context, a RWAcquire, side, clientAddr string) (g rwGrant, err error) {
	newest, err := m.opts.Store.Newest(a.Key)
	if err != nil {
		return g, err
	}
	if g.candidate, err = m.opts.Store.NextToken(); err != nil {
		return g, err
	}
	g.start = time.Now()
	term := m.term()
	g.call = lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opRWAcquire, Keys: recipeKeys(a.Key, side),
		Args: lockwriter.ArgsOf(rwMode(a.Write), a.Holder, a.WriteHolder, a.TimeoutPrefix, a.Lease.Milliseconds(), g.candidate, newest, g.start.UnixMilli(),
			recordValue{token: g.candidate, term: term, at: g.start.UnixMilli(), addr: clientAddr + rwAddrMark, owner: a.Holder}, term, m.markLife())}
	g.write = m.opts.Scripts.Start(ctx, a.Key, g.call, true)
	return g, twinReply(g.write, g.read)
}

// read decodes opRWAcquire's reply into g.
func (g *rwGrant) read(reply any) error {
	arr, kind, err := readKindReply(reply, 2, "read-write lock acquire")
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
	case kindTokenAhead:
		g.token = uint64(v)
		return nil
	}
	if len(arr) != 9 {
		return fmt.Errorf("locks: unexpected read-write lock acquire reply %v", reply)
	}
	g.token = uint64(v)
	if g.count, err = toInt(arr[2]); err != nil {
		return err
	}
	ms, err := toInt(arr[6])
	if err != nil {
		return err
	}
	g.lease = time.Duration(ms) * time.Millisecond
	g.was, g.swas, g.added, g.tw, g.sold = arr[3], arr[4], arr[5], arr[7], arr[8]
	return nil
}

// settleRWGrant finishes a read-write grant in the resource's turn.
func (m *Manager) settleRWGrant(ctx context.Context, g *rwGrant, a RWAcquire, clientAddr string, received time.Time, evictable bool) error {
	fresh := g.kind == kindGranted
	var reserveErr error
	if fresh {
		reserveErr = m.opts.Store.Reserve(a.Key, g.token)
	}
	err := m.grantVerdict(g.write, g.start, reserveErr, m.replyBy(received, a.Lease))
	if err == nil && fresh {
		err = m.opts.Store.Confirm(a.Key, g.token)
	}
	if err != nil {
		return m.abandonRWGrant(ctx, g, a, fresh && reserveErr == nil, err)
	}
	if fresh {
		if old := m.leases.granted(a.Key, g.token, g.start, g.start.Add(g.lease), clientAddr); old != nil {
			m.logExpired(old)
		}
	} else {
		m.leases.rearmed(a.Key, g.token, g.start.Add(g.lease))
	}
	if evictable {
		m.evictableGranted(g.call.Keys[1], a.Key, g.token)
	}
	return nil
}

// abandonRWGrant undoes a read-write grant that will not be replied, and
// settles its reserved token as abandonHashGrant does.
func (m *Manager) abandonRWGrant(ctx context.Context, g *rwGrant, a RWAcquire, reserved bool, err error) error {
	undone := false
	if !errors.Is(err, upstream.ErrOutcomeUnknown) {
		var newest any = ""
		if n, err := m.opts.Store.Newest(a.Key); err == nil && n < g.token {
			newest = n
		}
		_, uerr := m.opts.Scripts.RunAfter(ctx, g.write, lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opRWAcquireUndo, Keys: g.call.Keys,
			Args: lockwriter.ArgsOf(rwMode(a.Write), a.Holder, a.TimeoutPrefix, strconv.FormatUint(g.token, 10), g.count, g.was, g.swas, g.added, g.tw,
				m.term(), newest, m.markLife(), g.sold)})
		if uerr != nil {
			m.opts.Logger.Warn("could not undo an unacknowledged read-write lock grant; it expires with its lease", "err", uerr)
		} else {
			undone = true
			if n, _ := toInt(g.added); n == 1 {
				m.waiting.wakeHead(a.Key)
			}
		}
	}
	if reserved {
		if undone {
			m.opts.Store.Cancel(a.Key, g.token)
		} else if cerr := m.opts.Store.Confirm(a.Key, g.token); cerr != nil {
			m.opts.Logger.Warn("could not record a token whose grant may stand", "err", cerr)
		}
	}
	var nr *NoReplicasError
	if !undone && (err == ErrLate || errors.As(err, &nr)) {
		return fmt.Errorf("%w: a refused grant could not be undone (%v)", upstream.ErrOutcomeUnknown, err)
	}
	return err
}

// RWRenewStyle is a read renewal body's version (recipes.RenewStyle's
// numbers): 352, 400 or 470.
type RWRenewStyle int

// RWRenewLock is one lock of a read renewal.
type RWRenewLock struct {
	Key, Prefix string
	Holders     []string
}

// ErrScriptFails: Redisson 3.52.0's read renewal body fails on this call
// (a hold count at or above the call's key count; docs/design/recipes.md,
// "Surprises"). Nothing was renewed for that lock; the caller lets Redis
// run the client's own script, whose error the client then reads as it
// always did.
var ErrScriptFails = errors.New("locks: the client's own script fails on this call")

// RWRenew re-arms each lock of a read renewal batch as Redisson's body of
// style does, each in its own resource's turn and all at once (their
// writes share batches and WAITs). A renewal the replicas did not
// acknowledge has its old expiries (the hash's, its timeout keys', the
// side record's) restored; then the error is a NoReplicasError.
// batch is the call's keys in order (style 352 only).
func (m *Manager) RWRenew(ctx context.Context, style RWRenewStyle, locks []RWRenewLock, batch []string, lease time.Duration) ([]bool, error) {
	if err := m.AdmitWithin(ctx); err != nil {
		return nil, err
	}
	held := make([]bool, len(locks))
	errs := make([]error, len(locks))
	packedBatch := ""
	if style == 352 {
		packedBatch = packStrings(batch...)
	}
	var wg sync.WaitGroup
	for i := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held[i], errs[i] = m.renewRW(ctx, style, locks[i], packedBatch, lease)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err == ErrScriptFails {
			return held, err
		}
	}
	for _, err := range errs {
		if err != nil {
			return held, err
		}
	}
	return held, nil
}

// renewRW renews one lock of a read renewal batch.
func (m *Manager) renewRW(ctx context.Context, style RWRenewStyle, l RWRenewLock, batch string, lease time.Duration) (bool, error) {
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
	call := lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opRWRenew, Keys: recipeKeys(l.Key, side),
		Args: lockwriter.ArgsOf(strconv.Itoa(int(style)), packStrings(l.Holders...), l.Prefix, batch, lease.Milliseconds(), newest, now.UnixMilli(), m.term())}
	w := m.opts.Scripts.Start(ctx, l.Key, call, true)
	reply, err := w.Reply()
	if err != nil {
		return false, deposed(err)
	}
	if n, ok := reply.(int64); ok && n == 0 {
		return false, nil
	}
	arr, kind, err := readKindReply(reply, 1, "read-write lock renewal")
	if err != nil {
		return false, err
	}
	if kind == kindScriptFails {
		return false, ErrScriptFails
	}
	touched, ok := arr[len(arr)-1].([]any)
	if len(arr) != 5 || (!ok && arr[4] != nil) {
		return false, fmt.Errorf("locks: unexpected read-write lock renewal reply %v", reply)
	}
	acked, err := w.Acks()
	if err != nil {
		return false, err // the renewal may stand: nothing to undo
	}
	if acked < m.opts.MinReplicas {
		m.opts.Metrics.ReplicaShortfalls.Inc()
		pre := make([]string, len(touched))
		for i, v := range touched {
			switch v := v.(type) {
			case string:
				pre[i] = v
			case int64:
				pre[i] = strconv.FormatInt(v, 10)
			}
		}
		if _, uerr := m.opts.Scripts.RunAfter(ctx, w, lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opRWRenewUndo, Keys: call.Keys,
			Args: lockwriter.ArgsOf(arr[1], arr[2], arr[3], packStrings(pre...), m.term())}); uerr != nil {
			m.opts.Logger.Warn("could not undo an unacknowledged read-write lock renewal; the lease stands as Redis has it", "err", uerr)
		}
		return false, &NoReplicasError{Acked: acked, Wanted: m.opts.MinReplicas}
	}
	m.rearmedSide(l.Key, side, arr[3], now.Add(lease), evictable)
	return true, nil
}

// RWUnlock is a read-write lock's unlock or force-unlock.
type RWUnlock struct {
	Key, Holder               string
	Write, Force              bool
	Lease                     time.Duration // a write unlock re-arms it while the count stays above 0
	Channel, Publish, Message string
	Latch                     string
	LatchTTL                  int64
	// A read unlock's: its hold's timeout prefix and the lock's {name}.
	TimeoutPrefix, KeyPrefix string
}

// RWUnlock runs a read-write lock's unlock in the resource's turn, with no
// replica wait, as RecipeUnlock does: the recipe's integer reply, or null
// for its nil. The lock's release (the hash deleted) ends its side record.
func (m *Manager) RWUnlock(ctx context.Context, u RWUnlock) (n int64, null bool, err error) {
	side := m.recordKey(u.Key)
	turn := m.serial.lock(u.Key)
	defer m.serial.unlock(u.Key, turn)
	call := lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opRWUnlock, Keys: recipeKeys(u.Key, side),
		Args: lockwriter.ArgsOf(rwMode(u.Write), u.Holder, u.Lease.Milliseconds(), u.Channel, u.Latch, u.Publish, u.Message, u.LatchTTL,
			u.TimeoutPrefix, u.KeyPrefix, m.term())}
	if u.Force {
		call.Op = opRWForceUnlock
		call.Args = lockwriter.ArgsOf(rwMode(u.Write), u.Channel, u.Publish, u.Message, m.term())
	}
	reply, err := m.opts.Scripts.Start(ctx, u.Key, call, false).Reply()
	if err != nil {
		return 0, false, deposed(err)
	}
	arr, kind, err := readKindReply(reply, 1, "read-write lock unlock")
	if err != nil {
		return 0, false, err
	}
	if kind == 0 {
		return 0, true, nil
	}
	if len(arr) < 2 {
		return 0, false, fmt.Errorf("locks: unexpected read-write lock unlock reply %v", reply)
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

// rwHoldsScript: KEYS[1] a read-write lock's hash, ARGV[1] a holder field.
// 1 if the hash has that field (and it is not the mode).
const rwHoldsScript = `
if ARGV[1] == 'mode' then
  return 0
end
return redis.call('HEXISTS', KEYS[1], ARGV[1])
`

var rwHoldsSHA = resp.ScriptSHA(rwHoldsScript)

// holdsRW reports whether holder is one of the holders of the read-write
// lock whose side record rec is (HolderToken: the epoch's token is every
// holder's).
func (m *Manager) holdsRW(ctx context.Context, key, holder string, rec record) (bool, error) {
	if len(rec.ClientAddr) < len(rwAddrMark) || rec.ClientAddr[len(rec.ClientAddr)-len(rwAddrMark):] != rwAddrMark {
		return false, nil
	}
	v, err := m.opts.Scripts.Read(ctx, key, lockwriter.ScriptCall{Source: rwHoldsScript, SHA: rwHoldsSHA, Keys: []string{key}, Args: lockwriter.ArgsOf(holder)})
	if err != nil {
		return false, err
	}
	n, _ := v.(int64)
	return n == 1, nil
}
