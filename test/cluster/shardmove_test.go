package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestShardChannelsFollowTheirSlot: one client subscribes through the proxy
// to shard channels on every master (one SSUBSCRIBE per channel), then the
// slot of one channel moves to another master. Redis drops that slot's
// subscribers with an unasked sunsubscribe; the client must see nothing of
// it and keep receiving the channel's messages, now from the new master,
// with the other channels untouched.
func TestShardChannelsFollowTheirSlot(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	sub, pub := e.dial(t), e.dial(t)
	var channels []string
	for i, m := range e.cl.Masters {
		ch := st.keysOn(m, "follow:", 1)[0]
		channels = append(channels, ch)
		want := fmt.Sprintf("*3\r\n$10\r\nssubscribe\r\n$%d\r\n%s\r\n:%d\r\n", len(ch), ch, i+1)
		if got := sub.Do("SSUBSCRIBE", ch); string(got) != want {
			t.Fatalf("SSUBSCRIBE %s: %q, want %q (the count is the client's total)", ch, got, want)
		}
	}

	moving := channels[0]
	slot := testenv.KeySlot(moving)
	from, to := st.of(moving), e.cl.Masters[1]
	migrateSlot(t, e.cl, slot, from, to)

	// The proxy follows within its retry window; publish until it does.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := pub.Do("SPUBLISH", moving, "after")
		if string(got) == ":1\r\n" {
			break
		}
		if string(got) != ":0\r\n" {
			t.Fatalf("SPUBLISH %s after its slot moved: %q", moving, got)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no subscriber of %s on its new master %s 10s after the move", moving, to.Addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sub.SetTimeout(5 * time.Second)
	if got, err := sub.ReadReply(); err != nil || string(got) != pushOf("smessage", moving, "after") {
		t.Fatalf("after the slot moved, the subscriber read %q, %v; want only %q", got, err, pushOf("smessage", moving, "after"))
	}
	for _, ch := range channels[1:] {
		if got := pub.Do("SPUBLISH", ch, "still"); string(got) != ":1\r\n" {
			t.Fatalf("SPUBLISH %s: %q, want :1", ch, got)
		}
		if got, err := sub.ReadReply(); err != nil || string(got) != pushOf("smessage", ch, "still") {
			t.Fatalf("SPUBLISH %s: subscriber read %q, %v", ch, got, err)
		}
	}
	// And it can still leave: one confirmation per channel, counting down.
	for i, ch := range channels {
		want := fmt.Sprintf("*3\r\n$12\r\nsunsubscribe\r\n$%d\r\n%s\r\n:%d\r\n", len(ch), ch, len(channels)-i-1)
		if got := sub.Do("SUNSUBSCRIBE", ch); string(got) != want {
			t.Fatalf("SUNSUBSCRIBE %s: %q, want %q", ch, got, want)
		}
	}
}

// migrateSlot moves an empty-of-keys-or-not slot from one master to another
// the way redis-cli --cluster reshard does: IMPORTING, MIGRATING, MIGRATE
// every key, then SETSLOT NODE on both and on every other master.
func migrateSlot(t *testing.T, cl *testenv.Cluster, slot int, from, to *testenv.Redis) {
	t.Helper()
	src, dst := testenv.Dial(t, from.Addr), testenv.Dial(t, to.Addr)
	defer src.Close()
	defer dst.Close()
	s := fmt.Sprint(slot)
	fromID, toID := nodeID(t, from), nodeID(t, to)
	mustOK := func(c *testenv.Conn, args ...string) {
		t.Helper()
		if got := c.Do(args...); string(got) != "+OK\r\n" {
			t.Fatalf("%v: %q", args, got)
		}
	}
	mustOK(dst, "CLUSTER", "SETSLOT", s, "IMPORTING", fromID)
	mustOK(src, "CLUSTER", "SETSLOT", s, "MIGRATING", toID)
	for {
		keys, ok := testenv.SplitArray(src.Do("CLUSTER", "GETKEYSINSLOT", s, "100"))
		if !ok {
			t.Fatalf("CLUSTER GETKEYSINSLOT %s failed", s)
		}
		if len(keys) == 0 {
			break
		}
		host, port := splitAddr(to.Addr)
		args := []string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}
		for _, k := range keys {
			b, _ := testenv.ParseBulk(k)
			args = append(args, string(b))
		}
		if got := src.Do(args...); string(got) != "+OK\r\n" {
			t.Fatalf("MIGRATE: %q", got)
		}
	}
	mustOK(dst, "CLUSTER", "SETSLOT", s, "NODE", toID)
	mustOK(src, "CLUSTER", "SETSLOT", s, "NODE", toID)
	for _, m := range cl.Masters {
		if m != from && m != to {
			c := testenv.Dial(t, m.Addr)
			mustOK(c, "CLUSTER", "SETSLOT", s, "NODE", toID)
			c.Close()
		}
	}
}

func splitAddr(addr string) (host, port string) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:]
		}
	}
	return addr, ""
}

// TestRedirectedPipelineKeepsOrder: a key's slot moves behind the proxy's
// back, then one client pipelines INCR, GET, INCR, GET... on it. Every
// request meets MOVED and goes again; they must still run in the order sent:
// each GET sees the INCR just before it.
func TestRedirectedPipelineKeepsOrder(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	c := e.dial(t)
	k := st.keysOn(e.cl.Masters[0], "order:", 1)[0]
	if got := c.Do("SET", k, "0"); string(got) != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	migrateSlot(t, e.cl, testenv.KeySlot(k), e.cl.Masters[0], e.cl.Masters[2])
	const n = 200
	for range n {
		c.Send("INCR", k)
		c.Send("GET", k)
	}
	c.Flush()
	for i := 1; i <= n; i++ {
		incr, err := c.ReadReply()
		if err != nil || string(incr) != fmt.Sprintf(":%d\r\n", i) {
			t.Fatalf("INCR #%d: %q, %v", i, incr, err)
		}
		get, err := c.ReadReply()
		if want := fmt.Sprintf("$%d\r\n%d\r\n", len(fmt.Sprint(i)), i); err != nil || string(get) != want {
			t.Fatalf("GET after INCR #%d: %q, %v; want %q (requests ran out of order)", i, get, err, want)
		}
	}
}
