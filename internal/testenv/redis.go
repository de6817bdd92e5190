package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// redisWait bounds the wait for redis-server to answer PING and for a
// replica's link to come up.
const redisWait = 10 * time.Second

// RedisOptions configures StartRedis.
type RedisOptions struct {
	// Args are extra redis-server arguments, appended after testenv's own
	// (so a later "--save 60 1" overrides testenv's "--save ''").
	Args []string
}

// Redis is one redis-server process on 127.0.0.1.
type Redis struct {
	Addr string // "127.0.0.1:Port"
	Port int
	Dir  string // its working dir: redis.log, and any RDB a replica received

	bin    string
	args   []string
	master *Redis // the master it replicates, or nil
	// announced is the port it names to its master as a replica
	// (replica-announce-port, see AnnounceVia); 0: its own.
	announced int

	server
}

// StartRedis starts redis-server on 127.0.0.1:<free port> with no
// persistence, its own temp dir and its log in that dir, and waits until it
// answers PING (deadline 10s). t.Cleanup kills it.
func StartRedis(t testing.TB, opts RedisOptions) *Redis {
	t.Helper()
	return startRedis(t, opts.Args, nil)
}

// StartReplica starts a redis-server replicating master and waits until its
// master_link_status is up and master lists it as an online replica.
func StartReplica(t testing.TB, master *Redis) *Redis {
	t.Helper()
	if master.master != nil {
		t.Fatalf("testenv: StartReplica: %s is itself a replica; chained replicas are not supported", master.Addr)
	}
	return startRedis(t, nil, master)
}

func startRedis(t testing.TB, extra []string, master *Redis) *Redis {
	t.Helper()
	return startRedisWith(t, func(int) []string { return extra }, master)
}

// startRedisWith is startRedis with the extra arguments chosen per attempt,
// from that attempt's port (a cluster node picks its bus port there).
func startRedisWith(t testing.TB, extraFor func(port int) []string, master *Redis) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found: apt-get install -y redis-server")
	}
	r := &Redis{Dir: t.TempDir(), bin: bin, master: master}
	t.Cleanup(r.Kill) // after TempDir's cleanup is registered, so it runs first
	for attempt := 1; ; attempt++ {
		r.Port = FreePort(t)
		r.Addr = fmt.Sprintf("127.0.0.1:%d", r.Port)
		r.args = []string{
			"--port", strconv.Itoa(r.Port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--dir", r.Dir,
			"--logfile", r.logPath(),
			"--dbfilename", "dump.rdb",
			// Redis 7 waits 5s before a diskless full sync by default.
			"--repl-diskless-sync-delay", "0",
			"--enable-debug-command", "local",
		}
		if master != nil {
			r.args = append(r.args, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
		}
		r.args = append(r.args, extraFor(r.Port)...)
		err := r.start()
		if err == nil {
			break
		}
		if attempt < 3 && errors.Is(err, errPortTaken) {
			continue
		}
		t.Fatalf("testenv: starting redis-server on %s: %v\n--- last lines of %s ---\n%s",
			r.Addr, err, r.logPath(), tail(r.logPath(), 20))
	}
	if master != nil {
		r.waitLinkUp(t)
	}
	return r
}

func (r *Redis) logPath() string { return filepath.Join(r.Dir, "redis.log") }

var errPortTaken = errors.New("testenv: port already in use")

// start runs redis-server with r.args and waits for PING.
func (r *Redis) start() error {
	// redis-server writes to its logfile, except for errors in its arguments,
	// which go to stderr: send those to the same file.
	out, err := os.OpenFile(r.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	return r.launch(r.bin, r.args, r.Dir, out, r.Addr, redisWait, func() string {
		log, _ := os.ReadFile(r.logPath())
		return string(log)
	})
}

// Kill sends SIGKILL and waits for the process to exit. It is a no-op if it
// has already exited.
func (r *Redis) Kill() { r.kill() }

// Stop sends SIGSTOP and returns once every thread is stopped: the
// process keeps its port but answers nothing.
func (r *Redis) Stop() { r.proc().stop() }

// Cont sends SIGCONT after Stop.
func (r *Redis) Cont() { r.proc().signal(syscall.SIGCONT) }

// Restart kills the process if it is running and starts redis-server again
// on the same port with the same arguments and empty data. A replica
// replicates its master again (a full resync) and Restart waits for its link
// as StartReplica does. A restarted master's replicas reconnect on their own;
// use WaitReplicas to wait for them.
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	r.Kill()
	// A replica keeps the RDB of its last full sync in Dir; a restart must
	// not load it.
	for _, name := range []string{"dump.rdb", "appendonlydir"} {
		if err := os.RemoveAll(filepath.Join(r.Dir, name)); err != nil {
			t.Fatalf("testenv: Restart: %v", err)
		}
	}
	temps, _ := filepath.Glob(filepath.Join(r.Dir, "temp-*.rdb"))
	for _, f := range temps {
		os.Remove(f)
	}
	deadline := time.Now().Add(redisWait)
	for {
		err := r.start()
		if err == nil {
			break
		}
		if errors.Is(err, errPortTaken) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		t.Fatalf("testenv: restarting redis-server on %s: %v\n--- last lines of %s ---\n%s",
			r.Addr, err, r.logPath(), tail(r.logPath(), 20))
	}
	if r.master != nil {
		r.waitLinkUp(t)
	}
}

// WaitReplicas waits (deadline 10s) until r, a master, lists at least n
// replicas as online and, for n > 0, n of them acknowledge a write: a
// replica that re-attached by a full sync is "online" before the master
// streams it writes (Redis 7 starts on its first REPLCONF ACK, up to a
// second later), and until then every grant waits out the proxy's
// replica timeout.
func (r *Redis) WaitReplicas(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(redisWait)
	var info string
	for {
		var err error
		info, err = infoReplication(r.Addr)
		if err == nil && strings.Count(info, ",state=online,") >= n {
			if n > 0 {
				waitReplicated(t, r.Addr, "testenv:replicated", n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: %s did not list %d online replicas within %v (err %v):\n%s",
				r.Addr, n, redisWait, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitReplicated waits (deadline 10s) until n replicas of master r have
// acknowledged everything r had written when it was called: a write of its
// own and a WAIT on that connection, whose offset covers every earlier
// write to r. A failover test calls it before promoting a replica when the
// proxy ran with --min-replicas 0, so that what the test wrote is not lost
// by the failover it stages.
func (r *Redis) WaitReplicated(t testing.TB, n int) {
	t.Helper()
	waitReplicated(t, r.Addr, "testenv:replicated", n)
}

// waitReplicated writes key on the master at addr and WAITs, on that
// connection, until n replicas acknowledge it (deadline 10s), then deletes
// key.
func waitReplicated(t testing.TB, addr, key string, n int) {
	t.Helper()
	conn, err := dialConn(addr, redisWait)
	if err != nil {
		t.Fatalf("testenv: WaitReplicated: %v", err)
	}
	defer conn.Close()
	deadline := time.Now().Add(redisWait)
	for {
		if reply, err := conn.TryDo("SET", key, "1"); err != nil || string(reply) != "+OK\r\n" {
			t.Fatalf("testenv: WaitReplicated: SET %s on %s = %q (err %v)", key, addr, reply, err)
		}
		reply, err := conn.TryDo("WAIT", strconv.Itoa(n), "1000")
		if got, ok := ParseInt(reply); err == nil && ok && got >= int64(n) {
			conn.TryDo("DEL", key)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: WaitReplicated: WAIT %d on %s = %q (err %v) for %v", n, addr, reply, err, redisWait)
		}
	}
}

// waitLinkUp waits until replica r reports master_link_status:up and its
// master lists it, by port, as online.
func (r *Redis) waitLinkUp(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(redisWait)
	port := r.Port
	if r.announced != 0 {
		port = r.announced
	}
	online := regexp.MustCompile(`(?m)^slave\d+:ip=127\.0\.0\.1,port=` + strconv.Itoa(port) + `,state=online,`)
	var replicaInfo, masterInfo string
	var err error
	for {
		replicaInfo, err = infoReplication(r.Addr)
		if err == nil && strings.Contains(replicaInfo, "master_link_status:up") {
			masterInfo, err = infoReplication(r.master.Addr)
			if err == nil && online.MatchString(masterInfo) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: replica %s of %s not up within %v (err %v)\n--- replica INFO ---\n%s\n--- master INFO ---\n%s\n--- last lines of %s ---\n%s",
				r.Addr, r.master.Addr, redisWait, err, replicaInfo, masterInfo, r.logPath(), tail(r.logPath(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// infoReplication returns the text of INFO replication at addr.
func infoReplication(addr string) (string, error) {
	c, err := dialConn(addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	reply, err := c.TryDo("INFO", "replication")
	if err != nil {
		return "", err
	}
	body, ok := ParseBulk(reply)
	if !ok {
		return "", fmt.Errorf("INFO replied %q", reply)
	}
	return strings.ReplaceAll(string(body), "\r\n", "\n"), nil
}

// AnnounceVia makes r name l's address, a Link in front of it, whenever it
// is a replica (replica-announce-ip and -port, now and after any Restart),
// so that Sentinel, which learns replicas from their master, reaches r
// through l, before and after r is promoted. A replica's link to its master
// is cut once so that it announces itself anew, and AnnounceVia waits for
// the link as StartReplica does.
func (r *Redis) AnnounceVia(t testing.TB, l *Link) {
	t.Helper()
	host, port, _ := strings.Cut(l.Addr, ":")
	for _, kv := range [][2]string{{"replica-announce-ip", host}, {"replica-announce-port", port}} {
		if reply, err := tryDo(r.Addr, "CONFIG", "SET", kv[0], kv[1]); err != nil || string(reply) != "+OK\r\n" {
			t.Fatalf("testenv: AnnounceVia: CONFIG SET %s %s on %s = %q (err %v)", kv[0], kv[1], r.Addr, reply, err)
		}
		r.args = append(r.args, "--"+kv[0], kv[1])
	}
	r.announced = l.Port()
	if r.master == nil {
		return
	}
	if reply, err := tryDo(r.Addr, "CLIENT", "KILL", "TYPE", "master"); err != nil || !strings.HasPrefix(string(reply), ":") {
		t.Fatalf("testenv: AnnounceVia: CLIENT KILL TYPE master on %s = %q (err %v)", r.Addr, reply, err)
	}
	r.waitLinkUp(t)
}

// SeenInMonitor watches r's MONITOR for a command line holding word and
// closes the returned channel once one has been seen: that command has
// reached Redis (it runs, or is being run). The watch ends with the test.
func (r *Redis) SeenInMonitor(t testing.TB, word string) <-chan struct{} {
	t.Helper()
	mon := Dial(t, r.Addr)
	mon.SetTimeout(2 * time.Minute)
	if got := string(mon.Do("MONITOR")); got != "+OK\r\n" {
		t.Fatalf("MONITOR = %q", got)
	}
	seen := make(chan struct{})
	go func() {
		for {
			line, err := mon.ReadReply()
			if err != nil {
				return // closed by the test's cleanup
			}
			if strings.Contains(string(line), word) {
				close(seen)
				return
			}
		}
	}()
	return seen
}
