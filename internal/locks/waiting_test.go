package locks

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockModel answers opAcquire, opRelease, opHandoff and infoScript for one
// resource as the scripts do, without a lock-delay or the newest-token
// judgement: enough of Redis for the waiting line and the lease sweeper.
type lockModel struct {
	mu     sync.Mutex
	holder string
	token  string
	ends   time.Time
}

func (lm *lockModel) heldLocked() bool {
	return lm.holder != "" && time.Now().Before(lm.ends)
}

func (lm *lockModel) respond(c sent) reply {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	switch c.script {
	case "acquire":
		owner, candidate, others := c.args[0], c.args[2], c.args[4]
		ttlMs, _ := strconv.ParseInt(c.args[1], 10, 64)
		switch {
		case lm.heldLocked() && lm.holder == owner:
			lm.ends = time.Now().Add(time.Duration(ttlMs) * time.Millisecond)
			return reply{raw: kindReply(kindRearmed, lm.token), acks: acked(1)}
		case lm.heldLocked():
			return reply{raw: kindReply(kindBusy, strconv.FormatInt(time.Until(lm.ends).Milliseconds(), 10))}
		case others == "1":
			return reply{raw: kindReply(kindBusy, "-2")}
		}
		lm.holder, lm.token = owner, candidate
		lm.ends = time.Now().Add(time.Duration(ttlMs) * time.Millisecond)
		return reply{raw: kindReply(kindGranted, candidate), acks: acked(1)}
	case "release", "handoff":
		if !lm.heldLocked() || lm.holder != c.args[0] {
			return reply{raw: ":0\r\n"}
		}
		rel := bulk(string(recordValue{token: parseUint(lm.token), at: time.Now().UnixMilli(), addr: addr, owner: lm.holder}.appendTo(nil)))
		lm.holder = ""
		if c.script == "release" {
			return reply{raw: rel}
		}
		ttlMs, _ := strconv.ParseInt(c.args[3], 10, 64)
		lm.holder, lm.token = recordOwner(c.args[5]), c.args[4]
		lm.ends = time.Now().Add(time.Duration(ttlMs) * time.Millisecond)
		return reply{raw: "*2\r\n" + rel + kindReply(kindGranted, lm.token), acks: acked(1)}
	}
	return reply{raw: "-ERR not modelled\r\n"}
}

func parseUint(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// recordOwner is the owner at the end of a record's value (recordValue).
func recordOwner(v string) string {
	f := strings.SplitN(v, " ", 6)
	n, _ := strconv.Atoi(f[4])
	return f[5][n:]
}

func (lm *lockModel) read(string) (any, error) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if !lm.heldLocked() {
		return []any{nil, nil, int64(-2), nil, nil, nil}, nil
	}
	return []any{lm.holder, lm.token, time.Until(lm.ends).Milliseconds(), nil, nil, nil}, nil
}

// modelled is a fixture over a lockModel.
func modelled(t *testing.T, tweak func(*Options)) (*fixture, *lockModel) {
	return modelledWay(t, false, tweak)
}

// modelledWay is modelled, with now a newNowFixture (its releases by
// ReleaseNow: fixture.release).
func modelledWay(t *testing.T, now bool, tweak func(*Options)) (*fixture, *lockModel) {
	lm := &lockModel{}
	scripts := newFakeScripts(t)
	scripts.respond, scripts.read = lm.respond, lm.read
	if now {
		return newNowFixture(t, scripts, tweak), lm
	}
	return newFixture(t, scripts, tweak), lm
}

// bothWays runs test as a subtest with releases by Release ("release")
// and by ReleaseNow ("now"), each handoff alike; the latter must have
// started as callbacks at least once (mutation: ReleaseNow refusing when
// acquires wait in line, as it did before stop 34, fails that).
func bothWays(t *testing.T, test func(t *testing.T, now bool) *fixture) {
	for _, now := range []bool{false, true} {
		name := "release"
		if now {
			name = "now"
		}
		t.Run(name, func(t *testing.T) {
			if f := test(t, now); now && f != nil && f.releasedNow.Load() == 0 {
				t.Error("no release ran as callbacks (ReleaseNow)")
			}
		})
	}
}

type acquired struct {
	who   string
	token uint64
	err   error
}

// acquireAsync runs an Acquire that waits up to wait, and returns once it
// is in line (waiters is the line's length to wait for).
func (f *fixture) acquireAsync(t *testing.T, ctx context.Context, who string, wait time.Duration, waiters int, out chan<- acquired) {
	t.Helper()
	go func() {
		token, err := f.m.Acquire(ctx, "r", who, addr, ttl, wait, time.Now())
		out <- acquired{who, token, err}
	}()
	f.waitLine(t, waiters)
}

// waitLine waits until n acquires wait for r.
func (f *fixture) waitLine(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.m.waiting.count("r") != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting for r after 10s, want %d", f.m.waiting.count("r"), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func next(t *testing.T, results <-chan acquired) acquired {
	t.Helper()
	select {
	case r := <-results:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no acquire ended within 10s")
		return acquired{}
	}
}

// heldWithTwoWaiting: a holds r, then b and c wait in line for it (a
// minute each); their results arrive on results.
func heldWithTwoWaiting(t *testing.T, now bool) (*fixture, context.Context, chan acquired) {
	t.Helper()
	f, _ := modelledWay(t, now, nil)
	ctx := context.Background()
	if _, err := f.m.Acquire(ctx, "r", "a", addr, ttl, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	results := make(chan acquired, 2)
	f.acquireAsync(t, ctx, "b", time.Minute, 1, results)
	f.acquireAsync(t, ctx, "c", time.Minute, 2, results)
	return f, ctx, results
}

// TestWaitingLineFIFO: waiters are served in arrival order, a release
// hands the lock to the head (one script, with the head's token reserved
// ahead), and one promoted right after a grant waits for that lease
// rather than trying in vain.
func TestWaitingLineFIFO(t *testing.T) {
	bothWays(t, func(t *testing.T, now bool) *fixture {
		f, ctx, results := heldWithTwoWaiting(t, now)
		if st := f.m.Stats(); st.Waiters != 2 {
			t.Errorf("Stats.Waiters = %d, want 2", st.Waiters)
		}
		if _, waiters := f.m.Top(1); len(waiters) != 1 || waiters[0] != 2 {
			t.Errorf("LOCK.TOP's waiting count %v, want [2]", waiters)
		}
		if ok, err := f.release(ctx, "a"); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if r := next(t, results); r.who != "b" || r.err != nil {
			t.Fatalf("first served after a's release: %+v, want b", r)
		}
		f.waitLine(t, 1)
		if ok, err := f.release(ctx, "b"); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if r := next(t, results); r.who != "c" || r.err != nil {
			t.Fatalf("then: %+v, want c", r)
		}
		tries, handoffs := 0, 0
		for _, c := range f.scripts.sent() {
			switch {
			case c.script == "acquire" && c.args[0] == "c":
				tries++
			case c.script == "handoff":
				handoffs++
				if !c.wantAcks {
					t.Errorf("a handoff sent without a WAIT: its grant needs the replicas")
				}
			}
		}
		if tries != 1 || handoffs != 2 {
			t.Errorf("c tried %d times and %d releases handed off, want 1 (on arrival) and 2", tries, handoffs)
		}
		f.waitLine(t, 0)
		if st := f.m.Stats(); st.Waiters != 0 {
			t.Errorf("Stats.Waiters = %d after the line emptied", st.Waiters)
		}
		return f
	})
}

// TestWaitingLineLeaseRunsOut: the head tries again when the holder's
// lease ends, without a release.
func TestWaitingLineLeaseRunsOut(t *testing.T) {
	f, _ := modelled(t, nil)
	ctx := context.Background()
	if _, err := f.m.Acquire(ctx, "r", "a", addr, 30*time.Millisecond, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	results := make(chan acquired, 1)
	f.acquireAsync(t, ctx, "b", time.Minute, 1, results)
	if r := next(t, results); r.who != "b" || r.err != nil || r.token <= 1 {
		t.Fatalf("after a's lease ran out: %+v, want b granted a token above a's 1", r)
	}
}

// TestWaitingLineEnds: a wait that runs out answers busy (and is logged
// as slow), one whose client goes away ends with its context, and a full
// line refuses more at once.
func TestWaitingLineEnds(t *testing.T) {
	f, _ := modelled(t, func(o *Options) { o.MaxWaiters, o.SlowWait = 1, 0 })
	ctx := context.Background()
	if _, err := f.m.Acquire(ctx, "r", "a", addr, ttl, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Acquire(ctx, "r", "b", addr, ttl, 20*time.Millisecond, time.Now()); err != ErrBusy {
		t.Fatalf("a wait that ran out: %v, want ErrBusy", err)
	}
	if e := f.m.SlowLog(1); len(e) != 1 || e[0].Kind != SlowWait || e[0].Token != 0 || e[0].Resource != "r" {
		t.Errorf("slow-lock log after a long wait: %+v", e)
	}
	f.waitLine(t, 0)

	cctx, cancel := context.WithCancel(ctx)
	results := make(chan acquired, 1)
	f.acquireAsync(t, cctx, "c", time.Minute, 1, results)
	var qf *QueueFullError
	if _, err := f.m.Acquire(ctx, "r", "d", addr, ttl, time.Minute, time.Now()); !errors.As(err, &qf) || qf.Max != 1 {
		t.Fatalf("a wait beyond --max-waiters: %v, want QueueFullError{1}", err)
	}
	cancel()
	if r := next(t, results); r.who != "c" || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("a wait whose client went away: %+v", r)
	}
	f.waitLine(t, 0)

	f, _ = modelled(t, func(o *Options) { o.MaxWaiters = 0 })
	if _, err := f.m.Acquire(ctx, "r", "a", addr, ttl, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Acquire(ctx, "r", "b", addr, ttl, time.Minute, time.Now()); !errors.As(err, &qf) || qf.Max != 0 || qf.Error() == "" {
		t.Fatalf("waiting with --max-waiters 0: %v", err)
	}
}

// TestWaitingLineQueue: the line's own rules, below the Manager.
func TestWaitingLineQueue(t *testing.T) {
	var q waitQueue
	a, b := q.join("r", "a", addr, ttl, 2), q.join("r", "b", addr, ttl, 2)
	if q.join("r", "c", addr, ttl, 2) != nil {
		t.Fatal("a third waiter joined a line of at most 2")
	}
	q.wakeHead("r")
	if n := q.news("r", a); n.pos != 0 || !n.freed {
		t.Errorf("the head after a release: %+v", n)
	}
	if n := q.news("r", b); n.pos != 1 || n.freed {
		t.Errorf("the second after a release: %+v (only the head is woken)", n)
	}

	// A claim needs the head asleep and not leaving, and a token reserved
	// ahead; a claimed waiter cannot leave before it is handed the
	// outcome. The line's tokens go in the order drawn.
	if w, _ := q.claim("r"); w != nil {
		t.Fatal("claimed a head that is awake")
	}
	q.sleep(a)
	if w, _ := q.claim("r"); w != nil {
		t.Fatal("claimed a head with no token reserved ahead")
	}
	l, need := q.refill("r", 1, 8)
	if need != 2 {
		t.Fatalf("a line of two asks for %d tokens ahead, want 2 (one per waiter)", need)
	}
	if _, again := q.refill("r", 1, 8); again != 0 {
		t.Fatal("a second refill started while one is under way")
	}
	q.refilled("r", l, []uint64{7, 9}, false)
	if w, tok := q.claim("r"); w != a || tok != 7 {
		t.Fatalf("claim = %p, %d; want the head %p with the first token, 7", w, tok, a)
	}
	stopped := make(chan *handoff)
	go func() { stopped <- q.stop(a) }()
	select {
	case <-stopped:
		t.Fatal("a claimed waiter left before its handoff's outcome")
	case <-time.After(20 * time.Millisecond):
	}
	q.unclaim("r", a, false, 7) // not used: it goes back
	if got := <-stopped; got != nil {
		t.Fatalf("stop after an unclaim returned %v, want no handoff", got)
	}
	if w, _ := q.claim("r"); w != nil {
		t.Fatal("claimed a waiter on its way out")
	}
	if stale := q.dropStale("r", 7); len(stale) != 1 || stale[0] != 7 {
		t.Fatalf("dropStale(7) = %v, want [7]", stale)
	}
	if tok, _ := q.takeToken("r"); tok != 9 {
		t.Fatalf("takeToken = %d, want the line's token 9", tok)
	}
	if tok, wait := q.takeToken("r"); tok != 0 || wait {
		t.Fatalf("takeToken of an empty line with no refill = %d, %v; want none, and no waiting", tok, wait)
	}
	q.giveBack("r", 9)

	if unused := q.leave("r", a, ttl); unused != nil {
		t.Fatalf("the line's tokens %v handed back while b still waits", unused)
	}
	select {
	case <-b.wake:
	default:
		t.Fatal("the new head was not woken when the head left")
	}
	if n := q.news("r", b); n.pos != 0 || n.freed || n.leaseHint != ttl {
		t.Errorf("promoted after a grant: %+v; want the granted lease as hint", n)
	}
	if unused := q.leave("r", b, 0); len(unused) != 1 || unused[0] != 9 {
		t.Fatalf("the emptied line handed back %v for cancelling, want [9]", unused)
	}
	if n := q.count("r"); n != 0 {
		t.Errorf("%d left in line", n)
	}
	q.leave("r", b, 0)   // twice: harmless
	q.wakeHead("nobody") // nobody waits: harmless
}

// TestEndWaiters: a tier node that loses leadership ends every waiter with
// the error it is given (-TRYAGAIN), at once, and the line is empty after.
func TestEndWaiters(t *testing.T) {
	f, _, results := heldWithTwoWaiting(t, false)
	lost := errors.New("leadership lost")
	f.m.EndWaiters(lost)
	for i := 0; i < 2; i++ {
		if r := next(t, results); r.err != lost {
			t.Fatalf("a waiter ended with %+v, want the leadership error", r)
		}
	}
	f.waitLine(t, 0)
}
