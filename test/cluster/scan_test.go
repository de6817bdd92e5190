package cluster

import (
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// maxScanCalls bounds one full SCAN iteration: far more calls than 3000 keys
// need at COUNT 100, so a cursor that never returns to 0 fails the test.
const maxScanCalls = 5000

// scanAll iterates SCAN from cursor 0 until it returns 0 and counts how many
// times each key came back.
func scanAll(t *testing.T, c *testenv.Conn, extra ...string) map[string]int {
	t.Helper()
	seen := map[string]int{}
	cursor := "0"
	for calls := 0; ; calls++ {
		if calls == maxScanCalls {
			t.Fatalf("SCAN %s: the cursor did not return to 0 after %d calls", strings.Join(extra, " "), calls)
		}
		args := append([]string{"SCAN", cursor}, extra...)
		reply := c.Do(args...)
		noRedirect(t, testenv.ShowCommand(args), reply)
		parts, ok := testenv.SplitArray(reply)
		if !ok || len(parts) != 2 {
			t.Fatalf("%s: %s, want [cursor, keys]", testenv.ShowCommand(args), testenv.ShowReply(reply))
		}
		next, ok := testenv.ParseBulk(parts[0])
		if !ok {
			t.Fatalf("%s: cursor %q is not a bulk string", testenv.ShowCommand(args), parts[0])
		}
		if _, err := strconv.ParseUint(string(next), 10, 64); err != nil {
			t.Fatalf("%s: cursor %q is not an unsigned integer, as Redis's is", testenv.ShowCommand(args), next)
		}
		elems, ok := testenv.SplitArray(parts[1])
		if !ok {
			t.Fatalf("%s: keys %s are not an array", testenv.ShowCommand(args), testenv.ShowReply(parts[1]))
		}
		for _, el := range elems {
			k, ok := testenv.ParseBulk(el)
			if !ok {
				t.Fatalf("%s: element %q is not a bulk string", testenv.ShowCommand(args), el)
			}
			seen[string(k)]++
		}
		cursor = string(next)
		if cursor == "0" {
			return seen
		}
	}
}

// expectKeys fails unless seen holds exactly want, each once (the token
// authority's keys, which the proxy leaves out, are unexpected too).
func expectKeys(t *testing.T, what string, seen map[string]int, want []string) {
	t.Helper()
	wantSet := map[string]bool{}
	for _, k := range want {
		wantSet[k] = true
	}
	var missing, extra, dup []string
	for _, k := range want {
		if seen[k] == 0 {
			missing = append(missing, k)
		}
	}
	for k, n := range seen {
		if !wantSet[k] {
			extra = append(extra, k)
		} else if n > 1 {
			dup = append(dup, k+"×"+strconv.Itoa(n))
		}
	}
	if len(missing)+len(extra)+len(dup) > 0 {
		sort.Strings(missing)
		sort.Strings(extra)
		sort.Strings(dup)
		clipList := func(s []string) []string { return s[:min(len(s), 10)] }
		t.Errorf("%s: %d keys, want %d; missing %d %q, unexpected %d %q, repeated %d %q",
			what, len(seen), len(want), len(missing), clipList(missing), len(extra), clipList(extra), len(dup), clipList(dup))
	}
}

// TestScanDBSizeKeys: 3000 keys over every master; a full SCAN (COUNT 100,
// with MATCH, with TYPE) returns each matching key exactly once, DBSIZE is
// 3000 and KEYS returns them all: none of them counts or lists the token
// authority's two keys (Redis's suite waits for DBSIZE 0 after its keys
// expire). Mutation: without Options.OwnKeys, DBSIZE 3002 and the two keys
// in SCAN and KEYS.
func TestScanDBSizeKeys(t *testing.T) {
	e := startEnv(t, -1, 0)
	proxy := e.dial(t)
	const n = 3000
	var keys, ones []string
	for i := range n {
		k := "scan:" + strconv.Itoa(i)
		keys = append(keys, k)
		if strings.HasPrefix(k, "scan:1") {
			ones = append(ones, k)
		}
		proxy.Send("SET", k, "v")
	}
	proxy.Flush()
	for i := range n {
		if got, err := proxy.ReadReply(); err != nil || string(got) != "+OK\r\n" {
			t.Fatalf("SET %s: %q, %v", keys[i], got, err)
		}
	}
	for _, m := range e.cl.Masters {
		if got := testenv.Dial(t, m.Addr).Do("DBSIZE"); string(got) == ":0\r\n" {
			t.Fatalf("master %s holds none of the %d keys", m.Addr, n)
		}
	}

	if got := proxy.Do("DBSIZE"); string(got) != ":3000\r\n" {
		t.Errorf("DBSIZE = %s, want :3000 (the sum over the masters, less the token authority's 2 keys)", testenv.ShowReply(got))
	}
	expectKeys(t, "SCAN COUNT 100", scanAll(t, proxy, "COUNT", "100"), keys)
	expectKeys(t, "SCAN (default COUNT)", scanAll(t, proxy), keys)
	expectKeys(t, "SCAN MATCH scan:1* COUNT 100", scanAll(t, proxy, "MATCH", "scan:1*", "COUNT", "100"), ones)
	expectKeys(t, "SCAN MATCH nomatch:*", scanAll(t, proxy, "MATCH", "nomatch:*", "COUNT", "1000"), nil)

	reply := proxy.Do("KEYS", "*")
	elems, ok := testenv.SplitArray(reply)
	if !ok {
		t.Fatalf("KEYS *: %s", testenv.ShowReply(reply))
	}
	seen := map[string]int{}
	for _, el := range elems {
		k, _ := testenv.ParseBulk(el)
		seen[string(k)]++
	}
	expectKeys(t, "KEYS *", seen, keys)
	elems, _ = testenv.SplitArray(proxy.Do("KEYS", "scan:1*"))
	seen = map[string]int{}
	for _, el := range elems {
		k, _ := testenv.ParseBulk(el)
		seen[string(k)]++
	}
	expectKeys(t, "KEYS scan:1*", seen, ones)

	// TYPE is passed on.
	var hashes []string
	for i := range 40 {
		h := "scanh:" + strconv.Itoa(i)
		hashes = append(hashes, h)
		if got := proxy.Do("HSET", h, "f", "v"); string(got) != ":1\r\n" {
			t.Fatalf("HSET %s: %q", h, got)
		}
	}
	expectKeys(t, "SCAN TYPE hash", scanAll(t, proxy, "COUNT", "100", "TYPE", "hash"), hashes)
	expectKeys(t, "SCAN MATCH scan:1* TYPE string", scanAll(t, proxy, "MATCH", "scan:1*", "COUNT", "50", "TYPE", "string"), ones)
	if got := proxy.Do("DBSIZE"); string(got) != ":3040\r\n" {
		t.Errorf("DBSIZE = %s, want :3040", testenv.ShowReply(got))
	}

	// FLUSHDB through the proxy empties every master.
	if got := proxy.Do("FLUSHDB"); string(got) != "+OK\r\n" {
		t.Fatalf("FLUSHDB: %q", got)
	}
	for _, m := range e.cl.Masters {
		elems, _ := testenv.SplitArray(testenv.Dial(t, m.Addr).Do("KEYS", "*"))
		for _, el := range elems {
			if k, _ := testenv.ParseBulk(el); !isAuthorityKey(string(k)) {
				t.Errorf("key %q on %s after FLUSHDB via proxy", k, m.Addr)
			}
		}
	}
	expectKeys(t, "SCAN after FLUSHDB", scanAll(t, proxy, "COUNT", "100"), nil)
}

// TestKeylessBroadcast: SCRIPT LOAD, EXISTS and FLUSH through the proxy act
// on every master (so EVALSHA works whatever slot its keys are in); PING is
// answered.
func TestKeylessBroadcast(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	proxy := e.dial(t)
	const script = "return redis.call('GET', KEYS[1])"
	const sha = "d3c21d0c2b9ca22f82737626a27bcaf5d288f99f"
	if got := proxy.Do("PING"); string(got) != "+PONG\r\n" {
		t.Fatalf("PING: %q", got)
	}
	if got := proxy.Do("SCRIPT", "LOAD", script); string(got) != "$40\r\n"+sha+"\r\n" {
		t.Fatalf("SCRIPT LOAD: %q", got)
	}
	for _, m := range e.cl.Masters {
		d := testenv.Dial(t, m.Addr)
		if got := d.Do("SCRIPT", "EXISTS", sha); string(got) != "*1\r\n:1\r\n" {
			t.Errorf("SCRIPT EXISTS on %s after SCRIPT LOAD via proxy: %q, want it loaded on every master", m.Addr, got)
		}
		k := st.keysOn(m, "sha:", 1)[0]
		proxy.Do("SET", k, "v")
		if got := proxy.Do("EVALSHA", sha, "1", k); string(got) != "$1\r\nv\r\n" {
			t.Errorf("EVALSHA with key %s (on %s): %q", k, m.Addr, got)
		}
	}
	if got := proxy.Do("SCRIPT", "EXISTS", sha, "0000000000000000000000000000000000000000"); string(got) != "*2\r\n:1\r\n:0\r\n" {
		t.Errorf("SCRIPT EXISTS via proxy: %q", got)
	}
	// Loaded on one master only: not loaded for the client, who could not
	// run it on the others.
	testenv.Dial(t, e.cl.Masters[1].Addr).Do("SCRIPT", "FLUSH")
	if got := proxy.Do("SCRIPT", "EXISTS", sha); string(got) != "*1\r\n:0\r\n" {
		t.Errorf("SCRIPT EXISTS via proxy with the script missing on one master: %q, want *1 :0", got)
	}
	if got := proxy.Do("SCRIPT", "FLUSH"); string(got) != "+OK\r\n" {
		t.Fatalf("SCRIPT FLUSH: %q", got)
	}
	for _, m := range e.cl.Masters {
		if got := testenv.Dial(t, m.Addr).Do("SCRIPT", "EXISTS", sha); string(got) != "*1\r\n:0\r\n" {
			t.Errorf("SCRIPT EXISTS on %s after SCRIPT FLUSH via proxy: %q", m.Addr, got)
		}
	}
	if got := proxy.Do("EVALSHA", sha, "1", "any"); !isErr(got, "-NOSCRIPT") {
		t.Errorf("EVALSHA after SCRIPT FLUSH: %q, want -NOSCRIPT", got)
	}
}
