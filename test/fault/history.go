// Package fault is fenceproxy's fault suite: many clients lock, renew,
// check, fence writes and release a few hot resources through the real
// proxy while a seeded schedule kills, restarts, stops and fails over the
// real processes underneath, and every operation is recorded in a History.
// The checker (check.go, model.go) then proves over that history the
// guarantees of CONTRACT.md: tokens never regress, acknowledged leases of
// two owners never overlap, stale tokens are refused, a stale release never
// frees a newer owner's lease, acknowledged grants survive a proxy crash and
// a failover to a replica that acknowledged them, no fenced write with a
// stale token lands, no lease is replied after it ended, and no reply names
// a token the fence store calls never issued.
//
// Times in a history are nanoseconds on the test process's monotonic clock
// since the run began. An operation whose reply never came (connection
// error, timeout, a connection cut on purpose) has an unknown outcome: it
// may take effect at any time after it started, so End is Never.
//
// The suite itself is fault_test.go: TestFault in front of a standalone
// master with a replica and Sentinels, and (cluster_test.go)
// TestFaultCluster in front of a Redis Cluster of three masters with a
// replica each, with the cluster's own faults; a fault there may hit one
// master or one slot only (Fault.Scope), and excuses nothing elsewhere.
// Beside the lock family's clients, in front of one proxy, clients lock
// with their own recipes as unchanged libraries do (recipes.go: Redisson's
// RLock scripts by EVALSHA, redis-py's SET NX PX on --lock-keys keys), and
// are recorded as the same ops of the lock key.
// checker_test.go feeds the checker hand-written bad histories and
// asserts each is reported.
//
//	go test ./test/fault/                        30s of workload and faults in each mode (CI)
//	go test ./test/fault/ -timeout 30m -run TestFaultCluster -fault.duration=10m -fault.seed=N
//
// Flags: -fault.duration (default 30s), -fault.seed (default 0: pick one
// and print it; the same seed replays the same fault schedule and client
// choices, as far as timing allows), -fault.clients (lock clients, default
// 16). $FAULT_OUT: a directory to write the history JSON to after every
// run (it is written to the temp dir anyway when the run fails).
// $FAULT_HISTORY: a history file for TestCheckFile to check again.
package fault

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Never is the End of an operation whose outcome is unknown.
const Never = int64(math.MaxInt64)

// Kind names an operation.
type Kind string

const (
	Acquire Kind = "acquire" // LOCK.ACQUIRE resource owner ttl [WAIT ms]
	Renew   Kind = "renew"   // LOCK.RENEW resource owner ttl
	Release Kind = "release" // LOCK.RELEASE resource owner
	Check   Kind = "check"   // FENCE.CHECK resource token
	Exec    Kind = "exec"    // FENCE.EXEC resource token RPUSH data:resource token:id
	Info    Kind = "info"    // LOCK.INFO resource
	Incr    Kind = "incr"    // INCR of the client's own counter
	Set     Kind = "set"     // SET of ordinary data
	Get     Kind = "get"     // GET of ordinary data
	// TokenOf is LOCK.TOKEN resource holder: the fence-store token of a
	// recipe lock's grant (recipes.go), recorded for the history's reader;
	// the checks read it from the acquire it completes (GrantToken).
	TokenOf Kind = "token"
)

// Outcome classifies a reply.
type Outcome string

const (
	OK          Outcome = "ok"           // a token (acquire, renew), 1 (release, check), the command's reply (exec), an info, a value
	Null        Outcome = "null"         // acquire: held by another; renew: not held
	Zero        Outcome = "zero"         // release: not held; check: stale
	Refused     Outcome = "noreplicas"   // acquire or renew answered -NOREPLICAS: nothing granted
	Late        Outcome = "late"         // acquire or renew answered -TRYAGAIN for want of lease left: undone (a re-arm stands), like Refused
	Stale       Outcome = "stale"        // exec answered -STALE: not run
	NeverIssued Outcome = "never-issued" // check or exec: -ERR token N was never issued
	NotRun      Outcome = "not-run"      // a lock op answered -TRYAGAIN (Redis unreachable): the proxy did not send it
	Unknown     Outcome = "unknown"      // no reply, or an error that leaves the outcome open
)

// Op is one operation of the history.
type Op struct {
	ID       int      `json:"id"`
	Client   int      `json:"client"`
	Kind     Kind     `json:"kind"`
	Resource string   `json:"resource,omitempty"`
	Owner    string   `json:"owner,omitempty"`
	Token    int64    `json:"token,omitempty"`  // check/exec: the token sent
	TTL      int64    `json:"ttl_ms,omitempty"` // acquire/renew
	Args     []string `json:"args"`
	Start    int64    `json:"start"`
	End      int64    `json:"end"`              // Never if the outcome is unknown
	ErrAt    int64    `json:"err_at,omitempty"` // when the client gave up on an unknown outcome
	Reply    string   `json:"reply,omitempty"`
	Err      string   `json:"err,omitempty"`
	Outcome  Outcome  `json:"outcome"`
	// Result: acquire/renew the token replied; release/check 1 or 0; incr the
	// value; info the newest token it reported.
	Result int64 `json:"result,omitempty"`
	// InfoOwner is the owner LOCK.INFO reported ("" when free).
	InfoOwner string `json:"info_owner,omitempty"`
	// Recipe: the op is a client's own lock recipe (recipes.go), not the
	// lock family's command: its reply is read in the recipe's shape.
	Recipe Recipe `json:"recipe,omitempty"`
}

// refused reports whether a grant or renewal was answered with a refusal
// that leaves nothing granted (a re-armed lease stands as it was).
//
// A recipe lock's refused grant is answered as "held by another" (an
// integer for Redisson, nil for SET NX) and recorded as Null, not as a
// refusal: the proxy replies it only after the grant was undone and its
// reserved token cancelled (written before the reply, so a later kill -9
// keeps the cancellation); one it could not undo is answered with an
// error, an unknown outcome (locks/recipes.go abandonHashGrant,
// locks/setnx.go abandonValueWrite).
func (o *Op) refused() bool { return o.Outcome == Refused || o.Outcome == Late }

// waited reports whether the op is a LOCK.ACQUIRE ... WAIT.
func (o *Op) waited() bool {
	for _, a := range o.Args {
		if strings.EqualFold(a, "WAIT") {
			return true
		}
	}
	return false
}

// Known reports whether the op's reply arrived.
func (o *Op) Known() bool { return o.End != Never }

func (o *Op) String() string {
	end := "?"
	if o.Known() {
		end = fmt.Sprintf("%.3fms", float64(o.End)/1e6)
	}
	s := fmt.Sprintf("#%d c%d [%.3fms, %s] %s", o.ID, o.Client, float64(o.Start)/1e6, end, strings.Join(o.Args, " "))
	if o.Err != "" {
		return s + " -> (" + o.Outcome.String() + ": " + o.Err + ")"
	}
	return s + " -> " + strconv.Quote(o.Reply) + " (" + o.Outcome.String() + ")"
}

func (o Outcome) String() string { return string(o) }

// FaultKind names a fault.
type FaultKind string

const (
	ProxyKill      FaultKind = "proxy-kill"       // kill -9 of fenceproxy, restart on the same data dir
	MasterFailover FaultKind = "master-failover"  // SIGKILL of the master, its replica promoted by Sentinel and followed by the proxy (not restarted), the old master back empty
	MasterKill     FaultKind = "master-kill"      // SIGKILL of the master, restarted empty with no replica to promote: data loss
	RedisFlush     FaultKind = "redis-flush"      // FLUSHALL on the master: data loss
	ReplicaStop    FaultKind = "replica-stop"     // SIGSTOP of the replica (in a cluster, one master's), SIGCONT later: no grant on its master may be acknowledged meanwhile
	PausedHolder   FaultKind = "paused-holder"    // a holder process SIGSTOPped beyond its lease, then resumed with its stale token
	SlowClient     FaultKind = "slow-client"      // a client that reads a pipeline's replies slowly
	CutPipeline    FaultKind = "cut-pipeline"     // half a pipeline written, then the connection closed
	DataDirWipe    FaultKind = "data-dir-wipe"    // kill -9 of fenceproxy, its data dir emptied, restarted: the fence store lost
	DataDirRestore FaultKind = "data-dir-restore" // kill -9 of fenceproxy, its data dir replaced by an earlier copy, restarted
	LockConnKill   FaultKind = "lock-conn-kill"   // the replica stopped (in a cluster, one master's), then CLIENT KILL of the proxy's connections to its master mid-WAIT
	ProxyStop      FaultKind = "proxy-stop"       // SIGSTOP of fenceproxy for longer than the short ttls, then SIGCONT

	// Redis Cluster's own.
	MasterKillFailover FaultKind = "master-kill-failover" // SIGKILL of one master, its replica promoted by the cluster and followed by the proxy, the old master back empty as its replica
	ClusterFailover    FaultKind = "cluster-failover"     // CLUSTER FAILOVER on one master's replica: a coordinated switch, nothing lost
	SlotMigration      FaultKind = "slot-migration"       // a resource's slot (its owner record and data list) migrated key by key to another master under load, and back
)

// StandaloneFaults lists the faults of TestFault, in a fixed order.
var StandaloneFaults = []FaultKind{ProxyKill, MasterFailover, MasterKill, RedisFlush, ReplicaStop, PausedHolder, SlowClient, CutPipeline,
	DataDirWipe, DataDirRestore, LockConnKill, ProxyStop, RedisPartition, DelayedWrite}

// ClusterFaults lists the faults of TestFaultCluster, in a fixed order.
var ClusterFaults = []FaultKind{ProxyKill, MasterKillFailover, ClusterFailover, SlotMigration, ReplicaStop, PausedHolder, SlowClient, CutPipeline,
	DataDirWipe, DataDirRestore, LockConnKill, ProxyStop}

// LosesData reports whether the fault may make Redis forget owner records
// (the documented failure mode the lease checks leave out).
// A master-kill-failover does not: a record is acknowledged only once the
// replica that is promoted holds it, and the old master comes back as that
// replica's replica. What it loses was never acknowledged (an outcome the
// proxy could not know), and the model allows for that.
func (k FaultKind) String() string { return string(k) }

func (k FaultKind) LosesData() bool { return k == MasterKill || k == RedisFlush }

// LosesUnreplicated reports whether the fault may lose writes that no
// replica acknowledged: a master that dies before its replica read them is
// replaced by that replica. Ordinary writes (INCR) are never waited for.
// CLUSTER FAILOVER does not: the master stops taking writes until the
// replica has all of them. Nor does a slot migration.
func (k FaultKind) LosesUnreplicated() bool {
	return k == MasterFailover || k == MasterKillFailover || k.LosesData()
}

// LosesFenceStore reports whether the fault makes the fence store forget
// what it issued (guarantee 6): tokens still only rise, but every token
// issued before may be called stale from then on (the store's floor is a
// token issued to every resource and to no owner), so holders re-acquire:
// leases are not promised across it.
func (k FaultKind) LosesFenceStore() bool { return k == DataDirWipe || k == DataDirRestore }

// KillsProxy reports whether the fault kills fenceproxy with kill -9. A
// master-failover does not: the proxy follows Sentinel to the new master.
func (k FaultKind) KillsProxy() bool {
	return k == ProxyKill || k.LosesFenceStore()
}

// MovesMaster reports whether the fault puts owner records under another
// master, which the running proxy must follow without a restart and
// without losing an acknowledged grant.
func (k FaultKind) MovesMaster() bool {
	return k == MasterFailover || k == MasterKillFailover || k == ClusterFailover || k == SlotMigration
}

// Fault is one injected fault, as it happened.
type Fault struct {
	Kind  FaultKind `json:"kind"`
	At    int64     `json:"at"`    // planned offset
	Start int64     `json:"start"` // when its first action began
	End   int64     `json:"end"`   // when the system was whole again (e.g. the replica resynced)
	Note  string    `json:"note,omitempty"`
	// ReadBefore (proxy-stop): the ops in flight whose request the
	// stopped proxy had certainly read in full (the kernel held none of
	// its bytes unread); see check.go's lateLease.
	ReadBefore []int `json:"read_before,omitempty"`
	// Scope (a cluster fault on one master or one slot): the resources
	// and the data clients' counter keys whose slot it hit. Empty: the
	// fault hit the whole backend (and the proxy's faults hit everything).
	Scope []string `json:"scope,omitempty"`
	// Delayed (delayed-write): the FENCE.EXEC whose bytes were held on
	// their way to Redis from Start to End.
	Delayed int `json:"delayed,omitempty"`
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s [%.3fms, %.3fms]", f.Kind, float64(f.Start)/1e6, float64(f.End)/1e6)
	if f.Note != "" {
		s += " " + f.Note
	}
	if len(f.Scope) > 0 {
		s += " (hit " + strings.Join(f.Scope, " ") + ")"
	}
	return s
}

// Hits reports whether the fault hit the resource or counter key name.
func (f Fault) Hits(name string) bool {
	return len(f.Scope) == 0 || slices.Contains(f.Scope, name)
}

// Pause is an interval in which a client could not run: a holder process
// between SIGSTOP and SIGCONT, or a worker sleeping on purpose mid-lease.
type Pause struct {
	Client int   `json:"client"`
	Start  int64 `json:"start"`
	End    int64 `json:"end"`
}

// Snapshot is the contents of a fenced data list read straight from Redis:
// each element is "token:op-id" of the FENCE.EXEC that appended it.
type Snapshot struct {
	Resource string   `json:"resource"`
	At       int64    `json:"at"`
	Items    []string `json:"items"`
}

// History is everything recorded in one run. Its methods may be called
// from many goroutines.
type History struct {
	mu        sync.Mutex
	base      time.Time
	Seed      uint64     `json:"seed"`
	Ops       []*Op      `json:"ops"`
	Faults    []Fault    `json:"faults"`
	Pauses    []Pause    `json:"pauses"`
	Snapshots []Snapshot `json:"snapshots"`
	// Stalls are the intervals in which the test process itself did not
	// run (see WatchStalls); check.go's lateLease excuses a reply late by
	// no more than the stalls its op overlapped.
	Stalls []Stall `json:"stalls,omitempty"`
}

// Stall is an interval in which the test process could not run its
// goroutines: the whole machine stalled, or the process was descheduled
// or stopped for a collection. An op's times measured across it are late
// by up to its length whatever the proxy did.
type Stall struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// stallTick is how often WatchStalls wakes; a wake-up later than
// stallTick+stallSlack is recorded as a stall.
const (
	stallTick  = 5 * time.Millisecond
	stallSlack = 25 * time.Millisecond
)

// WatchStalls records the test process's own stalls until stop closes: a
// goroutine that sleeps stallTick and finds it woke much later saw a
// stretch in which no goroutine of the process ran on time. On a loaded
// 2-core machine such stretches reach half a second (seen under -race at a
// load of 9: a 150 ms lease "replied 502 ms after the call" while INCRs
// through every node stalled as long). The proxy cannot help a stall that
// keeps it from reading a request, and a stall of the test process alone
// delays only the clock that times the reply.
func (h *History) WatchStalls(stop <-chan struct{}) {
	t := time.NewTicker(stallTick)
	defer t.Stop()
	last := h.Now()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := h.Now()
		if now-last > int64(stallTick+stallSlack) {
			h.mu.Lock()
			h.Stalls = append(h.Stalls, Stall{Start: last, End: now})
			h.mu.Unlock()
		}
		last = now
	}
}

// stalledDuring is how long the recorded stalls overlapped [s, e].
func (h *History) stalledDuring(s, e int64) int64 {
	var d int64
	for _, st := range h.Stalls {
		if lo, hi := max(s, st.Start), min(e, st.End); hi > lo {
			d += hi - lo
		}
	}
	return d
}

// NewHistory starts the clock of a history.
func NewHistory(seed uint64) *History { return &History{base: time.Now(), Seed: seed} }

// Now is the time since the run began, on the monotonic clock.
func (h *History) Now() int64 { return int64(time.Since(h.base)) }

// Begin records the start of an op and returns it; Finish completes it.
// The last argument of an Exec, if empty, is set to "token:op-id", the
// item its fenced RPUSH appends to the data list.
func (h *History) Begin(client int, kind Kind, resource, owner string, token, ttl int64, args []string) *Op {
	return h.BeginRecipe("", client, kind, resource, owner, token, ttl, args)
}

// BeginRecipe is Begin of an op of a client's own lock recipe ("" for the
// lock family's and everything else).
func (h *History) BeginRecipe(recipe Recipe, client int, kind Kind, resource, owner string, token, ttl int64, args []string) *Op {
	op := &Op{Client: client, Kind: kind, Resource: resource, Owner: owner, Token: token, TTL: ttl, Args: args, End: Never, Outcome: Unknown, Recipe: recipe}
	h.mu.Lock()
	op.ID = len(h.Ops)
	if kind == Exec && len(args) > 0 && args[len(args)-1] == "" {
		args[len(args)-1] = strconv.FormatInt(token, 10) + ":" + strconv.Itoa(op.ID)
	}
	h.Ops = append(h.Ops, op)
	op.Start = h.Now()
	h.mu.Unlock()
	return op
}

// Finish records op's reply (raw RESP) or its error; with err non-nil the
// outcome is unknown and End stays Never.
func (h *History) Finish(op *Op, reply []byte, err error) {
	end := h.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		op.Err = err.Error()
		op.Outcome = Unknown
		op.ErrAt = end
		return
	}
	op.End = end
	op.Reply = string(reply)
	if op.Recipe != "" {
		op.Outcome, op.Result = ClassifyRecipe(op.Recipe, op.Kind, reply)
		return
	}
	op.Outcome, op.Result, op.InfoOwner = Classify(op.Kind, reply)
}

// GrantToken completes a recipe lock's grant with the token its holder's
// LOCK.TOKEN answered (tokenOp; nil if it could not be sent).
func (h *History) GrantToken(grant, tokenOp *Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	grantToken(grant, tokenOp)
}

// RenewToken sets a recipe renewal's result, answered without a token, to
// the holder's token.
func (h *History) RenewToken(op *Op, token int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if op.Outcome == OK {
		op.Result = token
	}
}

// AddFault, AddPause and AddSnapshot record the run's events.
func (h *History) AddFault(f Fault) {
	h.mu.Lock()
	h.Faults = append(h.Faults, f)
	h.mu.Unlock()
}

func (h *History) AddPause(p Pause) {
	h.mu.Lock()
	h.Pauses = append(h.Pauses, p)
	h.mu.Unlock()
}

func (h *History) AddSnapshot(s Snapshot) {
	h.mu.Lock()
	h.Snapshots = append(h.Snapshots, s)
	h.mu.Unlock()
}

// Classify reads a raw reply of an op of kind k.
func Classify(k Kind, reply []byte) (Outcome, int64, string) {
	r := string(reply)
	if strings.HasPrefix(r, "-") {
		switch {
		case strings.HasPrefix(r, "-NOREPLICAS") && (k == Acquire || k == Renew):
			return Refused, 0, ""
		case strings.HasPrefix(r, "-TRYAGAIN fenceproxy: the lock could not be granted with enough of its lease left") && k == Acquire,
			strings.HasPrefix(r, "-TRYAGAIN fenceproxy: the renewal could not be confirmed with enough of its lease left") && k == Renew:
			return Late, 0, ""
		case strings.HasPrefix(r, "-STALE") && k == Exec:
			return Stale, 0, ""
		case strings.HasPrefix(r, "-ERR token ") && strings.Contains(r, "was never issued") && (k == Check || k == Exec):
			return NeverIssued, 0, ""
		case strings.HasPrefix(r, "-ERR fenceproxy: another fenceproxy "), strings.HasPrefix(r, "-TRYAGAIN fenceproxy: this proxy is not confirmed as the backend's token authority"),
			strings.HasPrefix(r, "-NOREPLICAS") && strings.Contains(r, "fenceproxy's token bound"):
			// Refused before anything was done: another token authority
			// is live on the backend, or this one is not confirmed yet.
			return NotRun, 0, ""
		case strings.HasPrefix(r, "-TRYAGAIN fenceproxy: Redis is unreachable") && (k == Acquire || k == Renew || k == Release || k == Exec):
			// The lock manager answers this only when the write was not
			// sent (upstream.ErrUnavailable): nothing happened.
			return NotRun, 0, ""
		}
		// Every other error (lost contact with Redis, Redis unreachable,
		// loading) leaves the outcome open.
		return Unknown, 0, ""
	}
	switch k {
	case Acquire, Renew:
		if isNull(reply) {
			return Null, 0, ""
		}
		if n, ok := parseInt(reply); ok {
			return OK, n, ""
		}
	case Release, Check:
		if n, ok := parseInt(reply); ok && (n == 0 || n == 1) {
			if n == 0 {
				return Zero, 0, ""
			}
			return OK, 1, ""
		}
	case Exec, Set, Get:
		return OK, 0, ""
	case TokenOf:
		if isNull(reply) {
			return Null, 0, ""
		}
		if n, ok := parseInt(reply); ok && n > 0 {
			return OK, n, ""
		}
	case Incr:
		if n, ok := parseInt(reply); ok {
			return OK, n, ""
		}
	case Info:
		if owner, token, ok := parseInfo(reply); ok {
			return OK, token, owner
		}
	}
	return Unknown, 0, ""
}

// WriteFile writes the history as JSON to path.
func (h *History) WriteFile(path string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	if err := enc.Encode(h); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// sortedFaults returns the faults by start time.
func (h *History) sortedFaults() []Fault {
	fs := append([]Fault(nil), h.Faults...)
	sort.Slice(fs, func(i, j int) bool { return fs[i].Start < fs[j].Start })
	return fs
}

// parseInt returns N for exactly ":N\r\n".
func parseInt(b []byte) (int64, bool) {
	if len(b) < 4 || b[0] != ':' || !bytes.HasSuffix(b, []byte("\r\n")) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(b[1:len(b)-2]), 10, 64)
	return n, err == nil
}

func isNull(b []byte) bool {
	s := string(b)
	return s == "$-1\r\n" || s == "*-1\r\n" || s == "_\r\n"
}

// parseInfo reads owner and token from LOCK.INFO's flat array of
// field/value pairs, where values are bulk strings, integers or null.
func parseInfo(b []byte) (owner string, token int64, ok bool) {
	lines := strings.Split(string(b), "\r\n")
	if len(lines) < 1 || !strings.HasPrefix(lines[0], "*") {
		return "", 0, false
	}
	var vals []string
	var nulls []bool
	for i := 1; i < len(lines); i++ {
		l := lines[i]
		switch {
		case l == "":
			continue
		case l == "$-1" || l == "_":
			vals, nulls = append(vals, ""), append(nulls, true)
		case strings.HasPrefix(l, "$"):
			if i+1 < len(lines) {
				vals, nulls = append(vals, lines[i+1]), append(nulls, false)
				i++
			}
		case strings.HasPrefix(l, ":"):
			vals, nulls = append(vals, l[1:]), append(nulls, false)
		}
	}
	sawOwner, sawToken := false, false
	for i := 0; i+1 < len(vals); i += 2 {
		switch vals[i] {
		case "owner":
			sawOwner = true
			if !nulls[i+1] {
				owner = vals[i+1]
			}
		case "token":
			n, err := strconv.ParseInt(vals[i+1], 10, 64)
			if err != nil {
				return "", 0, false
			}
			token, sawToken = n, true
		}
	}
	return owner, token, sawOwner && sawToken
}
