package keys

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// replyFile is the COMMAND reply of Redis 7.0 that the fuzz target and the
// benchmarks load, so that they need no server. Regenerate it with
//
//	go test ./internal/keys -run TestCommandReplyFile -update
var replyFile = filepath.Join("testdata", "command-7.0.reply")

var update = flag.Bool("update", false, "rewrite "+replyFile+" from a live redis-server")

// startRedis starts a cluster-enabled redis-server (for CLUSTER KEYSLOT;
// COMMAND GETKEYS works either way) and connects to it.
func startRedis(t *testing.T) *testenv.Conn {
	t.Helper()
	r := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
	}})
	return testenv.Dial(t, r.Addr)
}

// liveTable loads the Table from the server behind c.
func liveTable(t *testing.T, c *testenv.Conn) (*Table, []byte) {
	t.Helper()
	reply := c.Do("COMMAND")
	tab, err := Load(reply)
	if err != nil {
		t.Fatalf("Load(COMMAND reply of %d bytes): %v", len(reply), err)
	}
	return tab, reply
}

func fileTable(t testing.TB) *Table {
	t.Helper()
	b, err := os.ReadFile(replyFile)
	if err != nil {
		t.Fatalf("%v (regenerate: go test ./internal/keys -run TestCommandReplyFile -update)", err)
	}
	tab, err := Load(b)
	if err != nil {
		t.Fatalf("Load(%s): %v", replyFile, err)
	}
	return tab
}

// getKeys asks the server for COMMAND GETKEYS args...; nil when it answers
// with an error (no keys, arity, malformed request).
func getKeys(t *testing.T, c *testenv.Conn, args [][]byte) []string {
	t.Helper()
	req := []string{"COMMAND", "GETKEYS"}
	for _, a := range args {
		req = append(req, string(a))
	}
	reply := c.Do(req...)
	if reply[0] == '-' {
		return nil
	}
	elems, ok := testenv.SplitArray(reply)
	if !ok {
		t.Fatalf("COMMAND GETKEYS %q: unexpected reply %q", args, reply)
	}
	keys := make([]string, 0, len(elems))
	for _, e := range elems {
		k, ok := testenv.ParseBulk(e)
		if !ok {
			t.Fatalf("COMMAND GETKEYS %q: element %q is not a bulk string", args, e)
		}
		keys = append(keys, string(k))
	}
	return keys
}

// keyNames runs Keys and checks invariant 2 of the package doc (indexes in
// range, ascending) and that dst's prefix is kept; it returns the names.
func keyNames(t testing.TB, tab *Table, args [][]byte) []string {
	t.Helper()
	prefix := []int{-7}
	idx := tab.LookupBytes(args[0]).Keys(prefix, args)
	if idx[0] != -7 {
		t.Fatalf("%q: Keys overwrote dst's prefix: %v", args, idx)
	}
	idx = idx[1:]
	names := make([]string, 0, len(idx))
	for j, i := range idx {
		if i < 1 || i >= len(args) {
			t.Fatalf("%q: index %d out of [1, %d): %v", args, i, len(args), idx)
		}
		if j > 0 && i < idx[j-1] {
			t.Fatalf("%q: indexes not ascending: %v", args, idx)
		}
		names = append(names, string(args[i]))
	}
	return names
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestKeysMatchGetKeys compares Keys with the live server's COMMAND GETKEYS
// for every request of the corpus, except where the corpus records an
// accepted difference and its reason.
func TestKeysMatchGetKeys(t *testing.T) {
	c := startRedis(t)
	tab, _ := liveTable(t, c)
	for _, r := range corpus {
		args := r.args()
		got := keyNames(t, tab, args)
		server := getKeys(t, c, args)
		want := server
		if r.want != nil {
			want = r.want
			if slices.Equal(sorted(server), sorted(r.want)) && len(server) > 0 {
				t.Errorf("%s: GETKEYS now agrees (%q); drop the override %q", r.line, server, r.why)
			}
		}
		// GETKEYS lists keys in spec order, Keys in argument order.
		if !slices.Equal(sorted(got), sorted(want)) {
			t.Errorf("%s: Keys = %q, want %q (GETKEYS %q)", r.line, got, want, server)
		}
	}
}

// sweepAccepted are the commands for which the sweep's synthetic request
// ("a1 a2 ...") gives other keys than GETKEYS, and why that is accepted.
var sweepAccepted = map[string]string{
	"pfmerge":      "GETKEYS is all or nothing: the empty source range fails and takes the destination with it; PFMERGE dst alone is valid and writes dst",
	"spublish":     "not_key shard channel, routed by slot",
	"ssubscribe":   "not_key shard channel, routed by slot",
	"sunsubscribe": "not_key shard channel, routed by slot",
	"zdiffstore":   "numkeys malformed (\"a2\") or beyond the arguments (2 with one key after it): only that spec is dropped and the destination remains; Redis rejects the request",
	"zinterstore":  "as zdiffstore",
	"zunionstore":  "as zdiffstore",
}

// TestKeysSweep builds, for every command and subcommand the server has, a
// request of the minimum arity with distinct arguments, and compares Keys
// with GETKEYS. It catches spec shapes the hand corpus forgot.
func TestKeysSweep(t *testing.T) {
	c := startRedis(t)
	tab, _ := liveTable(t, c)
	names := tab.Names()
	slices.Sort(names)
	checked := 0
	for _, name := range names {
		cmd := tab.Lookup(name)
		if cmd.subs != nil {
			continue // its subcommands are swept under their own names
		}
		n, extra := cmd.Arity(), 0
		if n < 0 {
			n, extra = -n, 3 // variadic: also with 1, 2 and 3 more arguments
		}
		// Arguments "a<i>" make every count malformed; arguments "<i>" make
		// counts valid numbers that still name their own position.
		for size := n; size <= n+extra; size++ {
			for _, format := range []string{"a%d", "%d"} {
				args := [][]byte{}
				for _, p := range strings.Split(name, "|") {
					args = append(args, []byte(p))
				}
				for len(args) < size {
					args = append(args, fmt.Appendf(nil, format, len(args)))
				}
				got := keyNames(t, tab, args)
				want := getKeys(t, c, args)
				checked++
				if slices.Equal(sorted(got), sorted(want)) {
					continue
				}
				if why, ok := sweepAccepted[name]; ok {
					t.Logf("%q: Keys %q, GETKEYS %q: accepted: %s", args, got, want, why)
					continue
				}
				t.Errorf("%q: Keys = %q, GETKEYS %q", args, got, want)
			}
		}
	}
	if checked < 400 {
		t.Errorf("swept only %d commands", checked)
	}
}

// TestCommandReplyFile checks that testdata/command-7.0.reply loads and
// agrees with the live server on the corpus; with -update it rewrites the
// file from the live server first.
func TestCommandReplyFile(t *testing.T) {
	c := startRedis(t)
	live, reply := liveTable(t, c)
	if *update {
		if err := os.WriteFile(replyFile, reply, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file := fileTable(t)
	if file.Len() != live.Len() {
		t.Errorf("%s has %d commands, the live server %d; regenerate with -update", replyFile, file.Len(), live.Len())
	}
	for _, r := range corpus {
		args := r.args()
		if f, l := keyNames(t, file, args), keyNames(t, live, args); !slices.Equal(f, l) {
			t.Errorf("%s: %s gives %q, the live server %q", r.line, replyFile, f, l)
		}
	}
}

func TestLookup(t *testing.T) {
	tab := fileTable(t)
	for _, tc := range []struct {
		name  string
		found bool
	}{
		{"get", true}, {"GET", true}, {"GeT", true}, {"object", true}, {"object|encoding", true},
		{"OBJECT|ENCODING", true}, {"nosuch", false}, {"", false}, {strings.Repeat("g", 200), false},
	} {
		if got := tab.LookupBytes([]byte(tc.name)) != nil; got != tc.found {
			t.Errorf("LookupBytes(%q) found = %v, want %v", tc.name, got, tc.found)
		}
	}
	if tab.Lookup("GET") != nil {
		t.Errorf("Lookup takes lower-case names only")
	}
	if !tab.Lookup("eval").Movable() || tab.Lookup("get").Movable() {
		t.Errorf("Movable: eval should be, get should not")
	}
	if !tab.Lookup("spublish").NotKey() || tab.Lookup("get").NotKey() {
		t.Errorf("NotKey: spublish should be, get should not")
	}
	if !tab.Lookup("sort").Incomplete() || !tab.Lookup("migrate").Incomplete() || tab.Lookup("eval").Incomplete() {
		t.Errorf("Incomplete: sort and migrate should be, eval should not")
	}
	if !tab.Lookup("get").HasFlag("readonly") || tab.Lookup("get").HasFlag("write") {
		t.Errorf("HasFlag: get is readonly, not write")
	}
	obj := tab.Lookup("object")
	if sub := obj.Sub([][]byte{[]byte("object"), []byte("Encoding"), []byte("k")}); sub == nil || sub.Name() != "object|encoding" {
		t.Errorf("Sub(OBJECT Encoding k) = %v", sub)
	}
	if tab.Lookup("get").Sub(nil) != tab.Lookup("get") {
		t.Errorf("Sub of a plain command is the command")
	}
	var nilCmd *Command
	if got := nilCmd.Keys(nil, [][]byte{[]byte("x"), []byte("y")}); len(got) != 0 {
		t.Errorf("nil Command has keys %v", got)
	}
}

// TestLoadRejects lists inputs Load must refuse.
func TestLoadRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"-ERR unknown command 'COMMAND'\r\n",
		"+OK\r\n",
		":1\r\n",
		"*1\r\n",
		"*1\r\n:1\r\n",
		"*1\r\n*2\r\n$3\r\nget\r\n:2\r\n",
		"*1\r\n*6\r\n$3\r\nget\r\n$1\r\n2\r\n*0\r\n:1\r\n:1\r\n:1\r\n",
		"*1\r\n*6\r\n$3\r\nget\r\n:2\r\n*0\r\n:1\r\n:1\r\n:99999999\r\n",
		"*1\r\n*6\r\n$0\r\n\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\n",
		"*1\r\n*6\r\n$3\r\nget\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\nextra",
		"*99999999\r\n",
		"$5\r\nab\r\n",
		strings.Repeat("*1\r\n", 40) + ":1\r\n",
	} {
		if _, err := Load([]byte(in)); err == nil {
			t.Errorf("Load(%q) succeeded", in)
		}
	}
}

// TestLoadRedis6 loads a COMMAND entry in Redis 6's shape (no key specs):
// the legacy triple applies.
func TestLoadRedis6(t *testing.T) {
	in := "*1\r\n*7\r\n$4\r\nmset\r\n:-3\r\n*2\r\n+write\r\n+denyoom\r\n:1\r\n:-1\r\n:2\r\n*0\r\n"
	tab, err := Load([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	args := request{line: "MSET a 1 b 2 c"}.args()
	if got := tab.LookupBytes(args[0]).Keys(nil, args); !slices.Equal(got, []int{1, 3, 5}) {
		t.Errorf("Keys = %v, want [1 3 5]", got)
	}
}

// TestKeysNoAlloc checks invariant 3: Keys allocates nothing when dst has
// room, nor do LookupBytes and Sub.
func TestKeysNoAlloc(t *testing.T) {
	tab := fileTable(t)
	dst := make([]int, 0, 64)
	for _, r := range corpus {
		args := r.args()
		if n := testing.AllocsPerRun(10, func() {
			dst = tab.LookupBytes(args[0]).Keys(dst[:0], args)
		}); n != 0 {
			t.Errorf("%s: %v allocations", r.line, n)
		}
	}
}

func TestTagForSlot(t *testing.T) {
	for slot := 0; slot < Slots; slot++ {
		tag := TagForSlot(slot)
		if got := SlotOf([]byte("prefix" + tag + "suffix")); got != slot {
			t.Fatalf("TagForSlot(%d) = %q, whose slot is %d", slot, tag, got)
		}
	}
}
