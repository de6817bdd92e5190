package locks

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/cluster"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestAppendEval: a script call encodes to exactly the RESP request that
// its arguments, spelled out, give through backend.AppendCommand.
func TestAppendEval(t *testing.T) {
	cases := []struct {
		call ScriptCall
		want []string
	}{
		{ScriptCall{Source: "return 1"}, []string{"EVAL", "return 1", "0"}},
		{ScriptCall{Source: "x", SHA: "abc", Keys: []string{"k1", "k2"}, Args: []any{"own", int64(-5), 7, uint64(18446744073709551615), true, false, []byte("b\r\n")}},
			[]string{"EVALSHA", "abc", "2", "k1", "k2", "own", "-5", "7", "18446744073709551615", "1", "0", "b\r\n"}},
		{ScriptCall{SHA: "s", Keys: []string{""}, Args: []any{""}}, []string{"EVALSHA", "s", "1", "", ""}},
	}
	for _, c := range cases {
		args := make([][]byte, len(c.want))
		for i, a := range c.want {
			args[i] = []byte(a)
		}
		want := backend.AppendCommand(nil, args)
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
	w = wr.Start(ctx, "k", ScriptCall{Source: set, Keys: []string{"k"}, Args: []any{"v"}}, true)
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
			w := wr.Start(ctx, "k", ScriptCall{Source: set, SHA: cluster.ScriptSHA(set), Keys: []string{"k"}, Args: []any{"v"}}, true)
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

	testenv.Dial(t, master.Addr).Do("SCRIPT", "FLUSH")
	rec, err := wr.Read(ctx, "k", ScriptCall{Source: infoScript, SHA: infoSHA, Keys: []string{"fenceproxy:lock:{r}"}})
	if fields, ok := rec.([]any); err != nil || !ok || len(fields) != 6 || fields[0] != nil {
		t.Fatalf("Read of infoScript after SCRIPT FLUSH: %v, %v", rec, err)
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

// TestDecode: the backend's own replies for a write that was not sent or
// was lost become this package's errors.
func TestDecode(t *testing.T) {
	if _, err := decode([]byte(backend.ReplyUnavailable)); !errors.Is(err, cluster.ErrUnavailable) {
		t.Errorf("unreachable: %v", err)
	}
	if _, err := decode([]byte("not RESP")); !errors.Is(err, cluster.ErrOutcomeUnknown) {
		t.Errorf("a malformed reply: %v", err)
	}
	if v, err := decode([]byte(":5\r\n")); v != int64(5) || err != nil {
		t.Errorf("an integer: %v, %v", v, err)
	}
}
