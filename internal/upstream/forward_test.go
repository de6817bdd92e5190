package upstream

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// connect fronts seeds (a standalone master, or a cluster's nodes) as the
// proxy does; the backend closes with the test.
func connect(t *testing.T, seeds ...string) Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	be, err := Connect(ctx, Options{Seeds: seeds, PoolSize: 2, WriterConns: 1, ReplicaTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	return be
}

// roundTrip forwards args for cl and returns the reply as a client would
// read it (an Err as its error reply).
func roundTrip(t *testing.T, f Forwarder, cl *Client, args ...string) string {
	t.Helper()
	done := make(chan struct{})
	p := resp.NewReplyFunc(func() { close(done) })
	f.Forward(cl, argv(args...), p)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%q: no reply within 10s", args)
	}
	var coded resp.CodedError
	if errors.As(p.Err, &coded) {
		code, msg := coded.RESPError()
		return string(resp.AppendError(nil, code, msg))
	} else if p.Err != nil {
		t.Fatalf("%q: %v", args, p.Err)
	}
	return string(p.Buf)
}

// forwardAllocs counts the allocations of one GET forwarded and answered,
// once the connections' buffers have grown (counted, not timed).
func forwardAllocs(f Forwarder, cl *Client) float64 {
	var wg sync.WaitGroup
	p := resp.NewReply(&wg)
	args := argv("GET", "{k}")
	get := func() {
		p.Buf, p.Err = p.Buf[:0], nil
		wg.Add(1)
		f.Forward(cl, args, p)
		wg.Wait()
	}
	for range 100 {
		get()
	}
	return testing.AllocsPerRun(1000, get)
}

// TestStandaloneForwarder: a standalone master's Forwarder forwards on the
// client's connection (RESP2 or RESP3 as the client speaks) without
// allocating, pins, waits for replicas and tunnels.
func TestStandaloneForwarder(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	be := connect(t, master.Addr)
	if be.RoutesByKey() {
		t.Error("a standalone master routes by key")
	}
	if table, err := be.Keys(); table == nil || err != nil {
		t.Errorf("Keys: %v, %v; want COMMAND's table", table, err)
	}
	cl := &Client{ID: 1}
	if got := roundTrip(t, be, cl, "SET", "{k}", "v"); got != "+OK\r\n" {
		t.Fatalf("SET = %q", got)
	}
	cl3 := &Client{ID: 2, RESP3: true}
	if got := roundTrip(t, be, cl3, "HGETALL", "{nohash}"); got != "%0\r\n" {
		t.Errorf("HGETALL for a RESP3 client = %q, want RESP3's empty map", got)
	}
	if n := forwardAllocs(be, cl); n >= 1 {
		t.Errorf("%.2f allocations per forwarded request, want 0", n)
	}

	pc, err := be.Pin(cl, argv("MULTI"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	p := resp.NewReplyFunc(func() { close(done) })
	pc.Do(argv("CLIENT", "ID"), p)
	<-done
	pc.Release(true)
	if strings.HasPrefix(string(p.Buf), "-") {
		t.Errorf("CLIENT ID on the pinned connection: %q", p.Buf)
	}

	done = make(chan struct{})
	p = resp.NewReplyFunc(func() { close(done) })
	be.WaitReplicas(cl, argv("WAIT", "0", "0"), "fenceproxy:wait-offset", p)
	<-done
	if string(p.Buf) != ":0\r\n" || p.Err != nil {
		t.Errorf("WAIT 0 0 = %q, %v; want :0 (no replicas)", p.Buf, p.Err)
	}
}

// TestClusterForwarder: in front of a Redis Cluster, a request goes to its
// slot's master without allocating, a request spanning slots is split and
// merged by the tables, a keyspace-wide one is broadcast, and a pinned
// connection never lets MOVED through.
func TestClusterForwarder(t *testing.T) {
	tc := testenv.StartCluster(t, testenv.ClusterOptions{ReplicasPerMaster: -1})
	be := connect(t, strings.Split(tc.Seeds(), ",")...)
	if !be.RoutesByKey() {
		t.Error("a Redis Cluster does not route by key")
	}
	cl := &Client{ID: 7}
	for _, step := range []struct{ args, want string }{
		{"MSET {a}1 x {b}1 y {c}1 z", "+OK\r\n"},
		{"MGET {c}1 {a}1 {b}1 {none}", "*4\r\n$1\r\nz\r\n$1\r\nx\r\n$1\r\ny\r\n$-1\r\n"},
		{"EXISTS {a}1 {b}1 {none}", ":2\r\n"},
		{"DBSIZE", ":3\r\n"},
		{"SUNION {a}1 {b}1", "-CROSSSLOT Keys in request don't hash to the same slot\r\n"},
		{"DEL {a}1 {b}1 {c}1", ":3\r\n"},
	} {
		if got := roundTrip(t, be, cl, strings.Fields(step.args)...); got != step.want {
			t.Errorf("%s = %q, want %q", step.args, got, step.want)
		}
	}
	if n := forwardAllocs(be, cl); n >= 1 && !raceEnabled {
		t.Errorf("%.2f allocations per forwarded request, want 0", n)
	}

	// A connection pinned for {a} meets a key of another master.
	pc, err := be.Pin(cl, argv("WATCH", "{a}1"))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release(false)
	var other string
	for _, k := range []string{"{b}1", "{c}1", "{d}1", "{e}1"} {
		if tc.MasterForSlot(t, slotOf(k)) != tc.MasterForSlot(t, slotOf("{a}1")) {
			other = k
			break
		}
	}
	done := make(chan struct{})
	p := resp.NewReplyFunc(func() { close(done) })
	pc.Do(argv("GET", other), p)
	<-done
	if !strings.HasPrefix(string(p.Buf), "-CROSSSLOT fenceproxy: this key is on another Redis Cluster master") {
		t.Errorf("GET %s on {a}'s pinned connection = %q, want fenceproxy's -CROSSSLOT", other, p.Buf)
	}
}

func slotOf(key string) int { return keys.SlotOf([]byte(key)) }
