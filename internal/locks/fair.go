package locks

import (
	"context"
	"fmt"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
)

// Redisson's RFairLock (internal/recipes, fair.go; the twins in
// fairops.go). Its lock is RLock's hash, so its grants run RecipeAcquire's
// path with the fair lock's queue beside them: the same guards, the same
// fence-store token and side record, the same shared WAIT and verdict
// (grantVerdict; a side record's token judged by judgeRecordToken). A
// grant the replicas did not acknowledge, or whose reply would be late, is
// undone exactly, hold and queue: the caller is back at the queue's head
// with its deadline, and every deadline the grant lowered is raised
// again, so the client's next try finds the queue as it left it. A
// refusal (the caller enqueued, or fair.tryonce's 1) waits for no replica:
// losing it in a failover loses only a place in the queue, which the
// client's next try takes again.
//
// Unlocks are RecipeUnlock's with RecipeUnlock.Fair set: ordered behind
// the resource, not waited, ending the side record. The watchdog renews a
// fair lock by RLock's batched renewal (RecipeRenew), since the hash is
// the same.

// FairQueue is a fair lock's queue and timeout set, and what the client's
// script reads with them.
type FairQueue struct {
	Queue, Timeouts string
	Wait            int64 // ms: how much later than the one ahead a waiter's deadline is
	ClientNow       int64 // unix ms, on the client's clock: stale heads are dropped by it
	Once            bool  // fair.tryonce: nobody is enqueued, a refusal is 1
}

// RecipeFairAcquire runs a fair lock's acquire (fair.acquire, or
// fair.tryonce when q.Once) for holder: it grants, re-enters, or refuses.
// It returns as RecipeAcquire does, except that ErrBusy comes with the
// recipe's own reply n: fair.acquire's time to wait (the caller is now
// queued) or fair.tryonce's 1.
func (m *Manager) RecipeFairAcquire(ctx context.Context, key, holder, clientAddr string, lease time.Duration, q FairQueue, received time.Time) (token uint64, n int64, err error) {
	return m.recipeAcquire(ctx, key, "", holder, clientAddr, lease, received, &q)
}

// RecipeFairDequeue takes holder out of a fair lock's queue (fair.dequeue,
// Redisson's acquireFailed: a tryLock whose wait is over), in the lock's
// turn, so that it is never run between a grant and its undo; it waits for
// no replica (a lost dequeue leaves a waiter whose deadline passes).
func (m *Manager) RecipeFairDequeue(ctx context.Context, key, holder string, q FairQueue) error {
	side := m.recordKey(key)
	turn := m.serial.lock(key)
	defer m.serial.unlock(key, turn)
	call := lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opFairDequeue, Keys: recipeKeys(key, side),
		Args: lockwriter.ArgsOf(holder, q.Queue, q.Timeouts, q.Wait, m.term())}
	reply, err := m.opts.Scripts.Start(ctx, key, call, false).Reply()
	if err != nil {
		return deposed(err)
	}
	if n, ok := reply.(int64); !ok || n != 1 {
		return fmt.Errorf("locks: unexpected fair dequeue reply %v", reply)
	}
	return nil
}

// fairGrant is a fair acquire's queue, and what a fresh grant did to it:
// opFairAcquire's last five reply values, which its undo takes back.
type fairGrant struct {
	q                                     *FairQueue
	popped, deadline, qwas, twas, lowered any
}

// grant turns a recipe acquire's call (opHashAcquire) into the fair
// lock's, and returns what its undo will need.
func (q *FairQueue) grant(c *lockwriter.ScriptCall) *fairGrant {
	once := "0"
	if q.Once {
		once = "1"
	}
	c.Op = opFairAcquire
	c.Args.Add(q.Queue, q.Timeouts, q.Wait, q.ClientNow, once)
	// A re-entry's: nothing popped, no deadline, both keys as if absent.
	return &fairGrant{q: q, popped: "0", deadline: "", qwas: "-2", twas: "-2", lowered: ""}
}

// read takes a fresh grant's queue values off opFairAcquire's reply and
// returns the rest, which is opHashAcquire's.
func (f *fairGrant) read(reply any) any {
	arr, ok := reply.([]any)
	if !ok || len(arr) != 11 {
		return reply
	}
	f.popped, f.deadline, f.qwas, f.twas, f.lowered = arr[6], arr[7], arr[8], arr[9], arr[10]
	return arr[:6]
}

// undo turns a recipe grant's undo (opHashAcquireUndo) into the fair
// lock's, which also puts the queue back.
func (f *fairGrant) undo(c *lockwriter.ScriptCall) {
	c.Op = opFairAcquireUndo
	c.Args.Add(f.q.Queue, f.q.Timeouts, f.q.Wait, f.popped, f.deadline, f.qwas, f.twas, f.lowered)
}

// unlock turns a recipe unlock's call (opHashUnlock, opHashForceUnlock)
// into the fair lock's.
func (q *FairQueue) unlock(c *lockwriter.ScriptCall) {
	if c.Op == opHashForceUnlock {
		c.Op = opFairForceUnlock
	} else {
		c.Op = opFairUnlock
	}
	c.Args.Add(q.Queue, q.Timeouts, q.ClientNow)
}
