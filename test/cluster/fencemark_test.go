package cluster

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// fenceMarksOn lists resource's fence marks on node (the record's slot's,
// fenceproxy:lock:{resource}:fence, and any slot's own,
// fenceproxy:lock:{tag}:fence:resource) with their values.
func fenceMarksOn(t *testing.T, node *testenv.Redis, resource string) map[string]string {
	t.Helper()
	c := testenv.Dial(t, node.Addr)
	defer c.Close()
	marks := map[string]string{}
	for _, pattern := range []string{lockPrefix + "{" + resource + "}:fence", lockPrefix + "{*}:fence:" + resource} {
		elems, _ := testenv.SplitArray(c.Do("KEYS", pattern))
		for _, el := range elems {
			k, _ := testenv.ParseBulk(el)
			v, _ := testenv.ParseBulk(c.Do("GET", string(k)))
			marks[string(k)] = string(v)
		}
	}
	return marks
}

// TestFenceExecMarksItsSlot: in front of a Redis Cluster, a grant raises
// the fence mark in its record's slot, and a FENCE.EXEC checks and raises
// the mark of the slot it writes: the record's when its key carries the
// resource as hash tag, else one of the key's own slot (a script's keys
// must share a slot), on that slot's master. A newer holder's write there
// raises that mark past the older token.
func TestFenceExecMarksItsSlot(t *testing.T) {
	e := startEnv(t, 0, 0)
	st := readSlots(t, e.cl)
	home, other := e.cl.Masters[0], e.cl.Masters[1]
	r := st.resourcesOn(home, "mark:", 1)[0]
	c := e.dial(t)

	tokA := token(t, c, "LOCK.ACQUIRE", r, "A", "60000")
	record := lockPrefix + "{" + r + "}:fence"
	if got := fenceMarksOn(t, home, r); got[record] != itoa(tokA)+" 0" {
		t.Fatalf("marks of %q on its record's master after A's grant: %v, want %s = %q", r, got, record, itoa(tokA)+" 0")
	}

	// A key with the resource as hash tag: the record's mark.
	if got := c.Do("FENCE.EXEC", r, itoa(tokA), "SET", "bal:{"+r+"}", "1"); string(got) != "+OK\r\n" {
		t.Fatalf("FENCE.EXEC SET bal:{%s} = %s", r, testenv.ShowReply(got))
	}
	// A key on another master: a mark in that key's slot, there.
	key := st.keysOn(other, "elsewhere:", 1)[0]
	if got := c.Do("FENCE.EXEC", r, itoa(tokA), "SET", key, "a"); string(got) != "+OK\r\n" {
		t.Fatalf("FENCE.EXEC SET %s (another master) = %s", key, testenv.ShowReply(got))
	}
	marks := fenceMarksOn(t, other, r)
	var slotMark string
	for k, v := range marks {
		if strings.HasSuffix(k, ":fence:"+r) && testenv.KeySlot(k) == testenv.KeySlot(key) && v == itoa(tokA)+" 0" {
			slotMark = k
		}
	}
	if slotMark == "" {
		t.Fatalf("marks of %q on %s after A wrote %s (slot %d): %v, want one in that slot showing A's token %d", r, other.Addr, key, testenv.KeySlot(key), marks, tokA)
	}

	// B, newer, writes the same slot: the mark there shows B's token, and
	// A's token is refused.
	if n, _ := testenv.ParseInt(c.Do("LOCK.RELEASE", r, "A")); n != 1 {
		t.Fatalf("A's release did not release")
	}
	tokB := token(t, c, "LOCK.ACQUIRE", r, "B", "60000")
	if got := c.Do("FENCE.EXEC", r, itoa(tokB), "SET", key, "b"); string(got) != "+OK\r\n" {
		t.Fatalf("B's FENCE.EXEC SET %s = %s", key, testenv.ShowReply(got))
	}
	if got := fenceMarksOn(t, other, r)[slotMark]; got != itoa(tokB)+" 0" {
		t.Errorf("%s after B wrote: %q, want B's token %d", slotMark, got, tokB)
	}
	if got := fenceMarksOn(t, home, r)[record]; got != itoa(tokB)+" 0" {
		t.Errorf("%s after B's grant: %q, want B's token %d", record, got, tokB)
	}
	if got := c.Do("FENCE.EXEC", r, itoa(tokA), "SET", key, "late"); !strings.HasPrefix(string(got), "-STALE") {
		t.Errorf("A's FENCE.EXEC after B's = %s, want -STALE", testenv.ShowReply(got))
	}
}
