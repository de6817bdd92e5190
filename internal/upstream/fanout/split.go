package fanout

import (
	"strconv"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// A request whose keys span slots is split into one request per slot where
// Redis's semantics allow, and the parts' replies are merged into what one
// node holding every key would have answered (merge.go). The rules are
// this file's two tables; any other such request gets -CROSSSLOT, as Redis
// Cluster answers. The keys are found by the backend's own COMMAND key
// specifications (package keys).

const replyCrossSlot = "-CROSSSLOT Keys in request don't hash to the same slot\r\n"

// Split is a request whose keys span slots, cut into one request per slot.
type Split struct {
	Slots []int    // each part's slot
	Parts [][]byte // each part, encoded
	Order [][2]int // each key's part and its place there (Merge's order)
	Merge Merge
}

// Cut splits a request (name: lower case) whose keys, at positions among
// args, span slots, if a table allows; if not, refusal is the reply
// instead: -CROSSSLOT, as Redis Cluster answers, or the error one Redis
// gives a request whose arguments do not go whole with its keys.
func Cut(name string, args [][]byte, positions []int) (s Split, refusal string) {
	if r, ok := splits[name]; ok {
		if !r.complete(args, positions) {
			// MSET k v k: one Redis says so; slicing on would read past
			// the request's arguments.
			return s, string(resp.AppendError(nil, "ERR", "wrong number of arguments for '"+name+"' command"))
		}
		groups, order := groupBySlot(len(positions), func(i int) []byte { return args[positions[i]] })
		return Split{Slots: slotsOf(groups), Parts: r.parts(args, positions, groups), Order: order, Merge: r.merge}, ""
	}
	if r, n, ok := keywiseScript(name, args, len(positions)); ok {
		groups, order := groupBySlot(n, func(i int) []byte { return args[3+i] })
		return Split{Slots: slotsOf(groups), Parts: r.parts(args, n, groups), Order: order, Merge: r.merge}, ""
	}
	return s, replyCrossSlot // a constant: refusing allocates nothing
}

// slotsOf is each group's slot.
func slotsOf(groups []group) []int {
	slots := make([]int, len(groups))
	for i, g := range groups {
		slots[i] = g.slot
	}
	return slots
}

// splitRule says how a command whose keys are independent of each other
// is split: each part is the command name followed by its slot's keys in
// request order, each key with the stride-1 arguments after it.
type splitRule struct {
	command string // lower case
	stride  int    // arguments that go with each key, the key included
	merge   Merge
}

var splitTable = []splitRule{
	{command: "mget", stride: 1, merge: mergeArrays},
	{command: "mset", stride: 2, merge: mergeOK}, // key value ...
	{command: "del", stride: 1, merge: MergeSum},
	{command: "unlink", stride: 1, merge: MergeSum},
	{command: "exists", stride: 1, merge: MergeSum},
	{command: "touch", stride: 1, merge: MergeSum},
}

// scriptRule is a Lua script known to treat each of its keys alone, with
// ARGV made of shared leading arguments and then one argument per key, and
// to return an array with one element per key: EVAL or EVALSHA of it is
// split per slot into EVALs (so no master ever answers NOSCRIPT) of the
// same body with that slot's keys, the shared arguments and the keys' own.
type scriptRule struct {
	name   string // what it is, for the reader
	body   string
	shared int // leading ARGV shared by every key
	merge  Merge
}

var scriptTable = []scriptRule{
	// Redisson's (3.44+) watchdog renewal renews up to 100 locks of any
	// slots in one EVAL.
	{name: "Redisson lock renewal", body: redissonRenewal, shared: 1, merge: mergeArrays},
}

const redissonRenewal = "local result = {} " +
	"for i = 1, #KEYS, 1 do " +
	"if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then " +
	"redis.call('pexpire', KEYS[i], ARGV[1]); " +
	"table.insert(result, 1); " +
	"else " +
	"table.insert(result, 0); " +
	"end; " +
	"end; " +
	"return result;"

// The tables by command name and by script SHA-1.
var (
	splits       = map[string]splitRule{}
	scriptSplits = map[string]scriptRule{}
)

func init() {
	for _, r := range splitTable {
		splits[r.command] = r
	}
	for _, r := range scriptTable {
		scriptSplits[resp.ScriptSHA(r.body)] = r
	}
}

// keywiseScript finds the scriptTable rule for an EVAL or EVALSHA with
// nkeys keys, and its key count n, if its arguments have the rule's shape.
func keywiseScript(name string, args [][]byte, nkeys int) (r scriptRule, n int, ok bool) {
	if (name != "eval" && name != "evalsha") || len(args) < 3 {
		return r, 0, false
	}
	sha := string(args[1])
	if name == "eval" {
		sha = resp.ScriptSHA(sha)
	}
	if r, ok = scriptSplits[keys.LowerName([]byte(sha))]; !ok {
		return r, 0, false
	}
	k, isInt := resp.ParseInt(args[2])
	if !isInt || int(k) != nkeys || len(args) != 3+2*int(k)+r.shared {
		return r, 0, false
	}
	return r, int(k), true
}

// group is the part of a split request bound for one slot.
type group struct {
	slot  int
	items []int // indexes of its keys among the request's, in request order
}

// groupBySlot groups n keys by slot, groups in order of first appearance;
// order[i] is key i's group and its place in it.
func groupBySlot(n int, key func(i int) []byte) (groups []group, order [][2]int) {
	bySlot := map[int]int{}
	order = make([][2]int, n)
	for i := range n {
		sl := keys.SlotOf(key(i))
		g, ok := bySlot[sl]
		if !ok {
			g = len(groups)
			bySlot[sl] = g
			groups = append(groups, group{slot: sl})
		}
		order[i] = [2]int{g, len(groups[g].items)}
		groups[g].items = append(groups[g].items, i)
	}
	return groups, order
}

// complete reports whether every key (at positions among args) has the
// arguments its stride says go with it: MSET k v k has not.
func (r splitRule) complete(args [][]byte, positions []int) bool {
	for _, at := range positions {
		if at+r.stride > len(args) {
			return false
		}
	}
	return true
}

// parts encodes one request per group: the command name followed by the
// group's keys (at positions among args), each with its stride.
func (r splitRule) parts(args [][]byte, positions []int, groups []group) [][]byte {
	reqs := make([][]byte, len(groups))
	for g, gr := range groups {
		part := append([][]byte(nil), args[0])
		for _, i := range gr.items {
			at := positions[i]
			part = append(part, args[at:at+r.stride]...)
		}
		reqs[g] = resp.AppendCommand(nil, part)
	}
	return reqs
}

// parts encodes one EVAL per group of a call EVAL|EVALSHA script n keys...
// shared-args... per-key-args...
func (r scriptRule) parts(args [][]byte, n int, groups []group) [][]byte {
	keyArgs := args[3 : 3+n]
	sharedArgs := args[3+n : 3+n+r.shared]
	perKey := args[3+n+r.shared:]
	reqs := make([][]byte, len(groups))
	for g, gr := range groups {
		part := [][]byte{[]byte("EVAL"), []byte(r.body), strconv.AppendInt(nil, int64(len(gr.items)), 10)}
		for _, i := range gr.items {
			part = append(part, keyArgs[i])
		}
		part = append(part, sharedArgs...)
		for _, i := range gr.items {
			part = append(part, perKey[i])
		}
		reqs[g] = resp.AppendCommand(nil, part)
	}
	return reqs
}
