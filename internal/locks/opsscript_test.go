package locks

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// The lock operations' script (opsScript) against a real Redis, called as
// the lock writer calls it; the writer itself is tested in its own
// package, internal/lockwriter.

// connect is a standalone backend over addr, with one lock connection of
// each kind.
func connect(t *testing.T, addr string) upstream.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	be, err := upstream.Connect(ctx, upstream.Options{Seeds: []string{addr}, PoolSize: 1, WriterConns: 1, ReplicaTimeout: 2 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	return be
}

// opCall is a call of one lock operation on resource.
func opCall(op lockOp, resource string, args ...any) lockwriter.ScriptCall {
	key := "fenceproxy:lock:{" + resource + "}"
	return lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: op, Keys: []string{key, key + ":delay", key + ":fence"}, Args: lockwriter.ArgsOf(args...)}
}

// runOps sends calls as one call of opsScript on c, in the request the
// lock writer makes of a batch's operations for one slot (EVALSHA, every
// operation's three keys, then each one's letter and arguments; the
// writer's own tests hold it to that), and returns each operation's
// reply as a Write reads it: its element of the script's list, or the
// whole reply when the call was refused whole.
func runOps(t *testing.T, c *testenv.Conn, calls ...lockwriter.ScriptCall) []any {
	t.Helper()
	nargs := 0
	for _, call := range calls {
		nargs += 1 + call.Args.Len()
	}
	req := redcon.AppendArray(nil, 3+3*len(calls)+nargs)
	req = redcon.AppendBulkString(redcon.AppendBulkString(req, "EVALSHA"), opsSHA)
	req = redcon.AppendBulkString(req, strconv.Itoa(3*len(calls)))
	for _, call := range calls {
		for _, k := range call.Keys {
			req = redcon.AppendBulkString(req, k)
		}
	}
	for _, call := range calls {
		req = redcon.AppendBulk(req, []byte{byte(call.Op)})
		req = append(req, call.Args.Encoded()...)
	}
	c.WriteRaw(req)
	raw, err := c.ReadReply()
	if err != nil {
		t.Fatal(err)
	}
	elems, n, list := resp.ArrayHeader(raw)
	if list && n != len(calls) {
		t.Fatalf("opsScript answered %d replies for %d operations: %q", n, len(calls), raw)
	}
	out := make([]any, len(calls))
	for i := range calls {
		reply := raw
		if list {
			size, whole := resp.Size(elems)
			if !whole {
				t.Fatalf("opsScript's reply cut short: %q", raw)
			}
			reply, elems = elems[:size], elems[size:]
		}
		v, err := lockwriter.Replied(reply, nil).Reply()
		if err != nil {
			out[i] = err
		} else {
			out[i] = v
		}
	}
	return out
}

// TestOpsScriptBatch: the lock operations of a batch run in one script
// call, in order, each on its own record, each answered with its own
// reply; one that fails (a key of another type) fails alone; a record in
// the older hash layout is understood and rewritten as a string by its
// re-arm, and released with its fields packed as a string record's; a call
// refused whole (NOSCRIPT) is every operation's answer.
func TestOpsScriptBatch(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	c := testenv.Dial(t, master.Addr)
	c.Do("RPUSH", "fenceproxy:lock:{list}", "x")
	c.Do("HSET", "fenceproxy:lock:{old}", "owner", "o", "token", "5", "acquired", "1000", "addr", "10.0.0.1:5")
	c.Do("PEXPIRE", "fenceproxy:lock:{old}", "60000")
	c.Do("HSET", "fenceproxy:lock:{older}", "owner", "o", "token", "7", "acquired", "1000", "addr", "10.0.0.1:5")
	c.Do("SCRIPT", "LOAD", opsScript)
	const now = int64(1733300000000)
	acquire := func(r, owner string, cand uint64, newest string) lockwriter.ScriptCall {
		return opCall(opAcquire, r, owner, int64(10000), cand, newest, false, int64(0), now,
			recordValue{token: cand, at: now, addr: "127.0.0.1:9", owner: owner}, uint64(0), int64(60000))
	}
	got := runOps(t, c,
		acquire("r", "a", 10, ""),
		acquire("list", "a", 11, ""),
		acquire("r", "b", 12, ""),
		acquire("r", "c", 9, ""),
		opCall(opRenew, "r", "a", int64(20000), "10", int64(0), now+1, uint64(0)),
		acquire("old", "o", 13, "5"),
		opCall(opRelease, "r", "b", int64(0), uint64(0)),
		opCall(opRelease, "r", "a", int64(0), uint64(0)),
		opCall(opUndo, "old", "o", "6", int64(0), uint64(0), "", "", int64(60000)),
		opCall(opRelease, "older", "o", int64(0), uint64(0)),
		acquire("u", "a", 20, ""),
		opCall(opUndo, "u", "a", "20", int64(0), uint64(0), strconv.FormatInt(now+1, 10), "", int64(60000)),
		opCall(opUndo, "u", "a", "20", int64(0), uint64(0), strconv.FormatInt(now, 10), "", int64(60000)),
	)
	want := []string{
		"10",        // granted: the token alone
		"WRONGTYPE", // a list: that operation alone fails
		"[0 ",       // busy: a's grant came first in the same call
		"[4 10]",    // a record's token at or above the candidate: not granted
		"10",        // a renews its token
		"[1 5]",     // the older record's owner re-arms it
		"0",         // b does not hold r
		"10 0 1733300000000 1733300000001 11 127.0.0.1:9a", // the released record, as a renewed it
		"0",                         // not that token
		"7 0 1000 0 10 10.0.0.1:5o", // a hash record released: its fields packed as a string's
		"20",                        // granted
		"0",                         // armed at another time (re-armed since): not undone
		"1",                         // armed then: undone
	}
	for i, w := range want {
		s := fmt.Sprint(got[i])
		if !strings.HasPrefix(s, w) {
			t.Errorf("operation %d answered %q, want %q", i, s, w)
		}
	}
	if rec, ok := testenv.ReadLockRecord(t, c, "fenceproxy:lock:{old}"); !ok || rec.Owner != "o" || rec.Token != "5" ||
		rec.Acquired != "1000" || rec.Renewed != strconv.FormatInt(now, 10) || rec.Addr != "10.0.0.1:5" {
		t.Errorf("the older record after its re-arm: %+v", rec)
	}
	if typ := string(c.Do("TYPE", "fenceproxy:lock:{old}")); typ != "+string\r\n" {
		t.Errorf("the older record is a %q after its re-arm, want a string", typ)
	}

	c.Do("SCRIPT", "FLUSH")
	for i, v := range runOps(t, c, acquire("s", "a", 20, ""), opCall(opRelease, "s", "a", int64(0), uint64(0))) {
		if err, ok := v.(error); !ok || !strings.Contains(err.Error(), "NOSCRIPT") {
			t.Errorf("operation %d of a call that met NOSCRIPT: %v", i, v)
		}
	}
}

// TestOpsScriptHandoff: opHandoff releases the owner's record and, in the
// same call, grants the resource to the head of the line with its token;
// a release by another owner grants nothing; a head's token not above the
// released one is not granted (kindTokenAhead), though the release stands.
func TestOpsScriptHandoff(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	c := testenv.Dial(t, master.Addr)
	c.Do("SCRIPT", "LOAD", opsScript)
	const now = int64(1733300000000)
	acquire := func(r, owner string, cand uint64) lockwriter.ScriptCall {
		return opCall(opAcquire, r, owner, int64(10000), cand, "", false, int64(0), now,
			recordValue{token: cand, at: now, addr: "127.0.0.1:9", owner: owner}, uint64(0), int64(60000))
	}
	handoff := func(r, owner, head string, cand uint64) lockwriter.ScriptCall {
		return opCall(opHandoff, r, owner, int64(0), uint64(0), int64(20000), cand,
			recordValue{token: cand, at: now + 5, addr: "127.0.0.1:8", owner: head}, int64(60000))
	}
	got := runOps(t, c,
		acquire("r", "a", 10),
		handoff("r", "x", "b", 11), // x does not hold r
		handoff("r", "a", "b", 11),
		acquire("s", "a", 20),
		handoff("s", "a", "b", 19), // 19 is below a's 20
	)
	want := []string{"10", "0", "[10 0 1733300000000 1733300000000 11 127.0.0.1:9a 11]", "20", "[20 0 1733300000000 1733300000000 11 127.0.0.1:9a [4 20]]"}
	for i, w := range want {
		if s := fmt.Sprint(got[i]); s != w {
			t.Errorf("operation %d answered %q, want %q", i, s, w)
		}
	}
	if rec, ok := testenv.ReadLockRecord(t, c, "fenceproxy:lock:{r}"); !ok || rec.Owner != "b" || rec.Token != "11" ||
		rec.Acquired != strconv.FormatInt(now+5, 10) || rec.Addr != "127.0.0.1:8" {
		t.Errorf("r after the handoff: %+v, want b's grant of 11", rec)
	}
	if pttl, _ := testenv.ParseInt(c.Do("PTTL", "fenceproxy:lock:{r}")); pttl <= 10000 {
		t.Errorf("b's lease: PTTL %d, want its own 20000 ms", pttl)
	}
	if _, ok := testenv.ReadLockRecord(t, c, "fenceproxy:lock:{s}"); ok {
		t.Errorf("s still has a record after a's release with a head token too low to grant")
	}
}

// TestRawPair: opAcquire's replies read from their bytes (rawPair) read
// as pair reads them parsed, and anything else, cut short anywhere
// included, is left to pair.
func TestRawPair(t *testing.T) {
	replies := []string{
		"$2\r\n17\r\n", "*2\r\n:1\r\n:5000\r\n", "*2\r\n:-1\r\n:-2\r\n", "*2\r\n:3\r\n$2\r\n12\r\n",
		"$-1\r\n", "$0\r\n\r\n", "$2\r\n1x\r\n", "$3\r\n17\r\n", "$2\r\n17\r\nx", "$2\r\n017\r\n", "$02\r\n17\r\n",
		"*1\r\n:1\r\n", "*3\r\n:1\r\n:2\r\n:3\r\n", "*2\r\n:1\r\n:2\r\n:3\r\n", ":5\r\n", "-ERR x\r\n", "*2\r\n:1\n:2\r\n",
	}
	for _, r := range replies {
		for cut := 0; cut <= len(r); cut++ {
			raw := []byte(r[:cut])
			kind, value, ok := rawPair(lockwriter.Replied(raw, nil))
			if !ok {
				continue
			}
			v, err := resp.Parse(raw)
			if err != nil {
				t.Errorf("rawPair(%q) = %d, %d, but it does not parse: %v", raw, kind, value, err)
				continue
			}
			if k, val, err := pair(v); err != nil || k != kind || val != value {
				t.Errorf("rawPair(%q) = %d, %d; pair reads %d, %d, %v", raw, kind, value, k, val, err)
			}
		}
	}
	for _, r := range []string{"$2\r\n17\r\n", "*2\r\n:1\r\n:5000\r\n"} {
		if _, _, ok := rawPair(lockwriter.Replied([]byte(r), nil)); !ok {
			t.Errorf("rawPair(%q) left it to pair", r)
		}
	}
}

// TestHashAcquireAsksForTheNewest: a recipe's acquire sent without the
// resource's newest token (RecipeAcquireNow, when the fence store does not
// have it cached) grants a fresh lock, but a re-entry, which is judged by
// that token, is answered kindNeedNewest with nothing written; sent again
// with it, the re-entry keeps its grant's token.
func TestHashAcquireAsksForTheNewest(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	c := testenv.Dial(t, master.Addr)
	c.Do("SCRIPT", "LOAD", opsScript)
	const holder, lease, life = "uuid:1", int64(30000), int64(86400000)
	side := "fenceproxy:lock:{lk}"
	acquire := func(cand uint64, newest any) []any {
		now := time.Now().UnixMilli()
		call := lockwriter.ScriptCall{Source: opsScript, SHA: opsSHA, Op: opHashAcquire, Keys: recipeKeys("lk", side),
			Args: lockwriter.ArgsOf(holder, lease, cand, newest, now,
				recordValue{token: cand, at: now, addr: "127.0.0.1:9" + recipeAddrMark, owner: holder}, uint64(0), life, "")}
		arr, ok := runOps(t, c, call)[0].([]any)
		if !ok || len(arr) < 2 {
			t.Fatalf("hash acquire answered %v", arr)
		}
		return arr
	}
	if got := acquire(5, ""); got[0] != int64(kindGranted) || got[1] != "5" {
		t.Fatalf("a fresh grant without the newest token: %v, want kind %d, token 5", got, kindGranted)
	}
	if got := acquire(6, ""); got[0] != int64(kindNeedNewest) {
		t.Fatalf("a re-entry without the newest token: %v, want kind %d", got, kindNeedNewest)
	}
	if n := string(c.Do("HGET", "lk", holder)); n != ":1\r\n" && n != "$1\r\n1\r\n" {
		t.Fatalf("the re-entry asked for the newest token wrote its count: %q", n)
	}
	if got := acquire(7, uint64(5)); got[0] != int64(kindRearmed) || got[1] != "5" {
		t.Fatalf("the re-entry with the newest token: %v, want kind %d, token 5", got, kindRearmed)
	}
}

// The letters by which opsScript defines a lazy family on first use are
// the ones that family registers: a letter missing from its family's
// letters would answer "unknown lock operation" until another call had
// defined the family.
func TestLazyOpLetters(t *testing.T) {
	registers := regexp.MustCompile(`recipeOps(?:\.([A-Za-z0-9])|\['([A-Za-z0-9])'\]) = `)
	topLevel := regexp.MustCompile(`(?m)^local function (\w+)`)
	for _, family := range []struct{ name, lua, letters string }{
		{"valueOpsLua", valueOpsLua, valueOpLetters},
		{"rwlockOpsLua", rwlockOpsLua, rwOpLetters},
		{"fairOpsLua", fairOpsLua, fairOpLetters},
	} {
		var got []string
		for _, m := range registers.FindAllStringSubmatch(family.lua, -1) {
			got = append(got, m[1]+m[2])
		}
		sort.Strings(got)
		want := strings.Split(family.letters, "")
		// A family is defined only when named, so it may use the shared
		// helpers but nothing another lazy family defines.
		for _, other := range []string{valueOpsLua, rwlockOpsLua, fairOpsLua} {
			if other == family.lua {
				continue
			}
			for _, m := range topLevel.FindAllStringSubmatch(other, -1) {
				if regexp.MustCompile(`\b` + m[1] + `\(`).MatchString(family.lua) {
					t.Errorf("%s calls %s, which another lazy family defines: move it to recipeOpsLua", family.name, m[1])
				}
			}
		}
		sort.Strings(want)
		if strings.Join(got, "") != strings.Join(want, "") {
			t.Errorf("%s registers %q, its letters are %q", family.name, got, want)
		}
	}
}

// A lazy family's operations run in any position of a call, twice in one
// call, and beside another family's; a letter no family registers is still
// refused, whole call, by name.
func TestLazyOpsInOneCall(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	c := testenv.Dial(t, master.Addr)
	c.Do("SCRIPT", "LOAD", opsScript)
	c.Do("SET", "v2", "h")
	keys := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, n, "fenceproxy:lock:{"+n+"}", "fenceproxy:lock:{"+n+"}:fence")
		}
		return out
	}
	args := append([]string{"EVALSHA", opsSHA, "9"}, keys("v1", "v2", "q")...)
	args = append(args, string(opValueRelease), "h", "0", string(opValueRelease), "h", "0",
		string(opFairDequeue), "h", "q", "t", "0", "0")
	// No key, then the holder's key deleted, then the dequeue's 1.
	if got, want := string(c.Do(args...)), "*3\r\n*1\r\n:0\r\n*1\r\n:2\r\n:1\r\n"; got != want {
		t.Fatalf("two value releases and a fair dequeue in one call: %q, want %q", got, want)
	}
	for _, op := range []string{"x", "VQ", ""} {
		reply := string(c.Do(append(append([]string{"EVALSHA", opsSHA, "3"}, keys("v3")...), op, "h", "0")...))
		if !strings.Contains(reply, "unknown lock operation") {
			t.Errorf("operation %q: %q, want the unknown-operation error", op, reply)
		}
	}
}
