package recipes

import "strconv"

// Redisson's RReadWriteLock (RedissonReadLock, RedissonWriteLock; and so
// RMultiLock over them). Both locks are one hash at the lock's name: a
// field "mode" ("read" or "write"), a field per holder with its re-entry
// count (a reader's lockName <uuid>:<threadId>, the writer's
// <uuid>:<threadId>:write), and, per read hold, a timeout key
// {name}:<lockName>:rwlock_timeout:<n> (n the hold's count) expiring with
// that hold's lease, from which an unlock works out how long the hash
// must live for the readers left. The write lock's watchdog renews it with
// RLock's batched renewal (lock.renew-batch); the read lock has its own,
// whose body changed in 4.0.0 and again in 4.7.0 (docs/design/recipes.md).
//
// Recognised calls carry their read-write fields in Call.RW; the kind is
// the one the script has (Acquire, Unlock, ForceUnlock, RenewBatch).

// RenewStyle is a read renewal body's version: what it renews differs.
type RenewStyle int

const (
	// Renew352 (3.52.0): the inner loop's variable shadows the key index,
	// so the timeout key of count c is looked up under the call's
	// KEYS[c+1] (not the lock's own prefix), and a count c with KEYS[c+1]
	// absent (c >= the call's key count) is a Lua error for the whole
	// call. The proxy lets Redis run that call (see RWCall.BatchKeys).
	Renew352 RenewStyle = 352
	// Renew40 (4.0.0): for a lock whose first listed holder holds it, the
	// hash and every hold's timeout key (every field's) are re-armed.
	Renew40 RenewStyle = 400
	// Renew47 (4.7.0): each lock lists its holders; the timeout keys of
	// those that hold it are re-armed, and the hash if any holds it.
	Renew47 RenewStyle = 470
)

// RWCall is what a read-write lock's call carries beyond Call's fields.
type RWCall struct {
	// Write: the write lock's script (Holder is then <lockName>:write).
	Write bool
	// WriteHolder: a read acquire's own write field (a write holder may
	// take the read lock).
	WriteHolder string
	// TimeoutPrefix: a read acquire's or unlock's
	// {name}:<lockName>:rwlock_timeout (timeout keys add :<n>).
	TimeoutPrefix string
	// KeyPrefix: a read unlock's {name}, under which it reads every hold's
	// timeout key.
	KeyPrefix string
	// A read renewal: its body's version, its locks, and (Renew352) every
	// key of the call in order, which that body reads timeout keys under.
	Style     RenewStyle
	Locks     []RWLock
	BatchKeys []string
}

// RWLock is one lock of a read renewal: its key, the prefix of its
// timeout keys ({name}) and the holders the call names for it (one before
// 4.7.0).
type RWLock struct {
	Key, Prefix string
	Holders     []string
}

// parseReadAcquire: KEYS name, timeoutPrefix; ARGV lease, lockName,
// lockName:write.
func parseReadAcquire(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if len(keys) != 2 || len(argv) != 3 {
		return c, false
	}
	if c, ok = parseAcquire(r, keys[:1], argv[:2]); !ok {
		return c, false
	}
	rw := &RWCall{}
	if rw.TimeoutPrefix, ok = key(keys[1]); !ok {
		return c, false
	}
	if rw.WriteHolder, ok = holder(argv[2]); !ok {
		return c, false
	}
	c.RW = rw
	return c, true
}

// parseWriteAcquire: KEYS name; ARGV lease, lockName:write.
func parseWriteAcquire(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if c, ok = parseAcquire(r, keys, argv); ok {
		c.RW = &RWCall{Write: true}
	}
	return c, ok
}

// parseReadUnlock: KEYS name, channel, timeoutPrefix, {name}, latch; ARGV
// message, lockName, PUBLISH|SPUBLISH, latchTtl. It has no lease (Lease
// stays 0): a read unlock re-arms the hash to the longest hold left.
func parseReadUnlock(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if len(keys) != 5 || len(argv) != 4 {
		return c, false
	}
	c = Call{Recipe: r, Channel: string(keys[1]), Latch: string(keys[4]), Message: string(argv[0])}
	rw := &RWCall{}
	if c.Key, ok = key(keys[0]); !ok {
		return c, false
	}
	if rw.TimeoutPrefix, ok = key(keys[2]); !ok {
		return c, false
	}
	if rw.KeyPrefix, ok = key(keys[3]); !ok {
		return c, false
	}
	if c.Holder, ok = holder(argv[1]); !ok {
		return c, false
	}
	if c.Publish, ok = publish(argv[2]); !ok {
		return c, false
	}
	n, err := strconv.ParseInt(string(argv[3]), 10, 64)
	if err != nil || n <= 0 || n > MaxLease.Milliseconds() || len(c.Latch) == 0 {
		return c, false
	}
	c.LatchTTL, c.RW = n, rw
	return c, true
}

// parseWriteUnlock: RLock's unlock layout (KEYS name, channel, latch; ARGV
// message, lease, lockName:write, PUBLISH|SPUBLISH, latchTtl).
func parseWriteUnlock(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if c, ok = parseUnlock(r, keys, argv); ok {
		c.RW = &RWCall{Write: true}
	}
	return c, ok
}

// parseReadForceUnlock and parseWriteForceUnlock: RLock's force-unlock
// layout (KEYS name, channel; ARGV message, PUBLISH|SPUBLISH).
func parseReadForceUnlock(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if c, ok = parseForceUnlock(r, keys, argv); ok {
		c.RW = &RWCall{}
	}
	return c, ok
}

func parseWriteForceUnlock(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if c, ok = parseForceUnlock(r, keys, argv); ok {
		c.RW = &RWCall{Write: true}
	}
	return c, ok
}

// parseReadRenew352 and parseReadRenew40: KEYS pairs name_i, {name_i};
// ARGV lease, lockName_1..lockName_N.
func parseReadRenew352(r *Recipe, keys, argv [][]byte) (Call, bool) {
	return parseReadRenewOld(r, keys, argv, Renew352)
}

func parseReadRenew40(r *Recipe, keys, argv [][]byte) (Call, bool) {
	return parseReadRenewOld(r, keys, argv, Renew40)
}

func parseReadRenewOld(r *Recipe, keys, argv [][]byte, style RenewStyle) (c Call, ok bool) {
	n := len(keys) / 2
	if n == 0 || len(keys) != 2*n || n > maxBatch || len(argv) != n+1 {
		return c, false
	}
	c, rw, ok := renewLocks(r, keys, argv[0], style)
	if !ok {
		return c, false
	}
	for i := range rw.Locks {
		h, ok := holder(argv[i+1])
		if !ok {
			return c, false
		}
		rw.Locks[i].Holders = []string{h}
	}
	return c, true
}

// parseReadRenew47: KEYS pairs name_i, {name_i}; ARGV lease, then per lock
// a count and that many lockNames.
func parseReadRenew47(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	n := len(keys) / 2
	if n == 0 || len(keys) != 2*n || n > maxBatch || len(argv) < 1+2*n {
		return c, false
	}
	c, rw, ok := renewLocks(r, keys, argv[0], Renew47)
	if !ok {
		return c, false
	}
	a := 1
	for i := range rw.Locks {
		count, ok := parseCount(argv[a])
		if !ok || count > maxBatch || a+1+count > len(argv) {
			return c, false
		}
		a++
		hs := make([]string, count)
		for j := range hs {
			if hs[j], ok = holder(argv[a]); !ok {
				return c, false
			}
			a++
		}
		rw.Locks[i].Holders = hs
	}
	return c, a == len(argv)
}

// renewLocks reads a read renewal's key pairs and lease.
func renewLocks(r *Recipe, keys [][]byte, leaseArg []byte, style RenewStyle) (c Call, rw *RWCall, ok bool) {
	c = Call{Recipe: r}
	if c.Lease, ok = lease(leaseArg); !ok {
		return c, nil, false
	}
	rw = &RWCall{Style: style, Locks: make([]RWLock, len(keys)/2)}
	for i := range rw.Locks {
		l := &rw.Locks[i]
		if l.Key, ok = key(keys[2*i]); !ok {
			return c, nil, false
		}
		if l.Prefix, ok = key(keys[2*i+1]); !ok {
			return c, nil, false
		}
	}
	if style == Renew352 {
		rw.BatchKeys = make([]string, len(keys))
		for i, k := range keys {
			rw.BatchKeys[i] = string(k)
		}
	}
	c.RW = rw
	return c, rw, true
}
