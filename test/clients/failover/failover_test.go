// Package failover is the client suites' failover case (test/clients/run.sh,
// SUITES=failover): the real lock libraries (Redisson's RLock, redis-py's
// Lock, node-redlock 5, go-redsync) across a master killed right after a
// grant and a replica promoted by Sentinel.
//
// It starts its own master, replica and three Sentinels (testenv) per mode,
// and in each mode every client runs the same steps on a key of its own:
// the replica is cut off (SIGSTOP and its link closed, so no grant reaches
// it), client A takes the lock, the master is killed, Sentinel promotes the
// replica, and client B takes the same lock.
//
//   - Straight at Redis (A at the master, B at the promoted replica): B is
//     granted too, the double grant. If it is not, the case is inconclusive
//     and fails, so this suite can fail.
//   - Through fenceproxy (--sentinel, --min-replicas 1, --lock-keys
//     'recipelock:*'; A and B at the proxy, which follows Sentinel): at most
//     one holder. A is expected to be refused (the replica never
//     acknowledged its grant); B is retried (bounded) until granted, once
//     the old master is back as the new one's replica.
//
// Redsync runs in this process; the others are probe programs that take a
// lock with the library's ordinary API for each name read on stdin and
// print granted/refused/error: test/clients/java's fenceproxy.LockProbe,
// test/clients/python/lock_probe.py (in its .venv) and
// test/clients/node/lock_probe.js. FENCEPROXY_CLIENTS_DIR is
// test/clients: run.sh installs the packages and sets it; without it the
// suite is skipped (so `go test ./...` passes by it). By hand, once run.sh
// has installed them: FENCEPROXY_CLIENTS_DIR=.. go test . in this
// directory. FENCEPROXY_FAILOVER_CLIENTS
// ("java python node go" by default) picks clients.
//
// Output, as the other client suites: `PASS <client>: <case> (...)`,
// `FAIL <client>: <case>: <call> -> <reply>`, and `failover totals: N
// passed, M failed`.
//
// FENCEPROXY_FAILOVER_NO_LOCK_KEYS=1 starts the proxy without --lock-keys,
// so that SET NX locks are forwarded as on a proxy without recipes: the
// proxy cases of the SET NX clients then fail, which shows they can. A
// proxy binary without --lock-keys (FENCEPROXY_BIN, a build from before
// the recipes) is started without it: every client's proxy case fails there.
package failover

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestMain runs the suite only where run.sh asked for it: `go test ./...`
// has not installed the clients' packages.
func TestMain(m *testing.M) {
	if os.Getenv("FENCEPROXY_CLIENTS_DIR") == "" {
		fmt.Println("failover client suite: FENCEPROXY_CLIENTS_DIR is not set; skipping (SUITES=failover test/clients/run.sh sets it)")
		os.Exit(0)
	}
	testenv.Main(m)
}

var passed, failed atomic.Int64

// The answers of an acquire: a probe's line, or redsync's outcome.
const (
	granted = "granted"
	refused = "refused"
)

// bWait bounds the retries of B's acquire through the proxy after the
// failover (it is refused until the old master is back as a replica).
const bWait = 30 * time.Second

// A prober is one client connected to one address.
type prober interface {
	acquire(key string) string // granted, refused or "error ..."
	close()
}

// A client is a lock library and how to start one of its clients.
type client struct {
	name  string // as in the PASS/FAIL lines: java, python, node, go
	lib   string // the library and call, for the PASS lines
	start func(addr string) (prober, error)
}

func clients(t *testing.T) []client {
	dir, _ := filepath.Abs(os.Getenv("FENCEPROXY_CLIENTS_DIR"))
	all := map[string]client{
		"java": {name: "java", lib: "Redisson RLock.tryLock()", start: func(addr string) (prober, error) {
			target := os.Getenv("FENCEPROXY_JAVA_TARGET") // run.sh's build of the Java suite
			if target == "" {
				target = filepath.Join(dir, "java/target")
			}
			cp, err := os.ReadFile(filepath.Join(target, "classpath.txt"))
			if err != nil {
				return nil, fmt.Errorf("%v (build test/clients/java: mvn package, as run.sh does)", err)
			}
			return startProbe("java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=error", "-cp",
				filepath.Join(target, "classes")+":"+strings.TrimSpace(string(cp)), "fenceproxy.LockProbe", addr)
		}},
		"python": {name: "python", lib: "redis-py Lock.acquire(blocking=False)", start: func(addr string) (prober, error) {
			return startProbe(filepath.Join(dir, "python/.venv/bin/python"), "-W", "ignore",
				filepath.Join(dir, "python/lock_probe.py"), addr)
		}},
		"node": {name: "node", lib: "node-redlock 5 acquire (retryCount 0)", start: func(addr string) (prober, error) {
			return startProbe("node", filepath.Join(dir, "node/lock_probe.js"), addr)
		}},
		"go": {name: "go", lib: "redsync Mutex.TryLock", start: startRedsync},
	}
	names := strings.Fields(os.Getenv("FENCEPROXY_FAILOVER_CLIENTS"))
	if len(names) == 0 {
		names = []string{"java", "python", "node", "go"}
	}
	var out []client
	for _, n := range names {
		c, ok := all[n]
		if !ok {
			t.Fatalf("FENCEPROXY_FAILOVER_CLIENTS names %q; the clients are java python node go", n)
		}
		out = append(out, c)
	}
	return out
}

// TestClientLocksAcrossFailover runs the two modes, each with every client
// in one failover, and prints the totals line.
func TestClientLocksAcrossFailover(t *testing.T) {
	cs := clients(t)
	t.Run("direct", func(t *testing.T) { scenario(t, cs, false) })
	t.Run("proxy", func(t *testing.T) { scenario(t, cs, true) })
	fmt.Printf("failover totals: %d passed, %d failed\n", passed.Load(), failed.Load())
}

// failoverPair is a master, its replica and three Sentinels watching them.
type failoverPair struct {
	master, replica *testenv.Redis
	sentinels       *testenv.Sentinels
}

func newFailoverPair(t *testing.T) failoverPair {
	var f failoverPair
	f.master = testenv.StartRedis(t, testenv.RedisOptions{})
	f.replica = testenv.StartReplica(t, f.master)
	f.sentinels = testenv.StartSentinels(t, f.master, testenv.SentinelOptions{})
	return f
}

// cutReplica stops the replica (SIGSTOP) and closes its link on the
// master, so that no write made after it reaches the replica.
func (f failoverPair) cutReplica(t *testing.T) {
	f.replica.Stop()
	testenv.Dial(t, f.master.Addr).Do("CLIENT", "KILL", "TYPE", "replica")
}

// failover kills the master, lets the replica run again and waits until
// Sentinel has promoted it.
func (f failoverPair) failover(t *testing.T) {
	f.master.Kill()
	f.replica.Cont()
	f.sentinels.WaitMaster(t, f.replica.Addr)
	f.replica.Promoted()
}

// knowsLockKeys reports whether the proxy binary has --lock-keys. One that
// does not (a build from before the recipes, FENCEPROXY_BIN) is started
// without it, so that the cases fail on the grants it makes, not on the flag.
func knowsLockKeys(t *testing.T) bool {
	out, _ := exec.Command(testenv.BuildProxy(t), "-help").CombinedOutput()
	return strings.Contains(string(out), "-lock-keys")
}

// outcome is one client's run of the steps.
type outcome struct {
	a, b   string // A's and B's answers
	bTries int
}

func scenario(t *testing.T, cs []client, viaProxy bool) {
	mode := "direct"
	if viaProxy {
		mode = "proxy"
	}
	f := newFailoverPair(t)
	addrA := f.master.Addr
	var p *testenv.Proxy
	if viaProxy {
		var args []string
		if os.Getenv("FENCEPROXY_FAILOVER_NO_LOCK_KEYS") != "1" && knowsLockKeys(t) {
			args = []string{"--lock-keys", "recipelock:*"}
		}
		p = testenv.StartProxy(t, testenv.ProxyOptions{Sentinels: f.sentinels, MinReplicas: 1,
			ReplicaTimeout: 300 * time.Millisecond, Args: args})
		addrA = p.Addr
	}
	key := func(c client) string { return "recipelock:failover:" + mode + ":" + c.name }
	out := make([]outcome, len(cs))

	// Every A is connected before the replica is cut off, so that it is
	// stopped only as long as the acquires take.
	as := make([]prober, len(cs))
	for i, c := range cs {
		pr, err := c.start(addrA)
		if err != nil {
			out[i].a = "error " + err.Error()
			continue
		}
		as[i] = pr
	}
	f.cutReplica(t)
	var wg sync.WaitGroup
	for i, c := range cs {
		if as[i] == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].a = as[i].acquire(key(c))
		}()
	}
	wg.Wait()
	f.failover(t)
	for _, pr := range as {
		if pr != nil {
			pr.close()
		}
	}

	addrB := f.replica.Addr
	if viaProxy {
		// The old master comes back empty as the new one's replica, so
		// grants can be acknowledged again; until then they are refused.
		f.master.Restart(t)
		f.master.Follow(t, f.replica)
		addrB = p.Addr
	}
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].b, out[i].bTries = acquireB(c, addrB, key(c), viaProxy)
		}()
	}
	wg.Wait()

	for i, c := range cs {
		judge(t, c, mode, out[i])
	}
}

// acquireB is B's acquire: once straight at Redis; through the proxy,
// retried (a new client after an error) until granted or bWait is over.
func acquireB(c client, addr, key string, retry bool) (answer string, tries int) {
	deadline := time.Now().Add(bWait)
	var pr prober
	defer func() {
		if pr != nil {
			pr.close()
		}
	}()
	for {
		tries++
		if pr == nil {
			var err error
			if pr, err = c.start(addr); err != nil {
				answer = "error " + err.Error()
			}
		}
		if pr != nil {
			answer = pr.acquire(key)
			if strings.HasPrefix(answer, "error") {
				pr.close()
				pr = nil
			}
		}
		if answer == granted || !retry || time.Now().After(deadline) {
			return answer, tries
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// judge prints and counts one client's case.
func judge(t *testing.T, c client, mode string, o outcome) {
	var what, problem string
	switch mode {
	case "direct":
		what = "straight at Redis, a grant lost with the master is granted again after the failover (the double grant)"
		if o.a != granted || o.b != granted {
			problem = fmt.Sprintf("A %s at the master -> %s, B %s at the promoted replica -> %s (want granted twice; inconclusive)",
				c.lib, o.a, c.lib, o.b)
		}
	default:
		what = "through fenceproxy across the failover, at most one holder"
		switch {
		case o.a == granted && o.b == granted:
			problem = fmt.Sprintf("A %s with the replica cut off -> granted, B %s after the failover -> granted: two holders",
				c.lib, c.lib)
		case o.a != granted && o.b != granted:
			problem = fmt.Sprintf("A %s with the replica cut off -> %s, B %s after the failover -> %s after %d tries in %v (want B granted once the new master has a replica)",
				c.lib, o.a, c.lib, o.b, o.bTries, bWait)
		}
	}
	if problem != "" {
		failed.Add(1)
		fmt.Printf("FAIL %s: %s: %s\n", c.name, what, problem)
		t.Errorf("%s: %s", c.name, problem)
		return
	}
	passed.Add(1)
	fmt.Printf("PASS %s: %s (%s: A -> %s, B -> %s in %d tries)\n", c.name, what, c.lib, o.a, o.b, o.bTries)
}

// probe is a probe program: names on its stdin, answers on its stdout.
type probe struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	stop  sync.Once
}

// probeWait bounds a probe's start (a JVM with Redisson on a loaded
// machine) and each of its answers.
const probeWait = 60 * time.Second

func startProbe(name string, args ...string) (prober, error) {
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &probe{cmd: cmd, in: in, lines: make(chan string, 16)}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	first := p.read()
	if !strings.HasPrefix(first, "ready ") {
		p.close()
		return nil, fmt.Errorf("%s did not start: %s", filepath.Base(name), first)
	}
	return p, nil
}

// read is the probe's next line, or "error ..." if it ended or hung.
func (p *probe) read() string {
	select {
	case l, ok := <-p.lines:
		if !ok {
			return "error the probe exited"
		}
		return l
	case <-time.After(probeWait):
		return fmt.Sprintf("error no answer within %v", probeWait)
	}
}

func (p *probe) acquire(key string) string {
	if _, err := fmt.Fprintln(p.in, key); err != nil {
		return "error " + err.Error()
	}
	return p.read()
}

// close ends the probe: stdin closed, then killed if it has not exited
// within a few seconds (a client may linger closing its connections).
func (p *probe) close() {
	p.stop.Do(func() {
		p.in.Close()
		done := make(chan struct{})
		go func() { p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-done
		}
	})
}

// redsyncProber is a go-redsync client on one go-redis connection pool.
type redsyncProber struct {
	c  *redis.Client
	rs *redsync.Redsync
}

func startRedsync(addr string) (prober, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, err
	}
	return &redsyncProber{c: c, rs: redsync.New(goredis.NewPool(c))}, nil
}

func (r *redsyncProber) acquire(key string) string {
	err := r.rs.NewMutex(key, redsync.WithExpiry(60*time.Second), redsync.WithTries(1)).TryLock()
	var taken *redsync.ErrTaken
	switch {
	case err == nil:
		return granted
	case errors.Is(err, redsync.ErrFailed), errors.As(err, &taken):
		return refused
	default:
		return "error " + err.Error()
	}
}

func (r *redsyncProber) close() { r.c.Close() }
