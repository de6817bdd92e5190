package fault

import (
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// The linearizability check: per resource, the lock operations of the
// history must be explainable by one sequential order, consistent with
// real time, of this specification of one lock:
//
//	state: the holder (or free) and its token, and the newest token issued
//	       (exact, or only a lower bound after a grant nobody saw the reply of)
//	acquire X -> t   X's own current token again (a re-arm), or a new grant:
//	                 t above the newest; X holds with t. The holder's lease
//	                 may run out at any moment, so a new grant is allowed
//	                 while someone holds (lease-overlap checks time).
//	renew X -> t     X holds with t
//	renew X -> null  X does not hold (if it did, its lease ran out)
//	release X -> 1   X held it; now free
//	release X -> 0   X does not hold (if it did, its lease ran out)
//	FENCE.CHECK t -> 1 / 0 / never issued: t is / is below / is above the newest
//	FENCE.EXEC t -> ran / -STALE / never issued: likewise
//	data loss        the holder is forgotten, the newest token is not
//	fence store lost the newest token becomes a lower bound (the floor: a
//	                 token issued to every resource and to no owner)
//	proxy crash      likewise, if acquires waited in line for the resource
//	with a line      then: the tokens a line reserves ahead of its grants
//	                 count as issued after a crash (locks/handoff.go), so the
//	                 holder of the moment may be called stale from then on
//
// An operation with an unknown outcome may have taken effect or not; an
// acquire may also have left its token counted as issued without taking
// the lock (an outcome the proxy could not know counts as issued, even if
// the lost write found the resource held; or a crash between reserving a
// refused grant's token and cancelling it). The holder then keeps its
// record but not the newest token: its renewal may be answered null while
// its release still finds the record. Ops that cannot change
// the state or constrain it (a null acquire, a refused one, an unknown
// check) are left out. An unknown op's effect is bounded to unknownWindow
// after its client gave up: the proxy runs a request it has read within
// its replica timeout, and a killed proxy runs nothing.
//
// Time is not in the model (leases run out nondeterministically), so this
// check complements, not replaces, lease-overlap and lost-grant.

const unknownWindow = 10 * time.Second

type lockInput struct {
	op     *Op
	wipe   bool
	forget bool // the fence store was lost
	// lineCrash: the proxy was killed with a line for the resource: its
	// tokens reserved ahead may now count as issued, or there were none.
	lineCrash bool
}

type lockState struct {
	holder    string // "" when free
	holderTok int64  // 0 when unknown
	newest    int64
	exact     bool // newest is exact; else a lower bound
}

func lockStep(st, in, _ any) []any {
	s := st.(lockState)
	i := in.(lockInput)
	if i.wipe {
		return []any{lockState{newest: s.newest, exact: s.exact}}
	}
	if i.forget {
		s.exact = false
		return []any{s}
	}
	if i.lineCrash {
		n := s
		n.exact = false
		return []any{s, n}
	}
	op := i.op
	free := lockState{newest: s.newest, exact: s.exact}
	above := func(t int64) bool { return t > s.newest } // exact or lower bound alike
	isNewest := func(t int64) bool { return (s.exact && t == s.newest) || (!s.exact && t > s.newest) }
	below := func(t int64) bool { return t < s.newest || !s.exact }
	switch op.Kind {
	case Acquire:
		switch op.Outcome {
		case OK:
			t := op.Result
			if s.holder == op.Owner && s.holderTok == t {
				return []any{s}
			}
			if above(t) {
				return []any{lockState{holder: op.Owner, holderTok: t, newest: t, exact: true}}
			}
			return nil
		default: // unknown, or refused before a proxy crash
			next := []any{s,
				// granted, its reply lost: the newest token is now one nobody saw
				lockState{holder: op.Owner, newest: s.newest, exact: false},
				// the record was written but its token never recorded (the proxy
				// died before it could): the record is never honoured
				lockState{holder: op.Owner, newest: s.newest, exact: s.exact},
				// its token counted as issued without taking the lock
				lockState{holder: s.holder, holderTok: s.holderTok, newest: s.newest, exact: false}}
			return next
		}
	case Renew:
		if op.Outcome == Null {
			if s.holder == op.Owner {
				if !s.exact {
					// a newer token may have been counted as issued: the
					// record stands, unhonoured, until its lease ends
					return []any{free, s}
				}
				return []any{free}
			}
			return []any{s}
		}
		t := op.Result
		if s.holder != op.Owner {
			return nil
		}
		if s.holderTok == t {
			return []any{s}
		}
		if s.holderTok == 0 && above(t) {
			// X's grant whose reply was lost. (The proxy renews only the
			// newest token issued; the model keeps the newest a lower
			// bound, which is looser and still sound.)
			n := s
			n.holderTok = t
			return []any{n}
		}
		return nil
	case Release:
		switch op.Outcome {
		case OK:
			if s.holder == op.Owner {
				return []any{free}
			}
			return nil
		case Zero:
			if s.holder == op.Owner {
				return []any{free}
			}
			return []any{s}
		default:
			if s.holder == op.Owner {
				return []any{s, free}
			}
			return []any{s}
		}
	case Check, Exec:
		t := op.Token
		switch op.Outcome {
		case OK:
			if !isNewest(t) {
				return nil
			}
			if !s.exact {
				n := s
				n.newest, n.exact = t, true
				if n.holder != "" && n.holderTok == 0 {
					n.holderTok = t
				}
				return []any{n}
			}
			return []any{s}
		case Zero, Stale:
			if below(t) {
				return []any{s}
			}
			return nil
		case NeverIssued:
			if above(t) {
				return []any{s}
			}
			return nil
		}
	}
	return []any{s}
}

// lockModel is the porcupine model of one resource's lock.
var lockModel = (&porcupine.NondeterministicModel{
	Init:  func() []any { return []any{lockState{exact: true}} },
	Step:  lockStep,
	Equal: func(a, b any) bool { return a.(lockState) == b.(lockState) },
	DescribeOperation: func(in, _ any) string {
		i := in.(lockInput)
		switch {
		case i.wipe:
			return "data loss"
		case i.forget:
			return "fence store lost"
		case i.lineCrash:
			return "proxy crash with a line"
		}
		return i.op.String()
	},
	DescribeState: func(st any) string {
		s := st.(lockState)
		return fmt.Sprintf("holder=%q/%d newest=%d exact=%v", s.holder, s.holderTok, s.newest, s.exact)
	},
}).ToModel()

// modelOps returns the porcupine history of resource r.
func (c *checker) modelOps(r string) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range c.byRes[r] {
		keep := false
		switch op.Kind {
		case Acquire:
			keep = op.Outcome == OK || op.Outcome == Unknown || (op.refused() && c.proxyCrashAfter(op.Start))
		case Renew:
			keep = op.Outcome == OK || op.Outcome == Null
		case Release:
			keep = true
		case Check:
			keep = op.Outcome == OK || op.Outcome == Zero || op.Outcome == NeverIssued
		case Exec:
			keep = op.Outcome == OK || op.Outcome == Stale || op.Outcome == NeverIssued
		}
		if !keep {
			continue
		}
		ret := op.End
		if !op.Known() {
			ret = Never
			if op.ErrAt > 0 {
				ret = op.ErrAt + int64(unknownWindow)
			}
		}
		in := lockInput{op: op}
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: in, Call: op.Start, Output: op.Outcome, Return: ret})
	}
	for _, f := range c.faults {
		if f.Kind.LosesData() && f.Hits(r) {
			out = append(out, porcupine.Operation{ClientId: -1, Input: lockInput{wipe: true}, Call: f.Start, Return: f.End})
		}
		// A delayed-write fault is not a loss of the fence store: the
		// dead run's heartbeat that its hold let reach Redis after the
		// restart is not taken for a live copy (sent before the restarted
		// process began; TestKilledProxysLateHeartbeat), so the floor stays
		// where it was and the grant made before the kill is still the
		// newest token. The kill inside the fault is a ProxyKill of its own.
		if f.Kind.LosesFenceStore() {
			out = append(out, porcupine.Operation{ClientId: -1, Input: lockInput{forget: true}, Call: f.Start, Return: f.End})
		} else if c.lineCrash(r, f.Start, f.End) {
			out = append(out, porcupine.Operation{ClientId: -1, Input: lockInput{lineCrash: true}, Call: f.Start, Return: f.End})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}

// lineSlack is how long before a crash a line that emptied may still have
// had tokens reserved ahead: a refill under way when it emptied cancels
// its tokens once their fsync is done.
const lineSlack = time.Second

// lineAt reports whether acquires may have waited in line for r at some
// time in [from, to]: a LOCK.ACQUIRE ... WAIT in flight then.
func (c *checker) lineAt(r string, from, to int64) bool {
	for _, op := range c.byRes[r] {
		if op.Kind == Acquire && op.waited() && op.Start < to && (op.End > from || !op.Known()) {
			return true
		}
	}
	return false
}

// linearizationBudget bounds the porcupine search over all resources.
var linearizationBudget = 20 * time.Second

// linearizability runs porcupine per resource; an illegal history is a
// violation, a search that runs out of time is reported as "unknown".
func (c *checker) linearizability(rep *Report) string {
	res := make([]string, 0, len(c.byRes))
	for r := range c.byRes {
		res = append(res, r)
	}
	sort.Strings(res)
	result := "ok"
	deadline := time.Now().Add(linearizationBudget)
	for _, r := range res {
		ops := c.modelOps(r)
		left := time.Until(deadline)
		if left <= 0 {
			return "unknown"
		}
		switch porcupine.CheckOperationsTimeout(lockModel, ops, left) {
		case porcupine.Illegal:
			rep.Violations = append(rep.Violations, Violation{Check: "linearizability", Msg: fmt.Sprintf("%q: the lock ops fit no sequential order of the lock spec (%d ops; see the history file)", r, len(ops))})
			result = "illegal"
		case porcupine.Unknown:
			if result == "ok" {
				result = "unknown"
			}
			unknown := 0
			for _, o := range ops {
				if in := o.Input.(lockInput); in.op != nil && in.op.Outcome == Unknown {
					unknown++
				}
			}
			rep.LinearizabilityNotes = append(rep.LinearizabilityNotes, fmt.Sprintf("%s: search timed out (%d ops, %d with unknown outcome)", r, len(ops), unknown))
		}
	}
	return result
}
