package recipes

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	args := strings.Fields(os.Getenv("REDISSON_BENCH_ARGS"))
	cmd := exec.Command("java", append([]string{"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-cp", filepath.Join(java, "target", "classes") + ":" + strings.TrimSpace(string(cp)), "fenceproxy.LockBench"}, args...)...)
	cmd.Env = append(os.Environ(), "FENCEPROXY_ADDR="+p.Addr, "FENCEPROXY_MASTER_ADDR="+master.Addr, "FENCEPROXY_REPLICA_ADDR="+replica.Addr,
		fmt.Sprintf("FENCEPROXY_BENCH_PIDS=fenceproxy:%d,master:%d,replica:%d", p.Pid(), master.Pid(), replica.Pid()))
	out, err := cmd.CombinedOutput()
	t.Logf("replication delayed by %v, fenceproxy %s:\n%s", delay, os.Getenv("REDISSON_BENCH_PROXY_ARGS"), out)
	if err != nil {
		t.Fatalf("LockBench: %v", err)
	}
	// Where the proxy's side of a cycle went (its lock path's own
	// histograms: the rest of a cycle is the client's and the network's).
	_, body := testenv.HTTPGet(t, "http://"+p.MetricsAddr+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "fenceproxy_") && (strings.Contains(l, "_seconds_sum") || strings.Contains(l, "_seconds_count")) {
			t.Log(l)
		}
	}
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
