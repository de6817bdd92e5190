package fault

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The checker must be able to fail: each test below feeds it a
// hand-written history that breaks one guarantee and asserts the break is
// reported (and, for the good history, that nothing is).

// hist builds a history by hand; times are in milliseconds.
type hist struct{ h *History }

func newHist() *hist { return &hist{h: &History{}} }

func (b *hist) add(client int, kind Kind, res, owner string, token, ttl int64, start, end int64, out Outcome, result int64) *Op {
	op := &Op{ID: len(b.h.Ops), Client: client, Kind: kind, Resource: res, Owner: owner, Token: token, TTL: ttl,
		Start: start * 1e6, End: end * 1e6, Outcome: out, Result: result}
	if end < 0 {
		op.End = Never
		op.ErrAt = start*1e6 + 1
	}
	op.Args = []string{string(kind), res, owner, strconv.FormatInt(token, 10)}
	b.h.Ops = append(b.h.Ops, op)
	return op
}

func (b *hist) acquire(c int, owner string, ttl, start, end int64, out Outcome, tok int64) *Op {
	return b.add(c, Acquire, "r", owner, 0, ttl, start, end, out, tok)
}
func (b *hist) renew(c int, owner string, ttl, start, end int64, out Outcome, tok int64) *Op {
	return b.add(c, Renew, "r", owner, 0, ttl, start, end, out, tok)
}
func (b *hist) release(c int, owner string, start, end int64, out Outcome) *Op {
	res := int64(0)
	if out == OK {
		res = 1
	}
	return b.add(c, Release, "r", owner, 0, 0, start, end, out, res)
}
func (b *hist) check(c int, tok, start, end int64, out Outcome) *Op {
	return b.add(c, Check, "r", "", tok, 0, start, end, out, 0)
}
func (b *hist) exec(c int, tok, start, end int64, out Outcome) *Op {
	return b.add(c, Exec, "r", "", tok, 0, start, end, out, 0)
}
func (b *hist) fault(k FaultKind, start, end int64) {
	b.h.Faults = append(b.h.Faults, Fault{Kind: k, Start: start * 1e6, End: end * 1e6})
}
func (b *hist) snapshot(ops ...*Op) {
	s := Snapshot{Resource: "r", At: 1e12}
	for _, op := range ops {
		s.Items = append(s.Items, strconv.FormatInt(op.Token, 10)+":"+strconv.Itoa(op.ID))
	}
	b.h.Snapshots = append(b.h.Snapshots, s)
}

// expect runs the checker and fails unless exactly the named checks
// reported (each at least once).
func expect(t *testing.T, b *hist, want ...string) Report {
	t.Helper()
	rep := CheckHistory(b.h)
	got := map[string]bool{}
	for _, v := range rep.Violations {
		got[v.Check] = true
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("check %q did not report; violations: %v", w, rep.Violations)
		}
		delete(got, w)
	}
	for g := range got {
		t.Errorf("unexpected violation %q: %v", g, rep.Violations)
	}
	return rep
}

// good is a legal history: A holds, fences, releases; B takes over; A's
// stale token is refused; plus a proxy kill that A's lease survives.
func good() (*hist, map[string]*Op) {
	b := newHist()
	m := map[string]*Op{}
	m["a"] = b.acquire(1, "A", 1000, 0, 1, OK, 10)
	b.fault(ProxyKill, 2, 20)
	m["arenew"] = b.renew(1, "A", 1000, 30, 31, OK, 10)
	m["acheck"] = b.check(1, 10, 32, 33, OK)
	m["aexec"] = b.exec(1, 10, 34, 35, OK)
	m["arel"] = b.release(1, "A", 36, 37, OK)
	m["b"] = b.acquire(2, "B", 1000, 38, 39, OK, 12)
	m["astale"] = b.check(1, 10, 40, 41, Zero)
	m["aexecstale"] = b.exec(1, 10, 42, 43, Stale)
	m["arel2"] = b.release(1, "A", 44, 45, Zero)
	m["bexec"] = b.exec(2, 12, 46, 47, OK)
	m["bnull"] = b.acquire(1, "C", 1000, 48, 49, Null, 0)
	m["brenew"] = b.renew(2, "B", 1000, 50, 51, OK, 12)
	m["brel"] = b.release(2, "B", 52, 53, OK)
	b.snapshot(m["aexec"], m["bexec"])
	return b, m
}

func TestCheckerGoodHistory(t *testing.T) {
	b, _ := good()
	rep := expect(t, b)
	if rep.Linearizability != "ok" || rep.Grants != 2 {
		t.Errorf("linearizability %q grants %d, want ok and 2", rep.Linearizability, rep.Grants)
	}
}

func TestCheckerOverlappingLeases(t *testing.T) {
	b := newHist()
	b.acquire(1, "A", 1000, 0, 1, OK, 10)
	b.acquire(2, "B", 1000, 10, 11, OK, 12) // A's lease runs to 1000ms
	expect(t, b, "lease-overlap")
}

func TestCheckerDataLossExcusesOverlap(t *testing.T) {
	b := newHist()
	b.acquire(1, "A", 1000, 0, 1, OK, 10)
	b.fault(MasterKill, 5, 50)
	b.acquire(2, "B", 1000, 60, 61, OK, 12)
	expect(t, b)
	// ...but not a regressing token.
	b.acquire(3, "C", 1000, 2000, 2001, OK, 11)
	expect(t, b, "token-order", "linearizability")
}

func TestCheckerRegressingToken(t *testing.T) {
	b := newHist()
	b.acquire(1, "A", 100, 0, 1, OK, 10)
	b.release(1, "A", 2, 3, OK)
	b.acquire(2, "B", 100, 4, 5, OK, 7)
	expect(t, b, "token-order", "linearizability")
}

func TestCheckerTokenReused(t *testing.T) {
	b := newHist()
	b.acquire(1, "A", 100, 0, 1, OK, 10)
	b.release(1, "A", 2, 3, OK)
	b.acquire(2, "B", 100, 4, 5, OK, 10)
	expect(t, b, "token-order", "token-owner", "linearizability")
}

func TestCheckerStaleReleaseAnsweredOne(t *testing.T) {
	b := newHist()
	b.acquire(1, "A", 100, 0, 1, OK, 10)
	b.acquire(2, "B", 1000, 200, 201, OK, 12) // A's lease ran out at 100ms
	b.release(1, "A", 300, 301, OK)
	expect(t, b, "stale-release", "linearizability")
}

func TestCheckerStaleExecLanding(t *testing.T) {
	t.Run("answered", func(t *testing.T) {
		b := newHist()
		b.acquire(1, "A", 100, 0, 1, OK, 10)
		b.acquire(2, "B", 1000, 200, 201, OK, 12)
		b.exec(1, 10, 300, 301, OK)
		expect(t, b, "stale-exec", "linearizability")
	})
	t.Run("refused but in the data", func(t *testing.T) {
		b := newHist()
		b.acquire(1, "A", 100, 0, 1, OK, 10)
		b.acquire(2, "B", 1000, 200, 201, OK, 12)
		bx := b.exec(2, 12, 210, 211, OK)
		ax := b.exec(1, 10, 300, 301, Stale)
		b.snapshot(bx, ax)
		expect(t, b, "data-order", "exec-landed", "stale-exec")
	})
	t.Run("reply lost, landed after a newer write", func(t *testing.T) {
		b := newHist()
		b.acquire(1, "A", 100, 0, 1, OK, 10)
		b.acquire(2, "B", 1000, 200, 201, OK, 12)
		bx := b.exec(2, 12, 210, 211, OK)
		ax := b.exec(1, 10, 300, -1, Unknown)
		b.snapshot(bx, ax)
		expect(t, b, "data-order", "stale-exec")
	})
}

func TestCheckerStaleCheckAnsweredOne(t *testing.T) {
	b := newHist()
	b.acquire(1, "A", 100, 0, 1, OK, 10)
	b.acquire(2, "B", 1000, 200, 201, OK, 12)
	b.check(1, 10, 300, 301, OK)
	expect(t, b, "stale-check", "linearizability")
}

func TestCheckerFalseStale(t *testing.T) {
	b := newHist()
	b.acquire(1, "A", 100, 0, 1, OK, 10)
	b.check(1, 10, 3, 4, Zero) // no newer token was ever asked for
	expect(t, b, "false-stale", "linearizability")
}

func TestCheckerGrantWhileReplicaStopped(t *testing.T) {
	b := newHist()
	b.fault(ReplicaStop, 100, 500)
	b.acquire(1, "A", 1000, 200, 300, OK, 10)
	expect(t, b, "replica-stop")
}

func TestCheckerLostGrant(t *testing.T) {
	for _, k := range []FaultKind{ProxyKill, MasterFailover, MasterKillFailover, ClusterFailover, SlotMigration} {
		t.Run(string(k), func(t *testing.T) {
			b := newHist()
			b.acquire(1, "A", 1000, 0, 1, OK, 10)
			b.fault(k, 10, 50)
			b.renew(1, "A", 1000, 60, 61, Null, 0)
			expect(t, b, "lost-grant")
		})
	}
	t.Run("info", func(t *testing.T) {
		b := newHist()
		b.acquire(1, "A", 1000, 0, 1, OK, 10)
		b.fault(ProxyKill, 10, 50)
		op := b.add(3, Info, "r", "", 0, 0, 60, 61, OK, 10)
		op.InfoOwner = ""
		expect(t, b, "lost-grant")
	})
	t.Run("data loss excuses it", func(t *testing.T) {
		b := newHist()
		b.acquire(1, "A", 1000, 0, 1, OK, 10)
		b.fault(RedisFlush, 10, 50)
		b.renew(1, "A", 1000, 60, 61, Null, 0)
		expect(t, b)
	})
}

func TestCheckerRevivedLease(t *testing.T) {
	b := newHist()
	b.acquire(1, "A", 100, 0, 1, OK, 10)
	b.renew(1, "A", 100, 50, 51, OK, 10) // runs out by 151ms at the latest
	b.renew(1, "A", 100, 300, 301, OK, 10)
	expect(t, b, "revived-lease")
	// -NOREPLICAS re-arms on the master: no revival.
	b = newHist()
	b.acquire(1, "A", 100, 0, 1, OK, 10)
	b.renew(1, "A", 100, 50, 251, Refused, 0)
	b.renew(1, "A", 100, 300, 301, OK, 10)
	expect(t, b)
}

// TestCheckerLateLease: a grant or renewal replied after its lease,
// counted from the call, was over (the outside review's replica stopped
// longer than the ttl, or the proxy stopped after reading the request).
func TestCheckerLateLease(t *testing.T) {
	t.Run("grant", func(t *testing.T) {
		b := newHist()
		b.acquire(1, "A", 300, 0, 400, OK, 10)
		expect(t, b, "late-lease")
	})
	t.Run("renewal", func(t *testing.T) {
		b := newHist()
		b.acquire(1, "A", 300, 0, 1, OK, 10)
		b.renew(1, "A", 300, 100, 500, OK, 10)
		expect(t, b, "late-lease")
	})
	t.Run("read before the proxy stopped", func(t *testing.T) {
		b := newHist()
		op := b.acquire(1, "A", 300, 0, 700, OK, 10)
		b.fault(ProxyStop, 50, 650)
		b.h.Faults[0].ReadBefore = []int{op.ID}
		expect(t, b, "late-lease")
	})
	t.Run("maybe unread while the proxy was stopped", func(t *testing.T) {
		b := newHist()
		b.acquire(1, "A", 300, 0, 700, OK, 10)
		b.fault(ProxyStop, 50, 650)
		expect(t, b)
	})
	t.Run("late by no more than the test process's stall", func(t *testing.T) {
		b := newHist()
		b.acquire(1, "A", 150, 0, 502, OK, 10)
		b.h.Stalls = []Stall{{Start: 20e6, End: 450e6}} // 430 ms >= 352 ms late
		expect(t, b)
	})
	t.Run("late by more than the test process's stall", func(t *testing.T) {
		b := newHist()
		b.acquire(1, "A", 150, 0, 502, OK, 10)
		b.h.Stalls = []Stall{{Start: 20e6, End: 300e6}, {Start: 600e6, End: 900e6}} // 280 ms of the op < 352 ms late
		expect(t, b, "late-lease")
	})
	t.Run("after waiting in line", func(t *testing.T) {
		b := newHist()
		op := b.acquire(1, "A", 300, 0, 700, OK, 10)
		op.Args = append(op.Args, "WAIT", "1000")
		expect(t, b)
	})
	t.Run("refused as late", func(t *testing.T) {
		b := newHist()
		b.acquire(1, "A", 300, 0, 700, Late, 0)
		b.acquire(2, "B", 300, 710, 711, OK, 11)
		expect(t, b)
	})
}

// TestCheckerUnissuedToken: the outside review's history. B's acquire has
// an unknown outcome; B's renewal then replies a token that FENCE.CHECK
// calls never issued.
func TestCheckerUnissuedToken(t *testing.T) {
	b := newHist()
	b.acquire(1, "A", 100, 0, 1, OK, 10)
	b.acquire(2, "B", 10000, 200, -1, Unknown, 0)
	b.renew(2, "B", 10000, 300, 301, OK, 12)
	b.check(3, 12, 302, 303, NeverIssued)
	expect(t, b, "unissued-token")
	// The same for a grant's token.
	b = newHist()
	b.acquire(1, "A", 100, 0, 1, OK, 10)
	b.check(3, 10, 2, 3, NeverIssued)
	expect(t, b, "unissued-token", "linearizability")
}

// TestCheckerUnknownGrantEndsHolderEarly: another owner's acquire of
// unknown outcome counts as issued, so the holder's renewal may be null
// while its record (and its release) still stands: neither lost-grant nor
// the model may call that a violation.
func TestCheckerUnknownGrantEndsHolderEarly(t *testing.T) {
	b := newHist()
	b.acquire(1, "A", 1000, 0, 1, OK, 10)
	b.acquire(2, "B", 10000, 10, -1, Unknown, 0)
	b.check(1, 10, 15, 16, Zero)
	b.renew(1, "A", 1000, 20, 21, Null, 0)
	b.release(1, "A", 30, 31, OK)
	expect(t, b)
}

// TestCheckerCrashWithLine: a proxy crash while acquires wait in line may
// make the holder's token stale (the line's tokens reserved ahead count as
// issued), or leave it current (none were reserved); a crash with nobody
// waiting may not make it stale.
func TestCheckerCrashWithLine(t *testing.T) {
	b := newHist()
	b.acquire(1, "A", 10000, 0, 1, OK, 10)
	w := b.acquire(2, "B", 1000, 2, 5, Null, 0)
	w.Args = append(w.Args, "WAIT", "3")
	b.fault(ProxyKill, 8, 9)
	b.check(1, 10, 20, 21, OK)
	b.renew(1, "A", 10000, 22, 23, OK, 10)
	b.release(1, "A", 24, 25, OK)
	expect(t, b)

	for _, waiting := range []bool{true, false} {
		b := newHist()
		b.acquire(1, "A", 10000, 0, 1, OK, 10)
		if waiting {
			w := b.acquire(2, "B", 1000, 2, 5, Null, 0)
			w.Args = append(w.Args, "WAIT", "3")
		}
		b.fault(ProxyKill, 8, 9)
		b.check(1, 10, 20, 21, Zero)
		b.renew(1, "A", 10000, 22, 23, Null, 0)
		b.release(1, "A", 24, 25, OK)
		if waiting {
			expect(t, b)
		} else {
			expect(t, b, "false-stale", "lost-grant", "linearizability")
		}
	}
}

func TestCheckerCounter(t *testing.T) {
	b := newHist()
	b.add(5, Incr, "", "", 0, 0, 0, 1, OK, 1)
	b.add(5, Incr, "", "", 0, 0, 2, 3, OK, 3)
	expect(t, b, "counter")
}

// An INCR whose reply never came may land after later ones (a stopped
// proxy runs it when it wakes): one step of two after it is fine, three
// is not.
func TestCheckerCounterLateUnknown(t *testing.T) {
	b := newHist()
	b.add(5, Incr, "", "", 0, 0, 0, 1, OK, 1)
	b.add(5, Incr, "", "", 0, 0, 2, -1, Unknown, 0)
	b.add(5, Incr, "", "", 0, 0, 10, 11, OK, 2)
	b.add(5, Incr, "", "", 0, 0, 12, 13, OK, 4)
	expect(t, b)
	b.add(5, Incr, "", "", 0, 0, 14, 15, OK, 7)
	expect(t, b, "counter")
}

// TestCheckerClusterScope: a cluster fault on one master (Fault.Scope)
// excuses nothing elsewhere, and the faults that lose nothing excuse
// nothing at all.
func TestCheckerClusterScope(t *testing.T) {
	incr := func(b *hist, key string, start, result int64) {
		op := b.add(5, Incr, "", "", 0, 0, start, start+1, OK, result)
		op.Args = []string{"INCR", key}
	}
	scoped := func(b *hist, k FaultKind, start, end int64, scope ...string) {
		b.fault(k, start, end)
		b.h.Faults[len(b.h.Faults)-1].Scope = scope
	}
	t.Run("grant on another master while a replica is stopped", func(t *testing.T) {
		b := newHist()
		scoped(b, ReplicaStop, 100, 500, "other")
		b.acquire(1, "A", 1000, 200, 300, OK, 10)
		expect(t, b)
		scoped(b, ReplicaStop, 100, 500, "r")
		expect(t, b, "replica-stop")
	})
	t.Run("counter across a kill on its master", func(t *testing.T) {
		b := newHist()
		incr(b, "ctr:1", 0, 1)
		scoped(b, MasterKillFailover, 5, 50, "ctr:1")
		incr(b, "ctr:1", 60, 1) // its last INCR was never replicated
		expect(t, b)
	})
	t.Run("counter across a kill on another master", func(t *testing.T) {
		b := newHist()
		incr(b, "ctr:1", 0, 1)
		scoped(b, MasterKillFailover, 5, 50, "ctr:2")
		incr(b, "ctr:1", 60, 1)
		expect(t, b, "counter")
	})
	for _, k := range []FaultKind{ClusterFailover, SlotMigration} {
		t.Run("counter across a "+string(k), func(t *testing.T) {
			b := newHist()
			incr(b, "ctr:1", 0, 1)
			scoped(b, k, 5, 50, "ctr:1")
			incr(b, "ctr:1", 60, 1)
			expect(t, b, "counter")
		})
	}
	t.Run("lease on another master than a kill", func(t *testing.T) {
		b := newHist()
		b.acquire(1, "A", 1000, 0, 1, OK, 10)
		scoped(b, MasterKillFailover, 10, 50, "other")
		b.renew(1, "A", 1000, 60, 61, Null, 0)
		expect(t, b, "lost-grant")
	})
}

func TestCheckerErrorReplies(t *testing.T) {
	b := newHist()
	op := b.add(1, Info, "r", "", 0, 0, 0, 1, Unknown, 0)
	op.Reply = "-ASK 1234 127.0.0.1:7001\r\n"
	op = b.add(1, Info, "r", "", 0, 0, 2, 3, Unknown, 0)
	op.Reply = "-ERR fenceproxy: internal error serving the lock command (see the proxy's log)\r\n"
	op = b.add(1, Exec, "r", "", 0, 0, 4, 5, Unknown, 0)
	op.Reply = "-READONLY You can't write against a read only replica.\r\n"
	op = b.add(1, Exec, "r", "", 0, 0, 6, 7, Unknown, 0)
	op.Reply = "-ERR Script attempted to access a non local key in a cluster node\r\n"
	expect(t, b, "redirect", "internal-error", "wrong-node")
}

func TestViolationNamesOps(t *testing.T) {
	b := newHist()
	b.acquire(1, "A", 1000, 0, 1, OK, 10)
	b.acquire(2, "B", 1000, 10, 11, OK, 12)
	rep := CheckHistory(b.h)
	if len(rep.Violations) == 0 || !strings.Contains(rep.Violations[0].String(), "acquire r B") {
		t.Fatalf("violation text does not show the ops: %v", rep.Violations)
	}
}

// TestCheckFile checks a history written by a run ($FAULT_HISTORY), to
// inspect or re-check one after changing the checker.
func TestCheckFile(t *testing.T) {
	path := os.Getenv("FAULT_HISTORY")
	if path == "" {
		t.Skip("set FAULT_HISTORY to a history JSON file written by TestFault")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	rep := CheckHistory(&h)
	t.Logf("%s: %d ops, grants=%d linearizability=%s (%v) violations=%d %s", path, len(h.Ops), rep.Grants, rep.Linearizability, time.Since(began).Round(time.Millisecond), len(rep.Violations), rep.ByCheck())
	for i, v := range rep.Violations {
		if i == 20 {
			break
		}
		t.Error(v)
	}
}

// recipeGrant adds a recipe lock's acquire read from its raw reply and
// completed by its holder's LOCK.TOKEN, read from its raw reply too, as
// the workload records them (recipes.go); tokenReply "" is a LOCK.TOKEN
// whose connection failed.
func (b *hist) recipeGrant(rc Recipe, c int, owner string, ttl, start, end int64, reply, tokenReply string) *Op {
	acq := b.add(c, Acquire, "r", owner, 0, ttl, start, end, Unknown, 0)
	acq.Recipe = rc
	acq.Outcome, acq.Result = ClassifyRecipe(rc, Acquire, []byte(reply))
	if acq.Outcome != OK {
		return acq
	}
	tok := b.add(c, TokenOf, "r", owner, 0, 0, end, end+1, Unknown, 0)
	if tokenReply == "" {
		tok.End, tok.ErrAt, tok.Err = Never, tok.Start+1, "connection reset"
	} else {
		tok.Outcome, tok.Result, _ = Classify(TokenOf, []byte(tokenReply))
	}
	grantToken(acq, tok)
	return acq
}

func (b *hist) recipeRelease(rc Recipe, c int, owner string, start, end int64, reply string) *Op {
	op := b.add(c, Release, "r", owner, 0, 0, start, end, Unknown, 0)
	op.Recipe = rc
	op.Outcome, op.Result = ClassifyRecipe(rc, Release, []byte(reply))
	return op
}

// Two recipe locks granted to two holders while the first one's lease is
// certainly on: the checker must see it, for either recipe's replies.
func TestCheckerOverlappingRecipeGrants(t *testing.T) {
	for _, rc := range Recipes {
		t.Run(string(rc), func(t *testing.T) {
			granted := "$-1\r\n" // Redisson: nil is "acquired"
			if rc == SetNX {
				granted = "+OK\r\n"
			}
			b := newHist()
			a := b.recipeGrant(rc, 1, "A", 1000, 0, 1, granted, ":10\r\n")
			c := b.recipeGrant(rc, 2, "B", 1000, 10, 11, granted, ":12\r\n") // A's lease runs to 1000ms
			if a.Outcome != OK || a.Result != 10 || c.Outcome != OK || c.Result != 12 {
				t.Fatalf("recorded %v and %v, want grants with tokens 10 and 12", a, c)
			}
			expect(t, b, "lease-overlap")
		})
	}
}

// A recipe's "held by another" (Redisson's pttl, SET NX's nil) is no
// grant; a grant whose LOCK.TOKEN failed is a grant with a token nobody
// saw; and a legal recipe history reports nothing.
func TestCheckerRecipeHistory(t *testing.T) {
	b := newHist()
	a := b.recipeGrant(Redisson, 1, "A", 1000, 0, 1, "$-1\r\n", ":10\r\n")
	busy := b.recipeGrant(Redisson, 2, "B", 1000, 2, 3, ":997\r\n", "")
	b.exec(1, 10, 4, 5, OK)
	b.recipeRelease(Redisson, 1, "A", 6, 7, ":1\r\n")
	lost := b.recipeGrant(Redisson, 2, "B", 1000, 8, 9, "$-1\r\n", "") // its token is a newer one nobody saw
	b.check(1, 10, 12, 13, Zero)
	b.recipeRelease(Redisson, 2, "B", 14, 15, ":1\r\n")
	b.recipeRelease(Redisson, 1, "A", 16, 17, "$-1\r\n")
	if a.Outcome != OK || busy.Outcome != Null || lost.Outcome != Unknown || !lost.Known() {
		t.Fatalf("recorded %v, %v and %v: want a grant, a refusal and a grant of unknown token", a, busy, lost)
	}
	rep := expect(t, b)
	if rep.Linearizability != "ok" {
		t.Errorf("linearizability %q, want ok", rep.Linearizability)
	}
	if g, unknown := recipeCounts(b.h); g[Redisson] != 1 || unknown != 1 {
		t.Errorf("recipeCounts = %v, %d; want redisson:1 and 1 unknown token", g, unknown)
	}

	// The same with redis-py's replies, and a stale FENCE.EXEC accepted.
	b = newHist()
	b.recipeGrant(SetNX, 1, "A", 1000, 0, 1, "+OK\r\n", ":10\r\n")
	b.recipeRelease(SetNX, 1, "A", 2, 3, ":1\r\n")
	b.recipeGrant(SetNX, 2, "B", 1000, 4, 5, "+OK\r\n", ":11\r\n")
	b.recipeGrant(SetNX, 1, "C", 1000, 6, 7, "$-1\r\n", "")
	b.exec(1, 10, 8, 9, OK)
	expect(t, b, "stale-exec", "linearizability")
}

// recipeRenew adds the Redisson watchdog's renewal of owner's lock, read
// from its raw reply, with the grant's token (RenewToken).
func (b *hist) recipeRenew(c int, owner string, ttl, start, end int64, reply string, token int64) *Op {
	op := b.add(c, Renew, "r", owner, 0, ttl, start, end, Unknown, 0)
	op.Recipe = Redisson
	op.Outcome, op.Result = ClassifyRecipe(Redisson, Renew, []byte(reply))
	if op.Outcome == OK {
		op.Result = token
	}
	return op
}

// The watchdog's renewal is read as a renewal: [1] extends the holder's
// lease, [0] is "not held", -NOREPLICAS refused; one answered [1] after
// the lease certainly ran out revived it, which the checker must see.
func TestCheckerRedissonRenewals(t *testing.T) {
	b := newHist()
	b.recipeGrant(Redisson, 1, "A", 1000, 0, 1, "$-1\r\n", ":10\r\n")
	ok := b.recipeRenew(1, "A", 1000, 500, 501, "*1\r\n:1\r\n", 10)
	refused := b.recipeRenew(1, "A", 1000, 600, 601, "-NOREPLICAS fenceproxy: 0 of 1 required replicas acknowledged the renewal in time; the leases not acknowledged stand as before it, retry\r\n", 10)
	null := b.recipeRenew(1, "A", 1000, 5000, 5001, "*1\r\n:0\r\n", 10)
	if ok.Outcome != OK || ok.Result != 10 || refused.Outcome != Refused || null.Outcome != Null {
		t.Fatalf("recorded %v, %v and %v: want a renewal with token 10, a refusal and not held", ok, refused, null)
	}
	rep := expect(t, b)
	if rep.Linearizability != "ok" {
		t.Errorf("linearizability %q, want ok", rep.Linearizability)
	}

	b = newHist()
	b.recipeGrant(Redisson, 1, "A", 1000, 0, 1, "$-1\r\n", ":10\r\n")
	b.recipeRenew(1, "A", 1000, 5000, 5001, "*1\r\n:1\r\n", 10) // its lease ran out at 1000ms
	expect(t, b, "revived-lease")
}
