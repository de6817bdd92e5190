package keys

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// keyFlags asks the server for COMMAND GETKEYSANDFLAGS args... and returns
// "key:R", "key:W", "key:RW" or "key:-" per key, as ACLs read the flags
// (ACCESS: read; INSERT, DELETE, UPDATE: write); nil on an error reply.
func keyFlags(t *testing.T, c *testenv.Conn, args [][]byte) []string {
	t.Helper()
	req := []string{"COMMAND", "GETKEYSANDFLAGS"}
	for _, a := range args {
		req = append(req, string(a))
	}
	reply := c.Do(req...)
	if reply[0] == '-' {
		return nil
	}
	elems, ok := testenv.SplitArray(reply)
	if !ok {
		t.Fatalf("GETKEYSANDFLAGS %q: %q", args, reply)
	}
	var out []string
	for _, e := range elems {
		pair, ok := testenv.SplitArray(e)
		if !ok || len(pair) != 2 {
			t.Fatalf("GETKEYSANDFLAGS %q: element %q", args, e)
		}
		key, _ := testenv.ParseBulk(pair[0])
		flags, _ := testenv.SplitArray(pair[1])
		read, write := false, false
		for _, f := range flags {
			switch strings.ToLower(strings.Trim(string(f), "+\r\n$0123456789")) {
			case "access":
				read = true
			case "insert", "delete", "update":
				write = true
			}
		}
		out = append(out, refString(string(key), read, write))
	}
	return out
}

func refString(key string, read, write bool) string {
	mode := "-"
	switch {
	case read && write:
		mode = "RW"
	case read:
		mode = "R"
	case write:
		mode = "W"
	}
	return fmt.Sprintf("%s:%s", key, mode)
}

// Commands whose key flags Redis computes in C (VARIABLE_FLAGS, or a spec
// it cannot apply): the proxy's ACL check computes them itself
// (commands.aclKeyRefs), so KeyRefs need not agree.
var flagsFromCode = map[string]bool{"set": true, "bitfield": true, "sort": true, "sort_ro": true, "migrate": true}

// TestKeyRefsMatchGetKeysAndFlags compares KeyRefs, keys and access flags,
// with the live server's COMMAND GETKEYSANDFLAGS over the corpus.
func TestKeyRefsMatchGetKeysAndFlags(t *testing.T) {
	c := startRedis(t)
	tab, _ := liveTable(t, c)
	compared := 0
	for _, r := range corpus {
		args := r.args()
		cmd := tab.LookupBytes(args[0])
		if r.want != nil || flagsFromCode[cmd.Sub(args).Name()] || cmd.NotKey() {
			continue // accepted differences of Keys (see corpus), or flags from code
		}
		want := keyFlags(t, c, args)
		var got []string
		for _, k := range cmd.KeyRefs(nil, args) {
			got = append(got, refString(string(args[k.Pos]), k.Read, k.Write))
		}
		if want == nil && len(got) == 0 {
			continue
		}
		compared++
		if !slices.Equal(sorted(got), sorted(want)) {
			t.Errorf("%s: KeyRefs %q, GETKEYSANDFLAGS %q", r.line, got, want)
		}
	}
	if compared < 50 {
		t.Fatalf("only %d requests compared", compared)
	}
}
