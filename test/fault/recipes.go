package fault

import (
	"strconv"
	"strings"
)

// Clients' own lock recipes (docs/design/recipes.md): beside the lock
// family's clients, some clients lock as an unchanged Redisson RLock does
// (EVALSHA of its acquire and unlock scripts, which the proxy answers by
// SHA without Redis having them, and of its watchdog's renewal, right
// after the grant and after a pause that may outlast the lease) and some
// as redis-py's Lock does (SET key value NX PX ttl on a --lock-keys key,
// released by its script by EVALSHA). Each learns its grant's fence-store
// token with LOCK.TOKEN and fences its writes with FENCE.EXEC on the lock
// key. Their ops are recorded as the family's Acquire, Renew, Release,
// Check and Exec of the lock key as the resource, so every check applies
// to them unchanged; only the reply shapes differ (ClassifyRecipe), and a
// grant's token comes from the LOCK.TOKEN that follows it (GrantToken), a
// renewal's from its grant's (RenewToken).

// Recipe names a client's own lock recipe.
type Recipe string

const (
	Redisson Recipe = "redisson" // RLock: lock.acquire, the watchdog's renewal and lock.unlock by EVALSHA
	SetNX    Recipe = "setnx"    // redis-py Lock: SET NX PX, release by EVALSHA
)

// Recipes are the recipes of the workload, in a fixed order.
var Recipes = []Recipe{Redisson, SetNX}

// The scripts' SHAs (docs/design/recipes.md; the proxy knows them, Redis
// need not).
const (
	redissonAcquireSHA = "149c5a8bf18676fd99e9e6e24923bd64d9b62f94" // KEYS name; ARGV lease, lockName: nil granted, int pttl
	redissonUnlockSHA  = "6866459238a13a701d42f4971f12d9f3a50e2442" // KEYS name, channel, latch; ARGV 0, lease, lockName, publish, latchTtl: nil/0/1
	redisPyReleaseSHA  = "c3f8721cbb97f72bc19e972846bd7aaf91901658" // KEYS name; ARGV token: 1 released, 0 not held
	redissonRenewSHA   = "6a3d31570dc6f4b0bd32bcdc8e75667747c6f635" // the watchdog's batch: KEYS names; ARGV lease, lockNames: 1/0 each
)

// recipeRenewArgs is the Redisson watchdog's renewal of one lock.
func recipeRenewArgs(key, holder string, ttl int64) []string {
	return []string{"EVALSHA", redissonRenewSHA, "1", key, strconv.FormatInt(ttl, 10), holder}
}

// recipeKeyPrefix is each recipe's lock keys' prefix; the SET NX ones
// match the proxy's --lock-keys (lockKeysFlag). Family resources (hot:N)
// never share a key with a recipe lock: the model is one lock per
// resource.
var recipeKeyPrefix = map[Recipe]string{Redisson: "rlock:", SetNX: "nxlock:"}

// lockKeysFlag is the proxy's --lock-keys in the modes with recipe clients.
const lockKeysFlag = "nxlock:*"

// Settings of the recipe workload, per recipe.
const (
	recipeResources = 3
	recipeClients   = 4
)

// recipeAcquireArgs is the acquire of recipe r on key for holder with a ttl ms lease.
func recipeAcquireArgs(r Recipe, key, holder string, ttl int64) []string {
	if r == Redisson {
		return []string{"EVALSHA", redissonAcquireSHA, "1", key, strconv.FormatInt(ttl, 10), holder}
	}
	return []string{"SET", key, holder, "NX", "PX", strconv.FormatInt(ttl, 10)}
}

// recipeReleaseArgs is the release of recipe r; req makes Redisson's
// unlock latch key unique to this unlock, as its request id does.
func recipeReleaseArgs(r Recipe, key, holder string, ttl int64, req string) []string {
	if r == Redisson {
		return []string{"EVALSHA", redissonUnlockSHA, "3", key, "redisson_lock__channel:{" + key + "}",
			"redisson_unlock_latch:{" + key + "}:" + req, "0", strconv.FormatInt(ttl, 10), holder, "PUBLISH", "3000"}
	}
	return []string{"EVALSHA", redisPyReleaseSHA, "1", key, holder}
}

// ClassifyRecipe reads the raw reply of a recipe's op of kind k (Acquire
// or Release; the others are the family's commands). A granted acquire is
// OK with its token still 0: GrantToken fills it in.
func ClassifyRecipe(r Recipe, k Kind, reply []byte) (Outcome, int64) {
	if k == Renew && r == Redisson && !strings.HasPrefix(string(reply), "-") {
		switch string(reply) {
		case "*1\r\n:1\r\n":
			return OK, 0 // the caller fills in the holder's token (RenewToken)
		case "*1\r\n:0\r\n":
			return Null, 0
		}
		return Unknown, 0
	}
	if strings.HasPrefix(string(reply), "-") || (k != Acquire && k != Release) {
		o, n, _ := Classify(k, reply)
		return o, n
	}
	n, isInt := parseInt(reply)
	switch {
	case k == Acquire && r == Redisson && isNull(reply):
		return OK, 0
	case k == Acquire && r == Redisson && isInt:
		return Null, 0 // the holder's pttl, or the proxy's "retry in n ms" of a refused grant
	case k == Acquire && r == SetNX && string(reply) == "+OK\r\n":
		return OK, 0
	case k == Acquire && r == SetNX && isNull(reply):
		return Null, 0
	case k == Release && r == Redisson && isNull(reply):
		return Zero, 0 // not the holder
	case k == Release && isInt && n == 1:
		return OK, 1
	case k == Release && r == SetNX && isInt && n == 0:
		return Zero, 0
	}
	// Redisson's unlock answers 0 when a re-entered lock is still held,
	// which the workload never does: unknown, like any other surprise.
	return Unknown, 0
}

// grantToken completes grant, a recipe acquire answered "granted", with
// the token of tokenOp, its holder's LOCK.TOKEN right after it. If that
// did not answer a token (the connection failed; the lease ran out, or
// Redis lost the lock, before it was asked), the grant took effect with a
// token nobody saw: it is recorded as an acquire of unknown outcome whose
// effect is over by its reply (End and ErrAt), which is what the checks
// and the model allow for an acquire whose reply was lost: granted with a
// token above the newest (the model's holder with holderTok 0, the newest
// then only a lower bound), or not.
func grantToken(grant, tokenOp *Op) {
	if grant.Kind != Acquire || grant.Outcome != OK || grant.Recipe == "" {
		return
	}
	if tokenOp != nil && tokenOp.Outcome == OK && tokenOp.Result > 0 {
		grant.Result = tokenOp.Result
		return
	}
	why := "not sent"
	if tokenOp != nil {
		why = tokenOp.Outcome.String()
		if tokenOp.Err != "" {
			why += ": " + tokenOp.Err
		}
	}
	grant.Outcome = Unknown
	grant.ErrAt = grant.End
	grant.Err = "granted; its token is unknown (LOCK.TOKEN: " + why + ")"
}

// recipeCounts counts the recipe grants of h, per recipe, and those whose
// token stayed unknown.
func recipeCounts(h *History) (granted map[Recipe]int, unknownToken int) {
	granted = map[Recipe]int{}
	for _, op := range h.Ops {
		if op.Recipe == "" || op.Kind != Acquire {
			continue
		}
		switch {
		case op.Outcome == OK:
			granted[op.Recipe]++
		case op.Known() && strings.HasPrefix(op.Err, "granted;"):
			unknownToken++
		}
	}
	return granted, unknownToken
}
