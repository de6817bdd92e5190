package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// infoField reads field of an INFO reply (a bulk or verbatim string).
func infoField(reply []byte, field string) string {
	for _, line := range strings.Split(string(reply), "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// infoSections lists the "# Name" headers of an INFO reply, in order.
func infoSections(reply []byte) []string {
	var out []string
	for _, line := range strings.Split(string(reply), "\r\n") {
		if name, ok := strings.CutPrefix(line, "# "); ok {
			out = append(out, name)
		}
	}
	return out
}

// TestInfoWholeCluster: INFO through the proxy in front of a Redis Cluster
// reports every master's keys and commands (Keyspace, Commandstats,
// Errorstats summed), in Redis's sections and order, in both protocols.
func TestInfoWholeCluster(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	proxy := e.dial(t)
	perMaster := 7
	var keys []string
	for _, m := range e.cl.Masters {
		keys = append(keys, st.keysOn(m, "info:", perMaster)...)
	}
	for _, k := range keys {
		// HSETNX: a command the proxy itself never sends.
		if got := proxy.Do("HSETNX", k, "f", "v"); string(got) != ":1\r\n" {
			t.Fatalf("HSETNX %s: %s", k, testenv.ShowReply(got))
		}
		if got := proxy.Do("LPUSH", k, "x"); !isErr(got, "-WRONGTYPE") {
			t.Fatalf("LPUSH %s: %s", k, testenv.ShowReply(got))
		}
	}
	var directKeys int64
	for _, m := range e.cl.Masters {
		n, _ := testenv.ParseInt(testenv.Dial(t, m.Addr).Do("DBSIZE"))
		directKeys += n
	}
	for _, proto := range []string{"2", "3"} {
		if got := proxy.Do("HELLO", proto); len(got) == 0 || got[0] == '-' {
			t.Fatalf("HELLO %s: %s", proto, testenv.ShowReply(got))
		}
		ks := proxy.Do("INFO", "keyspace")
		if want := fmt.Sprintf("db0:keys=%d,", directKeys); !strings.Contains(string(ks), want) {
			t.Errorf("RESP%s: INFO keyspace %s, want %q (every master's keys)", proto, testenv.ShowReply(ks), want)
		}
		cmd := proxy.Do("INFO", "commandstats")
		if want := fmt.Sprintf("calls=%d,", len(keys)); !strings.HasPrefix(infoField(cmd, "cmdstat_hsetnx"), want) {
			t.Errorf("RESP%s: INFO commandstats cmdstat_hsetnx:%s, want %s... (every master's HSETNXs)", proto, infoField(cmd, "cmdstat_hsetnx"), want)
		}
		errs := proxy.Do("INFO", "errorstats")
		if want := fmt.Sprintf("count=%d", len(keys)); infoField(errs, "errorstat_WRONGTYPE") != want {
			t.Errorf("RESP%s: INFO errorstats errorstat_WRONGTYPE:%s, want %s", proto, infoField(errs, "errorstat_WRONGTYPE"), want)
		}
		stats := proxy.Do("INFO", "stats")
		var sum int64
		for _, m := range e.cl.Masters {
			n, _ := strconv.ParseInt(infoField(testenv.Dial(t, m.Addr).Do("INFO", "stats"), "total_error_replies"), 10, 64)
			sum += n
		}
		if n, _ := strconv.ParseInt(infoField(stats, "total_error_replies"), 10, 64); n < int64(len(keys)) || n > sum {
			t.Errorf("RESP%s: INFO stats total_error_replies:%d, want between %d and the masters' sum %d", proto, n, len(keys), sum)
		}
	}
	proxy.Do("HELLO", "2")
	// The sections are Redis's, in its order, then the proxy's own.
	direct := infoSections(testenv.Dial(t, e.cl.Masters[0].Addr).Do("INFO"))
	via := infoSections(proxy.Do("INFO"))
	if len(via) < len(direct) || strings.Join(via[:len(direct)], ",") != strings.Join(direct, ",") {
		t.Errorf("INFO sections through the proxy %v, a master's %v", via, direct)
	}
}

// TestKeylessCommandsWholeCluster: CONFIG SET, SLOWLOG, LATENCY, FUNCTION,
// PUBSUB and WAITAOF through the proxy act on, and answer for, every
// master.
func TestKeylessCommandsWholeCluster(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	proxy := e.dial(t)
	directs := map[*testenv.Redis]*testenv.Conn{}
	for _, m := range e.cl.Masters {
		directs[m] = testenv.Dial(t, m.Addr)
	}
	for _, set := range [][]string{{"slowlog-log-slower-than", "0"}, {"latency-monitor-threshold", "1"}} {
		if got := proxy.Do("CONFIG", "SET", set[0], set[1]); string(got) != "+OK\r\n" {
			t.Fatalf("CONFIG SET %v: %s", set, testenv.ShowReply(got))
		}
		want := fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(set[0]), set[0], len(set[1]), set[1])
		for m, d := range directs {
			if got := d.Do("CONFIG", "GET", set[0]); string(got) != want {
				t.Errorf("CONFIG GET %s on %s after CONFIG SET through the proxy: %q", set[0], m.Addr, got)
			}
		}
		if got := proxy.Do("CONFIG", "GET", set[0]); string(got) != want {
			t.Errorf("CONFIG GET %s through the proxy: %q", set[0], got)
		}
	}
	if got := proxy.Do("CONFIG", "SET", "no-such-parameter", "1"); !isErr(got, "-ERR") {
		t.Errorf("CONFIG SET of an unknown parameter: %s, want Redis's error", testenv.ShowReply(got))
	}

	// SLOWLOG: every master's entries, the newest first.
	if got := proxy.Do("SLOWLOG", "RESET"); string(got) != "+OK\r\n" {
		t.Fatalf("SLOWLOG RESET: %s", testenv.ShowReply(got))
	}
	var keys []string
	for _, m := range e.cl.Masters {
		k := st.keysOn(m, "slow:", 1)[0]
		keys = append(keys, k)
		proxy.Do("SET", k, "v")
		proxy.Do("HSETNX", k+"h", "f", "v") // a command the proxy never sends itself
	}
	var sum int64 // the masters' entries so far; more come (the proxy's own)
	for _, d := range directs {
		n, _ := testenv.ParseInt(d.Do("SLOWLOG", "LEN"))
		sum += n
	}
	if n, _ := testenv.ParseInt(proxy.Do("SLOWLOG", "LEN")); n < sum {
		t.Errorf("SLOWLOG LEN through the proxy %d, want at least the masters' sum %d", n, sum)
	}
	all, ok := testenv.SplitArray(proxy.Do("SLOWLOG", "GET", "-1"))
	if !ok {
		t.Fatal("SLOWLOG GET -1: not an array")
	}
	seen := map[string]bool{}
	ids := map[int64]bool{} // the proxy's: unique across masters (each numbers its own from 0)
	var last int64 = 1 << 62
	for _, entry := range all {
		f, _ := testenv.SplitArray(entry)
		id, _ := testenv.ParseInt(f[0])
		when, _ := testenv.ParseInt(f[1])
		if when > last {
			t.Errorf("SLOWLOG GET: an entry at %d after one at %d: want the newest first", when, last)
		}
		if ids[id] {
			t.Errorf("SLOWLOG GET: id %d twice (the masters' own ids, merged?)", id)
		}
		ids[id] = true
		last = when
		for _, k := range keys {
			if strings.Contains(string(entry), "$3\r\nSET\r\n$"+strconv.Itoa(len(k))+"\r\n"+k+"\r\n") {
				seen[k] = true
			}
		}
	}
	if len(seen) != len(keys) {
		t.Errorf("SLOWLOG GET -1 shows the SETs of %v, want every master's: %v", seen, keys)
	}
	if got, _ := testenv.SplitArray(proxy.Do("SLOWLOG", "GET", "2")); len(got) != 2 {
		t.Errorf("SLOWLOG GET 2: %d entries", len(got))
	}

	// LATENCY: a slow script on the last master only.
	last3 := e.cl.Masters[len(e.cl.Masters)-1]
	k := st.keysOn(last3, "lat:", 1)[0]
	busy := "local t = redis.call('TIME') local s = t[1]*1000000+t[2] repeat t = redis.call('TIME') until t[1]*1000000+t[2] - s > 20000 return 1"
	if got := proxy.Do("EVAL", busy, "1", k); string(got) != ":1\r\n" {
		t.Fatalf("EVAL busy 20ms: %s", testenv.ShowReply(got))
	}
	latest := proxy.Do("LATENCY", "LATEST")
	if !strings.Contains(string(latest), "$7\r\ncommand\r\n") {
		t.Errorf("LATENCY LATEST through the proxy: %s, want the last master's command event", testenv.ShowReply(latest))
	}
	if h, ok := testenv.SplitArray(proxy.Do("LATENCY", "HISTORY", "command")); !ok || len(h) == 0 {
		t.Errorf("LATENCY HISTORY command: %d samples, want some", len(h))
	}
	hist := proxy.Do("LATENCY", "HISTOGRAM", "hsetnx")
	if want := fmt.Sprintf("$5\r\ncalls\r\n:%d\r\n", len(keys)); !strings.HasPrefix(string(hist), "*2\r\n$6\r\nhsetnx\r\n") || !strings.Contains(string(hist), want) {
		t.Errorf("LATENCY HISTOGRAM hsetnx: %s, want %d calls (one on each master)", testenv.ShowReply(hist), len(keys))
	}
	if n, _ := testenv.ParseInt(proxy.Do("LATENCY", "RESET")); n < 1 {
		t.Errorf("LATENCY RESET: %d events reset, want at least 1", n)
	}
	if got := proxy.Do("LATENCY", "LATEST"); string(got) != "*0\r\n" {
		t.Errorf("LATENCY LATEST after LATENCY RESET: %s", testenv.ShowReply(got))
	}

	// FUNCTION: loaded on every master, so FCALL works on every key;
	// STATS and LIST are one node's.
	lib := "#!lua name=kl\nredis.register_function('kl_get', function(keys, args) return redis.call('GET', keys[1]) end)"
	if got := proxy.Do("FUNCTION", "LOAD", lib); string(got) != "$2\r\nkl\r\n" {
		t.Fatalf("FUNCTION LOAD: %s", testenv.ShowReply(got))
	}
	for _, k := range keys {
		if got := proxy.Do("FCALL", "kl_get", "1", k); string(got) != "$1\r\nv\r\n" {
			t.Errorf("FCALL kl_get on %s (master %s): %s", k, st.of(k).Addr, testenv.ShowReply(got))
		}
	}
	if got, want := proxy.Do("FUNCTION", "LIST"), directs[e.cl.Masters[0]].Do("FUNCTION", "LIST"); string(got) != string(want) {
		t.Errorf("FUNCTION LIST through the proxy %s, a master's %s", testenv.ShowReply(got), testenv.ShowReply(want))
	}
	if got := proxy.Do("FUNCTION", "STATS"); !strings.Contains(string(got), "$15\r\nlibraries_count\r\n:1\r\n") {
		t.Errorf("FUNCTION STATS: %s", testenv.ShowReply(got))
	}
	dump := proxy.Do("FUNCTION", "DUMP")
	payload, ok := testenv.ParseBulk(dump)
	if !ok {
		t.Fatalf("FUNCTION DUMP: %s", testenv.ShowReply(dump))
	}
	if got := proxy.Do("FUNCTION", "FLUSH"); string(got) != "+OK\r\n" {
		t.Fatalf("FUNCTION FLUSH: %s", testenv.ShowReply(got))
	}
	if got := proxy.Do("FUNCTION", "RESTORE", string(payload)); string(got) != "+OK\r\n" {
		t.Fatalf("FUNCTION RESTORE: %s", testenv.ShowReply(got))
	}
	for m, d := range directs {
		if got := d.Do("FUNCTION", "LIST"); !strings.Contains(string(got), "$2\r\nkl\r\n") {
			t.Errorf("FUNCTION LIST on %s after RESTORE through the proxy: %s", m.Addr, testenv.ShowReply(got))
		}
	}

	// PUBSUB in RESP3: the subscriber of a shard channel on each master.
	for _, m := range e.cl.Masters {
		c := e.dial(t) // stays subscribed until the test ends
		ch := st.keysOn(m, "shch:", 1)[0]
		c.Do("SSUBSCRIBE", ch)
		c.Do("SSUBSCRIBE", "shared{"+ch+"}")
	}
	proxy.Do("HELLO", "3")
	if got := proxy.Do("PUBSUB", "SHARDCHANNELS"); len(got) == 0 || !strings.HasPrefix(string(got), "*6\r\n") {
		t.Errorf("PUBSUB SHARDCHANNELS in RESP3: %s, want the 6 shard channels of every master", testenv.ShowReply(got))
	}
	var args []string
	for _, m := range e.cl.Masters {
		args = append(args, st.keysOn(m, "shch:", 1)[0])
	}
	got := proxy.Do(append([]string{"PUBSUB", "SHARDNUMSUB"}, args...)...)
	want := fmt.Sprintf("*%d\r\n", 2*len(args))
	for _, a := range args {
		want += fmt.Sprintf("$%d\r\n%s\r\n:1\r\n", len(a), a)
	}
	if string(got) != want {
		t.Errorf("PUBSUB SHARDNUMSUB in RESP3: %s, want %q", testenv.ShowReply(got), want)
	}
	proxy.Do("HELLO", "2")

	// WAITAOF: every master's answer (Redis 7.0 does not know it: its own
	// error, never a hang).
	waitaof := proxy.Do("WAITAOF", "0", "0", "0")
	if direct := directs[e.cl.Masters[0]].Do("WAITAOF", "0", "0", "0"); string(waitaof) != string(direct) {
		t.Errorf("WAITAOF 0 0 0 through the proxy %s, a master's %s", testenv.ShowReply(waitaof), testenv.ShowReply(direct))
	}
}

// TestClusterOneNodeView: CLUSTER INFO, NODES, SLOTS, SHARDS and MYID
// through the proxy describe a cluster of one node, the proxy at the
// address the client used, master of every slot (RESP2 and RESP3); a
// go-redis ClusterClient given the proxy's address then sends everything
// to the proxy, and its keys land on the cluster's right masters.
func TestClusterOneNodeView(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	proxy := e.dial(t)
	host, port, _ := strings.Cut(e.proxy.Addr, ":")
	myid, ok := testenv.ParseBulk(proxy.Do("CLUSTER", "MYID"))
	if !ok || len(myid) != 40 {
		t.Fatalf("CLUSTER MYID: %q", myid)
	}
	id := string(myid)
	for _, proto := range []string{"2", "3"} {
		proxy.Do("HELLO", proto)
		info := proxy.Do("CLUSTER", "INFO")
		for _, f := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:1", "cluster_size:1"} {
			if !strings.Contains(string(info), f+"\r\n") {
				t.Errorf("RESP%s: CLUSTER INFO %s, want %s", proto, testenv.ShowReply(info), f)
			}
		}
		nodes := proxy.Do("CLUSTER", "NODES")
		line := id + " " + e.proxy.Addr + "@0 myself,master - 0 0 1 connected 0-16383\n"
		if !strings.Contains(string(nodes), line) {
			t.Errorf("RESP%s: CLUSTER NODES %s, want %q", proto, testenv.ShowReply(nodes), line)
		}
		meta := "*0\r\n"
		if proto == "3" {
			meta = "%0\r\n"
		}
		slots := fmt.Sprintf("*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$%d\r\n%s\r\n:%s\r\n$40\r\n%s\r\n%s", len(host), host, port, id, meta)
		if got := proxy.Do("CLUSTER", "SLOTS"); string(got) != slots {
			t.Errorf("RESP%s: CLUSTER SLOTS %s, want %q", proto, testenv.ShowReply(got), slots)
		}
		shards := proxy.Do("CLUSTER", "SHARDS")
		for _, f := range []string{"$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n", "$2\r\nid\r\n$40\r\n" + id, "$4\r\nport\r\n:" + port + "\r\n", "$6\r\nmaster\r\n"} {
			if !strings.Contains(string(shards), f) {
				t.Errorf("RESP%s: CLUSTER SHARDS %s, want %q in it", proto, testenv.ShowReply(shards), f)
			}
		}
	}
	proxy.Do("HELLO", "2")
	if got := proxy.Do("CLUSTER", "KEYSLOT", "foo"); string(got) != ":12182\r\n" {
		t.Errorf("CLUSTER KEYSLOT foo: %s (forwarded)", testenv.ShowReply(got))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{e.proxy.Addr}, Protocol: 2})
	defer cc.Close()
	for i := range 50 {
		k := "view:" + strconv.Itoa(i)
		if err := cc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("ClusterClient SET %s through the proxy: %v", k, err)
		}
		if got := testenv.Dial(t, st.of(k).Addr).Do("GET", k); string(got) != "$1\r\nv\r\n" {
			t.Fatalf("GET %s on its master %s after a ClusterClient SET through the proxy: %s", k, st.of(k).Addr, testenv.ShowReply(got))
		}
	}
	if err := cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
		if c.Options().Addr != e.proxy.Addr {
			return fmt.Errorf("the ClusterClient has a shard at %s, not the proxy", c.Options().Addr)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestClusterSubcommands: the rest of CLUSTER through the proxy, in front of
// three masters. KEYSLOT is every node's answer; COUNTKEYSINSLOT and
// GETKEYSINSLOT are the answer of the slot's own master (they went to the
// first master, which counts none of another master's keys), with Redis's
// errors for a bad slot; REPLICAS, SLAVES, COUNT-FAILURE-REPORTS and LINKS
// describe the one node of the view; the subcommands that change the
// cluster are refused with an error that says why, and change nothing.
func TestClusterSubcommands(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	d := dialMasters(t, e.cl)
	proxy := e.dial(t)
	myid, _ := testenv.ParseBulk(proxy.Do("CLUSTER", "MYID"))

	for i, m := range e.cl.Masters {
		// Three keys in one slot of each master (a hash tag), written
		// through the proxy.
		k := st.keysOn(m, "sub:", 1)[0]
		slot := strconv.Itoa(testenv.KeySlot(k))
		for j := range 3 {
			if got := proxy.Do("SET", "{"+k+"}:"+strconv.Itoa(j), "v"); string(got) != "+OK\r\n" {
				t.Fatalf("SET: %s", testenv.ShowReply(got))
			}
		}
		tag := "{" + k + "}"
		if testenv.KeySlot(tag) != testenv.KeySlot(k) {
			t.Fatalf("the hash tag of %s is in another slot", k)
		}
		for _, args := range [][]string{
			{"CLUSTER", "KEYSLOT", k},
			{"CLUSTER", "KEYSLOT", tag + ":0"},
			{"CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(testenv.KeySlot(tag))},
			{"CLUSTER", "GETKEYSINSLOT", strconv.Itoa(testenv.KeySlot(tag)), "10"},
			{"CLUSTER", "GETKEYSINSLOT", strconv.Itoa(testenv.KeySlot(tag)), "1"},
		} {
			got, want := proxy.Do(args...), d[m].Do(args...)
			if args[1] == "GETKEYSINSLOT" {
				// The same keys; Redis's order within a slot is its own.
				g, _ := testenv.SplitArray(got)
				w, _ := testenv.SplitArray(want)
				if len(g) != len(w) || len(g) == 0 {
					t.Errorf("master %d: %s through the proxy %s, on the slot's master %s", i, testenv.ShowCommand(args), testenv.ShowReply(got), testenv.ShowReply(want))
				}
				continue
			}
			if string(got) != string(want) {
				t.Errorf("master %d: %s through the proxy %s, on the slot's master %s", i, testenv.ShowCommand(args), testenv.ShowReply(got), testenv.ShowReply(want))
			}
		}
		if got := proxy.Do("CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(testenv.KeySlot(tag))); string(got) != ":3\r\n" {
			t.Errorf("master %d: CLUSTER COUNTKEYSINSLOT of slot %s holding 3 keys: %s", i, slot, testenv.ShowReply(got))
		}
	}

	// Redis's own errors and arity answers.
	for _, args := range [][]string{
		{"CLUSTER", "COUNTKEYSINSLOT", "16384"},
		{"CLUSTER", "COUNTKEYSINSLOT", "-1"},
		{"CLUSTER", "COUNTKEYSINSLOT", "x"},
		{"CLUSTER", "GETKEYSINSLOT", "1", "-1"},
		{"CLUSTER", "GETKEYSINSLOT", "99999", "1"},
		{"CLUSTER", "KEYSLOT"},
		{"CLUSTER", "KEYSLOT", "a", "b"},
	} {
		got, want := proxy.Do(args...), d[e.cl.Masters[0]].Do(args...)
		if string(got) != string(want) {
			t.Errorf("%s through the proxy %s, Redis %s", testenv.ShowCommand(args), testenv.ShowReply(got), testenv.ShowReply(want))
		}
	}

	// The one node of the view: no replicas, no failure reports, no links;
	// another node id (a real master's) is unknown to it.
	other := nodeID(t, e.cl.Masters[1])
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"CLUSTER", "REPLICAS", string(myid)}, "*0\r\n"},
		{[]string{"CLUSTER", "SLAVES", string(myid)}, "*0\r\n"},
		{[]string{"CLUSTER", "COUNT-FAILURE-REPORTS", string(myid)}, ":0\r\n"},
		{[]string{"CLUSTER", "LINKS"}, "*0\r\n"},
		{[]string{"CLUSTER", "REPLICAS", other}, "-ERR Unknown node " + other + "\r\n"},
	} {
		if got := proxy.Do(c.args...); string(got) != c.want {
			t.Errorf("%s: %s, want %q", testenv.ShowCommand(c.args), testenv.ShowReply(got), c.want)
		}
	}

	// Refused, and nothing changed: every master still owns its slots.
	before := readSlots(t, e.cl)
	for _, args := range [][]string{
		{"CLUSTER", "FAILOVER"},
		{"CLUSTER", "FAILOVER", "TAKEOVER"},
		{"cluster", "addslots", "0"},
		{"CLUSTER", "DELSLOTS", "0"},
		{"CLUSTER", "ADDSLOTSRANGE", "0", "10"},
		{"CLUSTER", "DELSLOTSRANGE", "0", "10"},
		{"CLUSTER", "SETSLOT", "0", "STABLE"},
		{"CLUSTER", "MEET", "127.0.0.1", "1"},
		{"CLUSTER", "FORGET", other},
		{"CLUSTER", "RESET", "HARD"},
		{"CLUSTER", "REPLICATE", other},
		{"CLUSTER", "FLUSHSLOTS"},
		{"CLUSTER", "SAVECONFIG"},
		{"CLUSTER", "BUMPEPOCH"},
		{"CLUSTER", "SET-CONFIG-EPOCH", "1"},
	} {
		got := proxy.Do(args...)
		want := "-ERR fenceproxy: CLUSTER " + strings.ToUpper(args[1]) + " is not served through fenceproxy, which shows its clients one node"
		if !strings.HasPrefix(string(got), want) {
			t.Errorf("%s: %s, want %q...", testenv.ShowCommand(args), testenv.ShowReply(got), want)
		}
	}
	if after := readSlots(t, e.cl); after.owner != before.owner {
		t.Errorf("the slots changed owner after the refused subcommands")
	}
	for _, m := range e.cl.Masters {
		if got := d[m].Do("CLUSTER", "INFO"); !strings.Contains(string(got), "cluster_state:ok") {
			t.Errorf("master %s after the refused subcommands: %s", m.Addr, testenv.ShowReply(got))
		}
	}
}
