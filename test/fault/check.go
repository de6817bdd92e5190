package fault

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Violation is one broken guarantee, with the ops that show it.
type Violation struct {
	Check string // the name of the check, e.g. "token-order"
	Msg   string
	Ops   []*Op
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", v.Check, v.Msg)
	for _, op := range v.Ops {
		fmt.Fprintf(&b, "\n\t%s", op)
	}
	return b.String()
}

// Report is what Check found.
type Report struct {
	Violations []Violation
	Grants     int // acquires answered with a token
	// StaleRefused counts FENCE.CHECK answered 0 and FENCE.EXEC answered
	// -STALE: how often the stale-holder path was exercised.
	StaleRefused int
	// Survived counts renewals answered with the token, and LOCK.INFO
	// naming the owner, of grants replied before a proxy kill -9 or a
	// failover and called after it: how often lost-grant was exercised
	// with a positive outcome.
	Survived int
	// Linearizability is the porcupine result over the lock model: "ok",
	// "illegal" (also a violation), or "unknown" (the search timed out).
	Linearizability      string
	LinearizabilityNotes []string // which resources timed out
	// LeaseUsed is the largest share of its lease that a grant or renewal
	// checked by late-lease had used up, by the client's count, when its
	// reply arrived (above 1 is a violation).
	LeaseUsed float64
}

// ByCheck counts the violations per check, e.g. "lease-overlap=3 stale-release=1".
func (r Report) ByCheck() string {
	n := map[string]int{}
	for _, v := range r.Violations {
		n[v.Check]++
	}
	names := make([]string, 0, len(n))
	for k := range n {
		names = append(names, k)
	}
	sort.Strings(names)
	for i, k := range names {
		names[i] = fmt.Sprintf("%s=%d", k, n[k])
	}
	return strings.Join(names, " ")
}

// Lease is the interval in which an owner certainly held a resource.
type Lease struct {
	Grant      *Op
	Begin, End int64
}

// CheckHistory runs every check over h. Each check is described where it is
// implemented; in short:
//
//	token-order       a grant replied before another started has the smaller token (same owner: equal allowed)
//	token-owner       one token, one owner
//	info-token        LOCK.INFO never reports a newest token below one already replied
//	lease-overlap     two owners' certain lease intervals never overlap
//	stale-check       FENCE.CHECK answers 1 only if no bigger token was replied before it started
//	stale-exec        FENCE.EXEC runs only if no bigger token was replied before it started
//	false-stale       FENCE.CHECK 0 / FENCE.EXEC -STALE only if some grant could have issued a bigger token
//	unissued-token    a token already replied (by an acquire or a renewal) is never called "never issued"
//	late-lease        a grant or renewal is replied while its lease, counted from the call, is still on
//	stale-release     a release answered 1 never frees a lease another owner certainly held
//	lost-grant        while an owner certainly holds a lease, its RENEW is not null, its RELEASE not 0, and LOCK.INFO shows it
//	revived-lease     a RENEW that starts after the lease certainly ran out is answered null
//	replica-stop      no grant or renewal is acknowledged while its master's only replica is stopped
//	data-order        the tokens in a fenced data list never go backwards
//	exec-landed       a FENCE.EXEC answered -STALE (or never issued) never appears in the data
//	delayed-write     a FENCE.EXEC held on its way to Redis never lands once a newer token was granted before it arrived
//	counter           INCR of a client's own counter rises by one when nothing could have lost or repeated it
//	redirect          no reply is -MOVED or -ASK (in front of a cluster a client sees one node)
//	internal-error    no reply is the proxy's fallback for a failure it did not expect
//	wrong-node        no reply is Redis's refusal of a command that reached a replica or a master without its slot
//	linearizability   per resource, the lock ops fit a sequential lock spec (model.go)
//
// Leases are certain from the grant's reply until call start + ttl (the
// server's lease began no earlier than the call), extended by each
// successful renewal (renew start + ttl), cut at the start of the owner's
// first release that was answered 1 or whose outcome is unknown, and cut
// at the start of any fault that may lose Redis data (Redis restarted
// empty, FLUSHALL, the master killed with no replica promoted): Redis
// forgetting an owner record is the documented failure mode the contract
// does not cover for leases (tokens still rise across it, which
// token-order checks). A master failover that promotes the replica which
// acknowledged the grants is not a data-loss fault: grants must survive it,
// whether Sentinel or Redis Cluster promotes it; so must they a CLUSTER
// FAILOVER and their slot's migration to another master. A cluster fault
// that hit one master or one slot (Fault.Scope) counts only for the
// resources there: grants on the other masters are held to every check
// meanwhile.
func CheckHistory(h *History) Report {
	c := newChecker(h)
	c.tokenOrder()
	c.infoTokens()
	c.leaseOverlap()
	c.staleFence()
	c.falseStale()
	c.lateLease()
	c.staleRelease()
	c.lostGrant()
	c.revivedLease()
	c.replicaStop()
	c.redisPartition()
	c.dataOrder()
	c.delayedWrite()
	c.counters()
	c.errorReplies()
	rep := Report{Violations: c.violations, Grants: c.grants, LeaseUsed: c.leaseUsed}
	rep.StaleRefused, rep.Survived = c.exercised()
	rep.Linearizability = c.linearizability(&rep)
	return rep
}

type checker struct {
	h          *History
	ops        []*Op            // by start
	byRes      map[string][]*Op // by start
	grants     int
	grantsBy   map[string][]*Op // acquires answered with a token, by end (reply time)
	maxBefore  map[string][]int64
	leases     map[string][]Lease // per resource
	issuers    map[string]issuerIndex
	faults     []Fault
	violations []Violation
	leaseUsed  float64
}

func newChecker(h *History) *checker {
	c := &checker{h: h, byRes: map[string][]*Op{}, grantsBy: map[string][]*Op{}, maxBefore: map[string][]int64{}, leases: map[string][]Lease{}}
	c.ops = append(c.ops, h.Ops...)
	sort.SliceStable(c.ops, func(i, j int) bool { return c.ops[i].Start < c.ops[j].Start })
	c.faults = h.sortedFaults()
	for _, op := range c.ops {
		if op.Resource == "" {
			continue
		}
		c.byRes[op.Resource] = append(c.byRes[op.Resource], op)
		if op.Kind == Acquire && op.Outcome == OK {
			c.grants++
			c.grantsBy[op.Resource] = append(c.grantsBy[op.Resource], op)
		}
	}
	for r, gs := range c.grantsBy {
		sort.SliceStable(gs, func(i, j int) bool { return gs[i].End < gs[j].End })
		mx := make([]int64, len(gs))
		var m int64
		for i, g := range gs {
			m = max(m, g.Result)
			mx[i] = m
		}
		c.maxBefore[r] = mx
	}
	for r := range c.byRes {
		c.leases[r] = c.computeLeases(r)
	}
	c.indexIssuers()
	return c
}

func (c *checker) fail(check string, ops []*Op, format string, args ...any) {
	c.violations = append(c.violations, Violation{Check: check, Msg: fmt.Sprintf(format, args...), Ops: ops})
}

// newestBefore returns the biggest token replied for r by a grant whose
// reply arrived strictly before t, and that grant (nil if none).
func (c *checker) newestBefore(r string, t int64) (int64, *Op) {
	gs := c.grantsBy[r]
	i := sort.Search(len(gs), func(i int) bool { return gs[i].End >= t })
	if i == 0 {
		return 0, nil
	}
	m := c.maxBefore[r][i-1]
	for j := i - 1; j >= 0; j-- {
		if gs[j].Result == m {
			return m, gs[j]
		}
	}
	return m, nil
}

// exercised counts what Report.StaleRefused and Report.Survived describe.
func (c *checker) exercised() (stale, survived int) {
	for r, ops := range c.byRes {
		for _, op := range ops {
			if op.Outcome == Zero && op.Kind == Check || op.Outcome == Stale {
				stale++
			}
			var owner string
			switch {
			case op.Kind == Renew && op.Outcome == OK:
				owner = op.Owner
			case op.Kind == Info && op.Outcome == OK && op.InfoOwner != "":
				owner = op.InfoOwner
			default:
				continue
			}
			for _, l := range c.leases[r] {
				if l.Grant.Owner != owner {
					continue
				}
				for _, f := range c.faults {
					if (f.Kind == ProxyKill || f.Kind.MovesMaster() && f.Hits(r)) && l.Grant.End < f.Start && f.End < op.Start {
						survived++
						break
					}
				}
				break
			}
		}
	}
	return stale, survived
}

// tokenOrder: guarantee 1 in real-time order. A grant whose reply arrived
// before another grant's call started must carry the smaller token, unless
// both went to the same owner with the same token (a retry re-arming it).
// Across every fault, data loss included.
func (c *checker) tokenOrder() {
	owners := map[string]map[int64]*Op{}
	for r, ops := range c.byRes {
		owners[r] = map[int64]*Op{}
		for _, g := range ops {
			if g.Kind != Acquire || g.Outcome != OK {
				continue
			}
			if g.Result <= 0 {
				c.fail("token-order", []*Op{g}, "%q: token %d is not positive", r, g.Result)
				continue
			}
			if prev, ok := owners[r][g.Result]; ok && prev.Owner != g.Owner {
				c.fail("token-owner", []*Op{prev, g}, "%q: token %d granted to two owners, %q and %q", r, g.Result, prev.Owner, g.Owner)
			} else if !ok {
				owners[r][g.Result] = g
			}
			m, by := c.newestBefore(r, g.Start)
			switch {
			case m > g.Result:
				c.fail("token-order", []*Op{by, g}, "%q: token %d granted after token %d had been replied", r, g.Result, m)
			case m == g.Result && by != nil && by.Owner != g.Owner:
				c.fail("token-order", []*Op{by, g}, "%q: token %d granted again to another owner", r, m)
			}
		}
	}
}

// infoTokens: LOCK.INFO's newest token never falls below a token already
// replied when it was called.
func (c *checker) infoTokens() {
	for r, ops := range c.byRes {
		for _, op := range ops {
			if op.Kind != Info || op.Outcome != OK {
				continue
			}
			if m, by := c.newestBefore(r, op.Start); m > op.Result {
				c.fail("info-token", []*Op{by, op}, "%q: LOCK.INFO reports newest token %d after token %d was replied", r, op.Result, m)
			}
		}
	}
}

// slack is the tolerance for comparing the test's monotonic clock with
// Redis's millisecond expiry clock: 2ms plus 0.2% of the lease (NTP may
// slew the wall clock Redis uses).
func slack(ttlMs int64) int64 { return 2e6 + ttlMs*1e6/500 }

// computeLeases returns the certain lease of every grant on r (see CheckHistory).
func (c *checker) computeLeases(r string) []Lease {
	var out []Lease
	ops := c.byRes[r]
	byOwner := map[string][]*Op{}
	for _, o := range ops {
		byOwner[o.Owner] = append(byOwner[o.Owner], o)
	}
	for _, g := range ops {
		if g.Kind != Acquire || g.Outcome != OK {
			continue
		}
		end := g.Start + g.TTL*1e6
		cut := Never
		for _, o := range byOwner[g.Owner] {
			if o.Start < g.Start || o == g {
				continue
			}
			switch {
			case (o.Kind == Renew || o.Kind == Acquire) && o.Outcome == OK && o.Result == g.Result:
				end = max(end, o.Start+o.TTL*1e6)
			case o.Kind == Release && (o.Outcome == OK || o.Outcome == Unknown):
				cut = min(cut, o.Start)
			}
		}
		for _, f := range c.faults {
			if (f.Kind.LosesData() || f.Kind.LosesFenceStore()) && f.End >= g.Start && f.Hits(r) {
				cut = min(cut, f.Start)
			}
		}
		end = min(end, cut)
		if end > g.End {
			out = append(out, Lease{Grant: g, Begin: g.End, End: end})
		}
	}
	return out
}

// leaseOverlap: no two owners' certain leases on one resource overlap by
// more than the clock slack.
func (c *checker) leaseOverlap() {
	for r, ls := range c.leases {
		sorted := append([]Lease(nil), ls...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].Begin < sorted[j].Begin })
		for i, a := range sorted {
			for _, b := range sorted[i+1:] {
				if b.Begin >= a.End {
					break
				}
				if a.Grant.Owner == b.Grant.Owner {
					continue
				}
				over := min(a.End, b.End) - b.Begin
				if over > slack(max(a.Grant.TTL, b.Grant.TTL)) {
					c.fail("lease-overlap", []*Op{a.Grant, b.Grant}, "%q: %q (token %d) certainly held it until %.3fms, %q (token %d) from %.3fms: %.3fms of overlap",
						r, a.Grant.Owner, a.Grant.Result, ms(a.End), b.Grant.Owner, b.Grant.Result, ms(b.Begin), ms(over))
				}
			}
		}
	}
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// staleFence: a FENCE.CHECK answered 1, or a FENCE.EXEC that ran, with a
// token older than one replied before it started (the stale holder is
// caught: guarantee of fencing).
func (c *checker) staleFence() {
	for r, ops := range c.byRes {
		for _, op := range ops {
			if op.Outcome != OK || (op.Kind != Check && op.Kind != Exec) {
				continue
			}
			if m, by := c.newestBefore(r, op.Start); m > op.Token {
				name := "stale-check"
				if op.Kind == Exec {
					name = "stale-exec"
				}
				c.fail(name, []*Op{by, op}, "%q: token %d accepted after token %d was replied", r, op.Token, m)
			}
		}
	}
}

// falseStale: FENCE.CHECK 0 and FENCE.EXEC -STALE claim a newer token was
// issued; some acquire that started before must have been able to issue it
// (answered a bigger token, or with an unknown outcome, or -NOREPLICAS
// before a proxy crash, which may leave its reserved token counted as
// issued). And guarantee 5: a token a reply carried, of a grant or a
// renewal (which must only ever name a token the fence store has issued),
// is never "never issued" afterwards (unissued-token).
func (c *checker) falseStale() {
	for r, ops := range c.byRes {
		var replied []*Op
		for _, o := range ops {
			if (o.Kind == Acquire || o.Kind == Renew) && o.Outcome == OK {
				replied = append(replied, o)
			}
		}
		for _, op := range ops {
			if op.Kind != Check && op.Kind != Exec {
				continue
			}
			if op.Outcome == NeverIssued {
				for _, g := range replied {
					if g.Result == op.Token && g.End < op.Start {
						c.fail("unissued-token", []*Op{g, op}, "%q: token %d was replied to a %s, then called never issued", r, op.Token, g.Kind)
						break
					}
				}
				continue
			}
			if op.Outcome != Zero && op.Outcome != Stale {
				continue
			}
			possible := c.couldIssue(r, op.Token, op.End)
			if !possible {
				c.fail("false-stale", []*Op{op}, "%q: token %d called stale, but no acquire could have issued a newer one", r, op.Token)
			}
		}
	}
}

// lateLease: guarantee 5, no reply promises a lease that is over. A
// grant or a renewal answered with a token must arrive while its lease,
// counted from the call's start as its client counts it, is still on:
// End <= Start + ttl. fenceproxy counts from when it read the request and
// replies only while --lease-safety-margin of the lease is left, which
// covers the loopback's own delays on either side. Left out: an acquire
// with WAIT, whose lease runs from the attempt that granted it, not from
// the call; and an op in flight across a proxy stop that the stopped proxy
// may not have read (its bytes waited in the kernel, and its lease began
// only when they were read): the fault lists in ReadBefore the ops it
// certainly had read, and those are held to the rule. A reply late by no
// more than the test process's own stalls during the op (History.Stalls)
// is excused: the stall, not the proxy, may have made it late.
func (c *checker) lateLease() {
	readBefore := map[int]bool{}
	for _, f := range c.faults {
		for _, id := range f.ReadBefore {
			readBefore[id] = true
		}
	}
	for _, op := range c.ops {
		if (op.Kind != Acquire && op.Kind != Renew) || op.Outcome != OK || op.TTL <= 0 || (op.Kind == Acquire && op.waited()) {
			continue
		}
		if !readBefore[op.ID] && c.proxyStopDuring(op.Start, op.End) {
			continue
		}
		c.leaseUsed = max(c.leaseUsed, float64(op.End-op.Start)/float64(op.TTL*1e6))
		if over := op.End - (op.Start + op.TTL*1e6); over > 0 && over > c.h.stalledDuring(op.Start, op.End) {
			c.fail("late-lease", []*Op{op}, "%q: token %d replied %.3fms after its %dms lease, counted from the call, was over",
				op.Resource, op.Result, ms(over), op.TTL)
		}
	}
}

// proxyStopDuring reports whether a proxy stop overlapped [s, e].
func (c *checker) proxyStopDuring(s, e int64) bool {
	for _, f := range c.faults {
		if f.Kind == ProxyStop && f.Start <= e && f.End >= s {
			return true
		}
	}
	return false
}

// couldIssue reports whether an acquire of r that started by t could have
// issued a token above tok.
func (c *checker) couldIssue(r string, tok, t int64) bool {
	for _, f := range c.faults {
		if f.Kind.LosesFenceStore() && f.Start < t {
			return true // its floor: a token above all, issued to every resource
		}
	}
	if c.lineCrash(r, 0, t) {
		return true // the line's tokens reserved ahead
	}
	ix := c.issuers[r]
	i := sort.Search(len(ix.start), func(i int) bool { return ix.start[i] > t })
	if i == 0 {
		return false
	}
	return ix.maxTok[i-1] > tok || ix.anyUnknown[i-1]
}

// issuerIndex lists the acquires of one resource by start, with running
// maxima: the biggest token replied, and whether any could have issued a
// token nobody saw.
type issuerIndex struct {
	start      []int64
	maxTok     []int64
	anyUnknown []bool
}

func (c *checker) indexIssuers() {
	c.issuers = map[string]issuerIndex{}
	for r, ops := range c.byRes {
		var ix issuerIndex
		var m int64
		unk := false
		for _, a := range ops {
			if a.Kind != Acquire {
				continue
			}
			if a.Outcome == OK {
				m = max(m, a.Result)
			}
			if a.Outcome == Unknown || (a.refused() && c.proxyCrashAfter(a.Start)) {
				unk = true
			}
			ix.start = append(ix.start, a.Start)
			ix.maxTok = append(ix.maxTok, m)
			ix.anyUnknown = append(ix.anyUnknown, unk)
		}
		c.issuers[r] = ix
	}
}

func (c *checker) proxyCrashAfter(t int64) bool {
	for _, f := range c.faults {
		if f.Kind.KillsProxy() && f.End >= t {
			return true
		}
	}
	return false
}

// heldThroughout returns a lease of r held by owner (or, with other set,
// by any owner but owner) for the whole of [s, e].
func (c *checker) heldThroughout(r, owner string, other bool, s, e int64) *Lease {
	for i := range c.leases[r] {
		l := &c.leases[r][i]
		if (l.Grant.Owner == owner) == other {
			continue
		}
		if l.Begin <= s && e <= l.End {
			return l
		}
	}
	return nil
}

// staleRelease: guarantee 3. A release answered 1 while another owner
// certainly held the lease for the whole of the release's call freed (or
// claimed to free) that owner's lease.
func (c *checker) staleRelease() {
	for r, ops := range c.byRes {
		for _, op := range ops {
			if op.Kind != Release || op.Outcome != OK {
				continue
			}
			if l := c.heldThroughout(r, op.Owner, true, op.Start, op.End); l != nil {
				c.fail("stale-release", []*Op{l.Grant, op}, "%q: %q's release answered 1 while %q (token %d) held it", r, op.Owner, l.Grant.Owner, l.Grant.Result)
			}
		}
	}
}

// lostGrant: an acknowledged grant is not lost while Redis keeps its data
// (proxy kill -9 and failover to the acknowledging replica included): while
// the owner certainly holds the lease for the whole call, its RENEW is not
// null, its RELEASE not 0, and LOCK.INFO names it. (A RENEW may be null
// after another owner's acquire of unknown outcome: see
// unknownGrantOfOther.)
func (c *checker) lostGrant() {
	for r, ops := range c.byRes {
		for _, op := range ops {
			if !op.Known() {
				continue
			}
			switch {
			case op.Kind == Renew && op.Outcome == Null, op.Kind == Release && op.Outcome == Zero:
				if l := c.heldThroughout(r, op.Owner, false, op.Start, op.End); l != nil && !(op.Kind == Renew && (c.unknownGrantOfOther(r, op.Owner, l.Begin, op.End) || c.lineCrash(r, l.Begin, op.End))) {
					c.fail("lost-grant", []*Op{l.Grant, op}, "%q: %q's lease (token %d, certain until %.3fms) was not found", r, op.Owner, l.Grant.Result, ms(l.End))
				}
			case op.Kind == Info && op.Outcome == OK:
				for i := range c.leases[r] {
					l := &c.leases[r][i]
					if l.Begin <= op.Start && op.End <= l.End && l.Grant.Owner != op.InfoOwner {
						c.fail("lost-grant", []*Op{l.Grant, op}, "%q: LOCK.INFO names %q while %q (token %d) certainly held it", r, op.InfoOwner, l.Grant.Owner, l.Grant.Result)
					}
				}
			}
		}
	}
}

// lineCrash reports whether fenceproxy was killed within [s, e] while
// acquires waited in line for r (or just after the line emptied): the
// tokens the line reserved ahead of its grants then count as issued, and
// the holder of the moment may be called stale (locks/handoff.go).
func (c *checker) lineCrash(r string, s, e int64) bool {
	for _, f := range c.faults {
		if f.Kind.KillsProxy() && f.Start <= e && f.End >= s && c.lineAt(r, f.Start-int64(lineSlack), f.End) {
			return true
		}
	}
	return false
}

// unknownGrantOfOther reports whether an acquire of r by another owner
// than owner, whose outcome its client was told is unknown, may have taken
// effect within [s, e]. Its token counts as issued (guarantee 5) even if
// it found r held: the holder's token is then no longer the newest, and
// its renewal is answered null while its record still stands.
func (c *checker) unknownGrantOfOther(r, owner string, s, e int64) bool {
	for _, o := range c.byRes[r] {
		if o.Kind != Acquire || o.Owner == owner || o.Outcome != Unknown || o.Start > e {
			continue
		}
		if o.ErrAt == 0 || o.ErrAt+int64(unknownWindow) >= s {
			return true
		}
	}
	return false
}

// revivedLease: an expired lease is never revived. A lease can last no
// longer than ttl after the reply of the last acquire or renewal of its
// owner that may have re-armed it (answered with the token, -NOREPLICAS,
// which leaves the re-arm on the master, or with an unknown outcome,
// bounded like the model's). A RENEW answered with a token that started
// later (plus the clock slack) revived it.
func (c *checker) revivedLease() {
	for _, ops := range c.byRes {
		byOwner := map[string][]*Op{}
		for _, o := range ops {
			if o.Owner != "" {
				byOwner[o.Owner] = append(byOwner[o.Owner], o)
			}
		}
		for _, own := range byOwner {
			var bound int64 // the latest the lease can have lasted to, so far
			for _, o := range own {
				if o.Kind == Renew && o.Outcome == OK && bound > 0 && o.Start > bound+slack(o.TTL) {
					c.fail("revived-lease", []*Op{o}, "%q: %q's lease ran out by %.3fms at the latest, and this renewal revived it", o.Resource, o.Owner, ms(bound))
				}
				if (o.Kind != Acquire && o.Kind != Renew) || (o.Outcome != OK && !o.refused() && o.Outcome != Unknown) {
					continue
				}
				end := o.End
				if !o.Known() {
					end = Never
					if o.ErrAt > 0 {
						end = o.ErrAt + int64(unknownWindow)
					}
				}
				if end == Never {
					bound = Never - int64(1e12) // no bound
					continue
				}
				bound = max(bound, end+o.TTL*1e6)
			}
		}
	}
}

// replicaStop: with --min-replicas 1 and the one replica stopped (a
// replica-stop, or a lock-conn-kill, which stops it too), no acquire or
// renewal that started after SIGSTOP and was answered before SIGCONT can
// carry a token: nothing could acknowledge it. In a cluster this holds for
// the resources of the stopped replica's master (the fault's scope).
func (c *checker) replicaStop() {
	for _, f := range c.faults {
		if f.Kind != ReplicaStop && f.Kind != LockConnKill {
			continue
		}
		for _, op := range c.ops {
			if (op.Kind == Acquire || op.Kind == Renew) && op.Outcome == OK && op.Start > f.Start && op.End < f.End && f.Hits(op.Resource) {
				c.fail("replica-stop", []*Op{op}, "answered with a token while the replica was stopped (%s)", f)
			}
		}
	}
}

// dataOrder: guarantee of FENCE.EXEC. Each fenced write appends
// "token:op-id" to the resource's data list; read straight from Redis the
// tokens never go backwards, no write refused as stale appears, and no
// write appears whose token was older than one replied before it started
// (whatever its own reply, which may have been lost).
func (c *checker) dataOrder() {
	byID := map[int]*Op{}
	for _, op := range c.h.Ops {
		byID[op.ID] = op
	}
	for _, s := range c.h.Snapshots {
		var prevTok int64
		var prevOp *Op
		for i, item := range s.Items {
			tokS, idS, ok := strings.Cut(item, ":")
			tok, err1 := strconv.ParseInt(tokS, 10, 64)
			id, err2 := strconv.Atoi(idS)
			op := byID[id]
			if !ok || err1 != nil || err2 != nil || op == nil || op.Kind != Exec || op.Token != tok || op.Resource != s.Resource {
				c.fail("data-order", nil, "%q: item %d %q of the data list matches no FENCE.EXEC of the history", s.Resource, i, item)
				continue
			}
			if tok < prevTok {
				c.fail("data-order", []*Op{prevOp, op}, "%q: data list (read at %.3fms) has token %d after token %d", s.Resource, ms(s.At), tok, prevTok)
			}
			if op.Outcome == Stale || op.Outcome == NeverIssued {
				c.fail("exec-landed", []*Op{op}, "%q: a FENCE.EXEC answered %s ran anyway", s.Resource, op.Outcome)
			}
			if m, by := c.newestBefore(s.Resource, op.Start); m > tok && op.Outcome != OK { // OK ones: stale-exec
				c.fail("stale-exec", []*Op{by, op}, "%q: a FENCE.EXEC with token %d landed although token %d was replied before it started", s.Resource, tok, m)
			}
			prevTok, prevOp = tok, op
		}
	}
}

// counters: each data client INCRs its own counter; the value rises by one
// from one INCR to the next unless the earlier or a later one between had
// an unknown outcome, or a fault that may lose Redis writes on the
// counter's master (data loss, or a failover after a kill: INCR is not
// replicated synchronously) came in between. A CLUSTER FAILOVER and a slot
// migration lose nothing, so a counter must rise by one across them. An
// INCR of unknown outcome may land at any time after it started, also
// after later INCRs (its bytes waited in a stopped proxy's socket past the
// client's timeout): each such one before lets a later step be one bigger.
func (c *checker) counters() {
	last := map[int]*Op{}
	unknown := map[int]int64{} // per client: INCRs of unknown outcome so far
	for _, op := range c.ops {
		if op.Kind != Incr {
			continue
		}
		prev := last[op.Client]
		last[op.Client] = op
		if op.Outcome == Unknown {
			unknown[op.Client]++
		}
		if prev == nil || prev.Outcome != OK || op.Outcome != OK {
			continue
		}
		if step := op.Result - prev.Result; step > 1 && step <= 1+unknown[op.Client] {
			continue
		}
		lossy := false
		for _, f := range c.faults {
			if f.Kind.LosesUnreplicated() && f.Hits(counterKey(op)) && f.Start <= op.End && f.End >= prev.Start {
				lossy = true
			}
		}
		if !lossy && op.Result != prev.Result+1 {
			c.fail("counter", []*Op{prev, op}, "INCR went from %d to %d", prev.Result, op.Result)
		}
	}
}

// counterKey is the key an INCR op incremented.
func counterKey(op *Op) string {
	if len(op.Args) < 2 {
		return ""
	}
	return op.Args[1]
}

// errorReplies: CONTRACT.md, a client in front of a Redis Cluster sees one
// node, so no -MOVED or -ASK reaches it (which would also name a backend
// address); and every failure of Redis a fault can cause (a master down,
// failing over, a slot half-moved) is answered with an error that says
// what to do (-TRYAGAIN, -CLUSTERDOWN, "lost contact"), never with the
// proxy's fallback for errors it did not foresee; nor does Redis's own
// refusal of a command sent to a node that no longer serves its slot
// (-READONLY from a master become a replica, a script's "non local key"):
// the proxy sends it on to the slot's master instead. (The proxy's own
// "-READONLY fenceproxy: ..." in front of a standalone replica says what
// to do, and is not this.)
func (c *checker) errorReplies() {
	for _, op := range c.ops {
		switch r := op.Reply; {
		case strings.HasPrefix(r, "-MOVED "), strings.HasPrefix(r, "-ASK "):
			c.fail("redirect", []*Op{op}, "a redirection reached the client")
		case strings.Contains(r, "fenceproxy: internal error"):
			c.fail("internal-error", []*Op{op}, "answered with the proxy's fallback error")
		case strings.HasPrefix(r, "-READONLY You can't write"), strings.Contains(r, "non local key"):
			c.fail("wrong-node", []*Op{op}, "Redis refused it as sent to the wrong node (a replica, or a master without its slot)")
		}
	}
}

// DelayedWrite holds a fenced write on its way to Redis across a restart
// of the proxy (the single-node modes) or a change of the tier's leader
// (the tier modes): holder X's FENCE.EXEC is checked and sent while the
// proxy's connections to the master are held (a holdRelay under the
// master's Link); the proxy (or the leader) is killed (-9), X's lock is
// released through the restarted proxy (or the new leader), Y is granted a
// newer token and writes with FENCE.EXEC; then the held bytes reach Redis.
// The fault is recorded as the proxy kill it contains and as a
// delayed-write with the held op, which check.go's delayedWrite judges.
const DelayedWrite FaultKind = "delayed-write"

// delayedWrite: guarantee 7, fenced writes are checked where they land.
// A FENCE.EXEC whose bytes a delayed-write fault held on their way to Redis
// (Fault.Delayed) reached Redis when the fault ended; if a grant of its
// resource with a bigger token was replied before then, the newer grant
// had raised the resource's fence mark, and the held write must not be in
// the data. (data-order catches it too when the newer holder's own write
// came first; this catches it whether or not that holder wrote.)
func (c *checker) delayedWrite() {
	for _, f := range c.faults {
		if f.Kind != DelayedWrite || f.Delayed < 0 || f.Delayed >= len(c.h.Ops) {
			continue
		}
		op := c.h.Ops[f.Delayed]
		if op.Kind != Exec || len(op.Args) == 0 {
			continue
		}
		var newer *Op
		for _, g := range c.byRes[op.Resource] {
			if g.Kind == Acquire && g.Outcome == OK && g.Result > op.Token && g.End < f.End {
				newer = g
				break
			}
		}
		if newer == nil {
			continue
		}
		item := op.Args[len(op.Args)-1]
		for _, s := range c.h.Snapshots {
			if s.Resource == op.Resource && slices.Contains(s.Items, item) {
				c.fail("delayed-write", []*Op{newer, op}, "%q: a FENCE.EXEC with token %d held on its way to Redis landed after token %d was granted (%s)", op.Resource, op.Token, newer.Result, f)
				break
			}
		}
	}
}
