package recipes

import (
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/auth"
)

// Value locks: the recipes whose lock is a string key holding the
// holder's random value, with the lock's lease as the key's expiry.
// redis-py's Lock, go-redsync/redsync, bsm/redislock and node-redlock all
// lock this way (docs/design/recipes.md, section 2):
//
//   - SET key value NX [PX ms | EX s], on a key matching --lock-keys
//     (KeyPatterns): a plain SET NX could be anything, so only the keys
//     the operator names are locks. Options in any order and case (go-redis
//     sends "set k v ex 8 nx"); with GET, XX, KEEPTTL, EXAT, PXAT or a
//     repeated option it is not a lock grant and is forwarded. (No lock
//     library sends EXAT or PXAT, and a lease given as a time on the
//     client's clock cannot be judged by the late-reply rule, which counts
//     from when the proxy read the request.) Without PX or EX it is a
//     grant with no lease (redis-py's Lock(timeout=None)): acknowledged and
//     tokened, held until it is released.
//   - the libraries' own acquire, release and extend scripts, by SHA-1
//     alone (their bodies are unambiguous, so they need no --lock-keys).
//     A call whose arguments do not fit (a lease that is not a positive
//     integer, a redlock key given twice) is forwarded.
//
// MatchValue returns such a request's ValueCall; the command layer runs
// it as the lock manager's value twin and answers in the library's reply
// shape (Reply).

// The value recipes' kinds: numbered apart from the hash recipes' so that
// both lists can grow.
const (
	// ValueAcquire grants a free key to its holder (SET NX, redlock's
	// acquire, redislock's obtain, which also re-obtains a key whose value
	// starts with its token).
	ValueAcquire Kind = 100 + iota
	// ValueExtend re-arms the key's expiry if it holds the holder's value
	// (redis-py's extend and reacquire, redsync's touch, redislock's
	// refresh, redlock's extend; redsync's touchWithSetNX also grants a
	// free key).
	ValueExtend
	// ValueRelease deletes the key if it holds the holder's value.
	ValueRelease
)

// Shape is how a value recipe's reply reads: each library has its own.
type Shape int

const (
	// ShapeOK: +OK granted, nil not (SET NX, redislock's obtain).
	ShapeOK Shape = iota + 1
	// ShapeCount: the number of keys granted, extended or released, 0
	// for none (redlock).
	ShapeCount
	// ShapeOne: 1 done, 0 not (redis-py's release, extend and reacquire;
	// redsync's touch and touchWithSetNX; redislock's release and
	// refresh).
	ShapeOne
	// ShapeDelete: redsync's delete: 1 deleted, 0 another's value, -1 no
	// key at all.
	ShapeDelete
)

// ValueCall is a recognised value-lock request's fields.
type ValueCall struct {
	Name  string // the recipe, for logs
	Kind  Kind
	Shape Shape
	Key   string
	// Keys: redlock's calls with more than one key (all of them, Key the
	// first), distinct; nil for one key.
	Keys   []string
	Holder string // the key's value: the holder's random token
	// Lease is what a grant or extend arms; 0 for SET NX without an
	// expiry (redis-py's default Lock(timeout=None)): a grant with no lease.
	Lease time.Duration
	// AddToTTL: redis-py's extend without replace_ttl adds Lease to what
	// is left of the key's expiry.
	AddToTTL bool
	// GrantFree: redsync's touchWithSetNX also grants the key when it is
	// free.
	GrantFree bool
	// Prefix: redislock's obtain also re-obtains a key whose value's
	// first Prefix bytes are the holder's (its token); 0 for none.
	Prefix int
	// SET: the request is a SET command (its refusal is nil in the
	// client's protocol; Shape is ShapeOK).
	SET bool
}

// valueRecipe is one known value-lock script.
type valueRecipe struct {
	Recipe
	shape Shape
	parse func(r *valueRecipe, keys, argv [][]byte) (ValueCall, bool)
}

// The value-lock scripts (docs/design/recipes.md, section 2). redis-py's
// release is one body for 4.6.0 to 8.2.0; its extend and reacquire
// changed in 8.2.0 only where the new ttl is not positive, which these
// twins never see (such a call is forwarded). redislock's pttl script is
// a read: it is forwarded.
var valueCatalogue = []valueRecipe{
	{Recipe{Name: "redis-py Lock release", SHA: "c3f8721cbb97f72bc19e972846bd7aaf91901658", BodyLen: 185, Kind: ValueRelease}, ShapeOne, parseValueRelease},
	{Recipe{Name: "redis-py Lock extend", SHA: "a4e8783852e6b949f9ef3a97212805108459a890", BodyLen: 503, Kind: ValueExtend}, ShapeOne, parsePyExtend},
	{Recipe{Name: "redis-py 8.2 Lock extend", SHA: "f335028e570b0f7f958d558097d9857b8dd9b09b", BodyLen: 574, Kind: ValueExtend}, ShapeOne, parsePyExtend},
	{Recipe{Name: "redis-py Lock reacquire", SHA: "1cac51482acf5858da00f6d685d68f886cd6b6b2", BodyLen: 198, Kind: ValueExtend}, ShapeOne, parseValueExtend},
	{Recipe{Name: "redis-py 8.2 Lock reacquire", SHA: "86adac77e1e4eac7090cbbe12386ad98a2b4124c", BodyLen: 252, Kind: ValueExtend}, ShapeOne, parseValueExtend},
	{Recipe{Name: "redsync delete", SHA: "e950836ed1e694540c503ef9972b8de518044d3b", BodyLen: 161, Kind: ValueRelease}, ShapeDelete, parseValueRelease},
	{Recipe{Name: "redsync touch", SHA: "d75bb8b5bd13532ddedd17762e772346e39b321e", BodyLen: 119, Kind: ValueExtend}, ShapeOne, parseValueExtend},
	{Recipe{Name: "redsync touchWithSetNX", SHA: "b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79", BodyLen: 200, Kind: ValueExtend}, ShapeOne, parseTouchWithSetNX},
	{Recipe{Name: "redislock obtain", SHA: "80a1b5f2cfccec3b7119ba7721d2127682b691a7", BodyLen: 285, Kind: ValueAcquire}, ShapeOK, parseRedislockObtain},
	{Recipe{Name: "redislock release", SHA: "cf0e94b2e9ffc7e04395cf88f7583fc309985910", BodyLen: 97, Kind: ValueRelease}, ShapeOne, parseValueRelease},
	{Recipe{Name: "redislock refresh", SHA: "a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf", BodyLen: 110, Kind: ValueExtend}, ShapeOne, parseValueExtend},
	// redlock's scripts take any number of keys (all of a lock's
	// resources); a key given twice is forwarded.
	{Recipe{Name: "redlock 4 acquire", SHA: "e5a322e2634ef59a516e8ea150cb085afafee684", BodyLen: 321, Kind: ValueAcquire}, ShapeCount, parseRedlock},
	{Recipe{Name: "redlock 4 extend", SHA: "ce46f80993d5dac20dd066eb301a4e37994bdbed", BodyLen: 349, Kind: ValueExtend}, ShapeCount, parseRedlock},
	{Recipe{Name: "redlock 4 release", SHA: "0f0f23b9048b36752b5be114f357ba083449f908", BodyLen: 257, Kind: ValueRelease}, ShapeCount, parseRedlockRelease},
	{Recipe{Name: "redlock 5 acquire", SHA: "96da70f7716f27d278a5218544df37fd8b0a5e4c", BodyLen: 338, Kind: ValueAcquire}, ShapeCount, parseRedlock},
	{Recipe{Name: "redlock 5 extend", SHA: "aed6f382e410db8ba7926d4e5e9aab410bf2a78a", BodyLen: 366, Kind: ValueExtend}, ShapeCount, parseRedlock},
	{Recipe{Name: "redlock 5 release", SHA: "e4612211c9f8f51c257e26e056b0a654b3187242", BodyLen: 274, Kind: ValueRelease}, ShapeCount, parseRedlockRelease},
}

var valueBySHA = map[string]*valueRecipe{}

func init() {
	for i := range valueCatalogue {
		r := &valueCatalogue[i]
		valueBySHA[r.SHA] = r
		bySHA[r.SHA] = &r.Recipe
		lengths[r.BodyLen] = true
	}
}

// ValueCatalogue returns the known value-lock scripts, for documentation
// and tests.
func ValueCatalogue() []Recipe {
	out := make([]Recipe, len(valueCatalogue))
	for i := range valueCatalogue {
		out[i] = valueCatalogue[i].Recipe
	}
	return out
}

// MatchValue recognises a value-lock script call (EVAL or EVALSHA): ok is
// false for anything else, which Match or the forwarder then takes.
func MatchValue(args [][]byte) (c ValueCall, ok bool) { return Lookup(args).MatchValue(args) }

// MatchValue is MatchValue for a request that Lookup found runs r (nil:
// none), which it does not look up again.
func (r *Recipe) MatchValue(args [][]byte) (c ValueCall, ok bool) {
	if r == nil {
		return c, false
	}
	vr := valueBySHA[r.SHA]
	if vr == nil {
		return c, false
	}
	n, ok := parseCount(args[2])
	if !ok || 3+n > len(args) {
		return c, false
	}
	return vr.parse(vr, args[3:3+n], args[3+n:])
}

// valueCall starts a call of r on its one key and holder.
func (r *valueRecipe) valueCall(keys, argv [][]byte, nargv int) (c ValueCall, ok bool) {
	if len(keys) != 1 || len(argv) != nargv {
		return c, false
	}
	c = ValueCall{Name: r.Name, Kind: r.Kind, Shape: r.shape}
	if c.Key, ok = key(keys[0]); !ok {
		return c, false
	}
	c.Holder, ok = holder(argv[0])
	return c, ok
}

// parseValueRelease: KEYS key; ARGV value.
func parseValueRelease(r *valueRecipe, keys, argv [][]byte) (ValueCall, bool) {
	return r.valueCall(keys, argv, 1)
}

// parseValueExtend: KEYS key; ARGV value, ms (redis-py's reacquire,
// redsync's touch, redislock's refresh; redlock's calls with one key).
func parseValueExtend(r *valueRecipe, keys, argv [][]byte) (c ValueCall, ok bool) {
	if c, ok = r.valueCall(keys, argv, 2); !ok {
		return c, false
	}
	c.Lease, ok = lease(argv[1])
	return c, ok
}

// parseRedlock: KEYS key1..keyN (distinct); ARGV value, ms.
func parseRedlock(r *valueRecipe, keys, argv [][]byte) (c ValueCall, ok bool) {
	if len(keys) <= 1 {
		return parseValueExtend(r, keys, argv)
	}
	if c, ok = r.redlockKeys(keys, argv, 2); !ok {
		return c, false
	}
	c.Lease, ok = lease(argv[1])
	return c, ok
}

// parseRedlockRelease: KEYS key1..keyN (distinct); ARGV value.
func parseRedlockRelease(r *valueRecipe, keys, argv [][]byte) (c ValueCall, ok bool) {
	if len(keys) <= 1 {
		return parseValueRelease(r, keys, argv)
	}
	return r.redlockKeys(keys, argv, 1)
}

// redlockKeys starts a redlock call of several keys.
func (r *valueRecipe) redlockKeys(keys, argv [][]byte, nargv int) (c ValueCall, ok bool) {
	if len(keys) > maxBatch || len(argv) != nargv {
		return c, false
	}
	c = ValueCall{Name: r.Name, Kind: r.Kind, Shape: r.shape, Keys: make([]string, len(keys))}
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		if c.Keys[i], ok = key(k); !ok || seen[c.Keys[i]] {
			return c, false
		}
		seen[c.Keys[i]] = true
	}
	c.Key = c.Keys[0]
	c.Holder, ok = holder(argv[0])
	return c, ok
}

// parseTouchWithSetNX: as touch, and a free key is granted.
func parseTouchWithSetNX(r *valueRecipe, keys, argv [][]byte) (c ValueCall, ok bool) {
	c, ok = parseValueExtend(r, keys, argv)
	c.GrantFree = true
	return c, ok
}

// parsePyExtend: KEYS key; ARGV token, ms, "1" to replace the ttl or "0"
// to add to it.
func parsePyExtend(r *valueRecipe, keys, argv [][]byte) (c ValueCall, ok bool) {
	if c, ok = r.valueCall(keys, argv, 3); !ok {
		return c, false
	}
	if c.Lease, ok = lease(argv[1]); !ok {
		return c, false
	}
	switch string(argv[2]) {
	case "0":
		c.AddToTTL = true
	case "1":
	default:
		return c, false
	}
	return c, true
}

// parseRedislockObtain: KEYS key; ARGV value, token length, ms.
func parseRedislockObtain(r *valueRecipe, keys, argv [][]byte) (c ValueCall, ok bool) {
	if c, ok = r.valueCall(keys, argv, 3); !ok {
		return c, false
	}
	n, err := strconv.Atoi(string(argv[1]))
	if err != nil || n < 1 || n > len(c.Holder) {
		return c, false
	}
	c.Prefix = n
	c.Lease, ok = lease(argv[2])
	return c, ok
}

// KeyPatterns are --lock-keys' globs (Redis's glob syntax, as KEYS and
// ACL key patterns match): a SET NX on a key matching one is a lock grant.
type KeyPatterns struct{ globs []string }

// ParseKeyPatterns reads --lock-keys: comma-separated globs; "" for none.
func ParseKeyPatterns(s string) (*KeyPatterns, error) {
	p := &KeyPatterns{}
	if s == "" {
		return p, nil
	}
	for _, g := range strings.Split(s, ",") {
		if g == "" {
			return nil, errEmptyPattern
		}
		p.globs = append(p.globs, g)
	}
	return p, nil
}

type patternError string

func (e patternError) Error() string { return string(e) }

const errEmptyPattern = patternError("--lock-keys: an empty pattern (a stray comma?): give globs such as lock:*,locks:{app}:*")

// Empty reports whether there are no patterns (then no SET is a grant).
func (p *KeyPatterns) Empty() bool { return p == nil || len(p.globs) == 0 }

// String is the patterns as --lock-keys takes them.
func (p *KeyPatterns) String() string {
	if p == nil {
		return ""
	}
	return strings.Join(p.globs, ",")
}

// Matches reports whether key matches one of the patterns.
func (p *KeyPatterns) Matches(key []byte) bool {
	if p == nil {
		return false
	}
	for _, g := range p.globs {
		if auth.Match([]byte(g), key) {
			return true
		}
	}
	return false
}

// MatchSet recognises SET key value NX [PX ms | EX s] on a key that
// matches p: ok is false for any other SET, which is forwarded as it came.
func MatchSet(p *KeyPatterns, args [][]byte) (c ValueCall, ok bool) {
	if p.Empty() || len(args) < 4 || !p.Matches(args[1]) {
		return c, false
	}
	c = ValueCall{Name: "SET NX", Kind: ValueAcquire, Shape: ShapeOK, SET: true}
	if c.Key, ok = key(args[1]); !ok {
		return c, false
	}
	if c.Holder, ok = holder(args[2]); !ok {
		return c, false
	}
	nx, expiry := false, false
	for i := 3; i < len(args); i++ {
		switch strings.ToLower(string(args[i])) {
		case "nx":
			if nx {
				return c, false
			}
			nx = true
		case "px", "ex":
			if expiry || i+1 >= len(args) {
				return c, false
			}
			d, ok := lease(args[i+1])
			if !ok {
				return c, false
			}
			if strings.EqualFold(string(args[i]), "ex") {
				if d > MaxLease/1000 {
					return c, false
				}
				d *= 1000
			}
			c.Lease, expiry = d, true
			i++
		default: // XX, GET, KEEPTTL, EXAT, PXAT, anything else
			return c, false
		}
	}
	return c, nx
}
