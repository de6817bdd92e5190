package locks

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// waitSlowLog waits until the slow-lock log has an entry of kind.
func (f *fixture) waitSlowLog(t *testing.T, kind string) SlowEntry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, e := range f.m.SlowLog(-1) {
			if e.Kind == kind {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s entry in the slow-lock log after 10s: %+v", kind, f.m.SlowLog(-1))
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLeaseExpiry: a lease that runs out unreleased is noticed by the
// sweeper (it asks Redis), logged as expired and no longer counted held.
func TestLeaseExpiry(t *testing.T) {
	f, _ := modelled(t, nil)
	if _, err := f.m.Acquire(context.Background(), "r", owner, addr, 20*time.Millisecond, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	e := f.waitSlowLog(t, SlowExpired)
	if e.Resource != "r" || e.Token != 1 || e.ClientAddr != addr || e.Duration != 20*time.Millisecond {
		t.Errorf("expiry entry %+v", e)
	}
	if n := counted(t, f.metrics.LockExpirations); n != 1 {
		t.Errorf("%v expirations counted", n)
	}
	if st := f.m.Stats(); st.Held != 0 {
		t.Errorf("%d leases held after the expiry", st.Held)
	}
}

// TestLeaseSweepRetracks: a lease still there at its known end (renewed
// through another proxy), or whose record cannot be read, is tracked on
// until Redis says it is gone.
func TestLeaseSweepRetracks(t *testing.T) {
	f, lm := modelled(t, nil)
	var reads atomic.Int32
	f.scripts.read = func(key string) (any, error) {
		switch reads.Add(1) {
		case 1:
			return nil, upstream.ErrUnavailable // looked at again in a second
		case 2:
			lm.mu.Lock()
			lm.ends = time.Now().Add(20 * time.Millisecond) // renewed elsewhere
			lm.mu.Unlock()
		}
		return lm.read(key)
	}
	if _, err := f.m.Acquire(context.Background(), "r", owner, addr, 10*time.Millisecond, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	f.waitSlowLog(t, SlowExpired)
	if n := reads.Load(); n < 3 {
		t.Errorf("the record was read %d times; want after the error, while renewed, and once gone", n)
	}
}

// TestLeasesTracking: the tracker below the Manager: a new grant finds
// the previous one expired unseen, renewals move a lease's end, and past
// maxTracked grants go uncounted.
func TestLeasesTracking(t *testing.T) {
	ls := leases{byRes: map[string]*lease{}, kick: make(chan struct{}, 1)}
	t0 := time.Now()
	if old := ls.granted("r", 1, t0, t0.Add(time.Second), addr); old != nil {
		t.Fatalf("a first grant returned %+v", old)
	}
	ls.rearmed("r", 1, t0.Add(3*time.Second))
	if old := ls.granted("r", 2, t0.Add(2*time.Second), t0.Add(4*time.Second), addr); old != nil {
		t.Fatalf("a grant while the re-armed lease still ran reported it expired: %+v", old)
	}
	if old := ls.granted("r", 3, t0.Add(5*time.Second), t0.Add(6*time.Second), addr); old == nil || old.token != 2 {
		t.Fatalf("a grant after the lease's end: previous %+v, want token 2 expired", old)
	}
	ls.rearmed("r", 2, t0) // another token's renewal: ignored
	ls.released("r", 2)    // likewise
	if n, _ := ls.counts(); n != 1 {
		t.Fatalf("%d tracked, want 1", n)
	}
	if l, wait := ls.nextDue(t0.Add(7 * time.Second)); l == nil || l.token != 3 || wait != 0 {
		t.Fatalf("nextDue past the end: %+v, %v", l, wait)
	}
	if l, wait := ls.nextDue(t0); l != nil || wait != time.Hour {
		t.Fatalf("nextDue of an empty heap: %+v, %v", l, wait)
	}
	ls = leases{byRes: map[string]*lease{}, kick: make(chan struct{}, 1)}
	for i := range maxTracked + 2 {
		ls.granted(strconv.Itoa(i), uint64(i+1), t0, t0.Add(time.Hour), "")
	}
	if n, untracked := ls.counts(); n != maxTracked || untracked != 2 {
		t.Fatalf("tracked %d, untracked %d; want %d and 2", n, untracked, maxTracked)
	}
}

// TestSlowLogAndStats: the Manager's slow-lock log and INFO figures.
func TestSlowLogAndStats(t *testing.T) {
	f, _ := modelled(t, func(o *Options) { o.SlowHeld, o.SlowLogLen = 0, 2 })
	ctx := context.Background()
	for range 3 {
		if _, err := f.m.Acquire(ctx, "r", owner, addr, ttl, 0, time.Now()); err != nil {
			t.Fatal(err)
		}
		if ok, err := f.m.Release(ctx, "r", owner); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	if n := f.m.SlowLogLen(); n != 2 {
		t.Fatalf("%d entries kept, want the bound 2", n)
	}
	if e := f.m.SlowLog(-1); len(e) != 2 || e[0].ID != 2 || e[1].ID != 1 {
		t.Fatalf("slow-lock log %+v, want the newest two, newest first", e)
	}
	st := f.m.Stats()
	if st.SlowLen != 2 || st.Held != 0 || st.Options.SlowLogLen != 2 || st.Options.KeyPrefix != "fenceproxy:lock:" {
		t.Errorf("Stats %+v", st)
	}
	f.m.SlowLogReset()
	if n := f.m.SlowLogLen(); n != 0 {
		t.Errorf("%d entries after a reset", n)
	}
}
