package fault

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

var (
	flagDuration  = flag.Duration("fault.duration", 30*time.Second, "how long the fault suite's workload runs (faults included)")
	flagSeed      = flag.Uint64("fault.seed", 0, "seed of the fault schedule and the clients' choices; 0 picks one (printed)")
	flagClients   = flag.Int("fault.clients", 16, "lock clients (4 data clients run beside them)")
	flagProxyArgs = flag.String("fault.proxy-args", "", "more flags for every fenceproxy the suite starts (e.g. \"--lock-conns 4\")")
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Settings of the workload.
const (
	nResources     = 6
	dataClients    = 4
	opTimeout      = 3 * time.Second        // every op's deadline; WAIT is at most 400ms
	replicaTimeout = 300 * time.Millisecond // --replica-timeout: well below the replica stops, so a refused grant is answered while the replica is still stopped
	// sentinelDownAfter is Sentinel's down-after-milliseconds: above a
	// master-kill's downtime (at most 800ms, plus the restart), so only a
	// master-failover makes Sentinel promote the replica.
	sentinelDownAfter = 2500 * time.Millisecond
	// probeWait bounds how long the proxy may take, once the backend is
	// whole again after a fault, to answer a lock command that it must
	// serve (heldAcross, probeMaster).
	probeWait = 30 * time.Second
)

var ttls = []int64{150, 300, 800, 2000}

// env is the system under test and the run's shared state.
type env struct {
	t               *testing.T
	h               *History
	seed            uint64
	mode            string                        // "standalone", "cluster", "tier" or "tier-cluster" (modeFaults)
	master, replica *testenv.Redis                // standalone: the backend
	sentinels       *testenv.Sentinels            // standalone: name the master; the proxy follows them
	links           redisLinks                    // standalone: in front of each Redis; the proxy and Sentinel reach it through them
	holds           map[*testenv.Redis]*holdRelay // standalone: under each Link, in front of its Redis (delayed-write)
	tier            *tier                         // a tier mode's nodes; nil otherwise
	cl              *testenv.Cluster              // cluster: the backend
	probes          []string                      // cluster: a resource on each master's slots (probeMaster)
	proxy           *testenv.Proxy
	dataDir         string
	backup          string // a copy of dataDir taken while the proxy was down
	addr            atomic.Pointer[string]
	resources       []string
	recipeRes       map[Recipe][]string // each recipe's lock keys (recipes.go); none in a tier
	holderBin       string

	mu      sync.Mutex
	newest  map[string]int64 // biggest token any reply carried, per resource
	delayed []string         // delayed-write's resources, whose data lists are read too

	flightMu sync.Mutex
	inFlight map[int]flight // by client id: its request written, its reply not yet read
}

// flight is one op whose request a client has written in full and whose
// reply it awaits.
type flight struct {
	op   *Op
	port int   // the client's local port
	sent int64 // when the write returned
}

func (e *env) proxyAddr() string { return *e.addr.Load() }

func (e *env) setProxy(p *testenv.Proxy) {
	e.proxy = p
	a := p.Addr
	e.addr.Store(&a)
}

func (e *env) noteToken(r string, tok int64) {
	e.mu.Lock()
	e.newest[r] = max(e.newest[r], tok)
	e.mu.Unlock()
}

func (e *env) newestSeen(r string) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.newest[r]
}

// dataKey is r's fenced data list, in the slot of r's owner record
// (fenceproxy:lock:{r}), so that in a cluster they move together.
func dataKey(r string) string { return "data:{" + r + "}" }

// counterKey is a data client's counter.
func counterName(client int) string { return "ctr:" + strconv.Itoa(client) }

// TestFault runs the workload through one fenceproxy in front of a
// standalone master, its replica and three Sentinels under a seeded
// schedule of faults, then checks the history (check.go). -fault.duration
// and -fault.seed make it longer or replay a schedule.
func TestFault(t *testing.T) { runFault(t, "standalone") }

// modeFaults is each mode's schedule: "standalone" and "cluster" put one
// fenceproxy in front of that backend, "tier" and "tier-cluster" a tier of
// tierNodes (tier_test.go).
var modeFaults = map[string][]FaultKind{"standalone": StandaloneFaults, "cluster": ClusterFaults, "tier": TierFaults, "tier-cluster": TierClusterFaults}

// runFault is every mode of the suite (TestFault, TestFaultCluster,
// TestFaultTier, TestFaultTierCluster): mode picks the backend, one proxy
// or a tier in front of it, and the faults; the workload, the schedule's
// draw and the checks are the same.
func runFault(t *testing.T, mode string) {
	seed := *flagSeed
	if seed == 0 {
		seed = rand.Uint64()%1_000_000 + 1
	}
	duration := *flagDuration
	e := &env{t: t, mode: mode, seed: seed, h: NewHistory(seed), newest: map[string]int64{}, inFlight: map[int]flight{}}
	t.Logf("fault: mode=%s seed=%d duration=%v proxy-args=%q (replay with -run '^%s$' -fault.seed=%d -fault.duration=%v)",
		mode, seed, duration, strings.Join(e.proxyArgs(), " "), t.Name(), seed, duration)

	began := time.Now()
	kinds := selectedFaults(modeFaults[mode])
	if slices.Contains(kinds, PausedHolder) {
		e.holderBin = buildHolder(t)
	}
	e.pickRecipeResources()
	if strings.HasSuffix(mode, "cluster") {
		e.startCluster()
	} else {
		e.startStandalone()
	}
	var plan []planned
	if strings.HasPrefix(mode, "tier") {
		e.tier = e.startTier()
		e.setProxy(e.tier.nodes[0]) // for helpers that use one address
		plan = planTier(seed, duration, kinds)
	} else {
		e.startProxy()
		plan = planFaults(seed, duration, kinds)
	}
	t.Logf("fault: set up in %v", time.Since(began).Round(time.Millisecond))
	e.h = NewHistory(seed) // the clock starts with the workload

	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	written := false
	t.Cleanup(func() {
		// A helper's t.Fatalf (a process that would not restart) ends
		// the test early: stop the clients and keep the evidence.
		halt()
		if t.Failed() && !written {
			t.Logf("fault: seed=%d; history so far written to %s", seed, e.writeHistory(os.Getenv("FAULT_OUT")))
		}
	})
	var workers, async sync.WaitGroup
	go e.h.WatchStalls(stop)
	e.startClients(stop, &workers)

	counts := map[FaultKind]int{}
	var lastEnd int64
	for n, p := range plan {
		// Faults are planned 1.5-3.5s apart, but one that overruns (a
		// Sentinel failover on a loaded machine) made the next ones start
		// back to back: a FLUSHALL and a data-dir wipe 8us apart lose
		// Redis's copy of the token bound and the fence store's at once,
		// the one double loss the contract lets tokens regress across
		// (guarantee 6), and the checker counted thousands of violations
		// (seed 691738, on main as on later branches). So the next one
		// starts at least minFaultGap after the last one ended.
		if d := time.Duration(max(p.At, lastEnd+int64(minFaultGap)) - e.h.Now()); d > 0 {
			time.Sleep(d)
		}
		counts[p.Kind]++
		e.inject(n, p, &async)
		lastEnd = e.h.Now()
	}
	if d := time.Duration(int64(duration) - e.h.Now()); d > 0 {
		time.Sleep(d)
	}
	halt()
	waitGroup(t, &workers, 30*time.Second, "clients")
	waitGroup(t, &async, 30*time.Second, "paused holders and slow clients")
	e.snapshotData("end")
	t.Logf("fault: workload done in %v", time.Since(began).Round(time.Millisecond))

	rep := CheckHistory(e.h)
	t.Logf("fault: checked in %v", time.Since(began).Round(time.Millisecond))
	var perKind []string
	for _, k := range kinds {
		perKind = append(perKind, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	late := 0
	for _, op := range e.h.Ops {
		if op.Outcome == Late {
			late++
		}
	}
	recipeGrants, unknownToken := recipeCounts(e.h)
	line := fmt.Sprintf("fault: mode=%s seed=%d duration=%v ops=%d grants=%d recipe-grants=redisson:%d,setnx:%d recipe-token-unknown=%d stale-refused=%d survived-crash=%d late-refused=%d lease-used=%.2f faults=%d (%s) linearizability=%s violations=%d",
		mode, seed, duration, len(e.h.Ops), rep.Grants, recipeGrants[Redisson], recipeGrants[SetNX], unknownToken, rep.StaleRefused, rep.Survived, late, rep.LeaseUsed, len(e.h.Faults), strings.Join(perKind, " "), rep.Linearizability, len(rep.Violations))
	t.Log(line)
	renewals := map[Outcome]int{}
	for _, op := range e.h.Ops {
		if op.Recipe == Redisson && op.Kind == Renew {
			renewals[op.Outcome]++
		}
	}
	t.Logf("fault: redisson renewals by outcome: %v", renewals)
	if n := len(e.h.Stalls); n > 0 {
		var longest int64
		for _, s := range e.h.Stalls {
			longest = max(longest, s.End-s.Start)
		}
		t.Logf("fault: the test process stalled %d times, the longest %v (late replies within a stall are excused)", n, time.Duration(longest).Round(time.Millisecond))
	}
	for _, n := range rep.LinearizabilityNotes {
		t.Logf("fault: linearizability: %s", n)
	}
	if out := os.Getenv("FAULT_OUT"); out != "" || len(rep.Violations) > 0 {
		path := e.writeHistory(out)
		written = true
		t.Logf("fault: history written to %s", path)
	}
	e.judge(line, fmt.Sprintf("go test ./test/fault/ -run '^%s$' -fault.seed=%d -fault.duration=%v", t.Name(), seed, duration), rep)
	if e.withRecipes() {
		for _, rc := range Recipes {
			if recipeGrants[rc] == 0 {
				t.Errorf("fault: no %s recipe lock was granted: the recipe workload did not run", rc)
			}
		}
	}
	// The proxy itself, not a restart, must have moved to each new master.
	// (In a cluster each failover's probe shows it: probeMaster.)
	if followed := strings.Count(e.proxy.Log(), "following the Sentinel failover"); followed < counts[MasterFailover] {
		t.Errorf("fault: the proxy's log shows %d followed failovers for %d master-failover faults", followed, counts[MasterFailover])
	}
}

// startStandalone starts the standalone backend: a master, its replica,
// a Link in front of each and three Sentinels that reach them through
// the Links; and picks the hot resources.
func (e *env) startStandalone() {
	t := e.t
	for i := range nResources {
		e.resources = append(e.resources, "hot:"+strconv.Itoa(i))
	}
	e.master = testenv.StartRedis(t, testenv.RedisOptions{})
	e.replica = testenv.StartReplica(t, e.master)
	e.linkRedis()
	e.sentinels = testenv.StartSentinels(t, e.master, testenv.SentinelOptions{DownAfter: sentinelDownAfter, MasterPort: e.links[e.master].Port()})
}

// startProxy starts the one fenceproxy of a mode without a tier, and
// takes a first backup for data-dir-restore while it is stopped (each
// proxy-kill takes a newer one while the proxy is down).
func (e *env) startProxy() {
	t := e.t
	e.dataDir = filepath.Join(t.TempDir(), "data")
	e.backup = filepath.Join(t.TempDir(), "backup")
	e.setProxy(testenv.StartProxy(t, e.proxyOptions()))
	if _, err := e.proxy.Terminate(); err != nil {
		t.Fatal(err)
	}
	e.backupDataDir()
	e.proxy.Restart(t)
}

func (e *env) proxyOptions() testenv.ProxyOptions {
	if e.cl != nil {
		return testenv.ProxyOptions{Backend: e.clusterSeeds(), DataDir: e.dataDir, MinReplicas: 1, ReplicaTimeout: replicaTimeout, Args: e.proxyArgs()}
	}
	return testenv.ProxyOptions{Sentinels: e.sentinels, DataDir: e.dataDir, MinReplicas: 1, ReplicaTimeout: replicaTimeout, Args: e.proxyArgs()}
}

// proxyArgs are -fault.proxy-args, --lock-conns from the seed unless
// those name it, and, with the recipe clients, the flag for their SET NX
// locks.
func (e *env) proxyArgs() []string {
	args := strings.Fields(*flagProxyArgs)
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--lock-conns") }) {
		args = append(args, "--lock-conns", strconv.Itoa(e.lockConns()))
	}
	if !e.withRecipes() {
		return args
	}
	return append(args, "--lock-keys", lockKeysFlag)
}

// lockConns is the --lock-conns a run's proxies get when -fault.proxy-args
// does not say: 1, 2 or 4 by the seed, so that runs also cover lock
// writers that overlap their rounds and hand the turn on (a connection of
// several killed by lock-conn-kill, a round handed on while its WAIT is
// out), and a replay with the seed gets the same.
func (e *env) lockConns() int { return []int{1, 2, 4}[e.seed%3] }

// writeHistory writes the history as JSON into dir ($FAULT_OUT), or into
// the system temp dir, which outlives the test unlike t.TempDir.
func (e *env) writeHistory(dir string) string {
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Errorf("fault: %v", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("fenceproxy-fault-seed%d-%s.json", e.seed, time.Now().Format("20060102T150405")))
	if err := e.h.WriteFile(path); err != nil {
		e.t.Errorf("fault: writing the history: %v", err)
	}
	return path
}

func waitGroup(t *testing.T, wg *sync.WaitGroup, d time.Duration, what string) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("fault: %s did not stop within %v", what, d)
	}
}

// buildHolder builds the paused-holder program (./holder).
func buildHolder(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "holder")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./holder").CombinedOutput()
	if err != nil {
		t.Fatalf("fault: building ./holder: %v\n%s", err, out)
	}
	return bin
}

// ---- clients ----

// client is one connection of the workload; do records every op.
type client struct {
	e     *env
	id    int
	conn  *testenv.Conn
	addr  string
	fresh bool // connected anew since the last op
}

// dial connects to the current proxy; false if it is not reachable now.
func (c *client) dial() bool {
	addr := c.e.clientAddr(c.id)
	if c.conn != nil && c.addr == addr {
		return true
	}
	if c.conn != nil {
		c.conn.Close()
	}
	conn, err := testenv.TryDial(addr, opTimeout)
	if err != nil {
		c.conn = nil
		return false
	}
	c.conn, c.addr, c.fresh = conn, addr, true
	return true
}

// do sends args and records the op; nil if no connection could be made
// (nothing was sent).
func (c *client) do(kind Kind, res, owner string, token, ttl int64, args ...string) *Op {
	return c.doRecipe("", kind, res, owner, token, ttl, args...)
}

// doRecipe is do of an op of a client's own lock recipe (recipes.go).
func (c *client) doRecipe(recipe Recipe, kind Kind, res, owner string, token, ttl int64, args ...string) *Op {
	if !c.dial() {
		time.Sleep(50 * time.Millisecond)
		return nil
	}
	c.fresh = false
	op := c.e.h.BeginRecipe(recipe, c.id, kind, res, owner, token, ttl, args)
	reply, err := c.send(op, args)
	c.e.h.Finish(op, reply, err)
	if err != nil {
		c.conn.Close()
		c.conn = nil
	}
	if (kind == Acquire || kind == Renew) && op.Outcome == OK {
		c.e.noteToken(res, op.Result)
	}
	return op
}

// send writes the request, notes it in flight (for a proxy stop to tell
// whether the proxy had read it), and reads the reply.
func (c *client) send(op *Op, args []string) ([]byte, error) {
	nc := c.conn.NetConn()
	nc.SetWriteDeadline(time.Now().Add(opTimeout))
	if _, err := nc.Write(testenv.AppendCommand(nil, args...)); err != nil {
		return nil, err
	}
	port := 0
	if a, ok := nc.LocalAddr().(*net.TCPAddr); ok {
		port = a.Port
	}
	e := c.e
	e.flightMu.Lock()
	e.inFlight[c.id] = flight{op: op, port: port, sent: e.h.Now()}
	e.flightMu.Unlock()
	defer func() {
		e.flightMu.Lock()
		delete(e.inFlight, c.id)
		e.flightMu.Unlock()
	}()
	return c.conn.ReadReply()
}

func (c *client) close() {
	if c.conn != nil {
		c.conn.Close()
	}
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

func i64(n int64) string { return strconv.FormatInt(n, 10) }

// held is a lock a client believes it holds.
type held struct {
	res, owner string
	token, ttl int64
}

// lockClient acquires (sometimes with WAIT), renews, checks, fences
// writes, releases, reads LOCK.INFO and now and then pauses beyond its
// lease before using its token again, on the hot resources.
func (e *env) lockClient(id int, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(e.seed, uint64(id)))
	c := &client{e: e, id: id}
	defer c.close()
	var h *held
	n, retryOwner, retries := 0, "", 0
	fenced := func(h *held) {
		c.do(Exec, h.res, h.owner, h.token, 0, "FENCE.EXEC", h.res, i64(h.token), "RPUSH", dataKey(h.res), "")
	}
	for !stopped(stop) {
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		if h == nil {
			r := e.resources[rng.IntN(len(e.resources))]
			owner := retryOwner
			if owner == "" {
				owner = fmt.Sprintf("c%d-%d", id, n)
				n++
			}
			ttl := ttls[rng.IntN(len(ttls))]
			args := []string{"LOCK.ACQUIRE", r, owner, i64(ttl)}
			if rng.IntN(2) == 0 {
				args = append(args, "WAIT", strconv.Itoa(rng.IntN(400)))
			}
			op := c.do(Acquire, r, owner, 0, ttl, args...)
			retryOwner = ""
			if op != nil && (op.Outcome == NotRun || op.Outcome == Unknown) {
				time.Sleep(20 * time.Millisecond) // Redis or the proxy is down: back off a little
			}
			switch {
			case op == nil:
			case op.Outcome == OK:
				h = &held{res: r, owner: owner, token: op.Result, ttl: ttl}
				retries = 0
			case op.Outcome == Unknown && retries < 2 && rng.IntN(2) == 0:
				// The outside review's step: the owner renews the grant it
				// may or may not have. A token replied now must be one
				// FENCE.CHECK calls issued (unissued-token).
				if rop := c.do(Renew, r, owner, 0, ttl, "LOCK.RENEW", r, owner, i64(ttl)); rop != nil && rop.Outcome == OK {
					h = &held{res: r, owner: owner, token: rop.Result, ttl: ttl}
					retries = 0
				} else {
					retryOwner, retries = owner, retries+1
				}
			case op.Outcome == Unknown && retries < 2:
				// A retry with the same owner is safe: it re-arms the grant
				// if the lost reply carried one.
				retryOwner, retries = owner, retries+1
			default:
				retries = 0
			}
			continue
		}
		if c.fresh {
			// Reconnected (the proxy was killed or replaced): the lease
			// must still be there.
			c.do(Renew, h.res, h.owner, 0, h.ttl, "LOCK.RENEW", h.res, h.owner, i64(h.ttl))
			continue
		}
		switch x := rng.IntN(100); {
		case x < 30:
			if op := c.do(Renew, h.res, h.owner, 0, h.ttl, "LOCK.RENEW", h.res, h.owner, i64(h.ttl)); op != nil && op.Outcome == Null {
				h = nil
			}
		case x < 48:
			c.do(Check, h.res, h.owner, h.token, 0, "FENCE.CHECK", h.res, i64(h.token))
		case x < 75:
			fenced(h)
		case x < 88:
			c.do(Release, h.res, h.owner, 0, 0, "LOCK.RELEASE", h.res, h.owner)
			h = nil
		case x < 94:
			r := e.resources[rng.IntN(len(e.resources))]
			c.do(Info, r, "", 0, 0, "LOCK.INFO", r)
		default:
			// A pause (a GC, a slow disk) that may outlast the lease; then
			// the holder carries on with its possibly stale token.
			d := time.Duration(rng.Int64N(2*h.ttl)) * time.Millisecond
			start := e.h.Now()
			time.Sleep(d)
			e.h.AddPause(Pause{Client: id, Start: start, End: e.h.Now()})
			c.do(Check, h.res, h.owner, h.token, 0, "FENCE.CHECK", h.res, i64(h.token))
			fenced(h)
			if rng.IntN(2) == 0 {
				// An expired lease must not come back.
				c.do(Renew, h.res, h.owner, 0, h.ttl, "LOCK.RENEW", h.res, h.owner, i64(h.ttl))
			}
			c.do(Release, h.res, h.owner, 0, 0, "LOCK.RELEASE", h.res, h.owner)
			h = nil
		}
	}
}

// recipeClient locks the recipe's keys as its unchanged client library
// would (recipes.go), then asks LOCK.TOKEN for the grant's token and, with
// it, checks and fences writes like a lock-family holder; sometimes it
// pauses beyond its lease first; then it releases with the recipe's own
// script. An acquire whose outcome is unknown is not retried: a Redisson
// retry by the same holder would re-enter a grant it may have.
func (e *env) recipeClient(id int, recipe Recipe, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(e.seed, uint64(id)))
	c := &client{e: e, id: id}
	defer c.close()
	res := e.recipeRes[recipe]
	for n := 0; !stopped(stop); n++ {
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		r := res[rng.IntN(len(res))]
		holder := fmt.Sprintf("%s-c%d-%d", recipe, id, n)
		if recipe == Redisson {
			holder = fmt.Sprintf("5e1f%04d-%06d:%d", id, n, 1) // uuid:threadId
		}
		ttl := ttls[rng.IntN(len(ttls))]
		acq := c.doRecipe(recipe, Acquire, r, holder, 0, ttl, recipeAcquireArgs(recipe, r, holder, ttl)...)
		if acq == nil || acq.Outcome != OK {
			if acq != nil && acq.Outcome == Unknown {
				time.Sleep(20 * time.Millisecond) // Redis or the proxy is down: back off a little
			}
			continue
		}
		tokOp := c.do(TokenOf, r, holder, 0, 0, "LOCK.TOKEN", r, holder)
		e.h.GrantToken(acq, tokOp)
		if tok := acq.Result; acq.Outcome == OK {
			e.noteToken(r, tok)
			for range rng.IntN(4) {
				if rng.IntN(3) == 0 {
					c.do(Check, r, holder, tok, 0, "FENCE.CHECK", r, i64(tok))
				} else {
					c.do(Exec, r, holder, tok, 0, "FENCE.EXEC", r, i64(tok), "RPUSH", dataKey(r), "")
				}
			}
			if recipe == Redisson && rng.IntN(2) == 0 {
				// The watchdog's renewal of the lock.
				if op := c.doRecipe(recipe, Renew, r, holder, 0, ttl, recipeRenewArgs(r, holder, ttl)...); op != nil {
					e.h.RenewToken(op, tok)
				}
			}
			if rng.IntN(10) == 0 {
				// A pause that may outlast the lease; then the holder
				// fences with its possibly stale token.
				d := time.Duration(rng.Int64N(2*ttl)) * time.Millisecond
				start := e.h.Now()
				time.Sleep(d)
				e.h.AddPause(Pause{Client: id, Start: start, End: e.h.Now()})
				c.do(Exec, r, holder, tok, 0, "FENCE.EXEC", r, i64(tok), "RPUSH", dataKey(r), "")
				if recipe == Redisson {
					// The watchdog, late: the lease may have run out.
					if op := c.doRecipe(recipe, Renew, r, holder, 0, ttl, recipeRenewArgs(r, holder, ttl)...); op != nil {
						e.h.RenewToken(op, tok)
					}
				}
			}
		}
		c.doRecipe(recipe, Release, r, holder, 0, 0, recipeReleaseArgs(recipe, r, holder, ttl, fmt.Sprintf("%d-%d", id, n))...)
	}
}

// withRecipes reports whether the mode runs recipe clients: every mode.
// In a tier the leader runs the twins and followers relay them
// (lockcmd/recipes.go); a late relayed recipe grant is refused on the
// follower and, unlike LOCK.ACQUIRE's, not undone on the leader: it stands
// until its lease ends, which delays the next grant and never makes a
// second holder.
func (e *env) withRecipes() bool { return true }

// pickRecipeResources names each recipe's lock keys.
func (e *env) pickRecipeResources() {
	e.recipeRes = map[Recipe][]string{}
	if !e.withRecipes() {
		return
	}
	for _, rc := range Recipes {
		for i := range recipeResources {
			e.recipeRes[rc] = append(e.recipeRes[rc], recipeKeyPrefix[rc]+strconv.Itoa(i))
		}
	}
}

// allResources is every lock resource of the run: the family's hot ones
// and the recipes' lock keys.
func (e *env) allResources() []string {
	out := slices.Clone(e.resources)
	for _, rc := range Recipes {
		out = append(out, e.recipeRes[rc]...)
	}
	return out
}

// dataClient reads and writes ordinary keys and INCRs its own counter.
func (e *env) dataClient(id int, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(e.seed, uint64(id)))
	c := &client{e: e, id: id}
	defer c.close()
	ctr := counterName(id)
	for !stopped(stop) {
		time.Sleep(time.Duration(1000+rng.IntN(5000)) * time.Microsecond)
		k := fmt.Sprintf("kv:%d:%d", id, rng.IntN(16))
		switch rng.IntN(3) {
		case 0:
			c.do(Incr, "", "", 0, 0, "INCR", ctr)
		case 1:
			c.do(Set, "", "", 0, 0, "SET", k, strconv.Itoa(rng.IntN(1_000_000)))
		default:
			c.do(Get, "", "", 0, 0, "GET", k)
		}
	}
}

// ---- faults ----

// planned is one fault of the schedule, all its choices drawn up front.
type planned struct {
	Kind FaultKind
	At   int64         // offset from the start of the run
	D    time.Duration // its own length: downtime, stop, extra pause
	N    int           // a choice: resource index, connections
}

// minFaultGap is the least time between the end of a fault and the start
// of the next: more than the proxy's heartbeat takes to write the token
// bound back to Redis after a data loss (twice a second).
const minFaultGap = 1500 * time.Millisecond

// planFaults draws the schedule from the seed: every fault kind once per
// round, rounds shuffled, 1.5-3.5s apart, from 2s in until 3s before the
// end.
func planFaults(seed uint64, d time.Duration, kinds []FaultKind) []planned {
	return drawPlan(rand.New(rand.NewPCG(seed, 0xfa017)), kinds, 2*time.Second, d-3*time.Second, 1500*time.Millisecond)
}

// drawPlan draws a schedule from rng: every kind once per round, rounds
// shuffled, the first at first, each next one gap plus up to 2s later,
// none after last.
func drawPlan(rng *rand.Rand, kinds []FaultKind, first, last, gap time.Duration) []planned {
	var plan []planned
	at := first
	for {
		round := append([]FaultKind(nil), kinds...)
		rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		for _, k := range round {
			if at > last {
				return plan
			}
			p := planned{Kind: k, At: int64(at), N: rng.IntN(1000)}
			p.D = faultLength(rng, k)
			plan = append(plan, p)
			at += gap + time.Duration(rng.IntN(2000))*time.Millisecond
		}
	}
}

// faultLengths are the kinds that have a length of their own
// (planned.D): drawn as min plus up to spread, in milliseconds.
var faultLengths = map[FaultKind]struct{ min, spread int }{
	ProxyKill:           {0, 300},
	DataDirWipe:         {0, 300},
	DataDirRestore:      {0, 300},
	MasterFailover:      {0, 1500},
	MasterKill:          {100, 700},
	ReplicaStop:         {700, 1300},
	PausedHolder:        {100, 600},
	SlowClient:          {10, 40},
	LockConnKill:        {400, 800},
	ProxyStop:           {400, 600}, // longer than the short ttls (150, 300ms)
	MasterKillFailover:  {0, 1500},
	SlotMigration:       {200, 1300},
	TierLeaderKill:      {0, 1000},
	TierFollowerKill:    {0, 1000},
	TierDataDirWipe:     {0, 1000},
	TierLeaderStop:      {200, 800},   // kept stopped after the new leader is known
	TierIsolate:         {2000, 2000}, // longer than an election
	TierOneWay:          {2000, 2000},
	TierEmptyDiskRejoin: {2000, 2000}, // the cut, then A and C alone: longer than an election
}

// faultLength draws a fault's own length; a kind that has none draws
// nothing, so that a seed's schedule stays what it was.
func faultLength(rng *rand.Rand, k FaultKind) time.Duration {
	l, ok := faultLengths[k]
	if !ok {
		return 0
	}
	return time.Duration(l.min+rng.IntN(l.spread)) * time.Millisecond
}

// inject runs fault n of the plan from the test goroutine; the paused
// holder and the slow client run on in goroutines of their own.
func (e *env) inject(n int, p planned, async *sync.WaitGroup) {
	t := e.t
	t.Logf("fault: at %v: %s (choice %d, %v)", time.Duration(e.h.Now()).Round(time.Millisecond), p.Kind, p.N, p.D)
	f := Fault{Kind: p.Kind, At: p.At}
	switch p.Kind {
	case TierLeaderKill, TierFollowerKill, TierLeaderStop, TierDataDirWipe, TierIsolate, TierOneWay, TierEmptyDiskRejoin:
		e.injectTier(n, p) // records its own Fault
		return
	case ProxyKill:
		f.Start = e.h.Now()
		e.proxy.Kill9()
		e.backupDataDir() // a crash image, as a backup of a killed proxy's dir would be
		time.Sleep(p.D)
		e.proxy.Restart(t)
		f.End = e.h.Now()
		f.Note = "down " + p.D.String()
	case DataDirWipe, DataDirRestore:
		f.Start = e.h.Now()
		e.proxy.Kill9()
		if err := os.RemoveAll(e.dataDir); err != nil {
			t.Fatalf("fault: %v", err)
		}
		if p.Kind == DataDirRestore {
			copyDir(t, e.backup, e.dataDir)
		}
		time.Sleep(p.D)
		e.proxy.Restart(t)
		f.End = e.h.Now()
		f.Note = "down " + p.D.String()
	case MasterFailover:
		// Sentinel promotes the replica and the proxy follows it by
		// itself, without a restart. The old master comes back empty at
		// its address and stays a master for D before it is made the new
		// master's replica: the proxy must send it nothing meanwhile (a
		// fenced write it took would be lost with its data).
		across := e.holdAcross(n, "across:"+strconv.Itoa(n))
		e.snapshotData("before " + string(p.Kind))
		f.Start = e.h.Now()
		oldMaster, promoted := e.master, e.replica
		oldMaster.Kill()
		e.sentinels.WaitMaster(t, e.named(promoted))
		promoted.Promoted()
		e.master, e.replica = promoted, oldMaster
		oldMaster.Restart(t)
		time.Sleep(p.D)
		oldMaster.Follow(t, promoted)
		f.End = e.h.Now()
		f.Note = "new master " + promoted.Addr + " named by Sentinel; old master back empty for " + p.D.String()
		across.verify()
	case MasterKill:
		e.snapshotData("before " + string(p.Kind))
		f.Start = e.h.Now()
		e.master.Kill()
		time.Sleep(p.D)
		e.master.Restart(t)
		e.master.WaitReplicas(t, 1)
		f.End = e.h.Now()
		e.checkSentinelMaster()
	case RedisFlush:
		e.snapshotData("before " + string(p.Kind))
		c := testenv.Dial(t, e.master.Addr)
		f.Start = e.h.Now()
		if r := c.Do("FLUSHALL"); string(r) != "+OK\r\n" {
			t.Fatalf("fault: FLUSHALL = %q", r)
		}
		f.End = e.h.Now()
		c.Close()
	case ReplicaStop:
		master, replica, scope := e.target(p.N)
		f.Scope = scope
		replica.Stop()
		f.Start = e.h.Now()
		time.Sleep(p.D)
		f.End = e.h.Now()
		replica.Cont()
		f.Note = "stopped " + p.D.String()
		e.settle(master)
	case PausedHolder:
		r := e.resources[p.N%len(e.resources)]
		f.Start = e.h.Now()
		async.Add(1)
		go func() { defer async.Done(); e.pausedHolder(n, r, p.D) }()
		f.End = f.Start
		f.Note = r
	case SlowClient:
		f.Start = e.h.Now()
		async.Add(1)
		go func() { defer async.Done(); e.slowClient(n, p.D) }()
		f.End = f.Start
	case CutPipeline:
		f.Start = e.h.Now()
		e.cutPipelines(n, p.N)
		f.End = e.h.Now()
	case LockConnKill:
		// Grants wait in WAIT for the stopped replica when the proxy's
		// connections to the master are cut: their outcome is unknown,
		// and their tokens must count as issued.
		master, replica, scope := e.target(p.N)
		f.Scope = scope
		replica.Stop()
		f.Start = e.h.Now()
		before := 100*time.Millisecond + time.Duration(p.N)*(p.D-200*time.Millisecond)/1000
		time.Sleep(before)
		c, err := testenv.TryDial(master.Addr, opTimeout)
		if err != nil {
			t.Fatalf("fault: dialing the master: %v", err)
		}
		killed, err := c.TryDo("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
		c.Close()
		if err != nil {
			t.Fatalf("fault: CLIENT KILL: %v", err)
		}
		f.Note = "CLIENT KILL -> " + testenv.ShowReply(killed) + " after " + before.String()
		time.Sleep(p.D - before)
		f.End = e.h.Now()
		replica.Cont()
		e.settle(master)
	case RedisPartition:
		e.redisPartition(p) // records a Fault per phase
		return
	case DelayedWrite:
		e.delayedWrite(n, p) // records its own Faults
		return
	case ProxyStop:
		f.Start = e.h.Now()
		e.proxy.Stop() // returns once it is stopped: it reads nothing more
		f.ReadBefore = e.readByStoppedProxy()
		time.Sleep(p.D)
		f.End = e.h.Now()
		e.proxy.Cont()
		f.Note = fmt.Sprintf("stopped %v, %d requests in flight read before", p.D, len(f.ReadBefore))
	case MasterKillFailover, ClusterFailover, SlotMigration:
		e.injectCluster(n, p, &f)
	}
	e.h.AddFault(f)
}

// heldAcross is a lease taken just before a fault that puts its record
// under another master (MovesMaster), with a ttl that outlasts the fault:
// the workload's leases (2 s at most) run out while a killed master fails
// over, so without it nothing would show that an acknowledged grant
// survives the move. Its ops are part of the history: lost-grant judges
// the renewal and LOCK.INFO after the fault.
type heldAcross struct {
	c          *client
	res, owner string
}

// acrossTTL outlasts any fault that moves a master (a kill, a failover and
// a restart take a few seconds).
const acrossTTL = 30000

// holdAcross takes r for acrossTTL through the proxy; nil if it was not
// granted within probeWait (the fault goes on without it).
func (e *env) holdAcross(n int, r string) *heldAcross {
	h := &heldAcross{c: &client{e: e, id: 200000 + n}, res: r, owner: "across-" + strconv.Itoa(n)}
	if h.c.acquireWithin(r, h.owner, acrossTTL) != nil {
		return h
	}
	h.c.close()
	e.t.Logf("fault: %s was not granted before the fault; nothing held across it", r)
	return nil
}

// acquireWithin takes r for owner, retrying until it is granted or
// probeWait has passed: lock commands may be refused for a few seconds
// after a data-dir fault (the dead proxy's authority is still live) or an
// election. It returns the grant, or nil.
func (c *client) acquireWithin(r, owner string, ttl int64) *Op {
	for deadline := time.Now().Add(probeWait); time.Now().Before(deadline); {
		op := c.do(Acquire, r, owner, 0, ttl, "LOCK.ACQUIRE", r, owner, i64(ttl))
		if op != nil && op.Outcome == OK {
			return op
		}
		time.Sleep(100 * time.Millisecond) // a retry by the same owner is safe
	}
	return nil
}

// resource lists the resource held, if any, for a fault's scope.
func (h *heldAcross) resource() []string {
	if h == nil {
		return nil
	}
	return []string{h.res}
}

// verify, after the fault: renew until the proxy answers (it may still be
// finding the new master), then LOCK.INFO, FENCE.CHECK and release. The
// checker judges the answers.
func (h *heldAcross) verify() {
	if h == nil {
		return
	}
	defer h.c.close()
	deadline := time.Now().Add(probeWait)
	for {
		op := h.c.do(Renew, h.res, h.owner, 0, acrossTTL, "LOCK.RENEW", h.res, h.owner, i64(acrossTTL))
		if op != nil && (op.Outcome == OK || op.Outcome == Null) {
			if op.Outcome == OK {
				h.c.do(Info, h.res, "", 0, 0, "LOCK.INFO", h.res)
				h.c.do(Check, h.res, h.owner, op.Result, 0, "FENCE.CHECK", h.res, i64(op.Result))
			}
			break
		}
		if time.Now().After(deadline) {
			h.c.e.t.Errorf("fault: the renewal of %s held across a fault was not answered within %v (last: %v)", h.res, probeWait, op)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.c.do(Release, h.res, h.owner, 0, 0, "LOCK.RELEASE", h.res, h.owner)
}

// target picks the master (and its replica) a replica-stop or a
// lock-conn-kill hits, and the names it hits (Fault.Scope): in a cluster
// one of the masters, by choice.
func (e *env) target(choice int) (master, replica *testenv.Redis, scope []string) {
	if e.cl == nil {
		return e.master, e.replica, nil
	}
	master = e.cl.Masters[choice%len(e.cl.Masters)]
	replicas := e.cl.ReplicasOf(master)
	if len(replicas) == 0 {
		e.t.Fatalf("fault: master %s has no replica", master.Addr)
	}
	return master, replicas[0], e.scopeOf(master)
}

// settle waits, after a replica's SIGCONT, until the backend is whole:
// in a cluster the replica is seen again (it was marked failed while it
// was stopped) before the next fault.
func (e *env) settle(master *testenv.Redis) {
	if e.cl != nil {
		e.cl.WaitHealthy(e.t)
		e.cl.WaitReplicated(e.t, master)
	}
}

// checkSentinelMaster fails the run if Sentinel names another master than
// the suite's: only master-failover should make it fail over (see
// sentinelDownAfter), and the suite's own view of the roles must hold.
func (e *env) checkSentinelMaster() {
	if named, err := e.sentinels.Master(0); err != nil || named != e.named(e.master) {
		e.t.Fatalf("fault: Sentinel names %q (err %v) as the master, the suite %s: a failover it did not plan", named, err, e.named(e.master))
	}
}

// readByStoppedProxy returns the ops in flight whose request the stopped
// proxy had read in full: written before this call, every byte of it
// acknowledged by the proxy's side (the client socket's send queue empty)
// and none left unread there (the proxy socket's receive queue empty). The
// two queues are read one after the other, send side first: bytes only
// move from the first to the second, and a stopped proxy takes none out.
func (e *env) readByStoppedProxy() []int { return e.readByStopped(e.proxyAddr()) }

// readByStopped is readByStoppedProxy for the stopped fenceproxy at addr
// (a node of a tier).
func (e *env) readByStopped(addr string) []int {
	_, portS, _ := net.SplitHostPort(addr)
	proxyPort, _ := strconv.Atoi(portS)
	at := e.h.Now()
	e.flightMu.Lock()
	var flights []flight
	for _, f := range e.inFlight {
		if f.sent < at {
			flights = append(flights, f)
		}
	}
	e.flightMu.Unlock()
	sendQ := tcpQueues(func(local, remote int) (int, bool) { return local, remote == proxyPort }, true)
	recvQ := tcpQueues(func(local, remote int) (int, bool) { return remote, local == proxyPort }, false)
	var ids []int
	for _, f := range flights {
		s, ok1 := sendQ[f.port]
		r, ok2 := recvQ[f.port]
		if ok1 && ok2 && s == 0 && r == 0 {
			ids = append(ids, f.op.ID)
		}
	}
	sort.Ints(ids)
	return ids
}

// tcpQueues reads /proc/net/tcp: for each socket that pick accepts, keyed
// by the client port pick returns, its send queue (tx) or receive queue.
func tcpQueues(pick func(local, remote int) (int, bool), tx bool) map[int]int64 {
	out := map[int]int64{}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return out
	}
	port := func(addr string) int {
		_, p, _ := strings.Cut(addr, ":")
		n, _ := strconv.ParseInt(p, 16, 32)
		return int(n)
	}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 5 || f[3] != "01" { // ESTABLISHED
			continue
		}
		key, ok := pick(port(f[1]), port(f[2]))
		if !ok {
			continue
		}
		txS, rxS, _ := strings.Cut(f[4], ":")
		q := rxS
		if tx {
			q = txS
		}
		n, _ := strconv.ParseInt(q, 16, 64)
		out[key] = n
	}
	return out
}

// backupDataDir replaces the backup with a copy of the data dir; the
// proxy must be down.
func (e *env) backupDataDir() {
	if err := os.RemoveAll(e.backup); err != nil {
		e.t.Fatalf("fault: %v", err)
	}
	copyDir(e.t, e.dataDir, e.backup)
}

func copyDir(t *testing.T, from, to string) {
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("fault: cp -a %s %s: %v: %s", from, to, err, out)
	}
}

// snapshotData reads every fenced data list straight from its master.
func (e *env) snapshotData(why string) {
	var owners []*testenv.Redis
	if e.cl != nil {
		owners = e.cl.Owners(e.t)
	}
	e.mu.Lock()
	resources := append(e.allResources(), e.delayed...)
	e.mu.Unlock()
	for _, r := range resources {
		master := e.master
		if owners != nil {
			master = owners[testenv.KeySlot(dataKey(r))]
		}
		addr := master.Addr
		if !e.snapshotList(r, addr, why) {
			return
		}
	}
}

// snapshotList reads r's data list from the master at addr; false if it
// cannot be read now.
func (e *env) snapshotList(r, addr, why string) bool {
	c, err := testenv.TryDial(addr, 5*time.Second)
	if err != nil {
		e.t.Logf("fault: cannot read the data lists (%s): %v", why, err)
		return false
	}
	defer c.Close()
	at := e.h.Now()
	reply, err := c.TryDo("LRANGE", dataKey(r), "0", "-1")
	if err != nil {
		e.t.Logf("fault: LRANGE %s (%s): %v", dataKey(r), why, err)
		return false
	}
	elems, ok := testenv.SplitArray(reply)
	if !ok {
		e.t.Errorf("fault: LRANGE %s on %s = %s", dataKey(r), addr, testenv.ShowReply(reply))
		return false
	}
	s := Snapshot{Resource: r, At: at}
	for _, el := range elems {
		b, _ := testenv.ParseBulk(el)
		s.Items = append(s.Items, string(b))
	}
	e.h.AddSnapshot(s)
	return true
}

// pausedHolder: a separate holder process acquires r with a 300ms lease
// and is SIGSTOPped; meanwhile another owner (the usurper) takes r; past
// the lease plus extra, the holder's FENCE.CHECK, FENCE.EXEC and
// LOCK.RELEASE with its stale token are queued on its stdin and it is
// SIGCONTed. The usurper then renews (its lease must have survived the
// stale release) and releases.
func (e *env) pausedHolder(n int, r string, extra time.Duration) {
	id := 1000 + n
	owner := fmt.Sprintf("holder-%d", n)
	const ttl = 300
	cmd := exec.Command(e.holderBin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err1 := cmd.StdinPipe()
	stdout, err2 := cmd.StdoutPipe()
	if err := errors.Join(err1, err2, cmd.Start()); err != nil {
		e.t.Errorf("fault: starting the holder: %v", err)
		return
	}
	done := make(chan struct{})
	defer func() {
		stdin.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	lines := make(chan string, 8)
	go func() {
		defer close(done)
		buf := make([]byte, 0, 4096)
		one := make([]byte, 1)
		for {
			if _, err := stdout.Read(one); err != nil {
				close(lines)
				cmd.Wait()
				return
			}
			if one[0] == '\n' {
				lines <- string(buf)
				buf = buf[:0]
				continue
			}
			buf = append(buf, one[0])
		}
	}()
	send := func(kind Kind, token int64, args ...string) *Op {
		var opTTL int64
		if kind == Acquire {
			opTTL = ttl
		}
		op := e.h.Begin(id, kind, r, owner, token, opTTL, args)
		fmt.Fprintf(stdin, "{\"addr\":%q,\"args\":[%s]}\n", e.proxyAddr(), quoteAll(args))
		return op
	}
	recv := func(op *Op) {
		select {
		case l, ok := <-lines:
			if !ok {
				e.h.Finish(op, nil, errors.New("holder exited"))
				return
			}
			reply, err := parseHolderLine(l)
			e.h.Finish(op, reply, err)
		case <-time.After(15 * time.Second):
			e.h.Finish(op, nil, errors.New("holder: no reply in 15s"))
		}
	}
	acq := send(Acquire, 0, "LOCK.ACQUIRE", r, owner, strconv.Itoa(ttl), "WAIT", "2000")
	recv(acq)
	if acq.Outcome != OK {
		return
	}
	e.noteToken(r, acq.Result)
	tok := acq.Result

	syscall.Kill(-cmd.Process.Pid, syscall.SIGSTOP)
	pauseStart := e.h.Now()
	u := &client{e: e, id: 2000 + n}
	defer u.close()
	usurper := fmt.Sprintf("usurper-%d", n)
	uop := u.do(Acquire, r, usurper, 0, 3000, "LOCK.ACQUIRE", r, usurper, "3000", "WAIT", "3000")
	if wake := time.Duration(pauseStart) + (ttl*time.Millisecond + extra) - time.Duration(e.h.Now()); wake > 0 {
		time.Sleep(wake)
	}
	ops := []*Op{
		send(Check, tok, "FENCE.CHECK", r, i64(tok)),
		send(Exec, tok, "FENCE.EXEC", r, i64(tok), "RPUSH", dataKey(r), ""),
		send(Release, 0, "LOCK.RELEASE", r, owner),
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	e.h.AddPause(Pause{Client: id, Start: pauseStart, End: e.h.Now()})
	for _, op := range ops {
		recv(op)
	}
	if uop != nil && uop.Outcome == OK {
		u.do(Renew, r, usurper, 0, 3000, "LOCK.RENEW", r, usurper, "3000")
		u.do(Release, r, usurper, 0, 0, "LOCK.RELEASE", r, usurper)
	}
}

func quoteAll(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return strings.Join(q, ",")
}

// parseHolderLine decodes {"reply": "..."} or {"err": "..."}.
func parseHolderLine(l string) ([]byte, error) {
	var v struct {
		Reply string `json:"reply"`
		Err   string `json:"err"`
	}
	if err := json.Unmarshal([]byte(l), &v); err != nil {
		return nil, fmt.Errorf("holder wrote %q: %v", l, err)
	}
	if v.Err != "" {
		return nil, errors.New(v.Err)
	}
	return []byte(v.Reply), nil
}

// slowClient pipelines 40 GETs of a 64 KiB value and reads the replies
// one at a time with a pause between them, so the proxy's writes to it
// back up; everyone else must go on being served.
func (e *env) slowClient(n int, pause time.Duration) {
	c := &client{e: e, id: 3000 + n}
	defer c.close()
	key := "slow:" + strconv.Itoa(n)
	if op := c.do(Set, "", "", 0, 0, "SET", key, strings.Repeat("x", 64<<10)); op == nil || op.Outcome != OK || c.conn == nil {
		return
	}
	var buf []byte
	ops := make([]*Op, 40)
	for i := range ops {
		ops[i] = e.h.Begin(c.id, Get, "", "", 0, 0, []string{"GET", key})
		buf = testenv.AppendCommand(buf, "GET", key)
	}
	nc := c.conn.NetConn()
	nc.SetWriteDeadline(time.Now().Add(opTimeout))
	if _, err := nc.Write(buf); err != nil {
		for _, op := range ops {
			e.h.Finish(op, nil, err)
		}
		return
	}
	for i, op := range ops {
		time.Sleep(pause)
		reply, err := c.conn.ReadReply()
		e.h.Finish(op, reply, err)
		if b, ok := testenv.ParseBulk(reply); err == nil && !(ok && len(b) == 64<<10) && !testenv.IsNull(reply) && !strings.HasPrefix(string(reply), "-") {
			// A reply out of order or cut would show here.
			e.t.Errorf("fault: slow client: GET %s = %s, want the 64 KiB value (or null after a data loss)", key, testenv.ShowReply(reply))
		}
		if err != nil {
			for _, rest := range ops[i+1:] {
				e.h.Finish(rest, nil, err)
			}
			return
		}
	}
}

// cutPipelines opens a few connections, each writing an acquire, a fenced
// write with the newest token seen for the resource, and half a release,
// and closes them at once: outcomes unknown.
func (e *env) cutPipelines(n, choice int) {
	for i := range 1 + choice%4 {
		r := e.resources[(choice+i)%len(e.resources)]
		owner := fmt.Sprintf("cut-%d-%d", n, i)
		id := 4000 + n*10 + i
		conn, err := testenv.TryDial(e.proxyAddr(), opTimeout)
		if err != nil {
			continue
		}
		var buf []byte
		var ops []*Op
		acq := e.h.Begin(id, Acquire, r, owner, 0, 500, []string{"LOCK.ACQUIRE", r, owner, "500"})
		ops = append(ops, acq)
		buf = testenv.AppendCommand(buf, acq.Args...)
		if tok := e.newestSeen(r); tok > 0 {
			ex := e.h.Begin(id, Exec, r, owner, tok, 0, []string{"FENCE.EXEC", r, i64(tok), "RPUSH", dataKey(r), ""})
			ops = append(ops, ex)
			buf = testenv.AppendCommand(buf, ex.Args...)
		}
		rel := testenv.AppendCommand(nil, "LOCK.RELEASE", r, owner)
		buf = append(buf, rel[:len(rel)/2]...)
		nc := conn.NetConn()
		nc.SetWriteDeadline(time.Now().Add(opTimeout))
		_, werr := nc.Write(buf)
		conn.Close()
		cut := errors.New("connection cut mid-pipeline")
		if werr != nil {
			cut = werr
		}
		for _, op := range ops {
			e.h.Finish(op, nil, cut)
		}
	}
}
