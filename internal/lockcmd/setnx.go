package lockcmd

import (
	"context"
	"errors"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/recipes"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Value locks (internal/recipes, setnx.go): SET key value NX [PX|EX] on a
// --lock-keys key, and the lock scripts of redis-py, redsync, redislock
// and node-redlock, run as the lock manager's value twins
// (Manager.RecipeValueWrite, RecipeValueRelease) where recipes run
// (Family.On), and answered in each library's reply shape. A refused
// grant (the replicas did not acknowledge it, or too little of its lease
// would be left) is answered as the library's "not acquired": nil for SET
// and redislock's obtain, 0 for redlock; a refused extend as its "not
// extended": 0. Everything else is forwarded as it came.

// SetOnLoop: a SET that is not a lock grant is forwarded, which the serve
// loop may do; one that is, is started there too, as callbacks or on a
// lock worker (RecipesOnLoop).
func (fam *Family) SetOnLoop(args [][]byte) bool {
	if fam.opts.LockKeys.Empty() || !fam.On() || fam.RecipesOnLoop() {
		return true // RecipesOnLoop first: Set matches the SET itself
	}
	_, ok := recipes.MatchSet(fam.opts.LockKeys, args)
	return !ok
}

// Set serves SET: a lock grant on a --lock-keys key, else
// forwarded.
func (fam *Family) Set(c Conn, args [][]byte, p *resp.Reply) {
	if fam.opts.LockKeys.Empty() || !fam.On() {
		fam.opts.Forward(c.Conn, args, p)
		return
	}
	call, ok := recipes.MatchSet(fam.opts.LockKeys, args)
	switch {
	case ok && fam.relayingRecipe(c):
		fam.relayRecipe(c, call.Key, args, &relayedGrant{lease: call.Lease, refused: nullReply(c),
			isGrant: func(r []byte) bool { return string(r) == "+OK\r\n" }}, p) // recipes.go: the tier's leader grants it
	case !ok || !fam.valueAligned(call) || fam.boundHolder(call.Holder):
		fam.opts.Forward(c.Conn, args, p)
	default:
		fam.valueRecipe(c, call, p)
	}
}

// valueScript serves a recognised value-lock script; ok is false for any
// other script.
func (fam *Family) valueScript(c Conn, r *recipes.Recipe, args [][]byte, p *resp.Reply) bool {
	call, ok := r.MatchValue(args)
	switch {
	case !ok:
		return false
	case !fam.valueAligned(call) || fam.boundHolder(call.Holder):
		fam.opts.Forward(c.Conn, args, p)
	default:
		fam.valueRecipe(c, call, p)
	}
	return true
}

// valueAligned reports whether a value lock's twin can run: always in
// front of one master; in front of a Redis Cluster when its key is in its
// owner record's slot (a key with a hash tag of its own is not), and for
// one key only (a twin of several keys names them beyond its KEYS, which
// only one master allows).
func (fam *Family) valueAligned(call recipes.ValueCall) bool {
	if !fam.opts.Backend.RoutesByKey() {
		return true
	}
	return len(call.Keys) <= 1 && keys.SlotOf([]byte(call.Key)) == keys.SlotOf([]byte(fam.opts.KeyPrefix+"{"+call.Key+"}"))
}

// valueRecipe runs a value lock's request.
func (fam *Family) valueRecipe(c Conn, call recipes.ValueCall, p *resp.Reply) {
	if call.Kind == recipes.ValueRelease {
		fam.valueRelease(c, call, p)
		return
	}
	v := locks.ValueWrite{Key: call.Key, Holder: call.Holder, Lease: call.Lease, Prefix: call.Prefix, Mode: locks.ValueExtend}
	grant := call.Kind == recipes.ValueAcquire
	switch {
	case grant:
		v.Mode = locks.ValueGrant
	case call.GrantFree:
		v.Mode = locks.ValueExtendOrGrant
	case call.AddToTTL:
		v.Mode = locks.ValueExtendAdd
	}
	yes, no := valueReplies(c, call.Shape)
	if call.Shape == recipes.ShapeCount {
		yes = redcon.AppendInt(nil, int64(max(len(call.Keys), 1)))
	}
	addr := c.RemoteAddr
	received := receivedAt(c)
	start := time.Now()
	// reply makes the client's reply to the write's outcome, and counts it.
	reply := func(err error) ([]byte, error) {
		if grant {
			fam.opts.Metrics.AcquireSeconds.Observe(time.Since(start).Seconds())
		}
		result, reply, err := valueOutcome(err, grant, yes, no)
		if grant {
			fam.opts.Metrics.Acquires.WithLabelValues(result).Inc()
		} else {
			fam.opts.Metrics.Renewals.WithLabelValues(result).Inc()
		}
		if err == nil {
			return reply, nil
		}
		ferr := fam.lockError(err, "the lock may or may not be held; it expires with its lease")
		var coded resp.Error
		if grant && errors.As(ferr, &coded) && coded.Code == "TRYAGAIN" {
			// Nothing was done (this proxy is not the token authority
			// right now): "not acquired", which the libraries retry,
			// where an error would reach the application.
			return no, nil
		}
		return nil, ferr
	}
	if len(call.Keys) <= 1 && fam.runNow(c, call.Key, p, func(ctx context.Context, now *nowReply) bool {
		return fam.opts.Manager.RecipeValueWriteNow(ctx, v, addr, received, func(_ int64, err error) { now.answer(reply(err)) })
	}) {
		return
	}
	fam.runLock(c, call.Key, p, 0, func(ctx context.Context) ([]byte, error) {
		var err error
		if len(call.Keys) > 1 {
			err = fam.opts.Manager.RecipeValueMulti(ctx, call.Keys, call.Holder, v.Mode, v.Lease, addr, received)
		} else {
			_, err = fam.opts.Manager.RecipeValueWrite(ctx, v, addr, received)
		}
		return reply(err)
	})
}

// valueReplies are a shape's "done" and "not done" replies.
func valueReplies(c Conn, shape recipes.Shape) (yes, no []byte) {
	switch shape {
	case recipes.ShapeOK:
		return []byte("+OK\r\n"), nullReply(c)
	}
	// ShapeOne, ShapeDelete (its -1 is a release's), ShapeCount (of one
	// key; valueRecipe counts several)
	return []byte(":1\r\n"), []byte(":0\r\n")
}

// valueOutcome maps a value write's result to its metric's result label
// and the reply (or the error to reply).
func valueOutcome(err error, grant bool, yes, no []byte) (string, []byte, error) {
	switch {
	case err == nil:
		if grant {
			return "granted", yes, nil
		}
		return "renewed", yes, nil
	case err == locks.ErrBusy:
		return "busy", no, nil
	case err == locks.ErrNotHeld:
		return "lost", no, nil
	case noReplicas(err) != nil:
		return "noreplicas", no, nil
	case err == locks.ErrLate:
		return "late", no, nil
	}
	if reply, ok := evictableReply(err, "nothing was granted or extended"); ok {
		return "evictable", reply, nil
	}
	return "error", nil, err
}

// valueRelease runs a value lock's release and answers in its shape.
func (fam *Family) valueRelease(c Conn, call recipes.ValueCall, p *resp.Reply) {
	if len(call.Keys) > 1 {
		fam.valueReleaseKeys(c, call, p)
		return
	}
	reply := func(found locks.ValueReleased, err error) ([]byte, error) {
		if err != nil {
			fam.opts.Metrics.Releases.WithLabelValues("error").Inc()
			return nil, fam.lockError(err, "the lock may or may not be released: retry")
		}
		if found == locks.ValueDeleted {
			fam.released.Inc()
			return redcon.AppendInt(nil, 1), nil
		}
		fam.notHeld.Inc()
		if found == locks.ValueAbsent && call.Shape == recipes.ShapeDelete {
			return redcon.AppendInt(nil, -1), nil // redsync: ErrLockAlreadyExpired
		}
		return redcon.AppendInt(nil, 0), nil
	}
	if fam.runNow(c, call.Key, p, func(_ context.Context, now *nowReply) bool {
		return fam.opts.Manager.RecipeValueReleaseNow(call.Key, call.Holder, func(found locks.ValueReleased, err error) {
			now.answer(reply(found, err))
		})
	}) {
		return
	}
	fam.runLock(c, call.Key, p, 0, func(ctx context.Context) ([]byte, error) {
		return reply(fam.opts.Manager.RecipeValueRelease(ctx, call.Key, call.Holder))
	})
}

// valueReleaseKeys runs redlock's release of several keys, each in its
// own turn (a release needs no atomicity: each key is deleted if it holds
// the value), and answers how many it deleted.
func (fam *Family) valueReleaseKeys(c Conn, call recipes.ValueCall, p *resp.Reply) {
	fam.runLock(c, call.Key, p, 0, func(ctx context.Context) ([]byte, error) {
		n := int64(0)
		for _, k := range call.Keys {
			found, err := fam.opts.Manager.RecipeValueRelease(ctx, k, call.Holder)
			if err != nil {
				fam.opts.Metrics.Releases.WithLabelValues("error").Inc()
				return nil, fam.lockError(err, "the locks may or may not be released: retry")
			}
			if found == locks.ValueDeleted {
				fam.released.Inc()
				n++
			} else {
				fam.notHeld.Inc()
			}
		}
		return redcon.AppendInt(nil, n), nil
	})
}
