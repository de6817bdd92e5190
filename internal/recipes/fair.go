package recipes

import (
	"strconv"
	"strings"
)

// Redisson's RFairLock: the lock is RLock's hash, plus a FIFO of waiters
// (the list redisson_lock_queue:{name}) and each waiter's deadline (the
// zset redisson_lock_timeout:{name}, scored in ms on the client's clock,
// which every script takes as an argument and uses to drop stale heads of
// the queue). Its five scripts (docs/design/recipes.md) are recognised:
//
//   - fair.acquire (lock(), tryLock(wait…)): granted (nil), or the caller is
//     enqueued and told how long to wait (an integer);
//   - fair.tryonce (tryLock()): the same grant, or 1 with nothing
//     enqueued. Its ARGV[3] and ARGV[4] are fair.acquire's swapped (now
//     and wait);
//   - fair.unlock and fair.forceunlock: RLock's unlock and force-unlock,
//     which publish the wake-up to the queue head's own channel
//     (channel:<lockName>) instead of the lock's;
//   - fair.dequeue (a tryLock whose wait ran out): takes the caller out of
//     the queue. It changes no lock, and runs as a twin only so that it is
//     ordered behind the resource's grants and their undos.

// The fair lock's kinds: numbered apart from the other lists so that each
// can grow.
const (
	// FairAcquire grants or re-enters a fair lock, or enqueues the caller
	// (fair.acquire; fair.tryonce when Call.Fair.Once, which enqueues
	// nobody).
	FairAcquire Kind = 300 + iota
	// FairUnlock is Unlock for a fair lock.
	FairUnlock
	// FairForceUnlock is ForceUnlock for a fair lock.
	FairForceUnlock
	// FairDequeue takes the holder out of the queue (Call.Key is the lock
	// the queue's name derives from).
	FairDequeue
)

// FairQueue is what a fair lock's script reads beside the lock: its queue
// and timeout set, the waiter's wait (ms), the client's clock (unix ms)
// and whether it is fair.tryonce.
type FairQueue struct {
	Queue, Timeouts string
	Wait, Now       int64
	Once            bool
}

// parseFairAcquire: KEYS name, queue, timeouts; ARGV lease, lockName,
// wait, now (fair.acquire) or lease, lockName, now, wait (fair.tryonce).
func parseFairAcquire(once bool) func(r *Recipe, keys, argv [][]byte) (Call, bool) {
	return func(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
		if len(keys) != 3 || len(argv) != 4 {
			return c, false
		}
		if c, ok = parseAcquire(r, keys[:1], argv[:2]); !ok {
			return c, false
		}
		wait, now := argv[2], argv[3]
		if once {
			wait, now = now, wait
		}
		c.Fair, ok = fairQueue(keys[1], keys[2], wait, now)
		c.Fair.Once = once
		return c, ok
	}
}

// parseFairUnlock: KEYS name, queue, timeouts, channel, latch; ARGV
// message, lease, lockName, now, PUBLISH|SPUBLISH, latchTtl.
func parseFairUnlock(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if len(keys) != 5 || len(argv) != 6 {
		return c, false
	}
	c = Call{Recipe: r, Channel: string(keys[3]), Latch: string(keys[4]), Message: string(argv[0])}
	if c.Key, ok = key(keys[0]); !ok {
		return c, false
	}
	if c.Publish, ok = publish(argv[4]); !ok {
		return c, false
	}
	if c.Fair, ok = fairQueue(keys[1], keys[2], []byte("0"), argv[3]); !ok {
		return c, false
	}
	return unlockTail(c, argv[1], argv[2], argv[5])
}

// parseFairForceUnlock: KEYS name, queue, timeouts, channel; ARGV
// message, now, PUBLISH|SPUBLISH.
func parseFairForceUnlock(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if len(keys) != 4 || len(argv) != 3 {
		return c, false
	}
	c = Call{Recipe: r, Channel: string(keys[3]), Message: string(argv[0])}
	if c.Key, ok = key(keys[0]); !ok {
		return c, false
	}
	if c.Publish, ok = publish(argv[2]); !ok {
		return c, false
	}
	c.Fair, ok = fairQueue(keys[1], keys[2], []byte("0"), argv[1])
	return c, ok
}

// parseFairDequeue: KEYS queue, timeouts; ARGV lockName, wait. The
// script names no lock: Key is the one its queue's name is Redisson's
// prefixName of, and a queue named otherwise is forwarded.
func parseFairDequeue(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if len(keys) != 2 || len(argv) != 2 {
		return c, false
	}
	c = Call{Recipe: r}
	name, ok := unprefix("redisson_lock_queue:", string(keys[0]))
	if !ok {
		return c, false
	}
	if t, ok := unprefix("redisson_lock_timeout:", string(keys[1])); !ok || t != name {
		return c, false
	}
	if c.Key, ok = key([]byte(name)); !ok {
		return c, false
	}
	if c.Holder, ok = holder(argv[0]); !ok {
		return c, false
	}
	c.Fair, ok = fairQueue(keys[0], keys[1], argv[1], []byte("1"))
	return c, ok
}

// unprefix inverts Redisson's prefixName(prefix, name): prefix:{name},
// or prefix:name for a name that has a '{' of its own. (A name that is
// itself "{x}" reads as x: the lock then is only not ordered behind its
// dequeue, which is what forwarding would give.)
func unprefix(prefix, k string) (string, bool) {
	rest, ok := strings.CutPrefix(k, prefix)
	if !ok || rest == "" {
		return "", false
	}
	if inner, ok := strings.CutPrefix(rest, "{"); ok {
		if name, ok := strings.CutSuffix(inner, "}"); ok && !strings.ContainsAny(name, "{}") && name != "" {
			return name, true
		}
	}
	return rest, strings.Contains(rest, "{")
}

// fairQueue reads a fair script's queue, timeout set, wait (ms, ≥ 0) and
// client clock (unix ms, > 0).
func fairQueue(queue, timeouts, wait, now []byte) (f FairQueue, ok bool) {
	if f.Queue, ok = key(queue); !ok {
		return f, false
	}
	if f.Timeouts, ok = key(timeouts); !ok {
		return f, false
	}
	var err error
	if f.Wait, err = strconv.ParseInt(string(wait), 10, 64); err != nil || f.Wait < 0 || f.Wait > MaxLease.Milliseconds() {
		return f, false
	}
	if f.Now, err = strconv.ParseInt(string(now), 10, 64); err != nil || f.Now <= 0 {
		return f, false
	}
	return f, true
}
