package lockwriter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
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

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

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

// TestWriter: the Writer against a real master with a replica: EVALSHA
// that meets NOSCRIPT goes again as EVAL, a write's WAIT counts the
// replica, concurrent writes are all answered, an undo goes to its
// grant's master, and reads and the memory policy come from the master.
func TestWriter(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	be := connect(t, master.Addr)
	wr := New(Options{Backend: be, MinReplicas: 1, ReplicaTimeout: 2 * time.Second})
	ctx := context.Background()

	const seven = "return 7"
	w := wr.Start(ctx, "k", ScriptCall{Source: seven, SHA: resp.ScriptSHA(seven)}, false)
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
			w := wr.Start(ctx, "k", ScriptCall{Source: set, SHA: resp.ScriptSHA(set), Keys: []string{"k"}, Args: ArgsOf("v")}, true)
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
	const exists = "return redis.call('EXISTS', KEYS[1])"
	read := ScriptCall{Source: exists, SHA: resp.ScriptSHA(exists), Keys: []string{"absent"}}
	for _, when := range []string{"first", "after SCRIPT FLUSH"} {
		if v, err := wr.Read(ctx, "absent", read); err != nil || v != int64(0) {
			t.Fatalf("Read of a script that only reads, %s: %v, %v", when, v, err)
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

// replyFunc and acksFunc make a func a ReplyIn or an AcksIn.
type (
	replyFunc func(w *Write)
	acksFunc  func()
)

func (f replyFunc) ReplyIn(w *Write) { f(w) }
func (f acksFunc) AcksIn()           { f() }

// TestStartThen: StartThen answers as Start does, on the writer's
// goroutine, without its caller waiting: a script's reply and its WAIT's
// count (AcksThen, before and after the WAIT is in), and a script that
// meets NOSCRIPT (SCRIPT FLUSH) sent again with its source; in the
// caller's storage or its own.
func TestStartThen(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	be := connect(t, master.Addr)
	wr := New(Options{Backend: be, MinReplicas: 1, ReplicaTimeout: 2 * time.Second})
	m := testenv.Dial(t, master.Addr)
	const set = "redis.call('SET', KEYS[1], ARGV[1]) return ARGV[1]"
	call := ScriptCall{Source: set, SHA: resp.ScriptSHA(set), Keys: []string{"k"}, Args: ArgsOf("v")}
	for _, when := range []string{"first", "known", "after SCRIPT FLUSH"} {
		if when == "after SCRIPT FLUSH" {
			m.Do("SCRIPT", "FLUSH")
		}
		type outcome struct {
			reply  any
			err    error
			acks   int
			ackErr error
		}
		done := make(chan outcome, 2)
		var kept *Write // the caller's storage, as the lock path passes it; nil once
		if when != "first" {
			kept = new(Write)
		}
		if !wr.StartThen(kept, "k", call, true, replyFunc(func(w *Write) {
			if kept != nil && when == "known" && w != kept {
				t.Errorf("%s: told of a Write other than the one kept for it", when)
			}
			v, err := w.Reply()
			w.AcksThen(acksFunc(func() {
				n, aerr := w.Acks()
				done <- outcome{v, err, n, aerr}
				w.AcksThen(acksFunc(func() { done <- outcome{v, err, n, aerr} })) // in already: at once
			}))
		})) {
			t.Fatalf("%s: StartThen did not queue the write", when)
		}
		for range 2 {
			select {
			case o := <-done:
				if o.err != nil || o.reply != "v" || o.ackErr != nil || o.acks != 1 {
					t.Fatalf("%s: reply %v, %v; acks %d, %v", when, o.reply, o.err, o.acks, o.ackErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no answer", when)
			}
		}
	}
	if stats := string(m.Do("INFO", "errorstats")); !strings.Contains(stats, "errorstat_NOSCRIPT:count=1") {
		t.Fatalf("after SCRIPT FLUSH the script should have gone by SHA, met NOSCRIPT once and been sent again:\n%s", stats)
	}
}

// TestWriterNodeClosed: writes racing the close of their master's node
// (by StartOn, and by StartThen, which tells its caller) are all answered (sent and replied, or "unreachable"), and a write to a
// closed node is answered "unreachable" at once: none waits forever in a
// queue nobody reads.
func TestWriterNodeClosed(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	be := connect(t, master.Addr)
	node := be.Masters()[0]
	wr := New(Options{Backend: be})
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
			if i%3 == 0 {
				// Told once too, the write queued, refused or sent
				// (StartThen's answer to a closing node goes through
				// Start's rules: Complete).
				if !wr.StartThen(nil, "k", call, i%2 == 0, replyFunc(func(w *Write) { _, err := w.Reply(); answered <- err })) {
					answered <- upstream.ErrUnavailable // not queued: nothing was done
				}
				return
			}
			_, err := wr.StartOn(ctx, node, call, i%2 == 0).Reply()
			answered <- err
		}()
	}
	node.Close()
	for range 1000 {
		select {
		case err := <-answered:
			if err != nil && !errors.Is(err, upstream.ErrUnavailable) && !errors.Is(err, upstream.ErrOutcomeUnknown) {
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
			if !errors.Is(err, upstream.ErrUnavailable) {
				t.Fatalf("a write to a closed node: %v, want ErrUnavailable", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a write to a closed node was never answered")
		}
	}
	if _, err := wr.StartOn(ctx, nil, call, false).Reply(); !errors.Is(err, upstream.ErrUnavailable) {
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
		{"not sent", resp.Reply{Err: backend.ErrUnavailable}, nil, upstream.ErrUnavailable},
		{"lost", resp.Reply{Err: backend.ErrLost}, nil, upstream.ErrOutcomeUnknown},
		{"a refused node", resp.Reply{Err: refused}, nil, refused},
		{"not RESP", resp.Reply{Buf: []byte("not RESP")}, nil, upstream.ErrOutcomeUnknown},
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

// batchScript stands in for a batch script (locks' opsScript): for each
// operation, one argument after its letter; it answers the letter, the
// three keys and the argument, or, for letter 'x', an error of its own.
const batchScript = `
local out = {}
for i = 1, #KEYS / 3 do
  local op, arg = ARGV[2 * i - 1], ARGV[2 * i]
  if op == 'x' then
    out[i] = {err = 'ERR op ' .. i .. ' ' .. arg}
  else
    out[i] = op .. ' ' .. KEYS[3 * i - 2] .. ' ' .. KEYS[3 * i - 1] .. ' ' .. KEYS[3 * i] .. ' ' .. arg
  end
end
return out`

// opWrite is a Write of one operation of batchScript, ready for a batch;
// bySHA sends it by the script's SHA.
func opWrite(op Op, key, arg string, bySHA bool) *Write {
	call := ScriptCall{Source: batchScript, Op: op, Keys: []string{key, key + ":d", key + ":f"}, Args: ArgsOf(arg)}
	if bySHA {
		call.SHA = resp.ScriptSHA(batchScript)
	}
	w := &Write{call: call}
	w.replied.Add(1)
	w.reply = resp.NewReply(&w.replied)
	return w
}

// TestAppendOps: a group of operations encodes to the call of their batch
// script that its parts, spelled out, give through resp.AppendCommand:
// EVALSHA while every operation has the SHA, EVAL with the source once
// one has not; every operation's three keys, then each one's letter and
// arguments.
func TestAppendOps(t *testing.T) {
	sha := resp.ScriptSHA(batchScript)
	for _, bySHA := range []bool{true, false} {
		ws := []*Write{opWrite('a', "k1", "one", true), opWrite('b', "k2", "two", bySHA)}
		want := []string{"EVALSHA", sha}
		if !bySHA {
			want = []string{"EVAL", batchScript}
		}
		want = append(want, "6", "k1", "k1:d", "k1:f", "k2", "k2:d", "k2:f", "a", "one", "b", "two")
		args := make([][]byte, len(want))
		for i, a := range want {
			args[i] = []byte(a)
		}
		if got, want := appendOps([]byte("junk"), ws), resp.AppendCommand([]byte("junk"), args); !bytes.Equal(got, want) {
			t.Errorf("appendOps (by SHA: %v) = %q, want %q", bySHA, got, want)
		}
	}
}

// TestOpsBatch: a batch's operations go as one call of their batch script
// beside the batch's other scripts, each answered with its own element of
// the script's list (an error element fails its operation alone); a call
// refused whole (NOSCRIPT) is every operation's answer; a list of the
// wrong length makes every operation's outcome unknown. Real Redis, the
// batch sent on a lock connection as the writer's loop sends it.
func TestOpsBatch(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	wr, conn := writerOnConn(t, master.Addr, Options{})
	var st writerState
	plain := &Write{call: ScriptCall{Source: "return 7"}}
	plain.replied.Add(1)
	plain.reply = resp.NewReply(&plain.replied)
	batch := []*Write{opWrite('a', "k1", "one", false), plain, opWrite('x', "k2", "two", false), opWrite('b', "k3", "three", false)}
	send(wr, conn, batch, &st)
	want := []string{"a k1 k1:d k1:f one", "7", "ERR op 2 two", "b k3 k3:d k3:f three"}
	for i, w := range batch {
		v, err := w.Reply()
		got := fmt.Sprint(v)
		if err != nil {
			got = err.Error()
		}
		if got != want[i] {
			t.Errorf("write %d answered %q, want %q", i, got, want[i])
		}
	}

	m := testenv.Dial(t, master.Addr)
	m.Do("SCRIPT", "FLUSH")
	batch = []*Write{opWrite('a', "k1", "one", true), opWrite('b', "k2", "two", true)}
	send(wr, conn, batch, &st)
	for i, w := range batch {
		if _, err := w.Reply(); err == nil || !strings.Contains(err.Error(), "NOSCRIPT") {
			t.Errorf("operation %d of a call that met NOSCRIPT: %v", i, err)
		}
	}

	ws := []*Write{opWrite('a', "k1", "one", true), opWrite('b', "k2", "two", true)}
	(&opsGroup{writes: ws}).Complete(&resp.Reply{Buf: []byte("*1\r\n:1\r\n")})
	for i, w := range ws {
		if _, err := w.Reply(); !errors.Is(err, upstream.ErrOutcomeUnknown) {
			t.Errorf("operation %d of a list one short: %v, want an unknown outcome", i, err)
		}
	}
}

// depthHolder is a Holder that counts how deep it is held, and how often.
type depthHolder struct{ depth, holds int }

func (h *depthHolder) HoldCommits()    { h.depth++; h.holds++ }
func (h *depthHolder) ReleaseCommits() { h.depth-- }

// completeFunc makes a func a resp.Completer.
type completeFunc func(*resp.Reply)

func (f completeFunc) Complete(r *resp.Reply) { f(r) }

// TestOpsCompleteUnderOneHold: the operations of a batch script's call are
// handed their replies with Options.Commits held, all under one hold, so
// that the fence store's commits their callers start go as one.
func TestOpsCompleteUnderOneHold(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	h := &depthHolder{}
	wr, conn := writerOnConn(t, master.Addr, Options{Commits: h})
	var depths []int
	var batch []*Write
	for i := range 5 {
		w := opWrite('a', fmt.Sprintf("k%d", i), "v", false)
		w.reply = resp.NewReplyTo(completeFunc(func(*resp.Reply) { depths = append(depths, h.depth) }))
		batch = append(batch, w)
	}
	send(wr, conn, batch, &writerState{})
	if fmt.Sprint(depths) != "[1 1 1 1 1]" || h.holds != 1 || h.depth != 0 {
		t.Fatalf("holder depth at each completion %v, holds %d, left held %d; want [1 1 1 1 1], 1, 0", depths, h.holds, h.depth)
	}
}

// writerOnConn is a Writer with opts over the Redis at addr, and the lock
// connection of its master that sends no WAIT, for a test to send batches
// on itself (sendBatch).
func writerOnConn(t *testing.T, addr string, opts Options) (*Writer, *backend.SyncConn) {
	be := connect(t, addr)
	node := be.Masters()[0]
	opts.Backend = be
	wr := New(opts)
	conns := make(chan *backend.SyncConn, 2)
	node.ServeLockWrites(func(conn *backend.SyncConn, acked bool) {
		if !acked {
			conns <- conn
		}
		<-node.Closed()
	})
	return wr, <-conns
}
