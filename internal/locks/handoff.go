package locks

import (
	"context"
	"errors"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// Direct handoff: how a contended lock passes from one holder to the next.
//
// Acquires that find the resource held wait in line (serial.go). While
// anyone waits, the line keeps up to reserveAheadDepth tokens drawn and
// reserved in the fence store ahead of the grants that will use them
// (refill, on a goroutine of its own), so that the fsync a grant needs is
// off the path from a release to the next grant. A release that finds the
// head asleep in its wait, and a token reserved, claims both and, in the
// same script (opHandoff), deletes its own record and writes the head's:
// one script and one WAIT per handoff, where there were a release round
// trip, a wake-up of the head, and the head's own script, WAIT and fsync. The release is answered as soon as the script is; the resource's
// turn passes to the head, which settles its grant as any grant is
// settled (replicas, lease left, confirm: settle) and only then lets the
// next operation on the resource in.
//
// The rules that keep it to the invariants of the package doc:
//
//   - The line's tokens are used in the order drawn, by grants to its
//     waiters only, and each only if it is above the resource's newest
//     when it is used (checked in the turn, where the newest is exact), so
//     grant order is still token order. One drawn before a grant of a
//     newer token (say, by an acquire that found no line when it began)
//     is cancelled, never issued. (Tokens drawn by each waiter for itself
//     were tried first: once one waiter had to draw afresh, every token
//     behind it was older than the newest, and the handoffs fell back to
//     the release-and-wake path for good: 1,481 of 2,711 releases found
//     the head's token stale at 50 contenders.)
//   - A claimed waiter cannot leave the line until the release says how
//     its handoff went (waitQueue.stop). If its wait ended meanwhile, it
//     takes the grant if its client is still there (as an attempt begun
//     before the deadline is replied after it); if its client went away,
//     or its node lost leadership (EndWaiters), it undoes the grant as a
//     refused grant is undone (abandon): compare-and-delete, and its
//     reservation cancelled only once the master holds no record of it.
//   - A handoff whose script's outcome is lost counts its token as
//     issued, as any grant whose outcome is unknown, and both the release
//     and the head are answered that the outcome is unknown.
//   - The price: a line's reserved tokens count as issued if the process
//     crashes while it waits, so after such a crash the holder of the
//     moment finds its token stale (its renewal answers null) and
//     acquires again. A crash without waiters changes nothing.
//   - In a tier no line reserves ahead: a reservation there is a Raft
//     commit, and every change of leader counts all pending reservations
//     as issued (the new leader cannot know which were replied), so
//     tokens kept ahead would end the holder's lease at each election.
//     Only a store that reserves many tokens with one sync (reserverAll:
//     the fence store) gets them; without, a release wakes the head to
//     try, as before.

// A line keeps at most reserveAheadMax tokens reserved ahead (and no more
// than it has waiters), and refills once fewer than reserveAheadLow are
// left: each refill reserves several with one fsync, which runs while
// the ones left are being granted. (One token per refill cost a fsync per
// handoff, 27% of the proxy's CPU on a hot lock at 50 contenders.) How
// many does not change what a crash costs (above): any token reserved
// ahead makes the holder of the moment stale.
const (
	reserveAheadMax = 8
	reserveAheadLow = 3
)

// handoff is what a release hands the head of the line it claimed.
type handoff struct {
	a    attempt      // the grant: its call, write and token (a.candidate, reserved ahead)
	turn *serialEntry // the resource's turn, the waiter's to end once it settled the grant
	// err: the handoff's outcome is unknown (its script's reply was
	// lost); its token counts as issued, and there is no turn.
	err error
}

// waitInLine is Acquire after a busy first attempt: it waits in line for
// resource, up to wait, and returns the token it is granted (by a release
// that hands it the lock, or by its own attempt when the holder's lease
// ran out or a release freed it) or ErrBusy.
func (m *Manager) waitInLine(ctx context.Context, resource, owner, clientAddr string, ttl, wait, leaseLeft time.Duration) (g Grant, err error) {
	start := time.Now()
	deadline := start.Add(wait)
	w := m.waiting.join(resource, owner, clientAddr, ttl, m.opts.MaxWaiters)
	if w == nil {
		return Grant{}, &QueueFullError{Max: m.opts.MaxWaiters}
	}
	m.opts.Metrics.LockWaiters.Inc()
	m.waitersNow.Add(1)
	m.refill(resource)
	var granted time.Duration
	defer func() {
		m.cancelAhead(resource, m.waiting.leave(resource, w, granted))
		m.opts.Metrics.LockWaiters.Dec()
		m.waitersNow.Add(-1)
		if waited := time.Since(start); m.opts.SlowWait >= 0 && waited > m.opts.SlowWait {
			m.slowEntry(SlowEntry{Time: time.Now(), Duration: waited, Kind: SlowWait,
				Resource: resource, Token: g.Token, ClientAddr: clientAddr})
		}
	}()
	// leave ends the wait with err, unless a release claimed w first:
	// then it settles that release's handoff.
	leave := func(err error) (Grant, error) {
		if h := m.waiting.stop(w); h != nil {
			g, err = m.settleHandoff(ctx, resource, w, h, err)
			if err == nil {
				granted = ttl
			}
			return g, err
		}
		return Grant{}, err
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	head := true // it just tried: the lease it saw is leaseLeft
	for {
		// Sleep until woken (a release here, or promotion to the head of
		// the line), until the holder's lease runs out (the head only), or
		// until the wait is over.
		sleep := time.Until(deadline)
		if sleep <= 0 {
			return leave(ErrBusy)
		}
		if head {
			sleep = min(sleep, leaseLeft+time.Millisecond)
		}
		timer.Reset(sleep)
		woken := false
		m.waiting.sleep(w)
		select {
		case <-w.wake:
			woken = true
		case <-timer.C:
		case <-ctx.Done():
			return leave(ctx.Err())
		}
		n := m.waiting.news(resource, w)
		if n.handed != nil {
			g, err = m.settleHandoff(ctx, resource, w, n.handed, n.ended)
			if err == nil {
				granted = ttl
			}
			return g, err
		}
		if n.ended != nil {
			return leave(n.ended)
		}
		if head = n.pos == 0; !head {
			continue
		}
		if woken && !n.freed && n.leaseHint > 0 {
			// Promoted right after a grant: that holder's lease has only
			// begun. Wait for its release or its end.
			leaseLeft = n.leaseHint
			continue
		}
		ahead, refilling := m.waiting.takeToken(resource)
		if refilling {
			// Woken (or a release claims it) once the line's refill is
			// in: no fsync of its own, and the line's tokens stay in
			// order.
			head = false
			continue
		}
		g, leaseLeft, err = m.tryAcquire(ctx, resource, owner, clientAddr, ttl, false, time.Time{}, &ahead)
		if ahead != 0 && !m.waiting.giveBack(resource, ahead) {
			m.opts.Store.Cancel(resource, ahead) // not used, and the line is gone
		}
		m.refill(resource)
		if err != ErrBusy {
			if err == nil {
				granted = ttl
			}
			return g, err
		}
	}
}

// refill starts reserving tokens ahead for resource's line, if it has
// fewer than it should and no refill is under way. It runs on a goroutine
// of its own (no turn: the tokens are the line's alone until a grant uses
// one, in the turn), all with one fsync, in the order drawn. On any
// failure the line does without: its grants reserve as any grant does.
func (m *Manager) refill(resource string) {
	if _, ok := m.opts.Store.(reserverAll); !ok {
		return // see "in a tier" above
	}
	l, need := m.waiting.refill(resource, reserveAheadLow, reserveAheadMax)
	if need == 0 {
		return
	}
	go func() {
		tokens := make([]uint64, 0, need)
		err := m.admit()
		for range need {
			if err != nil {
				break
			}
			var t uint64
			if t, err = m.opts.Store.NextToken(); err == nil {
				tokens = append(tokens, t)
			}
		}
		if err == nil {
			err = reserveAll(m.opts.Store, resource, tokens)
		}
		if err != nil {
			// Some may be on disk: cancelled, they count as issued only
			// after a crash, the safe side.
			m.cancelAhead(resource, tokens)
			tokens = nil
		}
		m.cancelAhead(resource, m.waiting.refilled(resource, l, tokens, err != nil))
	}()
}

// cancelAhead cancels tokens reserved ahead that no grant will use.
func (m *Manager) cancelAhead(resource string, tokens []uint64) {
	for _, t := range tokens {
		m.opts.Store.Cancel(resource, t)
	}
}

// settleHandoff finishes the grant a release handed w (h), in the turn
// the release passed on. ended, if set, is why w's wait ended meanwhile:
// its client went away or its node lost leadership (the grant is then
// undone), or its time ran out (the grant stands: it was made in time).
func (m *Manager) settleHandoff(ctx context.Context, resource string, w *waiter, h *handoff, ended error) (Grant, error) {
	if h.err != nil {
		return Grant{}, h.err
	}
	defer m.serial.unlock(resource, h.turn)
	a := &h.a
	token := a.candidate
	if ended == nil || ended == ErrBusy {
		if ctxErr := ctx.Err(); ctxErr != nil {
			ended = ctxErr
		}
	}
	if ended != nil && ended != ErrBusy {
		// Nobody is there to take it: undo it, as a refused grant.
		return Grant{}, m.abandon(context.WithoutCancel(ctx), a, resource, w.owner, token, true, ended)
	}
	evictable, _ := m.evictionGuard(a.call.Keys[0])
	return m.settle(ctx, a, resource, w.owner, w.addr, w.ttl, a.start, token, evictable)
}

// Release frees resource if owner holds it and reports whether it did. If
// acquires wait in line, the head is granted the resource in the same
// script when it can be (a handoff, above); else it is woken to try.
func (m *Manager) Release(ctx context.Context, resource, owner string) (bool, error) {
	turn := m.serial.lock(resource)
	keys := m.keys(resource)
	key := keys[0]
	w, token, newest, _ := m.claimHead(resource, key, false)
	now := time.Now()
	call := m.releaseCall(keys, owner, w, token, now)
	// A release alone needs no replica acknowledgement: if a failover
	// loses it, the lease merely runs out. A handoff's grant does.
	write := m.opts.Scripts.Start(ctx, key, call, w != nil)
	return m.releaseReplied(resource, turn, w, token, newest, call, now, write)
}

// releaseCall is a release's script call: opRelease, or with a head w of
// the line claimed (claimHead), opHandoff, which grants it token.
func (m *Manager) releaseCall(keys []string, owner string, w *waiter, token uint64, now time.Time) lockwriter.ScriptCall {
	term := m.term() // one read: the head's record's term is the one checked
	call := lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opRelease, Keys: keys}
	call.Args.Str(owner).Int(m.opts.LockDelay.Milliseconds()).Uint(term)
	if w != nil {
		call.Op = opHandoff
		call.Args.Int(w.ttl.Milliseconds()).Uint(token)
		addRecord(&call.Args, recordValue{token: token, term: term, at: now.UnixMilli(), addr: w.addr, owner: w.owner}).Int(m.markLife())
	}
	return call
}

// releaseReplied finishes Release once its script has answered (write),
// in the resource's turn, which it ends or hands to the head w. Without a
// head it never waits.
func (m *Manager) releaseReplied(resource string, turn *serialEntry, w *waiter, token, newest uint64, call lockwriter.ScriptCall, now time.Time, write *lockwriter.Write) (bool, error) {
	if w == nil {
		if body, ok := bulkReply(write); ok {
			// The usual reply, the released record, read from its
			// bytes (see bulkReply); the switch below does the same.
			if rec, ok := parseReleased(string(body)); ok {
				m.waiting.wakeHead(resource)
				m.serial.unlock(resource, turn)
				m.released(resource, rec)
				return true, nil
			}
		}
	}
	reply, err := write.Reply()
	if err != nil {
		if w != nil {
			if errors.Is(err, upstream.ErrOutcomeUnknown) {
				// The head's grant may stand: its token counts as issued.
				m.countIssued(resource, token)
				m.waiting.hand(w, &handoff{err: err})
			} else {
				m.waiting.unclaim(resource, w, false, token) // not run
			}
		}
		m.serial.unlock(resource, turn)
		return false, deposed(err)
	}
	rel, grant := reply, any(nil)
	if w != nil {
		if arr, ok := reply.([]any); ok && len(arr) == 2 {
			rel, grant = arr[0], arr[1]
		}
	}
	var rec releasedRecord
	released := false
	if v, ok := rel.(string); ok {
		rec, released = parseReleased(v)
	}
	if !released {
		if w != nil {
			m.waiting.unclaim(resource, w, false, token) // nothing written
		}
		m.serial.unlock(resource, turn)
		if _, err := toInt(rel); err != nil {
			return false, err
		}
		return false, nil // 0: not owner's
	}
	var kind, value int64
	if w != nil {
		kind, value, err = pair(grant)
	}
	switch {
	case w == nil:
		m.waiting.wakeHead(resource)
		m.serial.unlock(resource, turn)
	case err == nil && replyKind(kind) == kindGranted && uint64(value) == token:
		// The turn goes with the grant: the head settles it.
		m.waiting.hand(w, &handoff{turn: turn, a: attempt{call: call, newest: newest, candidate: token,
			start: now, write: write, kind: kindGranted, value: value, reserved: true}})
		m.refill(resource)
	default:
		// Released, not granted (the released record's token was at or
		// above the head's: kindTokenAhead). The head tries itself.
		m.opts.Store.Cancel(resource, token)
		m.waiting.unclaim(resource, w, true, 0)
		m.serial.unlock(resource, turn)
	}
	m.released(resource, rec)
	return true, nil
}

// claimHead claims the head of resource's line for a handoff (in the
// resource's turn), with the line's next token reserved ahead, if the head
// can be granted: it sleeps in its wait, a token above the resource's
// newest (returned) is there, and this node may grant. w is nil if not.
// With now (a caller that must not wait), ok is false, and nothing is
// claimed, when the resource's newest token would be read from disk.
func (m *Manager) claimHead(resource, key string, now bool) (w *waiter, token, newest uint64, ok bool) {
	if m.waiting.count(resource) == 0 || m.admit() != nil {
		return nil, 0, 0, true
	}
	if _, err := m.evictionGuard(key); err != nil {
		return nil, 0, 0, true // the head's own attempt gets the error
	}
	newest, known, err := m.opts.Store.NewestCached(resource)
	if err == nil && !known {
		if now {
			return nil, 0, 0, false
		}
		newest, err = m.opts.Store.Newest(resource)
	}
	if err != nil {
		return nil, 0, 0, true
	}
	m.cancelAhead(resource, m.waiting.dropStale(resource, newest))
	if w, token = m.waiting.claim(resource); w == nil {
		m.refill(resource)
		return nil, 0, 0, true
	}
	return w, token, newest, true
}

// released records a release's end of a lease: rec is what opRelease's
// reply says of the released record.
func (m *Manager) released(resource string, rec releasedRecord) {
	now := time.Now()
	m.leases.released(resource, rec.token)
	// acquired is 0 if an older record lacks it
	if held := now.Sub(time.UnixMilli(rec.acquired)); rec.acquired > 0 && m.opts.SlowHeld >= 0 && held > m.opts.SlowHeld {
		m.slowEntry(SlowEntry{Time: now, Duration: held, Kind: SlowHeld, Resource: resource, Token: rec.token, ClientAddr: rec.addr})
	}
}
