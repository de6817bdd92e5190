package locks

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// hashReply is opHashAcquire's reply: {kind, token, count before,
// PEXPIRETIME before, the side record's (or "")}.
func hashReply(k replyKind, token string, count int, was int64, swas string) string {
	s := "*5\r\n:" + itoa(int64(k)) + "\r\n" + bulk(token) + ":" + itoa(int64(count)) + "\r\n:" + itoa(was) + "\r\n"
	if swas == "" {
		return s + bulk("")
	}
	return s + ":" + swas + "\r\n"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A recipe's grant is settled as LOCK.ACQUIRE's is: reserved, confirmed
// after the replicas; on a shortfall or a late reply undone with the
// pre-image the twin returned and its reservation cancelled; an undo that
// fails, or a script reply lost, leaves the token counted as issued.
func TestRecipeAcquireSettles(t *testing.T) {
	fresh := hashReply(kindGranted, "1", 0, -2, "")
	reentry := hashReply(kindRearmed, "7", 2, 1700000000000, "1700000000001")
	for _, tc := range []recipeAcquireCase{
		{name: "fresh grant acknowledged", s: setup{replies: []reply{{raw: fresh, acks: acked(1)}}},
			newest: 1, calls: []string{"hash-acquire+acks"}},
		{name: "fresh grant short of replicas: undone, not issued",
			s:       setup{replies: []reply{{raw: fresh, acks: acked(0)}}, undos: []reply{{raw: ":1\r\n"}}},
			wantErr: noReplicas(0, 1), newest: 0, calls: []string{"hash-acquire+acks", "hash-undo"},
			undoArgs: []string{"0", "-2", ""}},
		{name: "fresh grant too late: undone", s: setup{replies: []reply{{raw: fresh, acks: acked(1)}}, undos: []reply{{raw: ":1\r\n"}}, late: true},
			wantErr: errIs(ErrLate), newest: 0, calls: []string{"hash-acquire+acks", "hash-undo"}},
		{name: "undo fails: counted as issued, outcome unknown",
			s:       setup{replies: []reply{{raw: fresh, acks: acked(0)}}, undos: []reply{{err: upstream.ErrUnavailable}}},
			wantErr: errIs(upstream.ErrOutcomeUnknown), newest: 1, calls: []string{"hash-acquire+acks", "hash-undo"}},
		{name: "script reply lost: counted as issued", s: setup{replies: []reply{{err: upstream.ErrOutcomeUnknown}}},
			wantErr: errIs(upstream.ErrOutcomeUnknown), newest: 1, calls: []string{"hash-acquire+acks"}},
		{name: "re-entry short of replicas: count and expiries restored",
			s: setup{store: func(s *memTokens) { s.newest["r"] = 7 },
				replies: []reply{{raw: reentry, acks: acked(0)}}, undos: []reply{{raw: ":1\r\n"}}},
			wantErr: noReplicas(0, 1), newest: 7, calls: []string{"hash-acquire+acks", "hash-undo"},
			undoArgs: []string{"2", "1700000000000", "1700000000001"}},
		{name: "busy: nothing to settle", s: setup{replies: []reply{{raw: "*2\r\n:0\r\n:900\r\n"}}},
			wantErr: errIs(ErrBusy), newest: 0, calls: []string{"hash-acquire+acks"}},
		{name: "re-entry without the newest token: asked again with it",
			s: setup{store: func(s *memTokens) { s.newest["r"] = 7 },
				replies: []reply{{raw: "*2\r\n:3\r\n:0\r\n", acks: acked(1)}, {raw: reentry, acks: acked(1)}}},
			newest: 7, calls: []string{"hash-acquire+acks", "hash-acquire+acks"}},
	} {
		// Each case both ways, as TestAcquireOutcomes: RecipeAcquire, and
		// RecipeAcquireNow falling back to it.
		for _, now := range []bool{false, true} {
			name, base := tc.name, newFixture
			if now {
				name, base = tc.name+"/now", newNowFixture
			}
			t.Run(name, func(t *testing.T) { tc.run(t, base, now) })
		}
	}
}

// recipeAcquireCase is one case of TestRecipeAcquireSettles.
type recipeAcquireCase struct {
	name     string
	s        setup
	wantErr  func(error) bool
	newest   uint64
	calls    []string
	undoArgs []string // the undo's count, PEXPIRETIMEs before (its args 2-4)
}

// run runs the case on base's fixture: by RecipeAcquireNow (which must
// start) if now, else by RecipeAcquire.
func (tc recipeAcquireCase) run(t *testing.T, base func(*testing.T, *fakeScripts, func(*Options)) *fixture, now bool) {
	f, received := arrange(t, base, tc.s)
	var err error
	if now {
		done := make(chan error, 1)
		if !f.m.RecipeAcquireNow(context.Background(), "r", "", owner, addr, ttl, received, func(_ uint64, _ int64, err error) { done <- err }) {
			t.Fatal("RecipeAcquireNow did not start")
		}
		err = <-done
	} else {
		_, _, err = f.m.RecipeAcquire(context.Background(), "r", "", owner, addr, ttl, received)
	}
	switch {
	case tc.wantErr == nil && err != nil:
		t.Fatalf("RecipeAcquire: %v", err)
	case tc.wantErr != nil && !tc.wantErr(err):
		t.Fatalf("RecipeAcquire: err %v, not the one expected", err)
	}
	if got := f.newest(); got != tc.newest {
		t.Errorf("newest token recorded = %d, want %d", got, tc.newest)
	}
	calls := f.scripts.sent()
	var names []string
	for _, c := range calls {
		n := c.script
		if c.wantAcks {
			n += "+acks"
		}
		names = append(names, n)
	}
	if !slices.Equal(names, tc.calls) {
		t.Fatalf("sent %q, want %q", names, tc.calls)
	}
	if tc.undoArgs != nil {
		u := calls[len(calls)-1].args
		if got := u[2:5]; !slices.Equal(got, tc.undoArgs) {
			t.Errorf("undo's count and expiries = %q, want %q", got, tc.undoArgs)
		}
	}
}

// A renewal batch: each lock's renewal joins the writer's batches; one
// short of replicas has its old expiries put back and fails the batch;
// one renewed is recorded; one whose reply comes too late to leave enough
// of the lease (counted from when the batch was received) fails the batch
// with ErrLate, its re-arm standing (nothing undone). Both ways:
// RecipeRenew, and RecipeRenewNow (its steps as callbacks; mutation:
// refusing every batch fails "/now").
func TestRecipeRenewRestoresOnShortfall(t *testing.T) {
	for _, tc := range []struct {
		name     string
		received time.Time
		batch    []RecipeLock
		held     []bool
		wantErr  func(error) bool
		undone   bool
	}{
		{name: "shortfall", batch: []RecipeLock{{"kept", "h"}, {"held", "h"}, {"gone", "h"}}, held: []bool{true, false, false},
			wantErr: func(err error) bool { var nr *NoReplicasError; return errors.As(err, &nr) }, undone: true},
		{name: "late", received: time.Now().Add(-time.Minute), batch: []RecipeLock{{"kept", "h"}, {"gone", "h"}}, held: []bool{false, false},
			wantErr: func(err error) bool { return errors.Is(err, ErrLate) }},
	} {
		for _, now := range []bool{false, true} {
			name := tc.name + "/blocking"
			if now {
				name = tc.name + "/now"
			}
			t.Run(name, func(t *testing.T) {
				scripts := newFakeScripts(t)
				scripts.respond = func(c sent) reply {
					switch c.keys[0] {
					case "held":
						return reply{raw: "*4\r\n:1\r\n:1700000000000\r\n" + bulk("") + bulk(""), acks: acked(0)}
					case "kept":
						return reply{raw: "*4\r\n:1\r\n:1700000000000\r\n" + bulk("") + bulk(""), acks: acked(1)}
					}
					return reply{raw: ":0\r\n", acks: acked(1)}
				}
				scripts.undos = []reply{{raw: ":1\r\n"}}
				var held []bool
				var err error
				if now {
					f := newNowFixture(t, scripts, nil)
					for _, l := range tc.batch {
						f.tokens.newest[l.Key], f.tokens.known[l.Key] = 1, true
					}
					type outcome struct {
						held []bool
						err  error
					}
					done := make(chan outcome, 1)
					if !f.m.RecipeRenewNow(context.Background(), tc.batch, 30*time.Second, tc.received, func(held []bool, err error) { done <- outcome{held, err} }) {
						t.Fatal("RecipeRenewNow did not start with every lock's newest token cached")
					}
					o := <-done
					held, err = o.held, o.err
				} else {
					f := newFixture(t, scripts, nil)
					held, err = f.m.RecipeRenew(context.Background(), tc.batch, 30*time.Second, tc.received)
				}
				if !tc.wantErr(err) || !slices.Equal(held, tc.held) {
					t.Fatalf("renewal = %v, %v; want %v and the case's error", held, err, tc.held)
				}
				var undone bool
				for _, c := range scripts.sent() {
					if c.script == "hash-renew-undo" {
						undone = c.args[1] == "1700000000000"
					}
				}
				if undone != tc.undone {
					t.Fatalf("an undo restoring the old expiry sent: %v, want %v (%+v)", undone, tc.undone, scripts.sent())
				}
			})
		}
	}
}
