package upstream

import (
	"fmt"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/upstream/fanout"
)

// TestSlowlogIDs: SLOWLOG GET merged from two masters that number their
// entries alike gets ids unique across them, newest highest; an entry keeps
// its id, and entries seen for the first time later get larger ones than
// any before, whatever their master's own ids.
func TestSlowlogIDs(t *testing.T) {
	a, b := &Node{Addr: "a"}, &Node{Addr: "b"}
	var ids slowIDs
	entry := func(id, when int) string { return fmt.Sprintf("*2\r\n:%d\r\n:%d\r\n", id, when) }
	list := func(entries ...string) []byte {
		out := fmt.Sprintf("*%d\r\n", len(entries))
		for _, e := range entries {
			out += e
		}
		return []byte(out)
	}
	get := func(parts ...[]byte) string {
		m := fanout.Broadcast(argv("slowlog", "get", "-1"), func() fanout.Renumber { return ids.renumber([]*Node{a, b}) })
		return string(m(parts, nil, nil))
	}
	// a: ids 1 (t=20), 0 (t=10); b: ids 1 (t=30), 0 (t=15).
	first := get(list(entry(1, 20), entry(0, 10)), list(entry(1, 30), entry(0, 15)))
	if want := list(entry(3, 30), entry(2, 20), entry(1, 15), entry(0, 10)); first != string(want) {
		t.Fatalf("first GET: %q, want %q", first, want)
	}
	// a new entry on a (its id 2, below b's count): larger than every id
	// before; the others keep theirs.
	second := get(list(entry(2, 40), entry(1, 20), entry(0, 10)), list(entry(1, 30), entry(0, 15)))
	if want := list(entry(4, 40), entry(3, 30), entry(2, 20), entry(1, 15), entry(0, 10)); second != string(want) {
		t.Fatalf("second GET: %q, want %q", second, want)
	}
}
