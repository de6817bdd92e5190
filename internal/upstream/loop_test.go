package upstream

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/netloop"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// countingWaiter is a client connection on the serve loop: AfterReplies
// runs its continuation at once (as the loop's does for a batch's first
// request) and is counted.
type countingWaiter struct{ waits atomic.Int32 }

func (w *countingWaiter) AfterReplies(_ *resp.Reply, then func()) {
	w.waits.Add(1)
	then()
}

// OffLoop runs work and its continuation at once, as a goroutine's does.
func (w *countingWaiter) OffLoop(_ *resp.Reply, work func() func()) {
	if then := work(); then != nil {
		then()
	}
}

// TestClusterServesOnLoop: in front of a Redis Cluster whose masters'
// shared connections the loop serves, ServesOnLoop admits requests of one
// slot, keyless ones, and those Forward sends to more than one master
// (each part on its master's connection); a request it admitted is routed by the view it
// read, even when the slot moves before Forward: it meets MOVED at the old
// master, is sent on to the new one and answered there, and Forward never
// waits. Once the view changed, the client's next request is admitted
// only first in its batch (where waiting costs nothing).
func TestClusterServesOnLoop(t *testing.T) {
	if !netloop.Supported {
		t.Skip("no event loops here")
	}
	tc := testenv.StartCluster(t, testenv.ClusterOptions{ReplicasPerMaster: -1})
	loop, err := netloop.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(loop.Close) // after the backend's
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	be, err := Connect(ctx, Options{Seeds: []string{tc.Masters[0].Addr}, PoolSize: 2, WriterConns: 1,
		ReplicaTimeout: time.Second, Logger: slog.New(slog.DiscardHandler), Loop: loop, LoopPoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Close)
	c := be.(*Cluster)
	w := &countingWaiter{}
	cl := &Client{ID: 1, Conn: w}

	for _, tcase := range []struct {
		args []string
		want bool
	}{
		{[]string{"GET", "{a}k"}, true},
		{[]string{"SET", "{a}k", "v"}, true},
		{[]string{"MGET", "{a}k", "{a}j"}, true},
		{[]string{"TIME"}, true},
		{[]string{"MGET", "{a}k", "{b}k"}, true},
		{[]string{"SCAN", "0"}, true},
		{[]string{"KEYS", "*"}, true},
		{[]string{"FLUSHALL"}, true},
		{[]string{"CONFIG", "SET", "maxmemory", "0"}, true},
	} {
		if got := c.ServesOnLoop(cl, argv(tcase.args...), false); got != tcase.want {
			t.Errorf("ServesOnLoop(%q) = %v, want %v", tcase.args, got, tcase.want)
		}
	}
	if got := roundTrip(t, c, cl, "SET", "{a}k", "A"); got != "+OK\r\n" {
		t.Fatalf("SET {a}k: %q", got)
	}

	// Admitted by the current view; then the slot moves before Forward.
	slot := testenv.KeySlot("{a}k")
	from := tc.MasterForSlot(t, slot)
	to := tc.Masters[0]
	if to == from {
		to = tc.Masters[1]
	}
	if !c.ServesOnLoop(cl, argv("GET", "{a}k"), false) {
		t.Fatal("ServesOnLoop refused GET {a}k")
	}
	epoch := c.Epoch()
	tc.MigrateSlot(t, slot, from, to, 0)
	c.Moved(slot, to.Addr) // as if another client's request had met MOVED
	if c.Epoch() == epoch {
		t.Fatal("Moved did not change the view")
	}
	if got := roundTrip(t, c, cl, "GET", "{a}k"); got != "$1\r\nA\r\n" {
		t.Fatalf("GET {a}k after its slot moved: %q, want the value", got)
	}
	if n := w.waits.Load(); n != 0 {
		t.Fatalf("Forward waited %d times for a request ServesOnLoop admitted", n)
	}

	// The view changed since the client's last request: Forward goes on
	// once the client's earlier requests have their replies (AfterReplies,
	// a continuation on the loop), so the loop serves it behind others too.
	if !c.ServesOnLoop(cl, argv("GET", "{a}k"), false) {
		t.Fatal("ServesOnLoop refused a request behind others after the view changed")
	}
	if got := roundTrip(t, c, cl, "GET", "{a}k"); got != "$1\r\nA\r\n" {
		t.Fatalf("GET {a}k by the new view: %q", got)
	}
	if n := w.waits.Load(); n != 1 {
		t.Fatalf("Forward asked for the earlier replies %d times after the view changed; want 1", n)
	}
	if !c.ServesOnLoop(cl, argv("GET", "{a}k"), false) {
		t.Fatal("ServesOnLoop refused a request by the client's view")
	}
	if got := string(testenv.Dial(t, to.Addr).Do("GET", "{a}k")); got != "$1\r\nA\r\n" {
		t.Fatalf("GET {a}k on its new master: %q", got)
	}
}
