package lockcmd

import (
	"context"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/recipes"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Redisson's RFairLock (internal/recipes, fair.go): its acquires run as
// RLock's do (recipeAcquire), through the fair twin
// (Manager.RecipeFairAcquire), and are answered in its own shapes: nil
// granted; fair.acquire's time to wait (the caller is queued) or
// fair.tryonce's 1 when the lock is held. A grant the replicas did not
// acknowledge is undone, queue and all, and answered as "held":
// fair.acquire's "retry in n ms", where lock() and tryLock(wait) wait for
// the wake-up or n ms and try again, at the head of the queue as before;
// fair.tryonce's 1, which tryLock() reads as false. Unlocks run as RLock's
// (recipeUnlock), with the queue; fair.dequeue runs in the lock's turn and
// answers nil, as the script does.

// fairRecipe serves a recognised fair-lock script; one whose queue or
// timeout set is not in its lock's slot is forwarded as it came.
func (fam *Family) fairRecipe(c Conn, args [][]byte, call recipes.Call, p *resp.Reply) {
	if !fam.fairAligned(call) {
		fam.opts.Forward(c.Conn, args, p)
		return
	}
	switch call.Recipe.Kind {
	case recipes.FairAcquire:
		fam.recipeAcquire(c, call, p)
	case recipes.FairUnlock, recipes.FairForceUnlock:
		fam.recipeUnlock(c, call, p)
	case recipes.FairDequeue:
		fam.fairDequeue(c, call, p)
	default:
		fam.opts.Forward(c.Conn, args, p)
	}
}

// fairAligned reports whether a fair script's queue and timeout set are in
// its lock's owner record's slot (sameSlot checked the rest).
func (fam *Family) fairAligned(call recipes.Call) bool {
	if !fam.opts.Backend.RoutesByKey() {
		return true
	}
	slot := keys.SlotOf([]byte(fam.opts.KeyPrefix + "{" + call.Key + "}"))
	return keys.SlotOf([]byte(call.Fair.Queue)) == slot && keys.SlotOf([]byte(call.Fair.Timeouts)) == slot
}

// fairQueue is the lock manager's view of a fair call's queue, nil for
// another recipe.
func fairQueue(call recipes.Call) *locks.FairQueue {
	switch call.Recipe.Kind {
	case recipes.FairAcquire, recipes.FairUnlock, recipes.FairForceUnlock, recipes.FairDequeue:
		f := call.Fair
		return &locks.FairQueue{Queue: f.Queue, Timeouts: f.Timeouts, Wait: f.Wait, ClientNow: f.Now, Once: f.Once}
	}
	return nil
}

// acquireRecipe runs a recipe's acquire: RLock's twin, or the fair lock's.
func (fam *Family) acquireRecipe(ctx context.Context, call recipes.Call, addr string, received time.Time) (token uint64, n int64, err error) {
	if q := fairQueue(call); q != nil {
		return fam.opts.Manager.RecipeFairAcquire(ctx, call.Key, call.Holder, addr, call.Lease, *q, received)
	}
	return fam.opts.Manager.RecipeAcquire(ctx, call.Key, call.TokenKey, call.Holder, addr, call.Lease, received)
}

// refusalReply is what a refused grant is answered with: fair.tryonce's
// 1, else "retry in retry ms".
func refusalReply(call recipes.Call, retry int64) int64 {
	if call.Recipe.Kind == recipes.FairAcquire && call.Fair.Once {
		return 1
	}
	return retry
}

// fairUnlock makes u a fair lock's unlock (a fair call's queue, and
// force for fair.forceunlock).
func fairUnlock(u *locks.RecipeUnlock, call recipes.Call) {
	if u.Fair = fairQueue(call); u.Fair != nil && call.Recipe.Kind == recipes.FairForceUnlock {
		u.Force = true
	}
}

func (fam *Family) fairDequeue(c Conn, call recipes.Call, p *resp.Reply) {
	null := nullReply(c)
	q := fairQueue(call)
	fam.runLock(c, call.Key, p, 0, func(ctx context.Context) ([]byte, error) {
		if err := fam.opts.Manager.RecipeFairDequeue(ctx, call.Key, call.Holder, *q); err != nil {
			return nil, fam.lockError(err, "the waiter may or may not have left the queue: retry")
		}
		return null, nil
	})
}
