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

// TestClusterForwardAfterViewChange: in front of a Redis Cluster, a
// request sent after the slots' view changed since the client's last one
// goes on once the client's earlier requests have their replies (the
// Waiter's AfterReplies: on the serve loop a continuation, never a wait),
// routed by the new view, and is answered with the value from the slot's
// new master; the next request, by the client's view, asks for nothing.
func TestClusterForwardAfterViewChange(t *testing.T) {
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
	if got := roundTrip(t, c, cl, "SET", "{a}k", "A"); got != "+OK\r\n" {
		t.Fatalf("SET {a}k: %q", got)
	}
	if n := w.waits.Load(); n != 0 {
		t.Fatalf("Forward asked for the earlier replies %d times by the client's view; want 0", n)
	}

	slot := testenv.KeySlot("{a}k")
	from := tc.MasterForSlot(t, slot)
	to := tc.Masters[0]
	if to == from {
		to = tc.Masters[1]
	}
	epoch := c.Epoch()
	tc.MigrateSlot(t, slot, from, to, 0)
	c.Moved(slot, to.Addr) // as if another client's request had met MOVED
	if c.Epoch() == epoch {
		t.Fatal("Moved did not change the view")
	}
	if got := roundTrip(t, c, cl, "GET", "{a}k"); got != "$1\r\nA\r\n" {
		t.Fatalf("GET {a}k by the new view: %q", got)
	}
	if n := w.waits.Load(); n != 1 {
		t.Fatalf("Forward asked for the earlier replies %d times after the view changed; want 1", n)
	}
	if got := roundTrip(t, c, cl, "GET", "{a}k"); got != "$1\r\nA\r\n" {
		t.Fatalf("GET {a}k by the client's view: %q", got)
	}
	if n := w.waits.Load(); n != 1 {
		t.Fatalf("Forward asked for the earlier replies again by the client's view (%d times)", n)
	}
	if got := string(testenv.Dial(t, to.Addr).Do("GET", "{a}k")); got != "$1\r\nA\r\n" {
		t.Fatalf("GET {a}k on its new master: %q", got)
	}
}
