package cluster

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// crossKeys returns n keys "cross:<i>" in n distinct slots, spread over
// every master.
func crossKeys(t *testing.T, st *slotTable, cl *testenv.Cluster, n int) []string {
	t.Helper()
	var keys []string
	slots := map[int]bool{}
	for i := 0; len(keys) < n; i++ {
		k := "cross:" + strconv.Itoa(i)
		if s := testenv.KeySlot(k); !slots[s] {
			slots[s] = true
			keys = append(keys, k)
		}
	}
	on := map[*testenv.Redis]bool{}
	for _, k := range keys {
		on[st.of(k)] = true
	}
	if len(on) != len(cl.Masters) {
		t.Fatalf("the %d cross-slot keys land on %d of %d masters", n, len(on), len(cl.Masters))
	}
	return keys
}

// directs dials every master.
type directs map[*testenv.Redis]*testenv.Conn

func dialMasters(t *testing.T, cl *testenv.Cluster) directs {
	t.Helper()
	d := directs{}
	for _, m := range cl.Masters {
		d[m] = testenv.Dial(t, m.Addr)
	}
	return d
}

// on sends args to the master owning key.
func (d directs) on(t *testing.T, st *slotTable, key string, args ...string) []byte {
	t.Helper()
	return d[st.of(key)].Do(args...)
}

// TestCrossSlotSplitMerge: MGET, MSET, DEL, UNLINK, EXISTS and TOUCH over
// keys in 30 slots on every master, with missing keys and duplicates, answer
// what one command per key sent to each key's owner adds up to.
func TestCrossSlotSplitMerge(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	d := dialMasters(t, e.cl)
	proxy := e.dial(t)

	keys := crossKeys(t, st, e.cl, 30)
	missing := []string{"cross:missing:a", "cross:missing:b", "cross:missing:c"}
	// Request order: interleaved existing, missing and duplicate keys.
	var req []string
	for i, k := range keys {
		req = append(req, k)
		if i%7 == 0 {
			req = append(req, missing[i%len(missing)])
		}
		if i%5 == 0 {
			req = append(req, keys[i/2])
		}
	}
	value := func(k string) string { return "val-of-" + k + "\x00\r\n" }
	setup := func() { // the existing keys hold their values, directly
		t.Helper()
		for _, k := range append(keys, missing...) {
			d.on(t, st, k, "DEL", k)
		}
		for _, k := range keys {
			d.on(t, st, k, "SET", k, value(k))
		}
	}
	sum := func(verb string) int64 { // one command per occurrence, on its owner
		t.Helper()
		var n int64
		for _, k := range req {
			v, ok := testenv.ParseInt(d.on(t, st, k, verb, k))
			if !ok {
				t.Fatalf("%s %s direct: not an integer", verb, k)
			}
			n += v
		}
		return n
	}
	check := func(args []string, want string) {
		t.Helper()
		got := proxy.Do(args...)
		noRedirect(t, testenv.ShowCommand(args), got)
		if string(got) != want {
			t.Errorf("%s via proxy:\n got  %s\n want %s", testenv.ShowCommand(args), testenv.ShowReply(got), testenv.ShowReply([]byte(want)))
		}
	}

	setup()
	mget := fmt.Sprintf("*%d\r\n", len(req))
	for _, k := range req {
		mget += string(d.on(t, st, k, "GET", k))
	}
	check(append([]string{"MGET"}, req...), mget)
	check(append([]string{"EXISTS"}, req...), ":"+itoa(sum("EXISTS"))+"\r\n")
	check(append([]string{"TOUCH"}, req...), ":"+itoa(sum("TOUCH"))+"\r\n")
	for _, verb := range []string{"DEL", "UNLINK"} {
		setup()
		want := ":" + itoa(sum(verb)) + "\r\n"
		setup()
		check(append([]string{verb}, req...), want)
		for _, k := range req {
			if got := d.on(t, st, k, "EXISTS", k); string(got) != ":0\r\n" {
				t.Errorf("%s via proxy left %s on its master", verb, k)
			}
		}
	}

	// MSET with duplicates: the last value of a key wins, as in one Redis.
	args := []string{"MSET"}
	last := map[string]string{}
	for i, k := range req {
		v := fmt.Sprintf("mset-%d-%s", i, k)
		args = append(args, k, v)
		last[k] = v
	}
	check(args, "+OK\r\n")
	for k, v := range last {
		if got := d.on(t, st, k, "GET", k); string(got) != fmt.Sprintf("$%d\r\n%s\r\n", len(v), v) {
			t.Errorf("GET %s on its master after MSET via proxy: %s, want %q", k, testenv.ShowReply(got), v)
		}
	}
}

// TestCrossSlotPipeline: 100 split-and-merged requests in one write get
// their replies in order, each what a model of the keyspace predicts.
func TestCrossSlotPipeline(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	proxy := e.dial(t)
	keys := crossKeys(t, st, e.cl, 24)
	model := map[string]string{}

	type req struct {
		args []string
		want string
	}
	var reqs []req
	bulk := func(k string) string {
		if v, ok := model[k]; ok {
			return fmt.Sprintf("$%d\r\n%s\r\n", len(v), v)
		}
		return "$-1\r\n"
	}
	for r := range 25 {
		sub := []string{}
		for i, k := range keys {
			if (i+r)%3 != 0 {
				sub = append(sub, k)
			}
		}
		sub = append(sub, "cross:nothing", sub[0])

		mset := []string{"MSET"}
		for _, k := range sub[:len(sub)-2] {
			v := fmt.Sprintf("r%d:%s", r, k)
			mset = append(mset, k, v)
			model[k] = v
		}
		reqs = append(reqs, req{mset, "+OK\r\n"})

		want := fmt.Sprintf("*%d\r\n", len(keys)+1)
		for _, k := range append(keys, "cross:nothing") {
			want += bulk(k)
		}
		reqs = append(reqs, req{append([]string{"MGET"}, append(keys, "cross:nothing")...), want})

		n := 0
		for _, k := range sub {
			if _, ok := model[k]; ok {
				n++
			}
		}
		reqs = append(reqs, req{append([]string{"EXISTS"}, sub...), fmt.Sprintf(":%d\r\n", n)})

		del := []string{keys[r%len(keys)], keys[(r*5+1)%len(keys)], "cross:nothing", keys[r%len(keys)]}
		n = 0
		for _, k := range del {
			if _, ok := model[k]; ok {
				n++
				delete(model, k)
			}
		}
		reqs = append(reqs, req{append([]string{"DEL"}, del...), fmt.Sprintf(":%d\r\n", n)})
	}
	if len(reqs) != 100 {
		t.Fatalf("%d requests, want 100", len(reqs))
	}
	var raw []byte
	for _, r := range reqs {
		raw = testenv.AppendCommand(raw, r.args...)
	}
	proxy.WriteRaw(raw)
	for i, r := range reqs {
		got, err := proxy.ReadReply()
		if err != nil {
			t.Fatalf("reply %d (%s): %v", i, testenv.ShowCommand(r.args), err)
		}
		noRedirect(t, testenv.ShowCommand(r.args), got)
		if string(got) != r.want {
			t.Fatalf("pipelined reply %d (%s):\n got  %s\n want %s", i, testenv.ShowCommand(r.args), testenv.ShowReply(got), testenv.ShowReply([]byte(r.want)))
		}
	}
}

// crossSlotReference asks master m for SUNION over two keys in two of its
// own slots and returns the reply: Redis Cluster's CROSSSLOT error.
func crossSlotReference(t *testing.T, st *slotTable, m *testenv.Redis) string {
	t.Helper()
	ks := st.keysOn(m, "ref:", 2)
	got := string(testenv.Dial(t, m.Addr).Do("SUNION", ks[0], ks[1]))
	if !strings.HasPrefix(got, "-CROSSSLOT") {
		t.Fatalf("SUNION %s %s on %s: %q, want -CROSSSLOT (is this Redis Cluster?)", ks[0], ks[1], m.Addr, got)
	}
	return got
}

// TestCrossSlotRefused: a command that cannot be split, with keys in
// several slots, gets exactly Redis Cluster's -CROSSSLOT error, whether its
// keys are on one master or several, alone or in a pipeline; the connection
// stays usable.
func TestCrossSlotRefused(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	proxy := e.dial(t)
	want := crossSlotReference(t, st, e.cl.Masters[0])
	if want != crossSlotError {
		t.Logf("Redis Cluster's CROSSSLOT error is %q", want)
	}
	sameNode := st.keysOn(e.cl.Masters[1], "refused:", 2)
	a, b := sameNode[0], sameNode[1]
	x := st.keysOn(e.cl.Masters[2], "refused:", 1)[0]
	proxy.Do("SET", a, "1")
	proxy.Do("SADD", x, "m")

	for _, pair := range [][2]string{{a, b}, {a, x}} {
		k1, k2 := pair[0], pair[1]
		for _, args := range [][]string{
			cmd("SUNION", k1, k2),
			cmd("SINTERSTORE", k1, k2),
			cmd("RENAME", k1, k2),
			cmd("MSETNX", k1, "1", k2, "2"),
			cmd("LMOVE", k1, k2, "LEFT", "RIGHT"),
			cmd("ZUNIONSTORE", k1, "1", k2),
			cmd("EVAL", "return redis.call('GET', KEYS[1])", "2", k1, k2),
			cmd("BLPOP", k1, k2, "0.1"),
		} {
			if got := proxy.Do(args...); string(got) != want {
				t.Errorf("%s via proxy: %s, want %q", testenv.ShowCommand(args), testenv.ShowReply(got), want)
			}
		}
	}

	// In a pipeline, between ordinary commands.
	var raw []byte
	for _, args := range [][]string{cmd("INCR", a), cmd("SUNION", a, x), cmd("INCR", a), cmd("MGET", a, x, b)} {
		raw = testenv.AppendCommand(raw, args...)
	}
	proxy.WriteRaw(raw)
	for i, w := range []string{":2\r\n", want, ":3\r\n", "*3\r\n$1\r\n3\r\n$-1\r\n$-1\r\n"} {
		got, err := proxy.ReadReply()
		if err != nil || string(got) != w {
			t.Fatalf("pipelined reply %d: %q, %v; want %q", i, got, err, w)
		}
	}
	// The refused commands changed nothing.
	if got := proxy.Do("TYPE", x); string(got) != "+set\r\n" {
		t.Errorf("TYPE %s after the refused commands: %q", x, got)
	}
	if got := proxy.Do("EXISTS", b); string(got) != ":0\r\n" {
		t.Errorf("EXISTS %s after the refused commands: %q", b, got)
	}
}
