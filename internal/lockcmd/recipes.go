package lockcmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/recipes"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Clients' own lock recipes: EVAL and EVALSHA of a script that
// internal/recipes recognises run as the lock manager's twin of it
// (Manager.RecipeAcquire and the others), and are answered in the recipe's
// own reply shape; every other script is forwarded as it came. A refused
// grant is answered with what the client already handles as "held, try
// again in n ms", a refused renewal with an error its watchdog retries
// (docs/lock-family.md, "Clients' own lock recipes").
//
// With fenceproxy's client authentication on, a recipe runs as its twin
// for any user the ACL allows the command and the script's keys (checked
// before, as for any command: Redis's own NOPERM otherwise). Its holder is
// the client library's (the hash field or the key's value), not bound to
// the user as the lock family's owners are; so a call whose holder has a
// NUL byte, which could name a user-bound family owner ("user\x00owner"),
// is forwarded as it came (boundHolder).
//
// In a tier the leader runs the twins, with the tier's tokens and terms;
// a follower relays a recognised call (a known script, a SET on a
// --lock-keys key) to the leader as it relays the lock family's commands,
// and answers the leader's reply (relayRecipe).
//
// In front of a
// Redis Cluster a twin's keys must share one slot (sameSlot); a call
// that names a lock whose slot is not its owner record's (a name with a
// hash tag of its own, such as {user}:lock) is forwarded as today, and
// goes through the cluster's split rules.

// boundHolder reports whether, with client authentication on, one of
// holders could be a lock-family owner bound to a user (lockOwner's
// "user\x00owner"): such a call is not run as a twin, whose holder could
// then take or renew another user's lock.
func (fam *Family) boundHolder(holders ...string) bool {
	if !fam.opts.Auth {
		return false
	}
	for _, o := range holders {
		if strings.IndexByte(o, 0) >= 0 {
			return true
		}
	}
	return false
}

// boundCall is boundHolder of every holder a recognised Redisson call
// names; with client authentication off it lists none (a slice a call).
func (fam *Family) boundCall(call recipes.Call) bool {
	if !fam.opts.Auth {
		return false
	}
	hs := []string{call.Holder}
	for _, l := range call.Locks {
		hs = append(hs, l.Holder)
	}
	if call.RW != nil {
		hs = append(hs, call.RW.WriteHolder)
		for _, l := range call.RW.Locks {
			hs = append(hs, l.Holders...)
		}
	}
	return fam.boundHolder(hs...)
}

// relayingRecipe reports whether a recognised recipe call on c is to be
// relayed to the tier's leader (relaying's rule for the lock family).
func (fam *Family) relayingRecipe(c Conn) bool {
	return fam.opts.Tier != nil && c.State().Peer == nil && !fam.opts.Tier.Leads()
}

// relayRecipe relays a recognised recipe call (args, on lock key) to the
// tier's leader, which runs its twin, and answers the leader's reply, in
// the order of the connection's other lock requests for the key. The
// leader counts the lease from when this node read the request
// (TIER.RELAY's elapsed time). For a grant (g not nil), this node judges
// the leader's reply again when it arrives, as a single node judges its
// own (locks.ErrLate): a grant that no longer leaves the safety margin of
// its lease is answered refused, the recipe's "not acquired" (it is not
// undone on the leader: it runs out with its lease; a retry by the same
// holder is a re-entry, or for a value lock refused until then). A grant
// that could not be relayed (no leader in reach: nothing was done) is
// answered refused too, as a single node that may not grant right now
// answers; any other call gets the relay's error.
func (fam *Family) relayRecipe(c Conn, key string, args [][]byte, g *relayedGrant, p *resp.Reply) {
	own := cloneArgs(args)
	user := fam.relayUser(c)
	resp3, received := c.RESP3(), receivedAt(c)
	fam.runLock(c, key, p, 0, func(ctx context.Context) ([]byte, error) {
		reply, err := fam.opts.Tier.Relay(ctx, user, resp3, 0, received, own)
		var unknown interface{ OutcomeUnknown() bool }
		switch {
		case errors.As(err, &unknown) && unknown.OutcomeUnknown():
			return nil, resp.Error{Code: "ERR", Msg: "fenceproxy: lost contact with the tier's leader while relaying the lock request; the lock may or may not be granted, renewed or released: it expires with its lease"}
		case err != nil && g != nil:
			return g.refused, nil
		case err == nil && g != nil && g.lease > 0 && fam.opts.Manager != nil && g.isGrant(reply) &&
			time.Now().After(fam.opts.Manager.ReplyBy(received, g.lease)):
			fam.opts.Metrics.Acquires.WithLabelValues("late").Inc()
			return g.refused, nil
		}
		return reply, err
	})
}

// relayedGrant is what a follower needs to judge a relayed recipe grant:
// its lease (0: none, never late), how to tell the leader's "granted"
// reply, and the recipe's "not acquired".
type relayedGrant struct {
	lease   time.Duration
	isGrant func(reply []byte) bool
	refused []byte
}

// relayedGrantOf is a recognised script's relayedGrant when it is a
// grant, nil otherwise; args run r.
func (fam *Family) relayedGrantOf(c Conn, r *recipes.Recipe, args [][]byte) *relayedGrant {
	if call, ok := r.Match(args); ok && (call.Recipe.Kind == recipes.Acquire || call.Recipe.Kind == recipes.FairAcquire) {
		replies := grantReplies(c, call.Recipe)
		granted := replies.granted(0) // nil; [-1, token] for a TokenReply
		if call.Recipe.TokenReply {
			granted = granted[:len(granted)-len(":0\r\n")] // "*2\r\n:-1\r\n", then the token
		}
		return &relayedGrant{lease: call.Lease, refused: replies.held(refusalReply(call, fam.recipeRetry(call.Lease))), // fair.go
			isGrant: func(r []byte) bool {
				return bytes.HasPrefix(r, granted) && (call.Recipe.TokenReply || len(r) == len(granted))
			}}
	}
	if call, ok := r.MatchValue(args); ok && call.Kind == recipes.ValueAcquire {
		yes, no := valueReplies(c, call.Shape)
		if call.Shape == recipes.ShapeCount {
			yes = redcon.AppendInt(nil, int64(max(len(call.Keys), 1)))
		}
		return &relayedGrant{lease: call.Lease, refused: no, isGrant: func(r []byte) bool { return bytes.Equal(r, yes) }}
	}
	return nil
}

// alignedWithRecord reports whether lock and the others a twin touches
// ("" skipped) are all in the slot of lock's owner record.
func (fam *Family) alignedWithRecord(lock string, others ...string) bool {
	slot := keys.SlotOf([]byte(fam.opts.KeyPrefix + "{" + lock + "}"))
	if keys.SlotOf([]byte(lock)) != slot {
		return false
	}
	for _, k := range others {
		if k != "" && keys.SlotOf([]byte(k)) != slot {
			return false
		}
	}
	return true
}

// sameSlot reports whether every key a twin of call touches is in its
// lock's owner record's slot (always true in front of one master): the
// lock key, the unlock's latch, and a sharded unlock message's channel.
func (fam *Family) sameSlot(call recipes.Call) bool {
	if !fam.opts.Backend.RoutesByKey() {
		return true
	}
	aligned := fam.alignedWithRecord
	if call.Recipe.Kind == recipes.RenewBatch {
		for _, l := range call.Locks {
			if !aligned(l.Key) {
				return false
			}
		}
		return true
	}
	channel := ""
	if call.Publish == "spublish" {
		channel = call.Channel
	}
	return aligned(call.Key, call.Latch, channel, call.TokenKey)
}

// EvalOnLoop: an unknown script is forwarded, and the serve loop may do
// that; a recognised one is started there too, as callbacks or on a lock
// worker (RecipesOnLoop).
func (fam *Family) EvalOnLoop(args [][]byte) bool {
	// RecipesOnLoop first: it is nearly always true, and Lookup (a SHA-1
	// of an EVAL's body) is then made once, by Eval.
	return !fam.On() || fam.RecipesOnLoop() || recipes.Lookup(args) == nil
}

// RecipesOnLoop reports whether the serve loop may serve a recognised
// recipe call (a Redisson script, a SET NX PX of a lock key...) as it serves
// the lock family without WAIT (LeaseOnLoop): serving one only matches it
// and starts its twin as callbacks (runNow) or hands it to a lock worker
// (runLock), or forwards it. Not on a tier node (see LeaseOnLoop), and not
// while the workers' backlog is filling. Served on a goroutine detour instead, a
// lock request costs 1.75x the proxy's CPU of one served on the loop
// (measured with the lock family: 66.8 against 117.2 µs per lock cycle).
func (fam *Family) RecipesOnLoop() bool {
	return !fam.InTier() && !fam.runner.Crowded()
}

// Eval serves EVAL and EVALSHA.
func (fam *Family) Eval(c Conn, args [][]byte, p *resp.Reply) {
	if !fam.On() {
		fam.opts.Forward(c.Conn, args, p)
		return
	}
	// Looked up once, and handed down: for an EVAL that is a SHA-1 of
	// the body (three of them per request before, four when relaying).
	r := recipes.Lookup(args)
	if fam.relayingRecipe(c) {
		if r != nil && len(args) > 3 {
			fam.relayRecipe(c, string(args[3]), args, fam.relayedGrantOf(c, r, args), p) // args[3]: the first key, the lock
			return
		}
	}
	if fam.valueScript(c, r, args, p) { // setnx.go
		return
	}
	call, ok := r.Match(args)
	if !ok || fam.boundCall(call) {
		fam.opts.Forward(c.Conn, args, p)
		return
	}
	if call.RW != nil {
		fam.rwScript(c, args, call, p) // rwlock.go
		return
	}
	if !fam.sameSlot(call) {
		fam.opts.Forward(c.Conn, args, p)
		return
	}
	switch call.Recipe.Kind {
	case recipes.Acquire:
		fam.recipeAcquire(c, call, p)
	case recipes.RenewBatch:
		fam.recipeRenew(c, call, p)
	case recipes.Unlock, recipes.ForceUnlock:
		fam.recipeUnlock(c, call, p)
	case recipes.FairAcquire, recipes.FairUnlock, recipes.FairForceUnlock, recipes.FairDequeue:
		fam.fairRecipe(c, args, call, p) // fair.go
	default:
		fam.opts.Forward(c.Conn, args, p)
	}
}

// recipeRetry is the "held, retry in n ms" a refused grant is answered
// with: Redisson's lock() then waits up to n ms for an unlock message and
// tries again, and tryLock(wait) does so until its wait is over. One
// replica wait: long enough not to spin while the replicas are away, short
// enough to retry soon after they are back; never above the lease.
func (fam *Family) recipeRetry(lease time.Duration) int64 {
	ms := max(fam.opts.ReplicaTimeout.Milliseconds(), 1)
	return min(ms, lease.Milliseconds())
}

// recipeGrantReplies are an acquire recipe's two reply shapes: granted
// (with the grant's token) and "held, retry in ms". (Methods on a value,
// not funcs in fields: those were closures made for every request.)
type recipeGrantReplies struct {
	tokenReply bool   // RFencedLock's lockAndGetToken: [-1, token] and [pttl, -1]
	null       []byte // else granted is the client's null, held the pttl
}

// grantReplies: nil and the pttl (RLock, RSpinLock, RFencedLock's lock());
// RFencedLock's lockAndGetToken reads [-1, token] and [pttl, -1].
func grantReplies(c Conn, r *recipes.Recipe) recipeGrantReplies {
	if r.TokenReply {
		return recipeGrantReplies{tokenReply: true}
	}
	return recipeGrantReplies{null: nullReply(c)}
}

// granted is the reply to a grant of token.
func (r recipeGrantReplies) granted(token uint64) []byte {
	if r.tokenReply {
		return redcon.AppendInt(redcon.AppendInt(redcon.AppendArray(nil, 2), -1), int64(token))
	}
	return r.null
}

// held is the reply that the lock is held for ms more (or to retry in ms).
func (r recipeGrantReplies) held(ms int64) []byte {
	if r.tokenReply {
		return redcon.AppendInt(redcon.AppendInt(redcon.AppendArray(nil, 2), ms), -1)
	}
	return redcon.AppendInt(nil, ms)
}

func (fam *Family) recipeAcquire(c Conn, call recipes.Call, p *resp.Reply) {
	replies := grantReplies(c, call.Recipe)
	addr := c.RemoteAddr
	received := receivedAt(c)
	retry := refusalReply(call, fam.recipeRetry(call.Lease)) // fair.go
	start := time.Now()
	if fairQueue(call) == nil && fam.runNow(c, call.Key, p, func(ctx context.Context, now *nowReply) bool {
		return fam.opts.Manager.RecipeAcquireNow(ctx, call.Key, call.TokenKey, call.Holder, addr, call.Lease, received,
			func(token uint64, pttl int64, err error) {
				fam.opts.Metrics.AcquireSeconds.Observe(time.Since(start).Seconds())
				now.answer(fam.recipeGrantReply(replies, token, pttl, retry, err))
			})
	}) {
		return
	}
	fam.runLock(c, call.Key, p, 0, func(ctx context.Context) ([]byte, error) {
		token, pttl, err := fam.acquireRecipe(ctx, call, addr, received) // fair.go: RLock's or RFairLock's
		fam.opts.Metrics.AcquireSeconds.Observe(time.Since(start).Seconds())
		return fam.recipeGrantReply(replies, token, pttl, retry, err)
	})
}

func (fam *Family) recipeRenew(c Conn, call recipes.Call, p *resp.Reply) {
	batch := make([]locks.RecipeLock, len(call.Locks))
	for i, l := range call.Locks {
		batch[i] = locks.RecipeLock{Key: l.Key, Holder: l.Holder}
	}
	received := receivedAt(c)
	if fam.runNow(c, batch[0].Key, p, func(ctx context.Context, now *nowReply) bool {
		return fam.opts.Manager.RecipeRenewNow(ctx, batch, call.Lease, received, func(held []bool, err error) {
			now.answer(fam.recipeRenewReply(held, err))
		})
	}) {
		return
	}
	fam.runLock(c, batch[0].Key, p, 0, func(ctx context.Context) ([]byte, error) {
		held, err := fam.opts.Manager.RecipeRenew(ctx, batch, call.Lease, received)
		return fam.recipeRenewReply(held, err)
	})
}

// recipeRenewReply is a watchdog renewal's reply to its twin's outcome:
// 1 or 0 per lock, or -NOREPLICAS for the batch. Not 0s on a shortfall: a
// 0 makes the watchdog stop renewing that lock for good, where an error is
// logged and the batch retried.
func (fam *Family) recipeRenewReply(held []bool, err error) ([]byte, error) {
	if err == nil {
		b := redcon.AppendArray(nil, len(held))
		for _, ok := range held {
			if ok {
				fam.renewed.Inc()
				b = redcon.AppendInt(b, 1)
			} else {
				fam.opts.Metrics.Renewals.WithLabelValues("lost").Inc()
				b = redcon.AppendInt(b, 0)
			}
		}
		return b, nil
	}
	if nr := noReplicas(err); nr != nil {
		fam.opts.Metrics.Renewals.WithLabelValues("noreplicas").Inc()
		return redcon.AppendError(nil, fmt.Sprintf(
			"NOREPLICAS fenceproxy: %d of %d required replicas acknowledged the renewal in time; the leases not acknowledged stand as before it, retry",
			nr.Acked, nr.Wanted)), nil
	}
	if errors.Is(err, locks.ErrLate) {
		fam.opts.Metrics.Renewals.WithLabelValues("late").Inc()
		return []byte(replyLateRenewal), nil
	}
	if reply, ok := evictableReply(err, "the lease was not extended"); ok {
		fam.opts.Metrics.Renewals.WithLabelValues("evictable").Inc()
		return reply, nil
	}
	fam.opts.Metrics.Renewals.WithLabelValues("error").Inc()
	return nil, fam.lockError(err, "the leases may or may not be extended: retry")
}

// recipeGrantReply is a recipe acquire's reply to its twin's outcome (the
// same answers recipeAcquire gives RLock's): granted, the holder's pttl,
// or "held, retry in retry ms" for a grant that was refused and undone, or
// not tried (-TRYAGAIN's causes); an error only when the outcome is
// unknown or the master's policy could evict the lock.
func (fam *Family) recipeGrantReply(replies recipeGrantReplies, token uint64, pttl, retry int64, err error) ([]byte, error) {
	switch {
	case err == nil:
		fam.granted.Inc()
		return replies.granted(token), nil
	case err == locks.ErrBusy:
		fam.busy.Inc()
		return replies.held(pttl), nil
	case noReplicas(err) != nil:
		fam.opts.Metrics.Acquires.WithLabelValues("noreplicas").Inc()
		return replies.held(retry), nil
	case err == locks.ErrLate:
		fam.opts.Metrics.Acquires.WithLabelValues("late").Inc()
		return replies.held(retry), nil
	}
	if reply, ok := evictableReply(err, "nothing was granted"); ok {
		fam.opts.Metrics.Acquires.WithLabelValues("evictable").Inc()
		return reply, nil
	}
	fam.opts.Metrics.Acquires.WithLabelValues("error").Inc()
	ferr := fam.lockError(err, "the lock may or may not be granted; it expires with its lease")
	var coded resp.Error
	if errors.As(ferr, &coded) && coded.Code == "TRYAGAIN" {
		return replies.held(retry), nil // nothing was done; lock() waits on it
	}
	return nil, ferr
}

func (fam *Family) recipeUnlock(c Conn, call recipes.Call, p *resp.Reply) {
	null := nullReply(c)
	u := locks.RecipeUnlock{Key: call.Key, Holder: call.Holder, Lease: call.Lease, Channel: call.Channel,
		Publish: call.Publish, Message: call.Message, Latch: call.Latch, LatchTTL: call.LatchTTL,
		Force: call.Recipe.Kind == recipes.ForceUnlock}
	fairUnlock(&u, call) // fair.go
	if fam.runNow(c, call.Key, p, func(_ context.Context, now *nowReply) bool {
		return fam.opts.Manager.RecipeUnlockNow(u, func(n int64, isNull bool, err error) {
			now.answer(fam.recipeUnlockReply(n, isNull, err, null))
		})
	}) {
		return
	}
	fam.runLock(c, call.Key, p, 0, func(ctx context.Context) ([]byte, error) {
		n, isNull, err := fam.opts.Manager.RecipeUnlock(ctx, u)
		return fam.recipeUnlockReply(n, isNull, err, null)
	})
}

// recipeUnlockReply is a Redisson unlock's answer (RLock's, the fair and
// the read-write lock's: the number its script returns, or null when the
// caller held nothing), counted in the release metrics.
func (fam *Family) recipeUnlockReply(n int64, isNull bool, err error, null []byte) ([]byte, error) {
	switch {
	case err != nil:
		fam.opts.Metrics.Releases.WithLabelValues("error").Inc()
		return nil, fam.lockError(err, "the lock may or may not be released: retry")
	case isNull:
		fam.notHeld.Inc()
		return null, nil
	case n == 1:
		fam.released.Inc()
	}
	return redcon.AppendInt(nil, n), nil
}

// Token is LOCK.TOKEN resource holder: the token of holder's current
// grant of resource (a client recipe's lock key, or a lock-family
// resource), null if holder does not hold it.
func (fam *Family) Token(c Conn, args [][]byte, p *resp.Reply) {
	resource, msg := parseResource(args[1])
	var holder string
	if msg == "" {
		holder, msg = parseOwner(args[2])
	}
	if msg != "" {
		p.DoneError(msg)
		return
	}
	// A lock-family owner is bound to the user (lockOwner); a recipe's
	// holder is the library's own, as the twin stored it.
	owners := []string{fam.lockOwner(c, holder)}
	if fam.opts.Auth && !fam.boundHolder(holder) {
		owners = append(owners, holder)
	}
	null := nullReply(c)
	fam.runLock(c, resource, p, 0, func(ctx context.Context) ([]byte, error) {
		var token uint64
		var ok bool
		var err error
		for _, o := range owners {
			if token, ok, err = fam.opts.Manager.HolderToken(ctx, resource, o); err != nil || ok {
				break
			}
		}
		switch {
		case err != nil:
			return nil, fam.lockError(err, "retry")
		case !ok:
			return null, nil
		}
		return redcon.AppendInt(nil, int64(token)), nil
	})
}

// cloneArgs copies a request's arguments for work that outlives its
// serving (a lock worker's): the protocol reuses their bytes once the
// client's next request is framed.
func cloneArgs(args [][]byte) [][]byte {
	own := make([][]byte, len(args))
	for i, a := range args {
		own[i] = append([]byte(nil), a...)
	}
	return own
}
