package keys

import (
	"math"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// Command is one command or subcommand of a Table: its name, flags and where
// its keys are. A nil *Command is valid and has no keys.
type Command struct {
	name      string
	arity     int
	flagNames []string
	acl       []string // ACL categories, lower case without '@'
	movable   bool
	notKey    bool

	specs  []keySpec
	legacy bool // a spec is of a type this package cannot apply: use first/last/step
	first  int  // the legacy triple; first 0 means no keys
	last   int
	step   int

	subs map[string]*Command // by the lower-case part after '|'
}

type bsKind uint8

const (
	bsUnknown bsKind = iota
	bsIndex          // pos is the index of the first key
	bsKeyword        // the first key follows keyword, searched from pos (negative: from the end, backwards)
)

type fkKind uint8

const (
	fkUnknown fkKind = iota
	fkRange          // lastKey, keyStep, limit
	fkKeynum         // keyNumIdx, firstKey, keyStep
)

// keySpec is one Redis 7 key specification, checked and flattened by
// parseSpec so that applying it reads no maps and allocates nothing.
type keySpec struct {
	bs         bsKind
	fk         fkKind
	notKey     bool // the "keys" are shard channels
	incomplete bool // Redis's own getkeys code finds keys this spec misses (MIGRATE)
	read       bool // flag ACCESS: the command reads the key's value (ACL %R)
	write      bool // flags INSERT, DELETE or UPDATE (ACL %W)
	pos        int
	keyword    string

	lastKey, limit      int // range
	keyNumIdx, firstKey int // keynum
	keyStep             int // both
}

// Name is the command's lower-case name; a subcommand's is "container|sub".
func (c *Command) Name() string {
	if c == nil {
		return ""
	}
	return c.name
}

// Arity is Redis's arity: N means exactly N arguments counting the name, -N
// at least N.
func (c *Command) Arity() int {
	if c == nil {
		return 0
	}
	return c.arity
}

// Movable reports the "movablekeys" flag: the keys' positions depend on the
// other arguments (EVAL's numkeys, XREAD's STREAMS), not only on the command.
func (c *Command) Movable() bool { return c != nil && c.movable }

// NotKey reports that every key spec of the command is flagged not_key: its
// "keys" are shard channels (SPUBLISH, SSUBSCRIBE, SUNSUBSCRIBE). Keys still
// returns them, since they route by slot like keys.
func (c *Command) NotKey() bool { return c != nil && c.notKey }

// Incomplete reports that Keys may miss some keys of some requests of this
// command: a key spec is flagged incomplete (MIGRATE), or the command moves
// its keys but has to use the legacy triple (SORT ... STORE, any movable
// command of a Redis 6 backend). For a container it reports false; ask its
// subcommand (Sub).
func (c *Command) Incomplete() bool {
	if c == nil {
		return false
	}
	if c.legacy && c.movable {
		return true
	}
	for _, s := range c.specs {
		if s.incomplete {
			return true
		}
	}
	return false
}

// HasFlag reports whether COMMAND lists flag (lower case: "readonly",
// "write", "blocking", "pubsub", ...) for the command. It scans a short list;
// cache the answer if the hot path needs it.
func (c *Command) HasFlag(flag string) bool {
	if c == nil {
		return false
	}
	for _, f := range c.flagNames {
		if f == flag {
			return true
		}
	}
	return false
}

// Sub resolves a container command (OBJECT, XINFO, CLIENT, CONFIG, ...) to
// the subcommand args[1] names, matched case-insensitively. It returns c
// itself for a command without subcommands, and nil when c is a container
// and args names none of its subcommands. It does not allocate.
func (c *Command) Sub(args [][]byte) *Command {
	if c == nil || c.subs == nil {
		return c
	}
	if len(args) < 2 {
		return nil
	}
	var buf [maxName]byte
	lower, ok := toLower(buf[:0], args[1])
	if !ok {
		return nil
	}
	return c.subs[string(lower)]
}

// Keys appends to dst the indexes into args (args[0] is the command name) of
// the request's keys, in ascending order, and returns the extended slice. A
// container command uses its subcommand's specs (see Sub). It never panics:
// a malformed request yields the keys that can still be found (see the
// package doc), and Redis rejects the request itself.
func (c *Command) Keys(dst []int, args [][]byte) []int {
	c = c.Sub(args)
	if c == nil {
		return dst
	}
	if c.legacy {
		return c.legacyKeys(dst, args)
	}
	start := len(dst)
	incomplete := false
	for i := range c.specs {
		dst = c.specs[i].appendKeys(dst, args)
		incomplete = incomplete || c.specs[i].incomplete
	}
	if len(c.specs) > 1 {
		sortInts(dst[start:])
	}
	if incomplete && len(dst)-start > 1 {
		// An empty key beside others is a placeholder (MIGRATE host port ""
		// db timeout KEYS a b), as Redis's own getkeys code treats it.
		kept := start
		for _, at := range dst[start:] {
			if len(args[at]) > 0 {
				dst[kept] = at
				kept++
			}
		}
		dst = dst[:kept]
	}
	return dst
}

// legacyKeys applies the first/last/step triple: keys from first to last
// (negative: counted from the end) every step.
func (c *Command) legacyKeys(dst []int, args [][]byte) []int {
	if c.first <= 0 {
		return dst
	}
	last := c.last
	if last < 0 {
		last += len(args)
	}
	for i := c.first; i <= last && i < len(args); i += c.step {
		dst = append(dst, i)
	}
	return dst
}

// appendKeys applies one spec the way Redis's getKeysUsingKeySpecs does
// (db.c, Redis 7.0), with the partial-result rule: a spec that does not fit
// the request adds nothing.
func (s *keySpec) appendKeys(dst []int, args [][]byte) []int {
	first, last, ok := s.span(args)
	if !ok {
		return dst
	}
	for i := first; i <= last; i += s.keyStep {
		dst = append(dst, i)
	}
	return dst
}

// span is where one spec's keys are in args: from first to last, every
// keyStep; ok is false when the spec does not fit the request.
func (s *keySpec) span(args [][]byte) (first, last int, ok bool) {
	argc := len(args)
	switch s.bs {
	case bsIndex:
		first = s.pos
	case bsKeyword:
		// Like Redis: forwards from startfrom up to, not including, the
		// last argument (a keyword there has no key after it); backwards
		// from argc+startfrom down to 1.
		if s.pos > 0 {
			for i := s.pos; i < argc-1; i++ {
				if equalFold(args[i], s.keyword) {
					first = i + 1
					break
				}
			}
		} else {
			for i := min(argc+s.pos, argc-1); i >= 1; i-- {
				if equalFold(args[i], s.keyword) {
					first = i + 1
					break
				}
			}
		}
		if first == 0 {
			return 0, 0, false
		}
	}
	switch s.fk {
	case fkRange:
		switch {
		case s.lastKey >= 0:
			last = first + s.lastKey
		case s.limit == 0:
			last = argc + s.lastKey
		default: // the keys are the first 1/limit of the rest (XREAD's STREAMS a b 0 0)
			last = first + (argc-first)/s.limit + s.lastKey
		}
	case fkKeynum:
		if s.keyNumIdx >= argc-first {
			return 0, 0, false
		}
		n, ok := parseCount(args[first+s.keyNumIdx])
		if !ok || n > argc {
			return 0, 0, false
		}
		first += s.firstKey
		last = first + n - 1
	}
	if first >= argc || last >= argc || last < first {
		return 0, 0, false
	}
	return first, last, true
}

// parseCount parses a non-negative count the way Redis's string2ll does
// (resp.ParseInt: decimal digits, no leading zeros, no spaces). A count
// above MaxInt32, more than any request's arguments, is not ok.
func parseCount(b []byte) (int, bool) {
	n, ok := resp.ParseInt(b)
	if !ok || n < 0 || n > math.MaxInt32 {
		return 0, false
	}
	return int(n), true
}

// sortInts sorts a short slice in place (insertion sort: a handful of
// indexes, usually already in order).
func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// equalFold reports whether b equals s ignoring ASCII case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		x, y := b[i], s[i]
		if x != y && lowerByte(x) != lowerByte(y) {
			return false
		}
	}
	return true
}

func lowerByte(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// toLower appends b lower-cased to dst, which has room for maxName bytes;
// false if b is longer than that.
func toLower(dst, b []byte) ([]byte, bool) {
	if len(b) > maxName {
		return nil, false
	}
	return AppendLower(dst, b), true
}

// AppendLower appends name lower-cased (ASCII, as Redis compares command
// names) to dst: for lookups by a name in any case, into a buffer on the
// caller's stack.
func AppendLower(dst, name []byte) []byte {
	for _, c := range name {
		dst = append(dst, lowerByte(c))
	}
	return dst
}

// LowerName is name lower-cased, as a string.
func LowerName(name []byte) string {
	var buf [maxName]byte
	return string(AppendLower(buf[:0], name))
}
