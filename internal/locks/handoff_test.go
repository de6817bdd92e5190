package locks

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// gatedModel is a modelled fixture whose handoffs wait at a gate: each
// handoff call is announced on arrived, and answered only when the test
// sends on open (the model then runs it); undos are modelled too.
func gatedModel(t *testing.T, now bool) (f *fixture, lm *lockModel, arrived chan sent, open chan struct{}) {
	t.Helper()
	f, lm = modelledWay(t, now, nil)
	arrived, open = make(chan sent, 1), make(chan struct{})
	f.scripts.respond = func(c sent) reply {
		if c.script == "handoff" {
			arrived <- c
			<-open
		}
		return lm.respond(c)
	}
	f.scripts.undos = nil
	return f, lm, arrived, open
}

// undoModelled answers the fixture's undos as the script would, against lm.
func undoModelled(f *fixture, lm *lockModel) {
	f.scripts.mu.Lock()
	defer f.scripts.mu.Unlock()
	f.scripts.undos = nil
	respond := f.scripts.respond
	f.scripts.respond = func(c sent) reply {
		if c.script != "undo" {
			return respond(c)
		}
		lm.mu.Lock()
		defer lm.mu.Unlock()
		if lm.heldLocked() && lm.holder == c.args[0] && lm.token == c.args[1] {
			lm.holder = ""
			return reply{raw: ":1\r\n"}
		}
		return reply{raw: ":0\r\n"}
	}
}

// waitAhead waits until r's line holds n tokens reserved ahead.
func (f *fixture) waitAhead(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.m.waiting.mu.Lock()
		l := f.m.waiting.lines["r"]
		got := 0
		if l != nil {
			got = len(l.tokens)
		}
		f.m.waiting.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tokens reserved ahead for r's line after 10s, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// storeLog is the fake store's log so far.
func (f *fixture) storeLog() []string {
	f.tokens.mu.Lock()
	defer f.tokens.mu.Unlock()
	return slices.Clone(f.tokens.log)
}

// TestHandoffWaiterLeaves: a waiter whose client goes away, or whose node
// loses leadership, while a release is handing it the lock cannot leave
// before the handoff's outcome; then its grant is undone as a refused one
// (compare-and-delete, the reservation cancelled once the record is
// gone), nothing is replied with its token, and the release still counts.
// One whose wait merely ran out takes the grant (made in time).
func TestHandoffWaiterLeaves(t *testing.T) {
	for _, how := range []string{"client gone", "leadership lost", "wait over"} {
		t.Run(how, func(t *testing.T) {
			bothWays(t, func(t *testing.T, now bool) *fixture {
				f, lm, arrived, open := gatedModel(t, now)
				undoModelled(f, lm)
				ctx := context.Background()
				if _, err := f.m.Acquire(ctx, "r", "a", addr, ttl, 0, time.Now()); err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				wait := time.Minute
				if how == "wait over" {
					wait = 300 * time.Millisecond
				}
				results := make(chan acquired, 1)
				f.acquireAsync(t, wctx, "b", wait, 1, results)
				f.waitAhead(t, 1)

				released := make(chan error, 1)
				go func() {
					ok, err := f.release(ctx, "a")
					if !ok && err == nil {
						err = errors.New("not released")
					}
					released <- err
				}()
				c := <-arrived
				token := c.args[4] // the head's reserved token
				switch how {
				case "client gone":
					cancel()
				case "leadership lost":
					f.m.EndWaiters(ErrDeposed)
				case "wait over":
					time.Sleep(wait)
				}
				select {
				case r := <-results:
					t.Fatalf("b left the line while its handoff was in flight: %+v", r)
				case <-time.After(50 * time.Millisecond):
				}
				close(open)
				if err := <-released; err != nil {
					t.Fatalf("a's release: %v", err)
				}
				r := next(t, results)
				if how == "wait over" {
					if r.err != nil || strconv.FormatUint(r.token, 10) != token {
						t.Fatalf("b, its wait over while granted: %+v, want its token %s", r, token)
					}
					return f
				}
				if r.err == nil || r.token != 0 {
					t.Fatalf("b, gone while granted: %+v, want an error and no token", r)
				}
				var undone bool
				for _, c := range f.scripts.sent() {
					undone = undone || c.script == "undo" && c.args[0] == "b" && c.args[1] == token
				}
				if !undone {
					t.Fatalf("b's grant of %s was not undone: %v", token, f.scripts.names())
				}
				if log := f.storeLog(); !slices.Contains(log, "cancel r "+token) || slices.Contains(log, "confirm r "+token) {
					t.Fatalf("b's token %s: store log %q, want it cancelled and never confirmed", token, log)
				}
				if lm.heldLocked() {
					t.Fatalf("r still held by %s after the undo", lm.holder)
				}
				f.waitLine(t, 0)
				return f
			})
		})
	}
}

// TestHandoffTokensInOrder: the line's tokens reserved ahead are used in
// the order drawn, only above the resource's newest: one drawn before a
// newer token was granted (here, an acquire that found no line when it
// began) is cancelled, never offered, and the handoff waits for a good one
// (the head tries itself).
func TestHandoffTokensInOrder(t *testing.T) {
	bothWays(t, func(t *testing.T, now bool) *fixture {
		f, _ := modelledWay(t, now, nil)
		ctx := context.Background()
		if _, err := f.m.Acquire(ctx, "r", "a", addr, ttl, 0, time.Now()); err != nil {
			t.Fatal(err)
		}
		results := make(chan acquired, 1)
		f.acquireAsync(t, ctx, "b", time.Minute, 1, results)
		f.waitAhead(t, 1)
		f.m.waiting.mu.Lock()
		drawn := f.m.waiting.lines["r"].tokens[0]
		f.m.waiting.mu.Unlock()
		// A newer token confirmed for r since: drawn is too old now.
		newer, _ := f.tokens.NextToken()
		f.tokens.Reserve("r", newer)
		f.tokens.Confirm("r", newer)

		if ok, err := f.release(ctx, "a"); !ok || err != nil {
			t.Fatal(ok, err)
		}
		r := next(t, results)
		if r.err != nil || r.token <= newer {
			t.Fatalf("b after the release: %+v, want a token above the newer %d", r, newer)
		}
		if log := f.storeLog(); !slices.Contains(log, "cancel r "+strconv.FormatUint(drawn, 10)) {
			t.Fatalf("the stale token %d reserved ahead was not cancelled: %q", drawn, log)
		}
		for _, c := range f.scripts.sent() {
			if (c.script == "handoff" && c.args[4] == strconv.FormatUint(drawn, 10)) ||
				(c.script == "acquire" && c.args[2] == strconv.FormatUint(drawn, 10)) {
				t.Fatalf("the stale token %d was offered: %+v", drawn, c)
			}
		}
		return f
	})
}

// TestHandoffTokensCancelled: tokens reserved ahead that no grant used
// are cancelled when the line empties.
func TestHandoffTokensCancelled(t *testing.T) {
	f, _ := modelled(t, nil)
	ctx := context.Background()
	if _, err := f.m.Acquire(ctx, "r", "a", addr, ttl, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Acquire(ctx, "r", "b", addr, ttl, 100*time.Millisecond, time.Now()); err != ErrBusy {
		t.Fatalf("b's wait: %v, want ErrBusy", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var reserved, cancelled []string
		for _, e := range f.storeLog() {
			if tok, ok := strings.CutPrefix(e, "reserve r "); ok {
				reserved = append(reserved, tok)
			}
			if tok, ok := strings.CutPrefix(e, "cancel r "); ok {
				cancelled = append(cancelled, tok)
			}
		}
		slices.Sort(reserved)
		slices.Sort(cancelled)
		if len(reserved) > 1 && slices.Equal(reserved[1:], cancelled) {
			return // the first is a's grant
		}
		if time.Now().After(deadline) {
			t.Fatalf("reserved %v, cancelled %v: the line's tokens were not all cancelled", reserved, cancelled)
		}
		time.Sleep(time.Millisecond)
	}
}

// oneByOne is a TokenStore that reserves one token at a time, as a tier's
// does: lines do not reserve ahead with it.
type oneByOne struct{ TokenStore }

// TestNoReserveAheadInATier: with a store that cannot reserve many tokens
// with one sync (a tier's, where tokens kept ahead would count as issued
// at every change of leader), a line reserves nothing ahead and a release
// wakes the head to try, as before handoffs.
func TestNoReserveAheadInATier(t *testing.T) {
	f, _ := modelled(t, func(o *Options) { o.Store = oneByOne{o.Store} })
	ctx := context.Background()
	if _, err := f.m.Acquire(ctx, "r", "a", addr, ttl, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	results := make(chan acquired, 1)
	f.acquireAsync(t, ctx, "b", time.Minute, 1, results)
	time.Sleep(20 * time.Millisecond)
	if ok, err := f.m.Release(ctx, "r", "a"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if r := next(t, results); r.err != nil || r.who != "b" {
		t.Fatalf("b after a's release: %+v", r)
	}
	for _, c := range f.scripts.sent() {
		if c.script == "handoff" {
			t.Fatalf("a release handed off with a store that does not reserve ahead: %+v", c)
		}
	}
	if log := f.storeLog(); len(log) != 4 { // a's reserve and confirm, b's
		t.Fatalf("store calls %q: want only the two grants' reserve and confirm", log)
	}
}
