package lockcmd

import (
	"context"
	"errors"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/recipes"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Redisson's RReadWriteLock (recognised by internal/recipes, run by the
// lock manager's twins, internal/locks/rwlock.go): answered in the
// scripts' own reply shapes, as RLock's are (recipes.go). A refused grant,
// read or write, is "held, retry in n ms"; a refused read renewal is
// -NOREPLICAS, which the watchdog logs and retries (a 0 would stop it for
// good). Redisson 3.52.0's read renewal body fails on a lock with a hold
// count at or above its key count (docs/design/recipes.md, "Surprises"):
// that call is run by Redis itself, so the client reads its own error as
// before.

// rwScript serves a recognised read-write lock script (call.RW set).
func (fam *Family) rwScript(c Conn, args [][]byte, call recipes.Call, p *resp.Reply) {
	if !fam.rwSameSlot(call) {
		fam.opts.Forward(c.Conn, args, p)
		return
	}
	switch call.Recipe.Kind {
	case recipes.Acquire:
		fam.rwAcquire(c, call, p)
	case recipes.RenewBatch:
		fam.rwRenew(c, args, call, p)
	case recipes.Unlock, recipes.ForceUnlock:
		fam.rwUnlock(c, call, p)
	default:
		fam.opts.Forward(c.Conn, args, p)
	}
}

// rwSameSlot is sameSlot for a read-write lock's call: every key its twin
// touches (timeout keys and the {name} prefix included) in the slot of
// its lock's owner record.
func (fam *Family) rwSameSlot(call recipes.Call) bool {
	if !fam.opts.Backend.RoutesByKey() {
		return true
	}
	aligned := fam.alignedWithRecord
	rw := call.RW
	if call.Recipe.Kind == recipes.RenewBatch {
		for _, l := range rw.Locks {
			if !aligned(l.Key, append([]string{l.Prefix}, rw.BatchKeys...)...) {
				return false
			}
		}
		return true
	}
	channel := ""
	if call.Publish == "spublish" {
		channel = call.Channel
	}
	return aligned(call.Key, call.Latch, channel, rw.TimeoutPrefix, rw.KeyPrefix)
}

func (fam *Family) rwAcquire(c Conn, call recipes.Call, p *resp.Reply) {
	replies := grantReplies(c, call.Recipe)
	addr := c.RemoteAddr
	received := receivedAt(c)
	retry := fam.recipeRetry(call.Lease)
	a := locks.RWAcquire{Key: call.Key, Holder: call.Holder, Write: call.RW.Write,
		WriteHolder: call.RW.WriteHolder, TimeoutPrefix: call.RW.TimeoutPrefix, Lease: call.Lease}
	fam.runLock(c, call.Key, p, 0, func(ctx context.Context) ([]byte, error) {
		start := time.Now()
		token, pttl, err := fam.opts.Manager.RWAcquire(ctx, a, addr, received)
		fam.opts.Metrics.AcquireSeconds.Observe(time.Since(start).Seconds())
		return fam.recipeGrantReply(replies, token, pttl, retry, err)
	})
}

func (fam *Family) rwRenew(c Conn, args [][]byte, call recipes.Call, p *resp.Reply) {
	rw := call.RW
	batch := make([]locks.RWRenewLock, len(rw.Locks))
	for i, l := range rw.Locks {
		batch[i] = locks.RWRenewLock{Key: l.Key, Prefix: l.Prefix, Holders: l.Holders}
	}
	own := cloneArgs(args) // the request's buffer is not the worker's
	fam.runLock(c, batch[0].Key, p, 0, func(ctx context.Context) ([]byte, error) {
		held, err := fam.opts.Manager.RWRenew(ctx, locks.RWRenewStyle(rw.Style), batch, rw.BatchKeys, call.Lease)
		if err == locks.ErrScriptFails {
			return fam.runOwnScript(ctx, own) // 3.52.0's body fails here: Redis answers as it would
		}
		return fam.recipeRenewReply(held, err)
	})
}

// runOwnScript runs the client's request on its keys' master as it came
// (Redis runs the client's own script, or answers NOSCRIPT, on which the
// client loads it and sends it again) and returns Redis's reply bytes.
func (fam *Family) runOwnScript(ctx context.Context, args [][]byte) ([]byte, error) {
	var first []byte
	if len(args) > 3 {
		first = args[3]
	}
	node := fam.opts.Backend.MasterForKey(first)
	if node == nil {
		return nil, resp.Error{Code: "TRYAGAIN", Msg: "fenceproxy: no master is reachable, retry"}
	}
	req := make([]string, len(args))
	for i, a := range args {
		req[i] = string(a)
	}
	raw, err := node.Raw(ctx, req...)
	var re resp.Error
	if errors.As(err, &re) {
		return resp.AppendError(nil, re.Code, re.Msg), nil
	}
	if err != nil {
		return nil, fam.lockError(err, "the leases may or may not be extended: retry")
	}
	return raw, nil
}

func (fam *Family) rwUnlock(c Conn, call recipes.Call, p *resp.Reply) {
	null := nullReply(c)
	u := locks.RWUnlock{Key: call.Key, Holder: call.Holder, Write: call.RW.Write, Force: call.Recipe.Kind == recipes.ForceUnlock,
		Lease: call.Lease, Channel: call.Channel, Publish: call.Publish, Message: call.Message, Latch: call.Latch,
		LatchTTL: call.LatchTTL, TimeoutPrefix: call.RW.TimeoutPrefix, KeyPrefix: call.RW.KeyPrefix}
	fam.runLock(c, call.Key, p, 0, func(ctx context.Context) ([]byte, error) {
		n, isNull, err := fam.opts.Manager.RWUnlock(ctx, u)
		return fam.recipeUnlockReply(n, isNull, err, null)
	})
}
