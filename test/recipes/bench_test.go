package recipes

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestRedissonBench is a benchmark, not a test (issue #23's speed item):
// Redisson RLock lock/unlock cycles/s through fenceproxy against Redisson
// in master-slave mode straight at the same master and replica, where it
// sends its own WAIT after every lock script (test/clients/java's
// LockBench prints both and the ratio). The replica follows its master
// through a Link that delays the replication stream by
// REDISSON_BENCH_DELAY (default 1ms), as a replica in another rack or
// zone is: on loopback a WAIT costs next to nothing, and the proxy's hop
// is all there is to see. It runs only with REDISSON_BENCH=1, after
// `mvn -q -B package -DskipTests` in test/clients/java; REDISSON_BENCH_ARGS
// are LockBench's (threads seconds rounds; default "32 5 2"), and
// REDISSON_BENCH_PROXY_ARGS extra flags of fenceproxy's (--lock-conns 4),
// REDISSON_BENCH_DATA_DIR where its fence store goes (a tmpfs: no fsync cost).
// REDISSON_BENCH_RELAY=1 adds a fourth mode: single-server through a byte
// relay in front of the master (a process of its own, io.Copy each way), a
// hop that does nothing: no safety, no WAIT. Its CPU per cycle is the
// floor of any proxy's on this machine, to hold against what sharing
// WAITs saves the client and Redis (direct's CPU per cycle minus the
// unsafe mode's).
// REDISSON_BENCH_THREADS ("4 8 16 32") runs LockBench once per thread count
// against the same processes and ends with a table of them: with few
// threads the replica's round trips bound both modes, with many the
// machine's cores do (docs/performance.md, "Clients' own locks: Redisson").
//
//	REDISSON_BENCH=1 go test ./test/recipes -run RedissonBench -v
func TestRedissonBench(t *testing.T) {
	if os.Getenv("REDISSON_BENCH") == "" {
		t.Skip("a benchmark: set REDISSON_BENCH=1")
	}
	java := filepath.Join("..", "clients", "java")
	cp, err := os.ReadFile(filepath.Join(java, "target", "classpath.txt"))
	if err != nil {
		t.Fatalf("build the Java suite first (mvn -q -B package -DskipTests in test/clients/java): %v", err)
	}
	delay := time.Millisecond
	if d := os.Getenv("REDISSON_BENCH_DELAY"); d != "" {
		if delay, err = time.ParseDuration(d); err != nil {
			t.Fatal(err)
		}
	}
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	if delay > 0 {
		link := testenv.StartLink(t, master.Addr)
		r := testenv.Dial(t, replica.Addr)
		r.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(link.Port()))
		master.WaitReplicas(t, 1)
		link.Delay(t, testenv.Downstream, delay)
	}
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1, ReplicaTimeout: time.Second, DataDir: dataDir(t),
		Args: strings.Fields(os.Getenv("REDISSON_BENCH_PROXY_ARGS"))})
	var relay relayProc
	if os.Getenv("REDISSON_BENCH_RELAY") != "" {
		relay = startRelay(t, master.Addr)
	}
	args := strings.Fields(os.Getenv("REDISSON_BENCH_ARGS"))
	threads := strings.Fields(os.Getenv("REDISSON_BENCH_THREADS"))
	if len(threads) == 0 {
		threads = []string{""} // LockBench's own, or REDISSON_BENCH_ARGS's
	}
	var table strings.Builder
	fmt.Fprintf(&table, "replica delay %v; per thread count, cycles/s (the rounds' mean) and the last round's CPU µs per cycle:\n", delay)
	fmt.Fprintf(&table, "%-8s %-10s %-10s %-6s %-6s %s\n", "threads", "proxy/s", "direct/s", "ratio", "relay", "cpu µs/cycle (through fenceproxy | direct | unsafe | relay)")
	for _, n := range threads {
		run := args
		if n != "" {
			run = append([]string{n}, args[min(1, len(args)):]...)
		}
		out := lockBench(t, java, string(cp), run, p, master, replica, relay)
		t.Logf("replication delayed by %v, fenceproxy %s, LockBench %v:\n%s", delay, os.Getenv("REDISSON_BENCH_PROXY_ARGS"), run, out)
		fmt.Fprintf(&table, "%-8s %s\n", n, summarizeLockBench(out))
	}
	t.Log(table.String())
	// Where the proxy's side of a cycle went (its lock path's own
	// histograms: the rest of a cycle is the client's and the network's),
	// and what it counted (grants, releases, forwarded requests: a
	// Redisson cycle is one of each).
	_, body := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "fenceproxy_") && !strings.HasSuffix(l, " 0") &&
			(strings.Contains(l, "_seconds_sum") || strings.Contains(l, "_seconds_count") || strings.Contains(l, "_total")) {
			t.Log(l)
		}
	}
}

// lockBench runs LockBench with args against p and the master and replica
// behind it, and returns what it printed.
func lockBench(t *testing.T, java, cp string, args []string, p *testenv.Proxy, master, replica *testenv.Redis, relay relayProc) string {
	t.Helper()
	pids := fmt.Sprintf("fenceproxy:%d,master:%d,replica:%d", p.Pid(), master.Pid(), replica.Pid())
	if relay.addr != "" {
		pids += fmt.Sprintf(",relay:%d", relay.pid)
	}
	cmd := exec.Command("java", append([]string{"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-cp", filepath.Join(java, "target", "classes") + ":" + strings.TrimSpace(cp), "fenceproxy.LockBench"}, args...)...)
	cmd.Env = append(os.Environ(), "FENCEPROXY_ADDR="+p.Addr, "FENCEPROXY_MASTER_ADDR="+master.Addr, "FENCEPROXY_REPLICA_ADDR="+replica.Addr,
		"FENCEPROXY_RELAY_ADDR="+relay.addr, "FENCEPROXY_BENCH_PIDS="+pids)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("LockBench %v: %v\n%s", args, err, out)
	}
	return string(out)
}

var (
	benchRound = regexp.MustCompile(`round \d+: fenceproxy \(single-server\) (\d+) cycles/s, direct \(master-slave, WAIT\) (\d+) cycles/s`)
	benchRelay = regexp.MustCompile(`ratio relay/direct: ([0-9.]+)`)
	benchCPU   = regexp.MustCompile(`cpu µs/cycle (proxy|direct|unsafe|relay): (.*)`)
)

// summarizeLockBench is one line of LockBench's output: both modes'
// cycles/s (the rounds' mean), their ratio (and the relay's against
// direct), and each process's CPU per cycle in the last round of each mode.
func summarizeLockBench(out string) string {
	var proxy, direct float64
	rounds := benchRound.FindAllStringSubmatch(out, -1)
	for _, m := range rounds {
		p, _ := strconv.ParseFloat(m[1], 64)
		d, _ := strconv.ParseFloat(m[2], 64)
		proxy, direct = proxy+p/float64(len(rounds)), direct+d/float64(len(rounds))
	}
	cpu := map[string]string{}
	for _, m := range benchCPU.FindAllStringSubmatch(out, -1) {
		cpu[m[1]] = m[2]
	}
	ratio := 0.0
	if direct > 0 {
		ratio = proxy / direct
	}
	relay := "-"
	if m := benchRelay.FindStringSubmatch(out); m != nil {
		relay = m[1]
	}
	line := fmt.Sprintf("%-10.0f %-10.0f %-6.2f %-6s %s | %s | %s", proxy, direct, ratio, relay, cpu["proxy"], cpu["direct"], cpu["unsafe"])
	if relay != "-" {
		line += " | " + cpu["relay"]
		if floor, ok := cpuFloor(cpu); ok {
			line += "\n         " + floor
		}
	}
	return line
}

// cpuFloor is the least CPU a Redisson cycle through any hardening proxy
// could cost this machine in all, from one run's figures: Java's as single-
// server straight at the master (the fewest messages a cycle has: no
// WAIT), Redis's as through fenceproxy (the lock records and fence marks
// the contract keeps in Redis, and the shared WAIT), and a byte relay's
// for the proxy's own process (the least a hop costs). Where the cores
// bind (both modes use the machine's every core), the rates go as the
// inverse of the CPU a cycle costs, so direct's total over this floor
// bounds the ratio any such proxy could reach here.
func cpuFloor(cpu map[string]string) (string, bool) {
	field := func(mode, name string) (float64, bool) {
		f := strings.Fields(cpu[mode])
		for i := 0; i+1 < len(f); i++ {
			if f[i] == name {
				v, err := strconv.ParseFloat(f[i+1], 64)
				return v, err == nil
			}
		}
		return 0, false
	}
	java, ok1 := field("unsafe", "java")
	master, ok2 := field("proxy", "master")
	replica, ok3 := field("proxy", "replica")
	hop, ok4 := field("relay", "relay")
	direct, ok5 := field("direct", "total")
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return "", false
	}
	floor := java + master + replica + hop
	return fmt.Sprintf("cpu floor through any proxy: %.0f µs/cycle (java unsafe %.0f + master %.0f + replica %.0f through fenceproxy + relay %.0f) "+
		"against direct's %.0f: where the cores bind, at most %.2fx", floor, java, master, replica, hop, direct, direct/floor), true
}

// dataDir is the fence store's directory: under REDISSON_BENCH_DATA_DIR if
// set (a tmpfs, to see what the disk's fsyncs cost), else testenv's.
func dataDir(t *testing.T) string {
	base := os.Getenv("REDISSON_BENCH_DATA_DIR")
	if base == "" {
		return ""
	}
	dir, err := os.MkdirTemp(base, "fenceproxy-bench")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// relayUpstreamEnv, set, makes this test binary TestRedissonBench's relay
// to the address it holds (TestMain) instead of running tests.
const relayUpstreamEnv = "FENCEPROXY_BENCH_RELAY_UPSTREAM"

// relayProc is a relay process: where it listens, and its pid (for its CPU).
type relayProc struct {
	addr string
	pid  int
}

// startRelay starts this test binary as a byte relay to upstream and
// returns it once it listens; it is killed when the test ends.
func startRelay(t *testing.T, upstream string) relayProc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), relayUpstreamEnv+"="+upstream)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the relay did not start: %v", err)
	}
	return relayProc{addr: strings.TrimSpace(addr), pid: cmd.Process.Pid}
}

// serveRelay listens on loopback, prints its address, and copies bytes both
// ways between each client and upstream, and nothing else: the cheapest
// proxy there is (io.Copy between two TCP connections splices on Linux).
// It runs until it is killed.
func serveRelay(upstream string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				return
			}
			defer u.Close()
			go func() { io.Copy(u, c); u.Close() }()
			io.Copy(c, u)
		}()
	}
}

// TestCPUFloor: the floor is read off LockBench's lines as documented.
func TestCPUFloor(t *testing.T) {
	cpu := map[string]string{
		"proxy":  "java 251 fenceproxy 147 master 84 replica 26 relay 0 total 507",
		"direct": "java 165 fenceproxy 0 master 65 replica 17 relay 0 total 248",
		"unsafe": "java 105 fenceproxy 0 master 46 replica 13 relay 0 total 164",
		"relay":  "java 120 fenceproxy 0 master 47 replica 18 relay 58 total 244",
	}
	got, ok := cpuFloor(cpu)
	if !ok || !strings.Contains(got, "273 µs/cycle") || !strings.Contains(got, "at most 0.91x") {
		t.Fatalf("cpuFloor = %q, %v; want a floor of 105+84+26+58 = 273 µs and 248/273 = 0.91x", got, ok)
	}
	if _, ok := cpuFloor(map[string]string{"proxy": cpu["proxy"]}); ok {
		t.Fatal("a floor from a run without the other modes")
	}
}
