package locks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// Value locks (setnxops.go): SET NX and the lock scripts of redis-py,
// redsync, redislock and node-redlock. A grant, fresh or under the
// holder's current token (redislock's re-obtain, an extend), is settled as
// a hash recipe's is (recipes.go): replied only once --min-replicas
// acknowledged, a fresh grant's token reserved meanwhile and confirmed
// after; on a shortfall, or a grant whose reply would leave less than the
// safety margin of its lease, the write is undone exactly from the
// pre-image the twin returned. Extends are not held to the late-reply
// rule (as renewals are not): an acknowledged extend stands. A grant with
// no lease (SET NX without PX or EX) has no late-reply rule either.

// ValueMode is what a value write may do: the modes of opValueWrite.
type ValueMode byte

const (
	// ValueGrant grants a free key (SET NX; redlock's acquire; with a
	// Prefix, redislock's obtain, which also re-obtains).
	ValueGrant ValueMode = 'g'
	// ValueExtend re-arms the holder's key.
	ValueExtend ValueMode = 'e'
	// ValueExtendOrGrant re-arms the holder's key or grants a free one
	// (redsync's touchWithSetNX).
	ValueExtendOrGrant ValueMode = 'E'
	// ValueExtendAdd adds the lease to what is left of the holder's
	// key's expiry (redis-py's extend without replace_ttl).
	ValueExtendAdd ValueMode = 'a'
)

// ValueWrite is one value-lock grant or extend.
type ValueWrite struct {
	Key, Holder string
	Mode        ValueMode
	Lease       time.Duration // 0: a grant with no lease
	Prefix      int           // redislock's token length; 0 for none
}

// noLeaseEnd is the tracked end of a grant with no lease: never swept.
const noLeaseEnd = 100 * 365 * 24 * time.Hour

// valueGrant is one run of opValueWrite.
type valueGrant struct {
	call      lockwriter.ScriptCall
	write     *lockwriter.Write
	start     time.Time
	candidate uint64
	kind      replyKind
	busy      int64
	token     uint64 // 0: no side record (an extend of a lock the proxy did not grant)
	lease     time.Duration
	pre       []any // the undo's arguments after the holder: value, PEXPIRETIME, side, its PEXPIRETIME, written
}

// RecipeValueWrite runs a value lock's grant or extend. It returns nil
// once it is acknowledged (and a fresh grant's token recorded); ErrBusy
// (with the holder's pttl) when another holds the key; ErrNotHeld when an
// extend found the key not the holder's; a NoReplicasError or ErrLate
// when it was undone; another error when the outcome is unknown or
// nothing was tried.
func (m *Manager) RecipeValueWrite(ctx context.Context, v ValueWrite, clientAddr string, received time.Time) (pttl int64, err error) {
	if err := m.AdmitWithin(ctx); err != nil {
		return 0, err
	}
	side := m.recordKey(v.Key)
	evictable, err := m.evictionGuard(side)
	if err != nil {
		return 0, err
	}
	turn := m.serial.lock(v.Key)
	defer m.serial.unlock(v.Key, turn)
	g, err := m.sendValueWrite(ctx, v, side, clientAddr)
	return m.valueAttempted(ctx, &g, err, v, side, clientAddr, received, evictable)
}

// valueAttempted finishes a value write whose script has answered g (or
// failed with err), in the key's turn: asked again once for a token
// ahead, or settled. It may wait (another round, the fsync, the WAIT, an
// undo).
func (m *Manager) valueAttempted(ctx context.Context, g *valueGrant, err error, v ValueWrite, side, clientAddr string, received time.Time, evictable bool) (pttl int64, _ error) {
	if err == nil && g.kind == kindTokenAhead {
		if err = m.judgeRecordToken(v.Key, side, int64(g.token)); err == nil {
			*g, err = m.sendValueWrite(ctx, v, side, clientAddr)
		}
	}
	if err != nil {
		if errors.Is(err, upstream.ErrOutcomeUnknown) && g.candidate != 0 {
			m.countIssued(v.Key, g.candidate)
		}
		return 0, err
	}
	switch g.kind {
	case kindBusy:
		m.hot.add(v.Key)
		return g.busy, ErrBusy
	case kindNotHeld:
		return 0, ErrNotHeld
	case kindGranted, kindRearmed:
		return 0, m.settleValueWrite(ctx, g, v, clientAddr, received, evictable)
	}
	return 0, fmt.Errorf("locks: unexpected value lock reply kind %d", g.kind)
}

func (m *Manager) sendValueWrite(ctx context.Context, v ValueWrite, side, clientAddr string) (g valueGrant, err error) {
	newest, err := m.opts.Store.Newest(v.Key)
	if err != nil {
		return g, err
	}
	if v.Mode.grants() {
		if g.candidate, err = m.opts.Store.NextToken(); err != nil {
			return g, err
		}
	}
	m.valueWriteCall(&g, v, side, clientAddr, newest)
	g.write = m.opts.Scripts.Start(ctx, v.Key, g.call, true)
	return g, twinReply(g.write, g.read)
}

// grants reports whether a write of the mode may grant a free key, and so
// offers a fresh token.
func (mode ValueMode) grants() bool { return mode == ValueGrant || mode == ValueExtendOrGrant }

// valueWriteCall makes g's script call for v, with g's candidate token
// (none: 0) and the key's newest token, sent now.
func (m *Manager) valueWriteCall(g *valueGrant, v ValueWrite, side, clientAddr string, newest uint64) {
	g.start = time.Now()
	term := m.term()
	g.call = lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opValueWrite, Keys: recipeKeys(v.Key, side)}
	args := g.call.Args.Str(v.Holder).Str(string(v.Mode)).Int(v.Lease.Milliseconds()).Uint(g.candidate).Uint(newest).Int(g.start.UnixMilli())
	addRecord(args, recordValue{token: g.candidate, term: term, at: g.start.UnixMilli(), addr: clientAddr + recipeAddrMark, owner: v.Holder}).
		Uint(term).Int(int64(v.Prefix)).Int(m.markLife())
}

// read decodes opValueWrite's reply into g.
func (g *valueGrant) read(reply any) error {
	arr, kind, err := readKindReply(reply, 1, "value lock")
	if err != nil {
		return err
	}
	g.kind = kind
	switch g.kind {
	case kindNotHeld:
		return nil
	case kindBusy, kindTokenAhead:
		if len(arr) != 2 {
			return fmt.Errorf("locks: unexpected value lock reply %v", reply)
		}
		v, err := toInt(arr[1])
		g.busy, g.token = v, uint64(v)
		return err
	}
	if len(arr) != 8 {
		return fmt.Errorf("locks: unexpected value lock reply %v", reply)
	}
	if tok, _ := arr[1].(string); tok != "" {
		if g.token, err = strconv.ParseUint(tok, 10, 64); err != nil {
			return err
		}
	} else if n, ok := arr[1].(int64); ok {
		g.token = uint64(n)
	}
	ms, err := toInt(arr[7])
	if err != nil {
		return err
	}
	g.lease = time.Duration(ms) * time.Millisecond
	g.pre = arr[2:7]
	return nil
}

// settleValueWrite finishes a value write whose script has answered, in
// the key's turn: a fresh grant's token reserved while the replicas
// acknowledge, then judged (valueVerdict) and settled.
func (m *Manager) settleValueWrite(ctx context.Context, g *valueGrant, v ValueWrite, clientAddr string, received time.Time, evictable bool) error {
	var reserveErr error
	if g.kind == kindGranted {
		reserveErr = m.opts.Store.Reserve(v.Key, g.token)
	}
	return m.settleValueVerdict(ctx, g, v, m.valueVerdict(g, v, received, reserveErr), reserveErr == nil, clientAddr, evictable)
}

// valueVerdict judges a value write once its token's reservation (a fresh
// grant's: reserveErr) and its WAIT are in. Only a grant with a lease can
// be late (a re-obtain is a grant too); an extend has no late-reply rule
// here.
func (m *Manager) valueVerdict(g *valueGrant, v ValueWrite, received time.Time, reserveErr error) error {
	var replyBy time.Time
	if grant := g.kind == kindGranted || v.Mode == ValueGrant; grant && v.Lease > 0 {
		replyBy = m.replyBy(received, v.Lease)
	}
	return m.grantVerdict(g.write, g.start, reserveErr, replyBy)
}

// settleValueVerdict confirms a value write the verdict let stand and
// tracks its lease, or undoes it (reserved: a fresh grant's token is
// reserved). It waits only to undo.
func (m *Manager) settleValueVerdict(ctx context.Context, g *valueGrant, v ValueWrite, verdict error, reserved bool, clientAddr string, evictable bool) error {
	fresh := g.kind == kindGranted
	err := verdict
	if err == nil && fresh {
		err = m.opts.Store.Confirm(v.Key, g.token)
	}
	if err != nil {
		return m.abandonValueWrite(ctx, g, v, fresh && reserved, err)
	}
	end := g.start.Add(g.lease)
	if g.lease <= 0 {
		end = g.start.Add(noLeaseEnd)
	}
	switch {
	case fresh:
		if old := m.leases.granted(v.Key, g.token, g.start, end, clientAddr); old != nil {
			m.logExpired(old)
		}
	case g.token != 0:
		m.leases.rearmed(v.Key, g.token, end)
	}
	if evictable && g.token != 0 {
		m.evictableGranted(g.call.Keys[1], v.Key, g.token)
	}
	return nil
}

// abandonValueWrite undoes a value write that will not be replied (unless
// its outcome is already unknown) and settles a fresh grant's reserved
// token as abandonHashGrant does.
func (m *Manager) abandonValueWrite(ctx context.Context, g *valueGrant, v ValueWrite, reserved bool, err error) error {
	undone := false
	if !errors.Is(err, upstream.ErrOutcomeUnknown) {
		args := lockwriter.ArgsOf(append(append([]any{v.Holder}, g.pre...), m.undoMark(v.Key, g.kind == kindGranted, g.token)...)...)
		_, uerr := m.opts.Scripts.RunAfter(ctx, g.write, lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opValueUndo, Keys: g.call.Keys, Args: args})
		if uerr != nil {
			m.opts.Logger.Warn("could not undo an unacknowledged value lock write; it stands until its lease ends", "key", v.Key, "err", uerr)
		} else {
			undone = true
			if g.kind == kindGranted {
				m.waiting.wakeHead(v.Key)
			}
		}
	}
	if reserved {
		if undone {
			m.opts.Store.Cancel(v.Key, g.token)
		} else if cerr := m.opts.Store.Confirm(v.Key, g.token); cerr != nil {
			m.opts.Logger.Warn("could not record a token whose grant may stand", "err", cerr)
		}
	}
	var nr *NoReplicasError
	if !undone && (err == ErrLate || errors.As(err, &nr)) {
		return fmt.Errorf("%w: a refused grant could not be undone (%v)", upstream.ErrOutcomeUnknown, err)
	}
	return err
}

// ValueReleased is what a value lock's release found.
type ValueReleased int

const (
	ValueAbsent  ValueReleased = iota // no key
	ValueOthers                       // the key holds another value
	ValueDeleted                      // deleted: it was the holder's
)

// RecipeValueRelease runs a value lock's release in the key's turn, with
// no replica wait (a lost release only delays the next grant until the
// lease ends), and ends the side record and the lease the proxy tracks.
func (m *Manager) RecipeValueRelease(ctx context.Context, key, holder string) (ValueReleased, error) {
	side := m.recordKey(key)
	turn := m.serial.lock(key)
	defer m.serial.unlock(key, turn)
	return m.valueReleased(key, m.opts.Scripts.Start(ctx, key, m.valueReleaseCall(key, side, holder), false))
}

// valueReleaseCall is a value lock's release script call.
func (m *Manager) valueReleaseCall(key, side, holder string) lockwriter.ScriptCall {
	call := lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opValueRelease, Keys: recipeKeys(key, side)}
	call.Args.Str(holder).Uint(m.term())
	return call
}

// valueReleased is a value lock release's outcome from its script's write
// (its reply: it waits for it unless it is in), in the key's turn.
func (m *Manager) valueReleased(key string, write *lockwriter.Write) (ValueReleased, error) {
	reply, err := write.Reply()
	if err != nil {
		return 0, deposed(err)
	}
	arr, kind, err := readKindReply(reply, 1, "value lock release")
	if err != nil || kind < 0 || kind > 2 {
		return 0, fmt.Errorf("locks: unexpected value lock release reply %v", reply)
	}
	if kind == 2 {
		if len(arr) == 2 {
			if s, ok := arr[1].(string); ok {
				if rec, ok := parseReleased(s); ok {
					m.released(key, rec)
				}
			}
		}
		m.waiting.wakeHead(key)
	}
	return ValueReleased(kind), nil
}

// RecipeValueMulti runs redlock's acquire (ValueGrant) or extend
// (ValueExtend) of several keys: all of them or none, each key a resource
// of its own with its own side record and token (one candidate token
// serves them all: it is above every token issued). keys must be
// distinct. It holds every key's turn, taken in sorted order. Its results
// are RecipeValueWrite's; a shortfall or a late grant undoes every key.
func (m *Manager) RecipeValueMulti(ctx context.Context, keys []string, holder string, mode ValueMode, lease time.Duration, clientAddr string, received time.Time) error {
	if err := m.AdmitWithin(ctx); err != nil {
		return err
	}
	sides := make([]string, len(keys))
	evictable := false
	for i, k := range keys {
		sides[i] = m.recordKey(k)
		risky, err := m.evictionGuard(sides[i])
		if err != nil {
			return err
		}
		evictable = evictable || risky
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for _, k := range sorted {
		turn := m.serial.lock(k)
		defer m.serial.unlock(k, turn)
	}
	g, err := m.sendValueMulti(ctx, keys, sides, holder, mode, lease, clientAddr)
	if err == nil && g.kind == kindTokenAhead {
		// Which of the keys' records carries it is not said: the error
		// names the first.
		if err = m.judgeRecordToken(keys[0], sides[0], int64(g.token)); err == nil {
			g, err = m.sendValueMulti(ctx, keys, sides, holder, mode, lease, clientAddr)
		}
	}
	if err != nil {
		if errors.Is(err, upstream.ErrOutcomeUnknown) && g.candidate != 0 {
			for _, k := range keys {
				m.countIssued(k, g.candidate)
			}
		}
		return err
	}
	switch g.kind {
	case kindBusy:
		m.hot.add(keys[0])
		return ErrBusy
	case kindNotHeld:
		return ErrNotHeld
	case kindGranted, kindRearmed:
		return m.settleValueMulti(ctx, &g, keys, sides, holder, lease, clientAddr, received, evictable)
	}
	return fmt.Errorf("locks: unexpected value lock reply kind %d", g.kind)
}

// multiGrant is one run of opValueMulti.
type multiGrant struct {
	call      lockwriter.ScriptCall
	write     *lockwriter.Write
	start     time.Time
	candidate uint64
	kind      replyKind
	token     uint64 // kindTokenAhead
	lease     time.Duration
	tokens    []uint64 // per key: its grant's or current token, 0 for none
	pre       [][]any  // per key: opValueUndo's arguments after the holder, less the term
}

func (m *Manager) sendValueMulti(ctx context.Context, keys, sides []string, holder string, mode ValueMode, lease time.Duration, clientAddr string) (g multiGrant, err error) {
	items := make([]string, 0, 3*len(keys))
	for i, k := range keys {
		newest, err := m.opts.Store.Newest(k)
		if err != nil {
			return g, err
		}
		items = append(items, k, sides[i], markKey(sides[i]), strconv.FormatUint(newest, 10))
	}
	if mode == ValueGrant {
		if g.candidate, err = m.opts.Store.NextToken(); err != nil {
			return g, err
		}
	}
	g.start = time.Now()
	term := m.term()
	g.call = lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opValueMulti, Keys: recipeKeys(keys[0], sides[0]),
		Args: lockwriter.ArgsOf(holder, string(mode), lease.Milliseconds(), g.candidate, g.start.UnixMilli(),
			recordValue{token: g.candidate, term: term, at: g.start.UnixMilli(), addr: clientAddr + recipeAddrMark, owner: holder},
			term, m.markLife(), packStrings(items...))}
	g.write = m.opts.Scripts.Start(ctx, keys[0], g.call, true)
	reply, err := g.write.Reply()
	if err != nil {
		return g, deposed(err)
	}
	return g, g.read(reply, len(keys))
}

// read decodes opValueMulti's reply for n keys into g.
func (g *multiGrant) read(reply any, n int) error {
	arr, kind, err := readKindReply(reply, 1, "value lock")
	if err != nil {
		return err
	}
	g.kind = kind
	switch g.kind {
	case kindNotHeld, kindBusy:
		return nil
	case kindTokenAhead:
		if len(arr) != 2 {
			return fmt.Errorf("locks: unexpected value lock reply %v", reply)
		}
		v, err := toInt(arr[1])
		g.token = uint64(v)
		return err
	}
	if len(arr) != 3+6*n {
		return fmt.Errorf("locks: unexpected value lock reply %v", reply)
	}
	ms, err := toInt(arr[2])
	if err != nil {
		return err
	}
	g.lease = time.Duration(ms) * time.Millisecond
	g.tokens, g.pre = make([]uint64, n), make([][]any, n)
	for i := range n {
		e := arr[3+6*i : 3+6*i+6]
		g.pre[i] = e[:5]
		if tok, _ := e[5].(string); tok != "" {
			if g.tokens[i], err = strconv.ParseUint(tok, 10, 64); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *Manager) settleValueMulti(ctx context.Context, g *multiGrant, keys, sides []string, holder string, lease time.Duration, clientAddr string, received time.Time, evictable bool) error {
	fresh := g.kind == kindGranted
	var reserveErr error
	reserved := 0
	if fresh {
		for _, k := range keys {
			if reserveErr = m.opts.Store.Reserve(k, g.candidate); reserveErr != nil {
				break
			}
			reserved++
		}
	}
	var replyBy time.Time // none for an extend
	if fresh {
		replyBy = m.replyBy(received, lease)
	}
	err := m.grantVerdict(g.write, g.start, reserveErr, replyBy)
	if err == nil && fresh {
		for _, k := range keys {
			if err = m.opts.Store.Confirm(k, g.candidate); err != nil {
				break
			}
		}
	}
	if err != nil {
		return m.abandonValueMulti(ctx, g, keys, sides, holder, reserved, err)
	}
	for i, k := range keys {
		switch {
		case fresh:
			if old := m.leases.granted(k, g.candidate, g.start, g.start.Add(g.lease), clientAddr); old != nil {
				m.logExpired(old)
			}
		case g.tokens[i] != 0:
			m.leases.rearmed(k, g.tokens[i], g.start.Add(g.lease))
		}
		if evictable && g.tokens[i] != 0 {
			m.evictableGranted(sides[i], k, g.tokens[i])
		}
	}
	return nil
}

// abandonValueMulti undoes every key of a multi-key write that will not be
// replied (unless its outcome is unknown), and settles the reservations
// of the first reserved keys: cancelled where the undo ran, else issued.
func (m *Manager) abandonValueMulti(ctx context.Context, g *multiGrant, keys, sides []string, holder string, reserved int, err error) error {
	undone := make([]bool, len(keys))
	all := true
	if !errors.Is(err, upstream.ErrOutcomeUnknown) {
		for i, k := range keys {
			args := lockwriter.ArgsOf(append(append([]any{holder}, g.pre[i]...), m.undoMark(k, g.kind == kindGranted, g.candidate)...)...)
			_, uerr := m.opts.Scripts.RunAfter(ctx, g.write, lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opValueUndo, Keys: recipeKeys(k, sides[i]), Args: args})
			if uerr != nil {
				m.opts.Logger.Warn("could not undo an unacknowledged value lock write; it stands until its lease ends", "key", k, "err", uerr)
				all = false
				continue
			}
			undone[i] = true
			if g.kind == kindGranted {
				m.waiting.wakeHead(k)
			}
		}
	} else {
		all = false
	}
	for i := range reserved {
		if undone[i] {
			m.opts.Store.Cancel(keys[i], g.candidate)
		} else if cerr := m.opts.Store.Confirm(keys[i], g.candidate); cerr != nil {
			m.opts.Logger.Warn("could not record a token whose grant may stand", "err", cerr)
		}
	}
	var nr *NoReplicasError
	if !all && (err == ErrLate || errors.As(err, &nr)) {
		return fmt.Errorf("%w: a refused grant could not be undone (%v)", upstream.ErrOutcomeUnknown, err)
	}
	return err
}

// undoMark is opValueUndo's last arguments: the term, the new token the
// write granted ("" if it granted none: fresh is false), the resource's
// newest token issued besides it ("" if unknown: the fence mark then
// stays up, the safe side) and the mark's life.
func (m *Manager) undoMark(key string, fresh bool, token uint64) []any {
	var tok, newest any = "", ""
	if fresh {
		tok = strconv.FormatUint(token, 10)
		if n, err := m.opts.Store.Newest(key); err == nil && n < token {
			newest = n
		}
	}
	return []any{m.term(), tok, newest, m.markLife()}
}
