package locks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/cluster"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestAppendEval: a script call encodes to exactly the RESP request that
// its arguments, spelled out, give through resp.AppendCommand.
func TestAppendEval(t *testing.T) {
	cases := []struct {
		call ScriptCall
		want []string
	}{
		{ScriptCall{Source: "return 1"}, []string{"EVAL", "return 1", "0"}},
		{ScriptCall{Source: "x", SHA: "abc", Keys: []string{"k1", "k2"}, Args: ArgsOf("own", int64(-5), 7, uint64(18446744073709551615), true, false, []byte("b\r\n"))},
			[]string{"EVALSHA", "abc", "2", "k1", "k2", "own", "-5", "7", "18446744073709551615", "1", "0", "b\r\n"}},
		{ScriptCall{SHA: "s", Keys: []string{""}, Args: ArgsOf("")}, []string{"EVALSHA", "s", "1", "", ""}},
	}
	for _, c := range cases {
		args := make([][]byte, len(c.want))
		for i, a := range c.want {
			args[i] = []byte(a)
		}
		want := resp.AppendCommand(nil, args)
		if got := appendEval([]byte("junk"), c.call); !bytes.Equal(got[4:], want) || string(got[:4]) != "junk" {
			t.Errorf("appendEval(%+v) = %q, want %q after what was there", c.call, got, want)
		}
	}
}

// connect is a standalone backend over addr, with one lock connection of
// each kind.
func connect(t *testing.T, addr string) cluster.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	be, err := cluster.Connect(ctx, cluster.Options{Seeds: []string{addr}, PoolSize: 1, WriterConns: 1, ReplicaTimeout: 2 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	return be
}

// TestWriter: the Writer against a real master with a replica: EVALSHA
// that meets NOSCRIPT goes again as EVAL, a write's WAIT counts the
// replica, concurrent writes are all answered, an undo goes to its
// grant's master, and reads and the memory policy come from the master.
func TestWriter(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	be := connect(t, master.Addr)
	wr := NewWriter(WriterOptions{Backend: be, MinReplicas: 1, ReplicaTimeout: 2 * time.Second})
	ctx := context.Background()

	const seven = "return 7"
	w := wr.Start(ctx, "k", ScriptCall{Source: seven, SHA: cluster.ScriptSHA(seven)}, false)
	if v, err := w.Reply(); err != nil || v != int64(7) {
		t.Fatalf("a script Redis does not have yet, by SHA: %v, %v", v, err)
	}
	if n, err := w.Acks(); n != 0 || err != nil {
		t.Fatalf("Acks of a write that asked for none: %d, %v", n, err)
	}

	const set = "redis.call('SET', KEYS[1], ARGV[1]) return ARGV[1]"
	w = wr.Start(ctx, "k", ScriptCall{Source: set, Keys: []string{"k"}, Args: ArgsOf("v")}, true)
	if v, err := w.Reply(); err != nil || v != "v" {
		t.Fatalf("SET script: %v, %v", v, err)
	}
	if n, err := w.Acks(); n != 1 || err != nil {
		t.Fatalf("Acks with one replica: %d, %v", n, err)
	}
	if raw, err := w.Raw(); err != nil || string(raw) != "$1\r\nv\r\n" {
		t.Fatalf("Raw: %q, %v", raw, err)
	}
	if v, err := wr.RunAfter(ctx, w, ScriptCall{Source: "return redis.call('GET', KEYS[1])", Keys: []string{"k"}}); err != nil || v != "v" {
		t.Fatalf("RunAfter: %v, %v", v, err)
	}
	if _, err := wr.Start(ctx, "k", ScriptCall{Source: "return redis.error_reply('BOOM no')"}, false).Reply(); err == nil || !strings.Contains(err.Error(), "BOOM no") {
		t.Fatalf("a script's own error: %v", err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 300)
	for range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := wr.Start(ctx, "k", ScriptCall{Source: set, SHA: cluster.ScriptSHA(set), Keys: []string{"k"}, Args: ArgsOf("v")}, true)
			if _, err := w.Reply(); err != nil {
				errs <- err
				return
			}
			if n, err := w.Acks(); n != 1 || err != nil {
				errs <- errors.Join(err, errors.New("not acknowledged"))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a concurrent write: %v", err)
	}

	// Every script above went first with its source: none met NOSCRIPT,
	// whose WAIT (sent behind it in its batch) would have held a writer
	// for nothing.
	m := testenv.Dial(t, master.Addr)
	if stats := string(m.Do("INFO", "errorstats")); strings.Contains(stats, "NOSCRIPT") {
		t.Fatalf("a script's first call met NOSCRIPT:\n%s", stats)
	}
	info := ScriptCall{Source: infoScript, SHA: infoSHA, Keys: []string{"fenceproxy:lock:{r}"}}
	for _, when := range []string{"first", "after SCRIPT FLUSH"} {
		rec, err := wr.Read(ctx, "k", info)
		if fields, ok := rec.([]any); err != nil || !ok || len(fields) != 6 || fields[0] != nil {
			t.Fatalf("Read of infoScript, %s: %v, %v", when, rec, err)
		}
		m.Do("SCRIPT", "FLUSH")
	}
	if stats := string(m.Do("INFO", "errorstats")); !strings.Contains(stats, "errorstat_NOSCRIPT:count=1") {
		t.Fatalf("after SCRIPT FLUSH, the known script should have gone by SHA, met NOSCRIPT once and been sent again:\n%s", stats)
	}
	if p, ok := wr.MemoryPolicy("k"); !ok || p != be.Masters()[0].Memory() {
		t.Fatalf("MemoryPolicy = %+v, %v; want the master's reading", p, ok)
	}
}

// TestWriterNodeClosed: writes racing the close of their master's node
// are all answered (sent and replied, or "unreachable"), and a write to a
// closed node is answered "unreachable" at once: none waits forever in a
// queue nobody reads.
func TestWriterNodeClosed(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	be := connect(t, master.Addr)
	node := be.Masters()[0]
	wr := NewWriter(WriterOptions{Backend: be})
	ctx := context.Background()
	call := ScriptCall{Source: "return 1"}
	if _, err := wr.StartOn(ctx, node, call, true).Reply(); err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1000)
	var wg sync.WaitGroup
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := wr.StartOn(ctx, node, call, i%2 == 0).Reply()
			answered <- err
		}()
	}
	node.Close()
	for range 1000 {
		select {
		case err := <-answered:
			if err != nil && !errors.Is(err, cluster.ErrUnavailable) && !errors.Is(err, cluster.ErrOutcomeUnknown) {
				t.Fatalf("a write racing the close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a write racing its node's close was never answered")
		}
	}
	wg.Wait()
	for i := range 20 {
		done := make(chan error, 1)
		go func() { _, err := wr.StartOn(ctx, node, call, i%2 == 0).Reply(); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, cluster.ErrUnavailable) {
				t.Fatalf("a write to a closed node: %v, want ErrUnavailable", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a write to a closed node was never answered")
		}
	}
	if _, err := wr.StartOn(ctx, nil, call, false).Reply(); !errors.Is(err, cluster.ErrUnavailable) {
		t.Fatalf("a write with no master: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	// A cancelled context may still win the race to the queue; either way
	// the write is answered.
	if _, err := wr.Start(cctx, "k", call, false).Reply(); err == nil {
		t.Fatalf("a write on a closed node with a cancelled context succeeded")
	}
}

// TestDecode: a write's reply becomes a value or this package's errors:
// a write that was lost (or answered with what is not RESP) has an
// unknown outcome; any other error of the reply (not sent, a refused
// node) and Redis's own error replies pass through as they are.
func TestDecode(t *testing.T) {
	refused := resp.NewError("READONLY fenceproxy: not the master")
	cases := []struct {
		name    string
		reply   resp.Reply
		want    any
		wantErr error
	}{
		{"an integer", resp.Reply{Buf: []byte(":5\r\n")}, int64(5), nil},
		{"a null", resp.Reply{Buf: []byte("$-1\r\n")}, nil, nil},
		{"not sent", resp.Reply{Err: backend.ErrUnavailable}, nil, cluster.ErrUnavailable},
		{"lost", resp.Reply{Err: backend.ErrLost}, nil, cluster.ErrOutcomeUnknown},
		{"a refused node", resp.Reply{Err: refused}, nil, refused},
		{"not RESP", resp.Reply{Buf: []byte("not RESP")}, nil, cluster.ErrOutcomeUnknown},
		{"Redis refused the script", resp.Reply{Buf: []byte("-WRONGTYPE Operation against a key holding the wrong kind of value\r\n")},
			nil, resp.Error{Code: "WRONGTYPE", Msg: "Operation against a key holding the wrong kind of value"}},
	}
	for _, c := range cases {
		v, err := decode(&c.reply)
		if v != c.want || !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
			t.Errorf("%s: decode = %v, %v; want %v, %v", c.name, v, err, c.want, c.wantErr)
		}
	}
}

// TestRawKeepsTheReplysError: Raw hands over the reply's bytes, or the
// error that kept it from Redis as it is (FENCE.EXEC answers a lost
// connection with backend.ErrLost's own reply).
func TestRawKeepsTheReplysError(t *testing.T) {
	w := &Write{reply: &resp.Reply{Err: backend.ErrLost}}
	if raw, err := w.Raw(); raw != nil || err != backend.ErrLost {
		t.Errorf("lost: Raw = %q, %v", raw, err)
	}
	w = &Write{reply: &resp.Reply{Buf: []byte("+OK\r\n")}}
	if raw, err := w.Raw(); string(raw) != "+OK\r\n" || err != nil {
		t.Errorf("a reply: Raw = %q, %v", raw, err)
	}
}

// opWrite is a Write of one lock operation, ready for a batch.
func opWrite(op lockOp, resource string, args ...any) *Write {
	key := "fenceproxy:lock:{" + resource + "}"
	w := &Write{call: ScriptCall{Source: opsScript, SHA: opsSHA, Op: op, Keys: []string{key, key + ":delay", key + ":fence"}, Args: ArgsOf(args...)}}
	w.replied.Add(1)
	w.reply = resp.NewReply(&w.replied)
	return w
}

// runOps sends ws as one call of opsScript on c and hands each its reply,
// as the Writer does with a batch's operations for one slot.
func runOps(t *testing.T, c *testenv.Conn, ws ...*Write) []any {
	t.Helper()
	c.WriteRaw(appendOps(nil, ws))
	raw, err := c.ReadReply()
	if err != nil {
		t.Fatal(err)
	}
	g := &opsGroup{writes: ws}
	g.Complete(&resp.Reply{Buf: raw})
	out := make([]any, len(ws))
	for i, w := range ws {
		v, err := w.Reply()
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
	acquire := func(r, owner string, cand uint64, newest string) *Write {
		return opWrite(opAcquire, r, owner, int64(10000), cand, newest, false, int64(0), now,
			recordValue{token: cand, at: now, addr: "127.0.0.1:9", owner: owner}, uint64(0), int64(60000))
	}
	got := runOps(t, c,
		acquire("r", "a", 10, ""),
		acquire("list", "a", 11, ""),
		acquire("r", "b", 12, ""),
		acquire("r", "c", 9, ""),
		opWrite(opRenew, "r", "a", int64(20000), "10", int64(0), now+1, uint64(0)),
		acquire("old", "o", 13, "5"),
		opWrite(opRelease, "r", "b", int64(0), uint64(0)),
		opWrite(opRelease, "r", "a", int64(0), uint64(0)),
		opWrite(opUndo, "old", "o", "6", int64(0), uint64(0), "", "", int64(60000)),
		opWrite(opRelease, "older", "o", int64(0), uint64(0)),
		acquire("u", "a", 20, ""),
		opWrite(opUndo, "u", "a", "20", int64(0), uint64(0), strconv.FormatInt(now+1, 10), "", int64(60000)),
		opWrite(opUndo, "u", "a", "20", int64(0), uint64(0), strconv.FormatInt(now, 10), "", int64(60000)),
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
	for i, v := range runOps(t, c, acquire("s", "a", 20, ""), opWrite(opRelease, "s", "a", int64(0), uint64(0))) {
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
	acquire := func(r, owner string, cand uint64) *Write {
		return opWrite(opAcquire, r, owner, int64(10000), cand, "", false, int64(0), now,
			recordValue{token: cand, at: now, addr: "127.0.0.1:9", owner: owner}, uint64(0), int64(60000))
	}
	handoff := func(r, owner, head string, cand uint64) *Write {
		return opWrite(opHandoff, r, owner, int64(0), uint64(0), int64(20000), cand,
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
			w := &Write{reply: &resp.Reply{Buf: raw}}
			kind, value, ok := rawPair(w)
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
		if _, _, ok := rawPair(&Write{reply: &resp.Reply{Buf: []byte(r)}}); !ok {
			t.Errorf("rawPair(%q) left it to pair", r)
		}
	}
}
