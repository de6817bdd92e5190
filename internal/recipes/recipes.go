// Package recipes recognises the lock scripts of clients' own lock
// libraries (Redisson's RLock, RSpinLock and RFencedLock; RReadWriteLock, rwlock.go;
// RFairLock, fair.go;
// value locks, setnx.go) in the requests they
// send, so that fenceproxy can make those locks as safe as its own lock
// family without a change to the client: a recognised grant or renewal is
// replied only after --min-replicas acknowledgements, undone on a
// shortfall, and given a fence-store token (the resource is the lock key).
//
// Its job is recognition only: Match reads an EVAL or EVALSHA request and,
// if it is a known recipe with arguments that parse, returns the request's
// canonical fields (Call). The proxy never runs the client's script: it runs
// its own twin, an operation of the lock writer's opsScript with the same
// effect on the recipe's keys (internal/locks, recipeops.go), and answers
// in the recipe's own reply shape (internal/commands, recipes.go). So a
// known SHA never meets NOSCRIPT, whether or not Redis has the body cached.
//
// Recognition is by the script's SHA-1 alone: EVALSHA names it, and an
// EVAL's body is hashed only when its length is a known body's, so other
// scripts cost a map lookup. The repository holds the SHA-1s and the
// argument layouts (docs/design/recipes.md), never a library's script.
// Anything that does not match, or whose arguments do not parse (a wrong
// key count, a lease that is not a positive integer), is forwarded as
// before.
package recipes

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// Kind is what a recognised script does to its lock.
type Kind int

const (
	// Acquire grants the lock to its holder, or re-enters it (count +1);
	// a busy lock answers its pttl.
	Acquire Kind = iota + 1
	// RenewBatch re-arms each of its locks that its holder still holds
	// (Redisson's watchdog: up to lockWatchdogBatchSize locks per call).
	RenewBatch
	// Unlock steps the holder's count back, deleting the lock (and
	// publishing the wake-up) at 0; a latch key makes a retry idempotent.
	Unlock
	// ForceUnlock deletes the lock whoever holds it.
	ForceUnlock
)

// Recipe is one known script.
type Recipe struct {
	Name    string // library and script, for logs and docs
	SHA     string // hex SHA-1 of the body, lower case
	BodyLen int    // the body's length in bytes (an EVAL of another length is not it)
	Kind    Kind
	// Publishes: the script publishes the unlock message (RLock), which
	// RSpinLock's does not.
	Publishes bool
	// Fenced: an Acquire that also hands out a token (RFencedLock): its
	// second key is the token key, which Redisson INCRs; the proxy raises
	// it to the grant's fence-store token instead.
	Fenced bool
	// TokenReply: the grant is answered [-1, token], a refusal [pttl, -1]
	// (RFencedLock's lockAndGetToken); else nil and pttl.
	TokenReply bool
	parse      func(r *Recipe, keys, argv [][]byte) (Call, bool)
}

// Lock is one lock a renewal names: its key and its holder.
type Lock struct{ Key, Holder string }

// Call is a recognised request's fields, copied out of the request.
type Call struct {
	Recipe *Recipe
	// RW: a read-write lock's own fields (rwlock.go); nil for the others.
	RW *RWCall
	// Key and Holder: the lock (Acquire, Unlock, ForceUnlock: Key only).
	Key, Holder string
	// TokenKey: a Fenced Acquire's token key (redisson_lock_token:{name}).
	TokenKey string
	// Lease is the lease an Acquire, RenewBatch or Unlock (a count still
	// above 0 re-arms it) asks for.
	Lease time.Duration
	// Locks are a RenewBatch's locks, in the request's order.
	Locks []Lock
	// Unlock and ForceUnlock: the wake-up channel, the command that
	// publishes on it (PUBLISH or SPUBLISH; "" for none) and the message;
	// Unlock's latch key and its ttl (ms).
	Channel, Publish, Message string
	Latch                     string
	LatchTTL                  int64
	// Fair: a fair lock's queue, timeout set, wait and clock (fair.go).
	Fair FairQueue
}

// Bounds on what a recognised call may carry; a call beyond them is
// forwarded, and Redis answers it as it would.
const (
	MaxKeyLen    = 512 // the fence store's longest resource
	MaxHolderLen = 256 // the lock family's longest owner
	MaxLease     = 30 * 24 * time.Hour
	maxBatch     = 1000 // renewals in one call (Redisson sends up to 100)
)

// The catalogue: Redisson 3.52.0, 4.0.0, 4.7.0 and 4.8.0 send these same bodies
// (docs/design/recipes.md, "Script catalogue").
var catalogue = []Recipe{
	{Name: "redisson lock.acquire", SHA: "149c5a8bf18676fd99e9e6e24923bd64d9b62f94", BodyLen: 234, Kind: Acquire, parse: parseAcquire},
	{Name: "redisson fenced.acquire-token", SHA: "49babb5a1e6a0c5f188c2ae62b93b51cdfd63e45", BodyLen: 288, Kind: Acquire, Fenced: true, TokenReply: true, parse: parseFencedAcquire},
	{Name: "redisson fenced.acquire", SHA: "46b5551ba403d6152a7a6eca122e08728d6c8c66", BodyLen: 262, Kind: Acquire, Fenced: true, parse: parseFencedAcquire},
	{Name: "redisson spin.acquire", SHA: "dad0f8d619e548e04f21fb48d50be5034df3adae", BodyLen: 339, Kind: Acquire, parse: parseAcquire},
	{Name: "redisson lock.renew-batch", SHA: "6a3d31570dc6f4b0bd32bcdc8e75667747c6f635", BodyLen: 220, Kind: RenewBatch, parse: parseRenewBatch},
	{Name: "redisson lock.unlock", SHA: "6866459238a13a701d42f4971f12d9f3a50e2442", BodyLen: 471, Kind: Unlock, Publishes: true, parse: parseUnlock},
	{Name: "redisson spin.unlock", SHA: "73ac2729af29ea9a975f95e8097f7ee9a74cce3d", BodyLen: 432, Kind: Unlock, parse: parseSpinUnlock},
	{Name: "redisson lock.forceunlock", SHA: "605e338249a7a1d40df83b04f7658354f883b41b", BodyLen: 107, Kind: ForceUnlock, Publishes: true, parse: parseForceUnlock},
	{Name: "redisson spin.forceunlock", SHA: "51b433c3cc9a6ca991b3aefec63d23490c246318", BodyLen: 68, Kind: ForceUnlock, parse: parseSpinForceUnlock},
	// RReadWriteLock (rwlock.go): the write lock's watchdog sends lock.renew-batch above.
	{Name: "redisson read.acquire", SHA: "95553a6ff11176c18e71344e89d116b06fd6f753", BodyLen: 717, Kind: Acquire, parse: parseReadAcquire},
	{Name: "redisson write.acquire", SHA: "6306ba3bf1f563b284bed52d305fce615c6664d9", BodyLen: 508, Kind: Acquire, parse: parseWriteAcquire},
	{Name: "redisson read.unlock", SHA: "6e1b10e11ac0a3ed8e902562ecd32ce01b553039", BodyLen: 1295, Kind: Unlock, Publishes: true, parse: parseReadUnlock},
	{Name: "redisson write.unlock", SHA: "21f5fb0f8ddfa9be5c3e0c9757c128796add75c6", BodyLen: 860, Kind: Unlock, Publishes: true, parse: parseWriteUnlock},
	{Name: "redisson read.forceunlock", SHA: "27dbe744e95c1d854a7f556cc6817030de2d0d01", BodyLen: 148, Kind: ForceUnlock, Publishes: true, parse: parseReadForceUnlock},
	{Name: "redisson write.forceunlock", SHA: "2e2cb2a3b13e2e80e4236ef6a25beaf365dba608", BodyLen: 149, Kind: ForceUnlock, Publishes: true, parse: parseWriteForceUnlock},
	{Name: "redisson read.renew-batch.3.52", SHA: "1affef780a01e1406cb1968c62918f618d10d6a3", BodyLen: 596, Kind: RenewBatch, parse: parseReadRenew352},
	{Name: "redisson read.renew-batch.4.0", SHA: "d6564f42b98d6eece0e940a478ee248f80b8a90a", BodyLen: 596, Kind: RenewBatch, parse: parseReadRenew40},
	{Name: "redisson read.renew-batch.4.7", SHA: "38d2b478dfbe264ab67c221b7e4be62245f00ba0", BodyLen: 574, Kind: RenewBatch, parse: parseReadRenew47},
	// RFairLock (fair.go).
	{Name: "redisson fair.acquire", SHA: "8f6ed299ffd259f0539c20f89253998c0777ea75", BodyLen: 1541, Kind: FairAcquire, parse: parseFairAcquire(false)},
	{Name: "redisson fair.tryonce", SHA: "d20501c26a30adf6fb0fe9883bbbcc497e6157e2", BodyLen: 929, Kind: FairAcquire, parse: parseFairAcquire(true)},
	{Name: "redisson fair.unlock", SHA: "367f80bd2e300e411fb0936d9b601e5bcb3fd4b6", BodyLen: 1173, Kind: FairUnlock, Publishes: true, parse: parseFairUnlock},
	{Name: "redisson fair.forceunlock", SHA: "71ed11d4e4818119ac560b3d670a7f08256afc46", BodyLen: 555, Kind: FairForceUnlock, Publishes: true, parse: parseFairForceUnlock},
	{Name: "redisson fair.dequeue", SHA: "d1ddef65ad80886b5d36e023c99930044ddd653a", BodyLen: 305, Kind: FairDequeue, parse: parseFairDequeue},
}

var (
	bySHA   = map[string]*Recipe{}
	lengths = map[int]bool{}
)

func init() {
	for i := range catalogue {
		r := &catalogue[i]
		bySHA[r.SHA] = r
		lengths[r.BodyLen] = true
	}
}

// Catalogue returns the known recipes, for documentation and tests.
func Catalogue() []Recipe { return append([]Recipe(nil), catalogue...) }

// Lookup returns the recipe an EVAL or EVALSHA request runs (args[0] is
// the command name, args[1] the body or the SHA), nil if it is not one of
// them. It does not parse the rest; Match does.
func Lookup(args [][]byte) *Recipe {
	if len(args) < 3 {
		return nil
	}
	switch {
	case strings.EqualFold(string(args[0]), "evalsha"):
		if len(args[1]) != 2*sha1.Size {
			return nil
		}
		var lower [2 * sha1.Size]byte
		for i, c := range args[1] {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			lower[i] = c
		}
		return bySHA[string(lower[:])]
	case strings.EqualFold(string(args[0]), "eval"):
		if !lengths[len(args[1])] {
			return nil
		}
		sum := sha1.Sum(args[1])
		return bySHA[hex.EncodeToString(sum[:])]
	}
	return nil
}

// Match recognises a request: the recipe it runs and its fields. ok is
// false for anything to forward as it came.
func Match(args [][]byte) (c Call, ok bool) { return Lookup(args).Match(args) }

// Match is Match for a request that Lookup found runs r (nil: none), which
// it does not look up again: for an EVAL that is a SHA-1 of the body.
func (r *Recipe) Match(args [][]byte) (c Call, ok bool) {
	if r == nil || r.parse == nil { // a value lock's script: MatchValue's
		return c, false
	}
	n, ok := parseCount(args[2])
	if !ok || 3+n > len(args) {
		return c, false
	}
	return r.parse(r, args[3:3+n], args[3+n:])
}

// parseAcquire: KEYS name; ARGV lease, lockName.
func parseAcquire(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if len(keys) != 1 || len(argv) != 2 {
		return c, false
	}
	c = Call{Recipe: r}
	if c.Key, ok = key(keys[0]); !ok {
		return c, false
	}
	if c.Lease, ok = lease(argv[0]); !ok {
		return c, false
	}
	c.Holder, ok = holder(argv[1])
	return c, ok
}

// parseFencedAcquire: KEYS name, tokenKey; ARGV lease, lockName.
func parseFencedAcquire(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if len(keys) != 2 {
		return c, false
	}
	if c, ok = parseAcquire(r, keys[:1], argv); !ok {
		return c, false
	}
	c.TokenKey, ok = key(keys[1])
	return c, ok
}

// parseRenewBatch: KEYS name1..nameN; ARGV lease, lockName1..lockNameN.
func parseRenewBatch(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if len(keys) == 0 || len(keys) > maxBatch || len(argv) != len(keys)+1 {
		return c, false
	}
	c = Call{Recipe: r, Locks: make([]Lock, len(keys))}
	if c.Lease, ok = lease(argv[0]); !ok {
		return c, false
	}
	for i := range keys {
		l := &c.Locks[i]
		if l.Key, ok = key(keys[i]); !ok {
			return c, false
		}
		if l.Holder, ok = holder(argv[i+1]); !ok {
			return c, false
		}
	}
	return c, true
}

// parseUnlock: KEYS name, channel, latch; ARGV message, lease, lockName,
// PUBLISH|SPUBLISH, latchTtl.
func parseUnlock(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if len(keys) != 3 || len(argv) != 5 {
		return c, false
	}
	c = Call{Recipe: r, Channel: string(keys[1]), Latch: string(keys[2]), Message: string(argv[0])}
	if c.Key, ok = key(keys[0]); !ok {
		return c, false
	}
	if c.Publish, ok = publish(argv[3]); !ok {
		return c, false
	}
	return unlockTail(c, argv[1], argv[2], argv[4])
}

// parseSpinUnlock: KEYS name, latch; ARGV lease, lockName, latchTtl.
func parseSpinUnlock(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if len(keys) != 2 || len(argv) != 3 {
		return c, false
	}
	c = Call{Recipe: r, Latch: string(keys[1])}
	if c.Key, ok = key(keys[0]); !ok {
		return c, false
	}
	return unlockTail(c, argv[0], argv[1], argv[2])
}

// unlockTail reads an unlock's lease, lockName and latch ttl.
func unlockTail(c Call, leaseArg, holderArg, latchTTL []byte) (Call, bool) {
	var ok bool
	if c.Lease, ok = lease(leaseArg); !ok {
		return c, false
	}
	if c.Holder, ok = holder(holderArg); !ok {
		return c, false
	}
	n, err := strconv.ParseInt(string(latchTTL), 10, 64)
	if err != nil || n <= 0 || n > MaxLease.Milliseconds() || len(c.Latch) == 0 {
		return c, false
	}
	c.LatchTTL = n
	return c, true
}

// parseForceUnlock: KEYS name, channel; ARGV message, PUBLISH|SPUBLISH.
func parseForceUnlock(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if len(keys) != 2 || len(argv) != 2 {
		return c, false
	}
	c = Call{Recipe: r, Channel: string(keys[1]), Message: string(argv[0])}
	if c.Key, ok = key(keys[0]); !ok {
		return c, false
	}
	c.Publish, ok = publish(argv[1])
	return c, ok
}

// parseSpinForceUnlock: KEYS name; no ARGV.
func parseSpinForceUnlock(r *Recipe, keys, argv [][]byte) (c Call, ok bool) {
	if len(keys) != 1 || len(argv) != 0 {
		return c, false
	}
	c = Call{Recipe: r}
	c.Key, ok = key(keys[0])
	return c, ok
}

func parseCount(b []byte) (int, bool) {
	n, err := strconv.Atoi(string(b))
	return n, err == nil && n >= 0
}

func key(b []byte) (string, bool) {
	return string(b), len(b) > 0 && len(b) <= MaxKeyLen
}

func holder(b []byte) (string, bool) {
	return string(b), len(b) > 0 && len(b) <= MaxHolderLen
}

func lease(b []byte) (time.Duration, bool) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n <= 0 || n > MaxLease.Milliseconds() {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// publish accepts the two commands an unlock may publish with.
func publish(b []byte) (string, bool) {
	switch strings.ToLower(string(b)) {
	case "publish":
		return "publish", true
	case "spublish":
		return "spublish", true
	}
	return "", false
}
