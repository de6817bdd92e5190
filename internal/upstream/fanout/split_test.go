package fanout

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

func argv(s ...string) [][]byte {
	out := make([][]byte, len(s))
	for i, a := range s {
		out[i] = []byte(a)
	}
	return out
}

// requestArgs reads back an encoded request (resp.AppendCommand's output) as
// its arguments.
func requestArgs(t *testing.T, req []byte) []string {
	t.Helper()
	elems, ok := resp.Elements(req)
	if !ok {
		t.Fatalf("not an array: %q", req)
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		v, err := resp.Parse(e)
		if err != nil {
			t.Fatalf("element %q: %v", e, err)
		}
		out[i], _ = v.(string)
	}
	return out
}

// TestTables: every entry of the split, script and broadcast tables is
// whole, and no command has two.
func TestTables(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range splitTable {
		if r.command != strings.ToLower(r.command) || r.stride < 1 || r.merge == nil || seen[r.command] {
			t.Errorf("split rule %+v: want a lower-case command named once, a stride of at least 1 and a merge", r.command)
		}
		seen[r.command] = true
	}
	for _, r := range scriptTable {
		if r.body == "" || r.shared < 0 || r.merge == nil {
			t.Errorf("script rule %q: want a body, shared >= 0 and a merge", r.name)
		}
	}
	for i := range broadcastTable {
		r := &broadcastTable[i]
		if r.command != strings.ToLower(r.command) || (r.merge == nil) == (r.mergeArgs == nil) || seen[r.command] {
			t.Errorf("broadcast rule %q: want a lower-case command not split, with one merge", r.command)
		}
		if r.sub == nil && len(broadcasts[r.command]) != 1 {
			t.Errorf("broadcast rule %q: broadcasts whole and has subcommand rules too", r.command)
		}
		for _, sub := range r.sub {
			if sub != strings.ToLower(sub) || broadcasts[r.command][sub] != r {
				t.Errorf("broadcast rule %q %q: want a lower-case subcommand named once", r.command, sub)
			}
		}
	}
	if splits["mset"].stride != 2 {
		t.Errorf("MSET's stride is %d, want 2 (key value)", splits["mset"].stride)
	}
}

// TestGroupBySlot: keys are grouped by slot in order of first appearance,
// each group keeping request order, and order maps every key back.
func TestGroupBySlot(t *testing.T) {
	ks := []string{"{a}1", "{b}1", "{a}2", "{c}1", "{b}2"}
	groups, order := groupBySlot(len(ks), func(i int) []byte { return []byte(ks[i]) })
	want := [][]int{{0, 2}, {1, 4}, {3}}
	if len(groups) != len(want) {
		t.Fatalf("%d groups, want %d: %+v", len(groups), len(want), groups)
	}
	for g, items := range want {
		if !slices.Equal(groups[g].items, items) {
			t.Errorf("group %d has keys %v, want %v", g, groups[g].items, items)
		}
		if slot := keys.SlotOf([]byte(ks[items[0]])); groups[g].slot != slot {
			t.Errorf("group %d is for slot %d, want %d", g, groups[g].slot, slot)
		}
	}
	wantOrder := [][2]int{{0, 0}, {1, 0}, {0, 1}, {2, 0}, {1, 1}}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("order %v, want %v", order, wantOrder)
	}
}

// TestSplitParts: a part carries each of its slot's keys with the
// arguments its stride says go with it (MSET: the value), in request order.
func TestSplitParts(t *testing.T) {
	for _, tc := range []struct {
		args      [][]byte
		positions []int
		want      [][]string
	}{
		{argv("MSET", "{a}1", "v1", "{b}1", "v2", "{a}2", "v3"), []int{1, 3, 5},
			[][]string{{"MSET", "{a}1", "v1", "{a}2", "v3"}, {"MSET", "{b}1", "v2"}}},
		{argv("mget", "{a}1", "{b}1", "{a}2"), []int{1, 2, 3},
			[][]string{{"mget", "{a}1", "{a}2"}, {"mget", "{b}1"}}},
		{argv("DEL", "{x}", "{y}"), []int{1, 2}, [][]string{{"DEL", "{x}"}, {"DEL", "{y}"}}},
	} {
		r := splits[strings.ToLower(string(tc.args[0]))]
		if !r.complete(tc.args, tc.positions) {
			t.Fatalf("%q: not complete", tc.args)
		}
		groups, _ := groupBySlot(len(tc.positions), func(i int) []byte { return tc.args[tc.positions[i]] })
		reqs := r.parts(tc.args, tc.positions, groups)
		if len(reqs) != len(tc.want) {
			t.Fatalf("%s: %d parts, want %d", tc.args[0], len(reqs), len(tc.want))
		}
		for i, req := range reqs {
			if got := requestArgs(t, req); !slices.Equal(got, tc.want[i]) {
				t.Errorf("%s part %d: %q, want %q", tc.args[0], i, got, tc.want[i])
			}
		}
	}
}

// TestSplitIncomplete: a key without the arguments its stride needs (MSET
// k v k, the last key's value missing) is caught before any part is built.
func TestSplitIncomplete(t *testing.T) {
	if splits["mset"].complete(argv("MSET", "{a}k", "1", "{b}k"), []int{1, 3}) {
		t.Error("MSET {a}k 1 {b}k is complete, want the missing value caught")
	}
	if !splits["del"].complete(argv("DEL", "{a}k", "{b}k"), []int{1, 2}) {
		t.Error("DEL {a}k {b}k is incomplete")
	}
}

// TestKeywiseScript: Redisson's renewal, by EVAL or EVALSHA in any case,
// splits into one EVAL of the same body per slot, with the slot's keys, the
// shared argument and the keys' own; a call of another shape, or another
// script, is not split.
func TestKeywiseScript(t *testing.T) {
	sha := resp.ScriptSHA(redissonRenewal)
	call := argv("EVALSHA", strings.ToUpper(sha), "3", "{a}1", "{b}1", "{a}2", "30000", "f1", "f2", "f3")
	r, n, ok := keywiseScript("evalsha", call, 3)
	if !ok || n != 3 {
		t.Fatalf("EVALSHA of Redisson's renewal: ok %v, n %d; want it split with 3 keys", ok, n)
	}
	groups, order := groupBySlot(n, func(i int) []byte { return call[3+i] })
	reqs := r.parts(call, n, groups)
	want := [][]string{
		{"EVAL", redissonRenewal, "2", "{a}1", "{a}2", "30000", "f1", "f3"},
		{"EVAL", redissonRenewal, "1", "{b}1", "30000", "f2"},
	}
	for i, req := range reqs {
		if got := requestArgs(t, req); !slices.Equal(got, want[i]) {
			t.Errorf("part %d: %q, want %q", i, got, want[i])
		}
	}
	// The parts' replies merge into one per key, in the call's order.
	merged := r.merge([][]byte{[]byte("*2\r\n:1\r\n:0\r\n"), []byte("*1\r\n:1\r\n")}, order, nil)
	if string(merged) != "*3\r\n:1\r\n:1\r\n:0\r\n" {
		t.Errorf("merged %q", merged)
	}

	if _, _, ok := keywiseScript("eval", argv("EVAL", redissonRenewal, "2", "{a}1", "{b}1", "30000", "f1", "f2"), 2); !ok {
		t.Error("EVAL of the body itself is not split")
	}
	for _, tc := range []struct {
		name  string
		args  [][]byte
		nkeys int
	}{
		{"evalsha", argv("EVALSHA", sha, "2", "{a}1", "{b}1", "30000", "f1"), 2},                          // one per-key argument short
		{"evalsha", argv("EVALSHA", sha, "3", "{a}1", "{b}1", "30000", "f1", "f2"), 2},                    // numkeys is not the keys found
		{"evalsha", argv("EVALSHA", sha, "x", "{a}1", "{b}1", "30000", "f1", "f2"), 2},                    // numkeys not a number
		{"evalsha", argv("EVALSHA", resp.ScriptSHA("return 1"), "2", "{a}1", "{b}1", "1", "f1", "f2"), 2}, // another script
		{"fcall", argv("FCALL", sha, "2", "{a}1", "{b}1", "30000", "f1", "f2"), 2},
	} {
		if _, _, ok := keywiseScript(tc.name, tc.args, tc.nkeys); ok {
			t.Errorf("%q split, want it left alone (CROSSSLOT)", tc.args)
		}
	}
}

// TestBroadcastApplies: a command broadcasts whole, or only for the
// subcommands its entry names, in any case.
func TestBroadcastApplies(t *testing.T) {
	for _, tc := range []struct {
		args [][]byte
		want bool
	}{
		{argv("dbsize"), true},
		{argv("script", "LOAD", "return 1"), true},
		{argv("script", "debug", "yes"), false},
		{argv("script"), false},
		{argv("pubsub", "NumSub", "c"), true},
		{argv("function", "list"), false},
		{argv("function", "STATS"), true},
		{argv("config", "get", "x"), false},
		{argv("config", "set", "x", "y"), true},
		{argv("slowlog", "get", "5"), true},
		{argv("latency", "doctor"), false},
	} {
		if got := Broadcasts(tc.args[0], tc.args); got != tc.want {
			t.Errorf("%q broadcasts: %v, want %v", tc.args, got, tc.want)
		}
	}
}

var errUnreachable = errors.New("unreachable")

// TestMergeInto: a part that got no reply (its master unreachable, its
// connection lost) answers the whole request with its error; else the
// merge answers.
func TestMergeInto(t *testing.T) {
	var done []string
	p := resp.NewReplyFunc(func() { done = append(done, "p") })
	parts := FanIn(2, func(replies []*resp.Reply) { Into(p, replies, nil, MergeSum) })
	parts[1].Buf = append(parts[1].Buf, ":2\r\n"...)
	parts[1].Done()
	if len(done) != 0 {
		t.Fatal("merged before every part was in")
	}
	parts[0].Buf = append(parts[0].Buf, ":3\r\n"...)
	parts[0].Done()
	if len(done) != 1 || string(p.Buf) != ":5\r\n" || p.Err != nil {
		t.Fatalf("done %v, reply %q, err %v; want :5 once", done, p.Buf, p.Err)
	}

	q := resp.NewReplyFunc(func() {})
	parts = FanIn(2, func(replies []*resp.Reply) { Into(q, replies, nil, MergeSum) })
	parts[0].Buf = append(parts[0].Buf, ":3\r\n"...)
	parts[0].Done()
	parts[1].Err = errUnreachable
	parts[1].Done()
	if q.Err != errUnreachable || len(q.Buf) != 0 {
		t.Fatalf("reply %q, err %v; want the part's error and no bytes", q.Buf, q.Err)
	}
}

// TestMergeRandom: RANDOMKEY answers some master's key, a null only when
// every master is empty.
func TestMergeRandom(t *testing.T) {
	parts := [][]byte{[]byte("$-1\r\n"), []byte("$1\r\nk\r\n"), []byte("$-1\r\n")}
	for i := range 20 {
		if got := string(mergeRandom(parts, nil, nil)); got != "$1\r\nk\r\n" {
			t.Fatalf("try %d: %q, want the one key", i, got)
		}
	}
	if got := string(mergeRandom([][]byte{[]byte("$-1\r\n"), []byte("$-1\r\n")}, nil, nil)); got != "$-1\r\n" {
		t.Errorf("every master empty: %q, want null", got)
	}
	if got := string(mergeRandom([][]byte{[]byte("$1\r\nk\r\n"), []byte("-ERR x\r\n")}, nil, nil)); got != "-ERR x\r\n" {
		t.Errorf("a master's error: %q, want it", got)
	}
}

// TestCut: a request of the tables is cut into a part per slot; one whose
// arguments do not go whole with its keys gets Redis's arity error, and
// any other gets Redis Cluster's -CROSSSLOT, with nothing cut.
func TestCut(t *testing.T) {
	s, refusal := Cut("mget", argv("MGET", "{a}1", "{b}1", "{a}2"), []int{1, 2, 3})
	if refusal != "" || len(s.Parts) != 2 || len(s.Slots) != 2 || s.Merge == nil || len(s.Order) != 3 {
		t.Fatalf("MGET over two slots: %+v, refusal %q; want two parts", s, refusal)
	}
	if _, refusal = Cut("mset", argv("MSET", "{a}k", "1", "{b}k"), []int{1, 3}); refusal != "-ERR wrong number of arguments for 'mset' command\r\n" {
		t.Errorf("MSET with a key's value missing: refusal %q", refusal)
	}
	if s, refusal = Cut("sunion", argv("SUNION", "{a}k", "{b}k"), []int{1, 2}); refusal != replyCrossSlot || s.Parts != nil {
		t.Errorf("SUNION over two slots: %+v, refusal %q; want -CROSSSLOT", s, refusal)
	}
}
