package commands

import (
	"context"
	"errors"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/recipes"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Value locks (internal/recipes, setnx.go): SET key value NX [PX|EX] on a
// --lock-keys key, and the lock scripts of redis-py, redsync, redislock
// and node-redlock, run as the lock manager's value twins
// (Manager.RecipeValueWrite, RecipeValueRelease) where recipes run
// (recipesOn), and answered in each library's reply shape. A refused
// grant (the replicas did not acknowledge it, or too little of its lease
// would be left) is answered as the library's "not acquired": nil for SET
// and redislock's obtain, 0 for redlock; a refused extend as its "not
// extended": 0. Everything else is forwarded as it came.

// setOnLoop: a SET that is not a lock grant is forwarded, which the serve
// loop may do.
func setOnLoop(h *Handler, _ *protocol.Conn, args [][]byte) bool {
	if h.opts.LockKeys.Empty() || !h.recipesOn() {
		return true
	}
	_, ok := recipes.MatchSet(h.opts.LockKeys, args)
	return !ok
}

// setCommand serves SET: a lock grant on a --lock-keys key, else
// forwarded.
func (h *Handler) setCommand(c *protocol.Conn, args [][]byte, p *resp.Reply) {
	if h.opts.LockKeys.Empty() || !h.recipesOn() {
		h.forward(c, args, p)
		return
	}
	call, ok := recipes.MatchSet(h.opts.LockKeys, args)
	switch {
	case ok && h.relayingRecipe(c):
		h.relayRecipe(c, call.Key, args, &relayedGrant{lease: call.Lease, refused: nullReply(c),
			isGrant: func(r []byte) bool { return string(r) == "+OK\r\n" }}, p) // recipes.go: the tier's leader grants it
	case !ok || !h.valueAligned(call) || h.boundHolder(call.Holder):
		h.forward(c, args, p)
	default:
		h.valueRecipe(c, call, p)
	}
}

// valueScript serves a recognised value-lock script; ok is false for any
// other script.
func (h *Handler) valueScript(c *protocol.Conn, r *recipes.Recipe, args [][]byte, p *resp.Reply) bool {
	call, ok := r.MatchValue(args)
	switch {
	case !ok:
		return false
	case !h.valueAligned(call) || h.boundHolder(call.Holder):
		h.forward(c, args, p)
	default:
		h.valueRecipe(c, call, p)
	}
	return true
}

// valueAligned reports whether a value lock's twin can run: always in
// front of one master; in front of a Redis Cluster when its key is in its
// owner record's slot (a key with a hash tag of its own is not), and for
// one key only (a twin of several keys names them beyond its KEYS, which
// only one master allows).
func (h *Handler) valueAligned(call recipes.ValueCall) bool {
	if !h.opts.Backend.RoutesByKey() {
		return true
	}
	return len(call.Keys) <= 1 && keys.SlotOf([]byte(call.Key)) == keys.SlotOf([]byte(h.opts.KeyPrefix+"{"+call.Key+"}"))
}

// valueRecipe runs a value lock's request.
func (h *Handler) valueRecipe(c *protocol.Conn, call recipes.ValueCall, p *resp.Reply) {
	if call.Kind == recipes.ValueRelease {
		h.valueRelease(c, call, p)
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
	h.runLock(c, call.Key, p, 0, func(ctx context.Context) ([]byte, error) {
		start := time.Now()
		var err error
		if len(call.Keys) > 1 {
			err = h.opts.Locks.RecipeValueMulti(ctx, call.Keys, call.Holder, v.Mode, v.Lease, addr, received)
		} else {
			_, err = h.opts.Locks.RecipeValueWrite(ctx, v, addr, received)
		}
		if grant {
			h.opts.Metrics.AcquireSeconds.Observe(time.Since(start).Seconds())
		}
		result, reply, err := valueOutcome(err, grant, yes, no)
		if grant {
			h.opts.Metrics.Acquires.WithLabelValues(result).Inc()
		} else {
			h.opts.Metrics.Renewals.WithLabelValues(result).Inc()
		}
		if err == nil {
			return reply, nil
		}
		ferr := h.lockError(err, "the lock may or may not be held; it expires with its lease")
		var coded resp.Error
		if grant && errors.As(ferr, &coded) && coded.Code == "TRYAGAIN" {
			// Nothing was done (this proxy is not the token authority
			// right now): "not acquired", which the libraries retry,
			// where an error would reach the application.
			return no, nil
		}
		return nil, ferr
	})
}

// valueReplies are a shape's "done" and "not done" replies.
func valueReplies(c *protocol.Conn, shape recipes.Shape) (yes, no []byte) {
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
	var nr *locks.NoReplicasError
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
	case errors.As(err, &nr):
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
func (h *Handler) valueRelease(c *protocol.Conn, call recipes.ValueCall, p *resp.Reply) {
	if len(call.Keys) > 1 {
		h.valueReleaseKeys(c, call, p)
		return
	}
	h.runLock(c, call.Key, p, 0, func(ctx context.Context) ([]byte, error) {
		found, err := h.opts.Locks.RecipeValueRelease(ctx, call.Key, call.Holder)
		if err != nil {
			h.opts.Metrics.Releases.WithLabelValues("error").Inc()
			return nil, h.lockError(err, "the lock may or may not be released: retry")
		}
		if found == locks.ValueDeleted {
			h.opts.Metrics.Releases.WithLabelValues("released").Inc()
			return redcon.AppendInt(nil, 1), nil
		}
		h.opts.Metrics.Releases.WithLabelValues("notheld").Inc()
		if found == locks.ValueAbsent && call.Shape == recipes.ShapeDelete {
			return redcon.AppendInt(nil, -1), nil // redsync: ErrLockAlreadyExpired
		}
		return redcon.AppendInt(nil, 0), nil
	})
}

// valueReleaseKeys runs redlock's release of several keys, each in its
// own turn (a release needs no atomicity: each key is deleted if it holds
// the value), and answers how many it deleted.
func (h *Handler) valueReleaseKeys(c *protocol.Conn, call recipes.ValueCall, p *resp.Reply) {
	h.runLock(c, call.Key, p, 0, func(ctx context.Context) ([]byte, error) {
		n := int64(0)
		for _, k := range call.Keys {
			found, err := h.opts.Locks.RecipeValueRelease(ctx, k, call.Holder)
			if err != nil {
				h.opts.Metrics.Releases.WithLabelValues("error").Inc()
				return nil, h.lockError(err, "the locks may or may not be released: retry")
			}
			if found == locks.ValueDeleted {
				h.opts.Metrics.Releases.WithLabelValues("released").Inc()
				n++
			} else {
				h.opts.Metrics.Releases.WithLabelValues("notheld").Inc()
			}
		}
		return redcon.AppendInt(nil, n), nil
	})
}
