package testenv

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

func TestFreePort(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p := FreePort(t)
		if p <= 0 || p > 65535 || seen[p] {
			t.Fatalf("FreePort returned %d (seen before: %v)", p, seen[p])
		}
		seen[p] = true
	}
}

func TestMasterReplica(t *testing.T) {
	master := StartRedis(t, RedisOptions{})
	replica := StartReplica(t, master)
	if master.Addr == replica.Addr || master.Dir == replica.Dir {
		t.Fatalf("master and replica share %s / %s", master.Addr, master.Dir)
	}

	m := Dial(t, master.Addr)
	if got := m.Do("SET", "k", "v\r\nwith crlf"); string(got) != "+OK\r\n" {
		t.Fatalf("SET = %q", got)
	}
	if n, ok := ParseInt(m.Do("WAIT", "1", "5000")); !ok || n != 1 {
		t.Fatalf("WAIT 1 5000: %d replicas acknowledged", n)
	}
	r := Dial(t, replica.Addr)
	if got, want := string(r.Do("GET", "k")), "$12\r\nv\r\nwith crlf\r\n"; got != want {
		t.Fatalf("GET on replica = %q, want %q", got, want)
	}
	if got := r.Do("SET", "k", "x"); !strings.HasPrefix(string(got), "-READONLY") {
		t.Fatalf("SET on replica = %q, want -READONLY", got)
	}
	// No persistence.
	if got := string(m.Do("CONFIG", "GET", "save")); got != "*2\r\n$4\r\nsave\r\n$0\r\n\r\n" {
		t.Fatalf("CONFIG GET save = %q", got)
	}
	if got := string(m.Do("CONFIG", "GET", "appendonly")); got != "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n" {
		t.Fatalf("CONFIG GET appendonly = %q", got)
	}
}

func TestRedisArgs(t *testing.T) {
	r := StartRedis(t, RedisOptions{Args: []string{"--maxmemory", "12345678"}})
	got := string(Dial(t, r.Addr).Do("CONFIG", "GET", "maxmemory"))
	if got != "*2\r\n$9\r\nmaxmemory\r\n$8\r\n12345678\r\n" {
		t.Fatalf("CONFIG GET maxmemory = %q", got)
	}
}

func TestKillRestart(t *testing.T) {
	r := StartRedis(t, RedisOptions{})
	c := Dial(t, r.Addr)
	c.Do("SET", "k", "v")
	pid := r.Pid()

	r.Kill()
	if _, err := c.TryDo("GET", "k"); err == nil {
		t.Fatalf("GET after Kill succeeded")
	}
	if processAlive(pid) {
		t.Fatalf("pid %d still alive after Kill", pid)
	}
	if dialable(r.Addr) {
		t.Fatalf("%s still accepts connections after Kill", r.Addr)
	}
	r.Kill() // a second Kill is a no-op

	r.Restart(t)
	if r.Pid() == pid {
		t.Fatalf("Restart kept pid %d", pid)
	}
	if got := Dial(t, r.Addr).Do("GET", "k"); !IsNull(got) {
		t.Fatalf("GET after Restart = %q, want null: data must be gone", got)
	}
	// Restart of a running server kills it first.
	pid = r.Pid()
	r.Restart(t)
	if processAlive(pid) {
		t.Fatalf("old pid %d alive after Restart", pid)
	}
}

func TestReplicaRestart(t *testing.T) {
	master := StartRedis(t, RedisOptions{})
	replica := StartReplica(t, master)
	m := Dial(t, master.Addr)
	m.Do("SET", "k", "v")
	m.Do("WAIT", "1", "5000")

	replica.Restart(t) // waits for the link again
	if n, ok := ParseInt(m.Do("WAIT", "1", "5000")); !ok || n != 1 {
		t.Fatalf("WAIT after replica restart: %d", n)
	}
	if got := string(Dial(t, replica.Addr).Do("GET", "k")); got != "$1\r\nv\r\n" {
		t.Fatalf("GET on restarted replica = %q: it did not resync", got)
	}

	// A restarted master comes back empty; its replica reconnects and
	// follows it, losing the key too.
	master.Restart(t)
	master.WaitReplicas(t, 1)
	m = Dial(t, master.Addr)
	if got := m.Do("GET", "k"); !IsNull(got) {
		t.Fatalf("GET on restarted master = %q", got)
	}
	m.Do("SET", "k2", "v2")
	m.Do("WAIT", "1", "5000")
	r := Dial(t, replica.Addr)
	if got := r.Do("GET", "k"); !IsNull(got) {
		t.Fatalf("replica kept k after master restart: %q", got)
	}
	if got := string(r.Do("GET", "k2")); got != "$2\r\nv2\r\n" {
		t.Fatalf("GET k2 on replica = %q", got)
	}
}

func TestStopCont(t *testing.T) {
	r := StartRedis(t, RedisOptions{})
	c := Dial(t, r.Addr)
	r.Stop()
	c.Send("PING")
	c.Flush()
	c.SetTimeout(300 * time.Millisecond)
	_, err := c.ReadReply()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("ReadReply from a stopped server: %v, want a timeout", err)
	}
	r.Cont()
	c.SetTimeout(DefaultTimeout)
	if got, err := c.ReadReply(); err != nil || string(got) != "+PONG\r\n" {
		t.Fatalf("after Cont: %q, %v", got, err)
	}
}

// A stopped server is still killed by its cleanup.
func TestStoppedIsCleanedUp(t *testing.T) {
	var pid int
	t.Run("inner", func(t *testing.T) {
		r := StartRedis(t, RedisOptions{})
		pid = r.Pid()
		r.Stop()
	})
	if processAlive(pid) {
		t.Fatalf("stopped redis-server pid %d survived its test's cleanup", pid)
	}
}

// Kill may race with Pid from another goroutine (run with -race): Pid
// keeps naming the same process, and once Kill returns that process has
// exited and been reaped, and its port answers no more.
func TestKillFromGoroutine(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		t.Run("", func(t *testing.T) {
			r := StartRedis(t, RedisOptions{})
			pid := r.Pid()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.Kill()
			}()
			if got := r.Pid(); got != pid {
				t.Errorf("Pid during Kill = %d, want %d", got, pid)
			}
			wg.Wait()
			if !r.proc().exited() {
				t.Fatalf("pid %d not reaped after Kill returned", pid)
			}
			if processAlive(pid) {
				t.Fatalf("pid %d still alive after Kill returned", pid)
			}
			if c, err := net.DialTimeout("tcp", r.Addr, time.Second); err == nil {
				c.Close()
				t.Fatalf("%s still accepts connections after Kill returned", r.Addr)
			}
		})
	}
}

func TestRESP3FromRedis(t *testing.T) {
	r := StartRedis(t, RedisOptions{})
	c := Dial(t, r.Addr)
	if got := c.Do("HELLO", "3"); got[0] != '%' {
		t.Fatalf("HELLO 3 = %q, want a map", got)
	}
	c.Do("HSET", "h", "f", "v")
	if got := string(c.Do("HGETALL", "h")); got != "%1\r\n$1\r\nf\r\n$1\r\nv\r\n" {
		t.Fatalf("HGETALL = %q", got)
	}
	c.Do("SADD", "s", "a")
	if got := string(c.Do("SMEMBERS", "s")); got != "~1\r\n$1\r\na\r\n" {
		t.Fatalf("SMEMBERS = %q", got)
	}
	c.Do("ZADD", "z", "1.5", "m")
	if got := string(c.Do("ZSCORE", "z", "m")); got != ",1.5\r\n" {
		t.Fatalf("ZSCORE = %q", got)
	}
	if got := c.Do("GET", "missing"); string(got) != "_\r\n" || !IsNull(got) {
		t.Fatalf("GET missing = %q", got)
	}
	// Pipelined: replies in order.
	c.Send("INCR", "n")
	c.Send("INCR", "n")
	c.Send("INCR", "n")
	c.Flush()
	for want := int64(1); want <= 3; want++ {
		got, err := c.ReadReply()
		if n, ok := ParseInt(got); err != nil || !ok || n != want {
			t.Fatalf("pipelined INCR %d = %q, %v", want, got, err)
		}
	}
	// Push message from pub/sub.
	c.Do("SUBSCRIBE", "ch")
	Dial(t, r.Addr).Do("PUBLISH", "ch", "hi")
	got, err := c.ReadReply()
	if err != nil || string(got) != ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n" {
		t.Fatalf("push = %q, %v", got, err)
	}
}

func TestMalformedInputClosed(t *testing.T) {
	r := StartRedis(t, RedisOptions{})
	c := Dial(t, r.Addr)
	c.WriteRaw([]byte("*1\r\n$x\r\n"))
	got, err := c.ReadReply()
	if err != nil || !strings.HasPrefix(string(got), "-ERR Protocol error") {
		t.Fatalf("reply to malformed input = %q, %v", got, err)
	}
	if got, err := c.ReadReply(); err != io.EOF {
		t.Fatalf("after protocol error: %q, %v; want io.EOF", got, err)
	}
}

// stubProxy builds testdata/stubproxy, a byte-forwarding stand-in for
// fenceproxy, so the proxy helpers are tested before fenceproxy exists.
func stubProxy(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stubproxy")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/stubproxy").CombinedOutput()
	if err != nil {
		t.Fatalf("building stubproxy: %v\n%s", err, out)
	}
	return bin
}

func TestProxyLifecycleWithStub(t *testing.T) {
	bin := stubProxy(t)
	master := StartRedis(t, RedisOptions{})
	p := startProxy(t, bin, ProxyOptions{Backend: master.Addr, MinReplicas: 1, ReplicaTimeout: 250 * time.Millisecond})
	if _, err := os.Stat(p.DataDir); err != nil {
		t.Fatalf("data dir: %v", err)
	}
	if !dialable(p.MetricsAddr) {
		t.Fatalf("metrics address %s not listening", p.MetricsAddr)
	}
	c := Dial(t, p.Addr)
	c.Do("SET", "k", "v")
	if got := string(Dial(t, master.Addr).Do("GET", "k")); got != "$1\r\nv\r\n" {
		t.Fatalf("GET through backend = %q", got)
	}
	for _, want := range []string{"--min-replicas 1", "--replica-timeout 250ms", "--backend " + master.Addr, "stubproxy: listening on " + p.Addr} {
		if !strings.Contains(p.Log(), want) {
			t.Fatalf("log lacks %q:\n%s", want, p.Log())
		}
	}

	addr, pid := p.Addr, p.Pid()
	p.Kill9()
	if processAlive(pid) || dialable(addr) {
		t.Fatalf("proxy alive after Kill9")
	}
	p.Restart(t)
	if p.Addr != addr || p.Pid() == pid {
		t.Fatalf("Restart: addr %s (was %s), pid %d (was %d)", p.Addr, addr, p.Pid(), pid)
	}
	if got := string(Dial(t, p.Addr).Do("GET", "k")); got != "$1\r\nv\r\n" {
		t.Fatalf("GET after proxy restart = %q", got)
	}
	if n := strings.Count(p.Log(), "--- testenv"); n != 2 {
		t.Fatalf("log has %d start headers, want 2", n)
	}

	code, err := p.Terminate()
	if err != nil || code != 0 {
		t.Fatalf("Terminate = %d, %v; want 0, nil", code, err)
	}
	if !strings.Contains(p.Log(), "SIGTERM, exiting") {
		t.Fatalf("log lacks the SIGTERM line:\n%s", p.Log())
	}
	if _, err := p.Terminate(); err == nil {
		t.Fatalf("Terminate of a stopped proxy: nil error")
	}
	p.Restart(t) // from stopped
}

func TestProxyExitCodeWithStub(t *testing.T) {
	bin := stubProxy(t)
	master := StartRedis(t, RedisOptions{})
	p := startProxy(t, bin, ProxyOptions{Backend: master.Addr, Args: []string{"--exit-after", "200ms"}})
	deadline := time.Now().Add(5 * time.Second)
	for !p.proc().exited() {
		if time.Now().After(deadline) {
			t.Fatalf("stub did not exit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := p.proc().exitCode(); code != 3 {
		t.Fatalf("exit code %d, want 3", code)
	}
}

// TestProxyBuilt runs the real fenceproxy. A cmd/fenceproxy without Go
// files (moved, renamed) fails it rather than skipping it, so the harness
// never stops running the real binary without a sound.
func TestProxyBuilt(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if files, _ := filepath.Glob(filepath.Join(root, "cmd", "fenceproxy", "*.go")); len(files) == 0 && os.Getenv("FENCEPROXY_BIN") == "" {
		t.Fatalf("%s has no Go files and FENCEPROXY_BIN is not set: testenv builds fenceproxy from there (BuildProxy); move it back, or point BuildProxy and this test at its new place", filepath.Join(root, "cmd", "fenceproxy"))
	}
	master := StartRedis(t, RedisOptions{})
	StartReplica(t, master)
	p := StartProxy(t, ProxyOptions{Backend: master.Addr, MinReplicas: 1, ReplicaTimeout: time.Second})
	c := Dial(t, p.Addr)
	if got := string(c.Do("SET", "k", "v")); got != "+OK\r\n" {
		t.Fatalf("SET through fenceproxy = %q", got)
	}
	p.Kill9()
	p.Restart(t)
	if code, err := p.Terminate(); err != nil || code != 0 {
		t.Fatalf("Terminate = %d, %v; want 0 (SIGTERM drains and exits 0)", code, err)
	}
}

func processAlive(pid int) bool {
	// Signal 0 checks existence; our children are reaped by Wait, so a
	// zombie does not count as alive here.
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}

// TestListensOnAGoneProcess: a port answered by a listener of another
// process is not a process's own, nor is it once that process is gone and
// reaped, so waitReady keeps waiting and sees it exit (then starts again
// on another port) rather than taking another server for it. Mutation:
// with an unreadable /proc/<pid>/fd read as "cannot say", CI's
// test/security TestInFrontOfCluster once sent AUTH to another test's
// Redis, its fenceproxy having failed to bind the port.
func TestListensOnAGoneProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if owns, known := listensOn(os.Getpid(), ln.Addr().String()); !owns || !known {
		t.Fatalf("our own listener: owns %v, known %v; want true, true", owns, known)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if owns, known := listensOn(cmd.Process.Pid, ln.Addr().String()); owns || !known {
		t.Fatalf("a reaped process: owns %v, known %v; want false, true", owns, known)
	}
}
