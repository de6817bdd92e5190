package locks

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fixture is a Manager between the two fakes.
type fixture struct {
	m       *Manager
	scripts *fakeScripts
	tokens  *memTokens
	metrics *metrics.Metrics
	// now: the Manager runs lock requests as callbacks where they can
	// (newNowFixture); releasedNow counts f.release's that did.
	now         bool
	releasedNow atomic.Int32
}

func newFixture(t *testing.T, scripts *fakeScripts, tweak func(*Options)) *fixture {
	t.Helper()
	f := &fixture{scripts: scripts, tokens: newMemTokens(), metrics: metrics.New()}
	opts := Options{Scripts: scripts, Store: f.tokens, MinReplicas: 1, Metrics: f.metrics, Logger: quiet,
		MaxWaiters: 10, SlowWait: -1, SlowHeld: -1, SlowLogLen: 16}
	if tweak != nil {
		tweak(&opts)
	}
	f.m = New(opts)
	return f
}

// newest is what the fake store holds as r's newest, read past any
// failure a test set.
func (f *fixture) newest() uint64 {
	f.tokens.mu.Lock()
	defer f.tokens.mu.Unlock()
	return max(f.tokens.newest["r"], f.tokens.floor)
}

const (
	owner = "o"
	addr  = "127.0.0.1:1"
	ttl   = 10 * time.Second
)

func errIs(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func noReplicas(acked, wanted int) func(error) bool {
	return func(err error) bool {
		var nr *NoReplicasError
		return errors.As(err, &nr) && nr.Acked == acked && nr.Wanted == wanted
	}
}

// unknownOutcome: a refusal whose grant could not be undone.
func undoFailed(err error) bool {
	return errors.Is(err, upstream.ErrOutcomeUnknown) && strings.Contains(err.Error(), "could not be undone")
}

func errContains(s string) func(error) bool {
	return func(err error) bool { return err != nil && strings.Contains(err.Error(), s) }
}

var errNotAdmitted = errors.New("not the token authority")

// setup is how a table case sets up a fixture: its options, the store's
// state and failures, the runner's policy, the scripts' replies in order,
// and whether the request was read long ago (no lease can be replied in
// time then).
type setup struct {
	opts    func(*Options)
	store   func(*memTokens)
	scripts func(*fakeScripts)
	replies []reply
	undos   []reply
	late    bool
}

// arrange builds the fixture s describes on base and returns when its
// request was read.
func arrange(t *testing.T, base func(*testing.T, *fakeScripts, func(*Options)) *fixture, s setup) (*fixture, time.Time) {
	scripts := newFakeScripts(t, s.replies...)
	scripts.undos = s.undos
	if s.scripts != nil {
		s.scripts(scripts)
	}
	f := base(t, scripts, s.opts)
	if s.store != nil {
		s.store(f.tokens)
	}
	received := time.Now()
	if s.late {
		received = received.Add(-time.Hour)
	}
	return f, received
}

// checkOutcome checks a command's token or error (wantErr nil: none) and
// the calls it sent.
func (f *fixture) checkOutcome(t *testing.T, op string, token uint64, err error, want uint64, wantErr func(error) bool, calls []string) {
	t.Helper()
	switch {
	case wantErr == nil && err != nil:
		t.Fatalf("%s: %v", op, err)
	case wantErr != nil && !wantErr(err):
		t.Fatalf("%s: err %v, not the one expected", op, err)
	case token != want:
		t.Fatalf("%s = %d, want %d", op, token, want)
	}
	if got := f.scripts.names(); !slices.Equal(got, calls) {
		t.Errorf("sent %q, want %q", got, calls)
	}
}

// counted is a counter's value.
func counted(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestAcquireOutcomes: every way one acquire attempt can end, with what it
// sent to Redis and what it left in the fence store.
func TestAcquireOutcomes(t *testing.T) {
	granted := reply{raw: kindReply(kindGranted, "1"), acks: acked(1)}
	undone := reply{raw: ":1\r\n"}
	for _, tc := range []struct {
		name    string
		opts    func(*Options)
		store   func(*memTokens)
		scripts func(*fakeScripts)
		replies []reply
		undos   []reply
		late    bool // read from the client long ago: no lease can be replied in time
		want    uint64
		wantErr func(error) bool // nil: no error
		calls   []string
		log     []string // the fence store's reserve, confirm, cancel and adopt
		newest  uint64   // the resource's newest afterwards
		check   func(t *testing.T, f *fixture)
	}{
		{name: "new grant", replies: []reply{granted}, want: 1,
			calls: []string{"acquire+acks"}, log: []string{"reserve r 1", "confirm r 1"}, newest: 1,
			check: func(t *testing.T, f *fixture) {
				c := f.scripts.sent()[0]
				if want := []string{"fenceproxy:lock:{r}", "fenceproxy:lock:{r}:delay", "fenceproxy:lock:{r}:fence"}; !slices.Equal(c.keys, want) || c.key != want[0] {
					t.Errorf("keys %q (key %q), want %q", c.keys, c.key, want)
				}
				// owner, ttl, candidate, newest ("": not cached), others waiting, lock-delay, now, the record, term, mark life
				if got := c.args; got[0] != owner || got[1] != "10000" || got[2] != "1" || got[3] != "" || got[4] != "0" || got[5] != "0" ||
					got[7] != "1 0 "+got[6]+" "+got[6]+" "+strconv.Itoa(len(addr))+" "+addr+owner || got[8] != "0" || got[9] != "86400000" {
					t.Errorf("args %q", got)
				}
				if st := f.m.Stats(); st.Held != 1 {
					t.Errorf("%d leases tracked, want the grant's", st.Held)
				}
			}},
		{name: "re-arm of the owner's grant",
			store:   func(s *memTokens) { s.newest["r"], s.known["r"], s.last = 5, true, 5 },
			replies: []reply{{raw: kindReply(kindRearmed, "5"), acks: acked(1)}}, want: 5,
			calls: []string{"acquire+acks"}, newest: 5,
			check: func(t *testing.T, f *fixture) {
				if args := f.scripts.sent()[0].args; args[3] != "5" || args[2] != "6" {
					t.Errorf("newest %q, candidate %q: want the cached 5 and a fresh 6", args[3], args[2])
				}
			}},
		{name: "busy", replies: []reply{{raw: kindReply(kindBusy, "1500")}}, wantErr: errIs(ErrBusy),
			calls: []string{"acquire+acks"},
			check: func(t *testing.T, f *fixture) {
				if top, _ := f.m.Top(1); len(top) != 1 || top[0].Resource != "r" || top[0].Count != 1 {
					t.Errorf("LOCK.TOP after a busy acquire: %+v", top)
				}
			}},
		{name: "replica shortfall, undone", replies: []reply{{raw: granted.raw, acks: acked(0)}}, undos: []reply{undone},
			wantErr: noReplicas(0, 1), calls: []string{"acquire+acks", "undo"}, log: []string{"reserve r 1", "cancel r 1"},
			check: func(t *testing.T, f *fixture) {
				if u := f.scripts.sent()[1]; !slices.Equal(u.args, []string{owner, "1", "0", "0", "", "0", "86400000"}) || len(u.keys) != 3 || u.keys[0] != "fenceproxy:lock:{r}" {
					t.Errorf("undo sent keys %q args %q, want the record's and (owner, 1, lock-delay 0, term 0, armed empty, newest 0, the mark's life)", u.keys, u.args)
				}
				if n := counted(t, f.metrics.ReplicaShortfalls); n != 1 {
					t.Errorf("%v shortfalls counted", n)
				}
			}},
		{name: "replica shortfall, record already gone", replies: []reply{{raw: granted.raw, acks: acked(0)}},
			undos: []reply{{raw: ":0\r\n"}}, wantErr: noReplicas(0, 1), calls: []string{"acquire+acks", "undo"},
			log: []string{"reserve r 1", "cancel r 1"}},
		{name: "replica shortfall, undo failed", replies: []reply{{raw: granted.raw, acks: acked(0)}},
			undos: []reply{{err: upstream.ErrUnavailable}}, wantErr: undoFailed, calls: []string{"acquire+acks", "undo"},
			log: []string{"reserve r 1", "confirm r 1"}, newest: 1},
		{name: "script reply lost", replies: []reply{{err: upstream.ErrOutcomeUnknown}}, wantErr: errIs(upstream.ErrOutcomeUnknown),
			calls: []string{"acquire+acks"}, log: []string{"reserve r 1", "confirm r 1"}, newest: 1},
		{name: "WAIT lost", replies: []reply{{raw: granted.raw, acks: "-UNBLOCKED force unblocked\r\n"}},
			wantErr: errIs(upstream.ErrOutcomeUnknown), calls: []string{"acquire+acks"},
			log: []string{"reserve r 1", "confirm r 1"}, newest: 1},
		{name: "not sent", replies: []reply{{err: upstream.ErrUnavailable}}, wantErr: errIs(upstream.ErrUnavailable),
			calls: []string{"acquire+acks"}},
		{name: "no master", scripts: func(s *fakeScripts) { s.noMaster = true }, wantErr: errIs(upstream.ErrUnavailable),
			calls: []string{"acquire+acks"}},
		{name: "script refused by Redis", replies: []reply{{raw: "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"}},
			wantErr: func(err error) bool {
				return errContains("WRONGTYPE")(err) && !errors.Is(err, upstream.ErrOutcomeUnknown)
			}, calls: []string{"acquire+acks"}},
		{name: "Reserve failed", store: func(s *memTokens) { s.failReserve = persist.ErrUnhealthy },
			replies: []reply{granted}, undos: []reply{undone}, wantErr: errIs(persist.ErrUnhealthy),
			calls: []string{"acquire+acks", "undo"}},
		{name: "Confirm failed", store: func(s *memTokens) { s.failConfirm = persist.ErrUnhealthy },
			replies: []reply{granted}, undos: []reply{undone}, wantErr: errIs(persist.ErrUnhealthy),
			calls: []string{"acquire+acks", "undo"}, log: []string{"reserve r 1", "cancel r 1"}},
		{name: "Confirm failed, undo failed", store: func(s *memTokens) { s.failConfirm = persist.ErrUnhealthy },
			replies: []reply{granted}, undos: []reply{{err: upstream.ErrOutcomeUnknown}}, wantErr: errIs(persist.ErrUnhealthy),
			calls: []string{"acquire+acks", "undo"}, log: []string{"reserve r 1"},
			check: func(t *testing.T, f *fixture) {
				// Neither confirmed nor cancelled: the reservation stands,
				// and the token counts as issued after a restart.
				if n, _ := f.tokens.reopen().Newest("r"); n != 1 {
					t.Errorf("after a crash the newest is %d, want the grant that may stand, 1", n)
				}
			}},
		{name: "NextToken failed", store: func(s *memTokens) { s.failNext = persist.ErrExhausted },
			wantErr: errIs(persist.ErrExhausted)},
		{name: "newest token needed (kind 3)",
			store:   func(s *memTokens) { s.newest["r"], s.last = 5, 5 },
			replies: []reply{{raw: kindReply(kindNeedNewest, "0")}, {raw: kindReply(kindRearmed, "5"), acks: acked(1)}},
			want:    5, calls: []string{"acquire+acks", "acquire+acks"}, newest: 5,
			check: func(t *testing.T, f *fixture) {
				first, second := f.scripts.sent()[0].args, f.scripts.sent()[1].args
				if first[3] != "" || second[3] != "5" || first[2] != "6" || second[2] != "7" {
					t.Errorf("newest %q then %q, candidates %q then %q: want unknown, then the newest read, each with a fresh candidate",
						first[3], second[3], first[2], second[2])
				}
			}},
		{name: "newest token needed, and unreadable", store: func(s *memTokens) { s.failNewest = persist.ErrUnhealthy },
			replies: []reply{{raw: kindReply(kindNeedNewest, "0")}}, wantErr: errIs(persist.ErrUnhealthy),
			calls: []string{"acquire+acks"}},
		{name: "cached newest unreadable", store: func(s *memTokens) { s.failCached = persist.ErrUnhealthy },
			wantErr: errIs(persist.ErrUnhealthy)},
		{name: "record token ahead (kind 4): adopted, asked again",
			replies: []reply{{raw: kindReply(kindTokenAhead, "500")}, {raw: kindReply(kindGranted, "502"), acks: acked(1)}},
			want:    502, calls: []string{"acquire+acks", "acquire+acks"}, log: []string{"adopt 500", "reserve r 502", "confirm r 502"}, newest: 502,
			check: func(t *testing.T, f *fixture) {
				if args := f.scripts.sent()[1].args; args[2] != "502" || args[3] != "501" {
					t.Errorf("asked again with candidate %q, newest %q; want above the adopted token, with the floor read", args[2], args[3])
				}
			}},
		{name: "record token ahead, adopt failed", store: func(s *memTokens) { s.failAdopt = persist.ErrUnhealthy },
			replies: []reply{{raw: kindReply(kindTokenAhead, "500")}}, wantErr: errIs(persist.ErrUnhealthy),
			calls: []string{"acquire+acks"}},
		{name: "record token ahead, malformed", replies: []reply{{raw: kindReply(kindTokenAhead, "0")}},
			wantErr: errContains("unexpected record token"), calls: []string{"acquire+acks"}},
		{name: "late grant, undone", late: true, replies: []reply{granted}, undos: []reply{undone}, wantErr: errIs(ErrLate),
			calls: []string{"acquire+acks", "undo"}, log: []string{"reserve r 1", "cancel r 1"}},
		{name: "late grant, undo failed", late: true, replies: []reply{granted}, undos: []reply{{err: upstream.ErrOutcomeUnknown}},
			wantErr: undoFailed, calls: []string{"acquire+acks", "undo"}, log: []string{"reserve r 1", "confirm r 1"}, newest: 1},
		{name: "late re-arm: stands, not undone", late: true,
			store:   func(s *memTokens) { s.newest["r"], s.known["r"], s.last = 5, true, 5 },
			replies: []reply{{raw: kindReply(kindRearmed, "5"), acks: acked(1)}}, wantErr: errIs(ErrLate),
			calls: []string{"acquire+acks"}, newest: 5},
		{name: "not the token authority", opts: func(o *Options) { o.Admit = func() error { return errNotAdmitted } },
			wantErr: errIs(errNotAdmitted),
			check: func(t *testing.T, f *fixture) {
				if f.tokens.last != 0 {
					t.Errorf("a token was drawn for a refused command")
				}
			}},
		{name: "evictable master", scripts: func(s *fakeScripts) { s.policy = upstream.MemoryPolicy{Policy: "allkeys-lru"} },
			wantErr: func(err error) bool {
				var ee *EvictableError
				return errors.As(err, &ee) && ee.Policy == "allkeys-lru" && strings.Contains(err.Error(), "allkeys-lru")
			}},
		{name: "master's policy unread", scripts: func(s *fakeScripts) { s.policy = upstream.MemoryPolicy{} },
			wantErr: func(err error) bool {
				var ee *EvictableError
				return errors.As(err, &ee) && ee.Policy == "" && strings.Contains(err.Error(), "could not be read")
			}},
		{name: "evictable master, allowed", opts: func(o *Options) { o.AllowEvictable = true },
			scripts: func(s *fakeScripts) { s.policy = upstream.MemoryPolicy{Policy: "volatile-ttl"} },
			replies: []reply{granted}, want: 1, calls: []string{"acquire+acks"}, log: []string{"reserve r 1", "confirm r 1"}, newest: 1,
			check: func(t *testing.T, f *fixture) {
				if n := counted(t, f.metrics.EvictableGrants); n != 1 {
					t.Errorf("%v evictable grants counted, want 1", n)
				}
			}},
		{name: "no replicas required", opts: func(o *Options) { o.MinReplicas = 0 },
			replies: []reply{{raw: granted.raw}}, want: 1, calls: []string{"acquire+acks"},
			log: []string{"reserve r 1", "confirm r 1"}, newest: 1},
		{name: "unknown reply kind", replies: []reply{{raw: kindReply(9, "1"), acks: acked(1)}},
			wantErr: errContains("unexpected acquire reply kind 9"), calls: []string{"acquire+acks"}},
		{name: "malformed reply", replies: []reply{{raw: ":1\r\n", acks: acked(1)}},
			wantErr: errContains("unexpected script reply"), calls: []string{"acquire+acks"}},
	} {
		// Each case both ways: Acquire, and AcquireNow (its steps as
		// callbacks), falling back to Acquire as LOCK.ACQUIRE does when
		// it cannot start so. They must end alike.
		for _, now := range []bool{false, true} {
			name, base := tc.name, newFixture
			if now {
				name, base = tc.name+"/now", newNowFixture
			}
			t.Run(name, func(t *testing.T) {
				f, received := arrange(t, base, setup{tc.opts, tc.store, tc.scripts, tc.replies, tc.undos, tc.late})
				var token uint64
				var err error
				if now {
					var started bool
					token, err, started = f.acquireNow(received)
					if !started {
						token, err = f.m.Acquire(context.Background(), "r", owner, addr, ttl, 0, received)
					}
					if _, ok := startsNow[tc.name]; ok != started {
						t.Errorf("AcquireNow started: %v, want %v", started, ok)
					}
				} else {
					token, err = f.m.Acquire(context.Background(), "r", owner, addr, ttl, 0, received)
				}
				f.checkOutcome(t, "Acquire", token, err, tc.want, tc.wantErr, tc.calls)
				if !slices.Equal(f.tokens.log, tc.log) {
					t.Errorf("fence store saw %q, want %q", f.tokens.log, tc.log)
				}
				if n := f.newest(); n != max(tc.newest, f.tokens.floor) {
					t.Errorf("newest %d afterwards, want %d", n, tc.newest)
				}
				if tc.check != nil {
					tc.check(t, f)
				}
			})
		}
	}
}

// startsNow are TestAcquireOutcomes's cases that AcquireNow starts (the
// others it leaves to Acquire: nothing can start without waiting there).
var startsNow = map[string]struct{}{}

func init() {
	for _, name := range []string{"new grant", "re-arm of the owner's grant", "busy", "replica shortfall, undone",
		"replica shortfall, record already gone", "replica shortfall, undo failed", "script reply lost", "WAIT lost",
		"not sent", "script refused by Redis", "Reserve failed", "Confirm failed", "Confirm failed, undo failed",
		"newest token needed (kind 3)", "newest token needed, and unreadable", "record token ahead (kind 4): adopted, asked again",
		"record token ahead, adopt failed", "record token ahead, malformed", "late grant, undone", "late grant, undo failed",
		"late re-arm: stands, not undone", "evictable master, allowed", "no replicas required", "unknown reply kind", "malformed reply"} {
		startsNow[name] = struct{}{}
	}
}

// newNowFixture is newFixture whose fakes also run scripts and reserve
// tokens without waiting (nowRunner, nowStore), answering on goroutines of
// their own as the lock writer and the fence store's committer do.
func newNowFixture(t *testing.T, scripts *fakeScripts, tweak func(*Options)) *fixture {
	f := newFixture(t, scripts, func(o *Options) {
		if tweak != nil {
			tweak(o)
		}
		o.Scripts = nowScripts{scripts}
		if mem, ok := o.Store.(*memTokens); ok {
			o.Store = nowTokens{mem}
		}
	})
	f.now = true
	return f
}

// release releases r for who as LOCK.RELEASE does: with a fixture of
// newNowFixture's, by ReleaseNow when it starts, else by Release.
func (f *fixture) release(ctx context.Context, who string) (bool, error) {
	if f.now {
		type outcome struct {
			ok  bool
			err error
		}
		done := make(chan outcome, 1)
		if f.m.ReleaseNow("r", who, releasedFunc(func(ok bool, err error) { done <- outcome{ok, err} })) {
			f.releasedNow.Add(1)
			o := <-done
			return o.ok, o.err
		}
	}
	return f.m.Release(ctx, "r", who)
}

// acquireNow runs AcquireNow of the fixture's resource and waits for its
// outcome; started false if it did not start.
func (f *fixture) acquireNow(received time.Time) (uint64, error, bool) {
	type outcome struct {
		g   Grant
		err error
	}
	done := make(chan outcome, 1)
	if !f.m.AcquireNow(context.Background(), "r", owner, addr, ttl, received, acquiredFunc(func(g Grant, err error) { done <- outcome{g, err} })) {
		return 0, nil, false
	}
	o := <-done
	return o.g.Token, o.err, true
}

// acquiredFunc and releasedFunc make funcs an AcquireDone and a
// ReleaseDone.
type (
	acquiredFunc func(Grant, error)
	releasedFunc func(bool, error)
)

func (f acquiredFunc) Acquired(g Grant, err error)       { f(g, err) }
func (f releasedFunc) Released(released bool, err error) { f(released, err) }

type nowScripts struct{ *fakeScripts }

func (s nowScripts) StartThen(_ *lockwriter.Write, key string, call lockwriter.ScriptCall, wantAcks bool, then lockwriter.ReplyIn) bool {
	if s.noMaster {
		return false // as the lock writer's: Start then says so
	}
	w := s.Start(context.Background(), key, call, wantAcks)
	go then.ReplyIn(w)
	return true
}

type nowTokens struct{ *memTokens }

func (s nowTokens) NextTokenNow() (uint64, bool, error) {
	t, err := s.NextToken()
	return t, err == nil, err
}

func (s nowTokens) ReserveThen(resource string, token uint64, done persist.Synced) error {
	go done.Synced(s.Reserve(resource, token))
	return nil
}

// TestBusyLease: a busy attempt says how long the holder's lease has
// left, or to look again soon when Redis does not say.
func TestBusyLease(t *testing.T) {
	for _, tc := range []struct {
		pttl string
		want time.Duration
	}{{"1500", 1500 * time.Millisecond}, {"-1", 50 * time.Millisecond}, {"-2", 50 * time.Millisecond}} {
		f := newFixture(t, newFakeScripts(t, reply{raw: kindReply(kindBusy, tc.pttl)}), nil)
		_, left, err := f.m.tryAcquire(context.Background(), "r", owner, addr, ttl, false, time.Time{}, nil)
		if err != ErrBusy || left != tc.want {
			t.Errorf("PTTL %s: lease left %v (%v), want %v", tc.pttl, left, err, tc.want)
		}
	}
}

// TestAcquireWithOthersWaiting: while others wait in line, a newcomer asks
// without a WAIT first (a busy answer wrote nothing), and only a re-arm of
// its own grant goes on to the serialized attempt with its WAIT.
func TestAcquireWithOthersWaiting(t *testing.T) {
	t.Run("busy", func(t *testing.T) {
		f := newFixture(t, newFakeScripts(t, reply{raw: kindReply(kindBusy, "900")}), nil)
		f.m.waiting.join("r", "w", addr, ttl, 10)
		if _, err := f.m.Acquire(context.Background(), "r", owner, addr, ttl, 0, time.Now()); err != ErrBusy {
			t.Fatalf("Acquire: %v, want ErrBusy", err)
		}
		calls := f.scripts.sent()
		if len(calls) != 1 || calls[0].wantAcks || calls[0].args[4] != "1" {
			t.Fatalf("sent %+v, want one acquire without a WAIT, with others waiting", calls)
		}
	})
	t.Run("own re-arm", func(t *testing.T) {
		rearmed := reply{raw: kindReply(kindRearmed, "5"), acks: acked(1)}
		f := newFixture(t, newFakeScripts(t, rearmed, rearmed), nil)
		f.tokens.newest["r"], f.tokens.known["r"], f.tokens.last = 5, true, 5
		f.m.waiting.join("r", "w", addr, ttl, 10)
		if token, err := f.m.Acquire(context.Background(), "r", owner, addr, ttl, 0, time.Now()); err != nil || token != 5 {
			t.Fatalf("Acquire = %d, %v; want the owner's 5", token, err)
		}
		if got := f.scripts.names(); !slices.Equal(got, []string{"acquire", "acquire+acks"}) {
			t.Fatalf("sent %q", got)
		}
		if args := f.scripts.sent()[1].args; args[4] != "1" {
			t.Fatalf("the serialized attempt let the newcomer barge: others-waiting %q", args[4])
		}
	})
	t.Run("refused early", func(t *testing.T) {
		f := newFixture(t, newFakeScripts(t, reply{err: upstream.ErrUnavailable}), nil)
		f.m.waiting.join("r", "w", addr, ttl, 10)
		if _, err := f.m.Acquire(context.Background(), "r", owner, addr, ttl, 0, time.Now()); !errors.Is(err, upstream.ErrUnavailable) {
			t.Fatalf("Acquire: %v", err)
		}
		f = newFixture(t, newFakeScripts(t), func(o *Options) { o.Admit = func() error { return errNotAdmitted } })
		f.m.waiting.join("r", "w", addr, ttl, 10)
		if _, err := f.m.Acquire(context.Background(), "r", owner, addr, ttl, 0, time.Now()); err != errNotAdmitted {
			t.Fatalf("Acquire: %v", err)
		}
	})
}

// boundedTokens is memTokens that knows its issued bound (issuedBounder).
type boundedTokens struct {
	*memTokens
	bound uint64
}

func (b boundedTokens) IssuedBound() uint64 { return b.bound }

// TestRecordTokenAboveEveryBound: a record token at or above the
// candidate is adopted if a fence store may have issued it (at most the
// issued bound), and refused, never adopted, above it: counted, and the
// error names the resource, its key and the token.
func TestRecordTokenAboveEveryBound(t *testing.T) {
	const foreign = "9007199254740990"
	bounded := func(f *fixture, bound uint64) {
		f.m.opts.Store = boundedTokens{f.tokens, bound}
	}

	f := newFixture(t, newFakeScripts(t, reply{raw: kindReply(kindTokenAhead, foreign)}), nil)
	bounded(f, 1<<20)
	_, err := f.m.Acquire(context.Background(), "r", owner, addr, ttl, 0, time.Now())
	var fe *ForeignTokenError
	if !errors.As(err, &fe) || fe.Resource != "r" || fe.Key != "fenceproxy:lock:{r}" || strconv.FormatUint(fe.Token, 10) != foreign || fe.Bound != 1<<20 {
		t.Fatalf("Acquire over a record with token %s = %v, want a ForeignTokenError naming it", foreign, err)
	}
	if f.tokens.floor != 0 || slices.ContainsFunc(f.tokens.log, func(s string) bool { return strings.HasPrefix(s, "adopt") }) {
		t.Fatalf("the store adopted the foreign token: floor %d, log %q", f.tokens.floor, f.tokens.log)
	}
	if n := counted(t, f.metrics.ForeignTokens); n != 1 {
		t.Fatalf("foreign tokens counted %v, want 1", n)
	}

	// Within the bound: adopted, and the acquire asks again above it.
	f = newFixture(t, newFakeScripts(t, reply{raw: kindReply(kindTokenAhead, "500")}, reply{raw: kindReply(kindGranted, "502"), acks: acked(1)}), nil)
	bounded(f, 1<<20)
	tok, err := f.m.Acquire(context.Background(), "r", owner, addr, ttl, 0, time.Now())
	if err != nil || tok <= 500 || f.tokens.floor != 501 {
		t.Fatalf("Acquire over a record with token 500 (bound %d) = %d, %v (floor %d), want a grant above it after adopting it", 1<<20, tok, err, f.tokens.floor)
	}
}

// TestKeys: an operation's keys, sliced from one string, are the record's
// key, its lock-delay guard and its fence mark.
func TestKeys(t *testing.T) {
	m := &Manager{opts: Options{KeyPrefix: "p:"}}
	got := m.keys("r{x}")
	want := []string{m.recordKey("r{x}"), m.recordKey("r{x}") + ":delay", markKey(m.recordKey("r{x}"))}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("keys = %q, want %q", got, want)
	}
}
