package locks

import (
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestSlowLogRing: the log keeps the newest max entries, returns them newest
// first, and a reset empties it while ids keep rising.
func TestSlowLogRing(t *testing.T) {
	l := newSlowLog(3, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ids := func(es []SlowEntry) []uint64 {
		var out []uint64
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	for i := 0; i < 5; i++ {
		l.add(SlowEntry{Kind: SlowWait, Resource: "r"})
	}
	if got := ids(l.get(-1)); len(got) != 3 || got[0] != 4 || got[1] != 3 || got[2] != 2 {
		t.Fatalf("get(-1) after 5 adds to a ring of 3 = %v, want [4 3 2]", got)
	}
	if got := ids(l.get(2)); len(got) != 2 || got[0] != 4 || got[1] != 3 {
		t.Fatalf("get(2) = %v, want [4 3]", got)
	}
	if got := ids(l.get(10)); len(got) != 3 {
		t.Fatalf("get(10) = %v, want all 3", got)
	}
	l.reset()
	if l.len() != 0 || len(l.get(-1)) != 0 {
		t.Fatalf("after reset: len %d", l.len())
	}
	l.add(SlowEntry{Kind: SlowHeld})
	l.add(SlowEntry{Kind: SlowExpired})
	if got := ids(l.get(-1)); len(got) != 2 || got[0] != 6 || got[1] != 5 {
		t.Fatalf("after reset and 2 adds: %v, want [6 5]", got)
	}
	none := newSlowLog(0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	none.add(SlowEntry{})
	if none.len() != 0 {
		t.Fatalf("a log of max 0 kept an entry")
	}
}

// TestLeasesOrder: the lease tracker hands out leases by their end, follows
// re-arms, forgets releases, and reports a replaced lease as expired only if
// it had reached its end.
func TestLeasesOrder(t *testing.T) {
	ls := leases{byRes: map[string]*lease{}, kick: make(chan struct{}, 1)}
	t0 := time.Unix(1000, 0)
	ls.granted("a", 1, t0, t0.Add(3*time.Second), "x")
	ls.granted("b", 2, t0, t0.Add(1*time.Second), "x")
	ls.granted("c", 3, t0, t0.Add(2*time.Second), "x")
	ls.rearmed("b", 2, t0.Add(5*time.Second))  // b now ends last
	ls.rearmed("c", 99, t0.Add(9*time.Second)) // another token: ignored
	ls.released("a", 1)
	if l, wait := ls.nextDue(t0); l != nil || wait != 2*time.Second {
		t.Fatalf("nextDue(t0) = %v, %v; want nothing due, c in 2s", l, wait)
	}
	var order []string
	for {
		l, _ := ls.nextDue(t0.Add(time.Minute))
		if l == nil {
			break
		}
		order = append(order, l.resource)
	}
	if len(order) != 2 || order[0] != "c" || order[1] != "b" {
		t.Fatalf("due order %v, want [c b] (a released, b re-armed past c)", order)
	}
	// Replacing: a lease past its end is reported, one not yet is not.
	ls2 := leases{byRes: map[string]*lease{}, kick: make(chan struct{}, 1)}
	ls2.granted("r", 1, t0, t0.Add(time.Second), "x")
	if old := ls2.granted("r", 2, t0.Add(2*time.Second), t0.Add(3*time.Second), "y"); old == nil || old.token != 1 {
		t.Fatalf("a grant after the old lease's end did not report it expired")
	}
	if old := ls2.granted("r", 3, t0.Add(2500*time.Millisecond), t0.Add(4*time.Second), "z"); old != nil {
		t.Fatalf("a grant before the old lease's end (released elsewhere) reported it expired: %+v", old)
	}
	if n, _ := ls2.counts(); n != 1 {
		t.Fatalf("tracked %d leases of one resource", n)
	}
}
