package cluster

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestLockInfoFollowsItsRecord: LOCK.INFO reads the owner record on the
// master of its slot the way the lock writes do. Sent while the slot is
// half moved (the record already on the importing master), it waits for
// the move and names the holder, never -ASK; sent right after a move,
// before the proxy has read the new slot map, it names the holder, never
// -MOVED (either would also name a backend address); and with the
// record's master down it answers an error that says what to do, not the
// proxy's internal-error fallback. (The fault suite found all three:
// test/fault's redirect and internal-error checks.)
func TestLockInfoFollowsItsRecord(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	from, to, down := e.cl.Masters[0], e.cl.Masters[1], e.cl.Masters[2]
	r := st.resourcesOn(from, "info:", 1)[0]
	c := e.dial(t)
	tok := token(t, c, "LOCK.ACQUIRE", r, "A", "60000")
	rDown := st.resourcesOn(down, "info:", 1)[0]
	token(t, c, "LOCK.ACQUIRE", rDown, "B", "60000")
	holder := func(when string, raw []byte) {
		t.Helper()
		noRedirect(t, "LOCK.INFO "+when, raw)
		li, err := testenv.ParseLockInfo(raw)
		if err != nil || string(li.Owner) != "A" || li.Token != tok {
			t.Fatalf("LOCK.INFO %s = %s (%v), want owner A, token %d", when, testenv.ShowReply(raw), err, tok)
		}
	}

	slot := strconv.Itoa(resourceSlot(r))
	mustOK := func(addr string, args ...string) {
		t.Helper()
		mc := testenv.Dial(t, addr)
		defer mc.Close()
		if got := mc.Do(args...); string(got) != "+OK\r\n" {
			t.Fatalf("%s: %s", testenv.ShowCommand(args), testenv.ShowReply(got))
		}
	}
	mustOK(to.Addr, "CLUSTER", "SETSLOT", slot, "IMPORTING", nodeID(t, from))
	mustOK(from.Addr, "CLUSTER", "SETSLOT", slot, "MIGRATING", nodeID(t, to))
	mustOK(from.Addr, "MIGRATE", "127.0.0.1", strconv.Itoa(to.Port), "", "0", "5000", "KEYS", lockPrefix+"{"+r+"}")
	c.Send("LOCK.INFO", r)
	c.Flush()
	for _, m := range []*testenv.Redis{to, from, down} {
		mustOK(m.Addr, "CLUSTER", "SETSLOT", slot, "NODE", nodeID(t, to))
	}
	raw, err := c.ReadReply()
	if err != nil {
		t.Fatal(err)
	}
	holder("sent while its slot was half moved", raw)

	migrateSlot(t, e.cl, resourceSlot(r), to, from)
	holder("right after its slot moved", c.Do("LOCK.INFO", r))

	down.Kill()
	c.SetTimeout(loadConnTimeout) // the proxy waits up to its retry window for a new master
	got := c.Do("LOCK.INFO", rDown)
	if !allowed(got) || strings.Contains(string(got), "internal error") {
		t.Fatalf("LOCK.INFO with the record's master down = %s, want an error that says to retry (-TRYAGAIN, -CLUSTERDOWN, -ERR fenceproxy: lost contact ...)", testenv.ShowReply(got))
	}
}
