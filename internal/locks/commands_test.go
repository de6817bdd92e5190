package locks

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// holding is a fixture whose store knows 5 as r's newest token, the one
// owner holds.
func holding(t *testing.T, scripts *fakeScripts, tweak func(*Options)) *fixture {
	f := newFixture(t, scripts, tweak)
	f.tokens.newest["r"], f.tokens.known["r"], f.tokens.last = 5, true, 5
	return f
}

// holdingNow is holding for the callbacks' course (newNowFixture).
func holdingNow(t *testing.T, scripts *fakeScripts, tweak func(*Options)) *fixture {
	f := newNowFixture(t, scripts, tweak)
	f.tokens.newest["r"], f.tokens.known["r"], f.tokens.last = 5, true, 5
	return f
}

// renewNow runs RenewNow of the fixture's resource and waits for its
// outcome; started false if it did not start.
func (f *fixture) renewNow(received time.Time) (uint64, error, bool) {
	type outcome struct {
		token uint64
		err   error
	}
	done := make(chan outcome, 1)
	if !f.m.RenewNow("r", owner, ttl, received, renewedFunc(func(token uint64, err error) { done <- outcome{token, err} })) {
		return 0, nil, false
	}
	o := <-done
	return o.token, o.err, true
}

type renewedFunc func(uint64, error)

func (f renewedFunc) Renewed(token uint64, err error) { f(token, err) }

// TestRenewOutcomes: every way a renewal ends, both ways: Renew, and
// RenewNow (its steps as callbacks) falling back to Renew as LOCK.RENEW
// does when it cannot start so. They must end alike, and RenewNow start
// whenever a script is sent (mutation: RenewNow refusing every renewal,
// as before it ran as callbacks, fails that).
func TestRenewOutcomes(t *testing.T) {
	renewed := reply{raw: bulk("5"), acks: acked(1)}
	for _, tc := range []struct {
		name    string
		opts    func(*Options)
		store   func(*memTokens)
		scripts func(*fakeScripts)
		replies []reply
		late    bool
		want    uint64
		wantErr func(error) bool
		calls   []string
	}{
		{name: "renewed", replies: []reply{renewed}, want: 5, calls: []string{"renew+acks"}},
		{name: "not held", replies: []reply{{raw: "$-1\r\n", acks: acked(1)}}, wantErr: errIs(ErrNotHeld), calls: []string{"renew+acks"}},
		{name: "replica shortfall", replies: []reply{{raw: bulk("5"), acks: acked(0)}}, wantErr: noReplicas(0, 1), calls: []string{"renew+acks"}},
		{name: "WAIT lost", replies: []reply{{raw: bulk("5"), acks: "-UNBLOCKED\r\n"}}, wantErr: errIs(upstream.ErrOutcomeUnknown), calls: []string{"renew+acks"}},
		{name: "reply lost", replies: []reply{{err: upstream.ErrOutcomeUnknown}}, wantErr: errIs(upstream.ErrOutcomeUnknown), calls: []string{"renew+acks"}},
		{name: "malformed reply", replies: []reply{{raw: "*1\r\n:1\r\n", acks: acked(1)}}, wantErr: errContains("unexpected script value"), calls: []string{"renew+acks"}},
		{name: "late", late: true, replies: []reply{renewed}, wantErr: errIs(ErrLate), calls: []string{"renew+acks"}},
		{name: "not the token authority", opts: func(o *Options) { o.Admit = func() error { return errNotAdmitted } }, wantErr: errIs(errNotAdmitted)},
		{name: "evictable master", scripts: func(s *fakeScripts) { s.policy = upstream.MemoryPolicy{Policy: "allkeys-random"} },
			wantErr: func(err error) bool { var ee *EvictableError; return errors.As(err, &ee) }},
		{name: "evictable master, allowed", opts: func(o *Options) { o.AllowEvictable = true },
			scripts: func(s *fakeScripts) { s.policy = upstream.MemoryPolicy{Policy: "allkeys-random"} },
			replies: []reply{renewed}, want: 5, calls: []string{"renew+acks"}},
		{name: "newest unreadable", store: func(s *memTokens) { s.failNewest, s.failCached = persist.ErrUnhealthy, persist.ErrUnhealthy }, wantErr: errIs(persist.ErrUnhealthy)},
	} {
		for _, now := range []bool{false, true} {
			name, base := tc.name, holding
			if now {
				name, base = tc.name+"/now", holdingNow
			}
			t.Run(name, func(t *testing.T) {
				f, received := arrange(t, base, setup{tc.opts, tc.store, tc.scripts, tc.replies, nil, tc.late})
				var token uint64
				var err error
				started := false
				if now {
					token, err, started = f.renewNow(received)
				}
				if !started {
					token, err = f.m.Renew(context.Background(), "r", owner, ttl, received)
				}
				if now && started != (len(tc.calls) > 0) {
					t.Errorf("RenewNow started: %v, want %v (when a script is sent)", started, len(tc.calls) > 0)
				}
				f.checkOutcome(t, "Renew", token, err, tc.want, tc.wantErr, tc.calls)
				if len(tc.calls) > 0 {
					// owner, ttl, newest, lock-delay, now
					if args := f.scripts.sent()[0].args; args[0] != owner || args[1] != "10000" || args[2] != "5" {
						t.Errorf("renew args %q", args)
					}
				}
				if turn, ok := f.m.serial.tryLock("r"); !ok {
					t.Error("the resource's turn is still taken after the renewal")
				} else {
					f.m.serial.unlock("r", turn)
				}
			})
		}
	}
}

// TestRelease: a release reports whether it freed the lease, wakes the
// head of the line, forgets the lease, and logs a long hold.
func TestRelease(t *testing.T) {
	acquired := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10)
	record := bulk("1 0 " + acquired + " " + acquired + " " + strconv.Itoa(len(addr)) + " " + addr + owner)
	f := newFixture(t, newFakeScripts(t,
		reply{raw: kindReply(kindGranted, "1"), acks: acked(1)},
		reply{raw: record},
		reply{raw: ":0\r\n"},
		reply{err: upstream.ErrUnavailable},
	), func(o *Options) { o.SlowHeld = time.Second })
	ctx := context.Background()
	if _, err := f.m.Acquire(ctx, "r", owner, addr, ttl, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	w := f.m.waiting.join("r", "w", addr, ttl, 10)
	if ok, err := f.m.Release(ctx, "r", owner); !ok || err != nil {
		t.Fatalf("Release = %v, %v; want true", ok, err)
	}
	if c := f.scripts.sent()[1]; c.script != "release" || c.wantAcks || !slices.Equal(c.args, []string{owner, "0", "0"}) {
		t.Errorf("release sent as %+v: want no WAIT, the owner, lock-delay 0 and term 0 only", c)
	}
	if n := f.m.waiting.news("r", w); !n.freed {
		t.Errorf("the head of the line was not told the resource was freed")
	}
	if st := f.m.Stats(); st.Held != 0 {
		t.Errorf("%d leases still tracked after the release", st.Held)
	}
	e := f.m.SlowLog(-1)
	if len(e) != 1 || e[0].Kind != SlowHeld || e[0].Token != 1 || e[0].ClientAddr != addr || e[0].Duration < time.Minute {
		t.Errorf("slow-lock log %+v, want one held entry for token 1", e)
	}
	if ok, err := f.m.Release(ctx, "r", owner); ok || err != nil {
		t.Errorf("Release of a lock not held = %v, %v; want false", ok, err)
	}
	if _, err := f.m.Release(ctx, "r", owner); !errors.Is(err, upstream.ErrUnavailable) {
		t.Errorf("Release with Redis unreachable: %v", err)
	}

	// A record from before acquired-at and addr existed: released, no log.
	f = newFixture(t, newFakeScripts(t, reply{raw: bulk("3 0 0 0 0 " + owner)}, reply{raw: "+OK\r\n"}), func(o *Options) { o.SlowHeld = 0 })
	if ok, err := f.m.Release(ctx, "r", owner); !ok || err != nil {
		t.Errorf("Release of an older record = %v, %v", ok, err)
	}
	if n := f.m.SlowLogLen(); n != 0 {
		t.Errorf("an older record without acquired-at was logged as held (%d entries)", n)
	}
	if _, err := f.m.Release(ctx, "r", owner); err == nil {
		t.Errorf("Release took +OK for an answer")
	}
}

// TestFenceCheck: current, stale and never-issued tokens, the floor among
// them.
func TestFenceCheck(t *testing.T) {
	f := holding(t, newFakeScripts(t), nil)
	for _, tc := range []struct {
		token   uint64
		current bool
		err     error
	}{{5, true, nil}, {4, false, nil}, {1, false, nil}, {6, false, ErrNeverIssued}} {
		if current, err := f.m.FenceCheck("r", tc.token); current != tc.current || err != tc.err {
			t.Errorf("FenceCheck(%d) = %v, %v; want %v, %v", tc.token, current, err, tc.current, tc.err)
		}
	}
	if _, err := f.m.FenceCheck("never", 1); err != ErrNeverIssued {
		t.Errorf("FenceCheck of a resource with no token: %v", err)
	}
	// The floor is issued to nobody: never current.
	f.tokens.floor = 9
	if _, err := f.m.FenceCheck("r", 9); err != ErrNeverIssued {
		t.Errorf("FenceCheck of the floor: %v, want ErrNeverIssued", err)
	}
	if current, err := f.m.FenceCheck("r", 5); current || err != nil {
		t.Errorf("FenceCheck of a token below the floor = %v, %v; want stale", current, err)
	}
	f.tokens.failNewest = persist.ErrUnhealthy
	if _, err := f.m.FenceCheck("r", 5); err != persist.ErrUnhealthy {
		t.Errorf("FenceCheck with the store failing: %v", err)
	}
	f = holding(t, newFakeScripts(t), func(o *Options) { o.Admit = func() error { return errNotAdmitted } })
	if _, err := f.m.FenceCheck("r", 5); err != errNotAdmitted {
		t.Errorf("FenceCheck refused by the authority: %v", err)
	}
	if len(f.scripts.sent()) != 0 {
		t.Errorf("FENCE.CHECK sent %+v to Redis", f.scripts.sent())
	}
}

// TestFenceCheckNow: the serve loop's FENCE.CHECK judges as FenceCheck
// does where the resource's newest token is cached, and judges nothing
// (known false, no error) where it is not, when the cache fails, or when
// the authority does not admit this node now: the caller then asks
// FenceCheck where it may wait (AdmitWithin, a read of the store).
func TestFenceCheckNow(t *testing.T) {
	f := holding(t, newFakeScripts(t), nil)
	f.tokens.known["r"] = true
	for _, tc := range []struct {
		token   uint64
		current bool
		err     error
	}{{5, true, nil}, {4, false, nil}, {6, false, ErrNeverIssued}} {
		if current, known, err := f.m.FenceCheckNow("r", tc.token); !known || current != tc.current || err != tc.err {
			t.Errorf("FenceCheckNow(%d) = %v, %v, %v; want %v, true, %v", tc.token, current, known, err, tc.current, tc.err)
		}
	}
	if _, known, err := f.m.FenceCheckNow("not-cached", 1); known || err != nil {
		t.Errorf("FenceCheckNow of a resource not cached: known %v, %v; want false, nil", known, err)
	}
	f.tokens.failCached = persist.ErrUnhealthy
	if _, known, err := f.m.FenceCheckNow("r", 5); known || err != nil {
		t.Errorf("FenceCheckNow with the cache failing: known %v, %v; want false, nil (FenceCheck judges)", known, err)
	}
	f = holding(t, newFakeScripts(t), func(o *Options) { o.Admit = func() error { return errNotAdmitted } })
	if _, known, err := f.m.FenceCheckNow("r", 5); known || err != nil {
		t.Errorf("FenceCheckNow refused by the authority: known %v, %v; want false, nil (judged where it may wait)", known, err)
	}
}

// record is infoScript's reply for a held resource.
func recordReply(owner, token string, pttl int64) func(string) (any, error) {
	return func(string) (any, error) {
		return []any{owner, token, pttl, "1700000000000", "1700000001000", addr}, nil
	}
}

// TestFencedExec: the command runs only for the newest token, and with a
// holder prefix only while that user's lease holds the token.
func TestFencedExec(t *testing.T) {
	command := [][]byte{[]byte("SET"), []byte("k"), []byte("v")}
	for _, tc := range []struct {
		name   string
		token  uint64
		prefix string
		read   func(string) (any, error)
		admit  error
		err    error // nil: runs
		calls  []string
	}{
		{name: "current", token: 5, calls: []string{"exec"}},
		{name: "stale", token: 4, err: ErrStale},
		{name: "never issued", token: 6, err: ErrNeverIssued},
		{name: "not the authority", token: 5, admit: errNotAdmitted, err: errNotAdmitted},
		{name: "the user's own lease", token: 5, prefix: "u\x00", read: recordReply("u\x00o", "5", 900), calls: []string{"info", "exec"}},
		{name: "another user's lease", token: 5, prefix: "u\x00", read: recordReply("w\x00o", "5", 900), err: ErrOtherHolder, calls: []string{"info"}},
		{name: "lease over", token: 5, prefix: "u\x00", calls: []string{"info"}, err: ErrLeaseOver},
		{name: "lease of another token", token: 5, prefix: "u\x00", read: recordReply("u\x00o", "4", 900), err: ErrLeaseOver, calls: []string{"info"}},
		{name: "record unreadable", token: 5, prefix: "u\x00", read: func(string) (any, error) { return nil, upstream.ErrUnavailable },
			err: upstream.ErrUnavailable, calls: []string{"info"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scripts := newFakeScripts(t, reply{raw: "+OK\r\n"})
			scripts.read = tc.read
			f := holding(t, scripts, func(o *Options) {
				if tc.admit != nil {
					o.Admit = func() error { return tc.admit }
				}
			})
			raw, err := f.m.FencedExecAs(context.Background(), "r", tc.token, command, nil, tc.prefix)
			if !errors.Is(err, tc.err) || (err == nil && string(raw) != "+OK\r\n") {
				t.Fatalf("FencedExecAs = %q, %v; want %v", raw, err, tc.err)
			}
			if got := scripts.names(); !slices.Equal(got, tc.calls) {
				t.Fatalf("sent %q, want %q", got, tc.calls)
			}
			if tc.err == nil {
				c := scripts.sent()[len(tc.calls)-1]
				// The fence mark first, then the command's key, declared
				// too so that Redis Cluster redirects the script (test/cluster
				// TestFenceExecFollowsItsSlot); token, term, checked-at,
				// the mark's life, then the command.
				const mark = "fenceproxy:lock:{r}:fence"
				if c.key != mark || !slices.Equal(c.args[4:], []string{"SET", "k", "v"}) || !slices.Equal(c.keys, []string{mark, "k"}) ||
					c.args[0] != "5" || c.args[1] != "0" || c.args[3] != "86400000" {
					t.Errorf("exec sent for key %q with keys %q args %q", c.key, c.keys, c.args)
				}
			}
		})
	}
	// A command without a key goes to the master of "" (any, standalone).
	scripts := newFakeScripts(t, reply{raw: "+PONG\r\n"})
	f := holding(t, scripts, nil)
	if raw, err := f.m.FencedExec(context.Background(), "r", 5, [][]byte{[]byte("PING")}); err != nil || string(raw) != "+PONG\r\n" {
		t.Fatalf("FencedExec(PING) = %q, %v", raw, err)
	}
	if c := scripts.sent()[0]; c.key != "fenceproxy:lock:{r}:fence" || len(c.keys) != 1 {
		t.Errorf("a keyless command went by key %q with keys %q, want the record's fence mark alone", c.key, c.keys)
	}
	f.tokens.failNewest = persist.ErrUnhealthy
	if _, err := f.m.FencedExec(context.Background(), "r", 5, command); err != persist.ErrUnhealthy {
		t.Errorf("FencedExec with the store failing: %v", err)
	}
}

// TestInfo: LOCK.INFO's record, free or held, from new and older records.
func TestInfo(t *testing.T) {
	ctx := context.Background()
	scripts := newFakeScripts(t)
	f := holding(t, scripts, nil)
	f.m.waiting.join("r", "w", addr, ttl, 10)

	scripts.read = recordReply(owner, "5", 900)
	info, err := f.m.Info(ctx, "r")
	want := Info{Owner: owner, Held: true, Token: 5, LeaseLeft: 900 * time.Millisecond, Waiters: 1,
		Acquired: time.UnixMilli(1700000000000), Renewed: time.UnixMilli(1700000001000), ClientAddr: addr}
	if err != nil || info != want {
		t.Fatalf("Info = %+v, %v\nwant %+v", info, err, want)
	}
	if c := scripts.sent()[0]; c.key != "fenceproxy:lock:{r}" || c.script != "info" {
		t.Errorf("read %+v", c)
	}

	scripts.read = func(string) (any, error) { return []any{owner, "5", int64(-1)}, nil } // an older record
	if info, err = f.m.Info(ctx, "r"); err != nil || !info.Held || info.LeaseLeft != 0 || !info.Acquired.IsZero() {
		t.Errorf("Info of an older record without expiry = %+v, %v", info, err)
	}
	scripts.read = func(string) (any, error) { return []any{owner, "5", int64(1), "junk", "", addr}, nil }
	if info, err = f.m.Info(ctx, "r"); err != nil || !info.Acquired.IsZero() || !info.Renewed.IsZero() {
		t.Errorf("Info of a record with malformed times = %+v, %v", info, err)
	}
	scripts.read = nil // free
	if info, err = f.m.Info(ctx, "r"); err != nil || info.Held || info.Owner != "" || info.Token != 5 {
		t.Errorf("Info of a free resource = %+v, %v", info, err)
	}
	scripts.read = func(string) (any, error) { return []any{}, nil }
	if info, err = f.m.Info(ctx, "r"); err != nil || info.Held {
		t.Errorf("Info of a short reply = %+v, %v", info, err)
	}
	scripts.read = func(string) (any, error) { return "junk", nil }
	if _, err = f.m.Info(ctx, "r"); err == nil {
		t.Errorf("Info took a string for a record")
	}
	scripts.read = func(string) (any, error) { return nil, upstream.ErrUnavailable }
	if _, err = f.m.Info(ctx, "r"); !errors.Is(err, upstream.ErrUnavailable) {
		t.Errorf("Info with Redis unreachable: %v", err)
	}
	f.tokens.failNewest = persist.ErrUnhealthy
	if _, err = f.m.Info(ctx, "r"); err != persist.ErrUnhealthy {
		t.Errorf("Info with the store failing: %v", err)
	}
}

// TestReleaseNow: ReleaseNow ends as Release does, and leaves to Release
// what it cannot do without waiting (a line to hand the lock to, a turn
// taken).
func TestReleaseNow(t *testing.T) {
	f := newFixture(t, newFakeScripts(t,
		reply{raw: kindReply(kindGranted, "1"), acks: acked(1)},
		reply{raw: bulk("1 0 0 0 0 " + owner)},
		reply{raw: ":0\r\n"},
		reply{err: upstream.ErrUnavailable},
	), nil)
	f = newNowFixture(t, f.scripts, nil)
	ctx := context.Background()
	if _, err := f.m.Acquire(ctx, "r", owner, addr, ttl, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	releaseNow := func() (bool, error, bool) {
		type outcome struct {
			ok  bool
			err error
		}
		done := make(chan outcome, 1)
		if !f.m.ReleaseNow("r", owner, releasedFunc(func(ok bool, err error) { done <- outcome{ok, err} })) {
			return false, nil, false
		}
		o := <-done
		return o.ok, o.err, true
	}
	if ok, err, started := releaseNow(); !started || !ok || err != nil {
		t.Fatalf("ReleaseNow = %v, %v (started %v); want true", ok, err, started)
	}
	if c := f.scripts.sent()[1]; c.script != "release" || c.wantAcks {
		t.Errorf("release sent as %+v: want no WAIT", c)
	}
	if st := f.m.Stats(); st.Held != 0 {
		t.Errorf("%d leases still tracked after the release", st.Held)
	}
	if ok, err, started := releaseNow(); !started || ok || err != nil {
		t.Errorf("ReleaseNow of a lock not held = %v, %v (started %v); want false", ok, err, started)
	}
	if _, err, started := releaseNow(); !started || !errors.Is(err, upstream.ErrUnavailable) {
		t.Errorf("ReleaseNow with Redis unreachable: %v (started %v)", err, started)
	}
	turn := f.m.serial.lock("r")
	if _, _, started := releaseNow(); started {
		t.Errorf("ReleaseNow started while another request had the resource's turn")
	}
	f.m.serial.unlock("r", turn)
	f.m.waiting.join("r", "w", addr, ttl, 10)
	f.tokens.mu.Lock()
	f.tokens.known["r"] = false
	f.tokens.mu.Unlock()
	if _, _, started := releaseNow(); started {
		t.Errorf("ReleaseNow started with an acquire waiting in line and r's newest token not cached (the handoff reads it from disk)")
	}
	if n := len(f.scripts.sent()); n != 4 {
		t.Errorf("%d scripts sent, want 4: none by a ReleaseNow that did not start", n)
	}
}
