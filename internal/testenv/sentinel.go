package testenv

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sentinelWait bounds the wait for a set of Sentinels to know each other
// and the master's replicas, and for a failover to be named by all of them.
const sentinelWait = 30 * time.Second

// SentinelOptions configures StartSentinels.
type SentinelOptions struct {
	Count      int    // Sentinels; 3 if 0
	Quorum     int    // Sentinels that must agree the master is down; a majority if 0
	MasterName string // the name they monitor the master under; "fp" if empty
	// DownAfter is down-after-milliseconds: how long the master may not
	// answer before a Sentinel deems it down. 1s if 0.
	DownAfter time.Duration
	// FailoverTimeout is failover-timeout; 6s if 0 (a second failover of
	// the same master waits twice this long after the first).
	FailoverTimeout time.Duration
	// MasterPort is the port they monitor the master at, e.g. that of a
	// Link in front of it; the master's own if 0.
	MasterPort int
	// Password is the Sentinels' own requirepass (they also use it with
	// each other: sentinel-pass). Empty: none.
	Password string
	// Certs, if set, makes the Sentinels speak TLS only, to clients, to
	// each other and to Redis (tls-replication yes): use it with Redis
	// from StartTLSRedis. Addrs are then TLS addresses.
	Certs *Certs
}

// Sentinels is a set of redis-sentinel processes monitoring one master.
type Sentinels struct {
	MasterName string
	Addrs      []string // each Sentinel's 127.0.0.1:port, in start order

	opts   SentinelOptions
	tlsCfg *tls.Config // with Certs: trusts the CA, shows the client certificate
	procs  []*sentinelProc
}

type sentinelProc struct {
	addr, dir string
	server
}

// StartSentinels starts opts.Count redis-sentinel processes on free
// loopback ports, each with a writable config file of its own in a temp
// dir, monitoring master, and waits (deadline 30s) until every one knows
// the others and master's online replicas (without that a failover cannot
// happen). t.Cleanup kills them.
func StartSentinels(t testing.TB, master *Redis, opts SentinelOptions) *Sentinels {
	t.Helper()
	if opts.Count == 0 {
		opts.Count = 3
	}
	if opts.Quorum == 0 {
		opts.Quorum = opts.Count/2 + 1
	}
	if opts.MasterName == "" {
		opts.MasterName = "fp"
	}
	if opts.DownAfter == 0 {
		opts.DownAfter = time.Second
	}
	if opts.FailoverTimeout == 0 {
		opts.FailoverTimeout = 6 * time.Second
	}
	bin, err := redisServerBin(t)
	if err != nil {
		t.Fatal(err)
	}
	s := &Sentinels{MasterName: opts.MasterName, opts: opts}
	if opts.Certs != nil {
		s.tlsCfg = opts.Certs.ClientConfig(t, true)
	}
	info, err := s.redisInfo(master.Addr)
	if err != nil {
		t.Fatalf("testenv: StartSentinels: INFO replication on %s: %v", master.Addr, err)
	}
	replicas := strings.Count(info, ",state=online,")
	for range opts.Count {
		p := &sentinelProc{dir: t.TempDir()}
		t.Cleanup(p.kill)
		for attempt := 1; ; attempt++ {
			port := FreePort(t)
			p.addr = fmt.Sprintf("127.0.0.1:%d", port)
			monitored := master.Port
			if opts.MasterPort != 0 {
				monitored = opts.MasterPort
			}
			err := s.launch(p, bin, port, monitored)
			if err == nil {
				break
			}
			if attempt < 3 && errors.Is(err, errPortTaken) {
				continue
			}
			t.Fatalf("testenv: starting redis-sentinel on %s: %v\n--- last lines of its log ---\n%s",
				p.addr, err, tail(filepath.Join(p.dir, "sentinel.log"), 20))
		}
		s.procs = append(s.procs, p)
		s.Addrs = append(s.Addrs, p.addr)
	}
	deadline := time.Now().Add(sentinelWait)
	for {
		err := s.acquainted(replicas)
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: Sentinels not ready within %v: %v", sentinelWait, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// launch writes p's config and starts it on port.
func (s *Sentinels) launch(p *sentinelProc, bin string, port, masterPort int) error {
	o := s.opts
	lines := []string{
		"bind 127.0.0.1",
		"daemonize no",
		"dir " + p.dir,
		"logfile " + filepath.Join(p.dir, "sentinel.log"),
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", o.MasterName, masterPort, o.Quorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", o.MasterName, o.DownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", o.MasterName, o.FailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", o.MasterName),
	}
	if o.Certs != nil {
		lines = append(lines, "port 0", "tls-port "+strconv.Itoa(port),
			"tls-cert-file "+o.Certs.ServerCert, "tls-key-file "+o.Certs.ServerKey,
			"tls-ca-cert-file "+o.Certs.CAFile, "tls-replication yes")
	} else {
		lines = append(lines, "port "+strconv.Itoa(port))
	}
	if o.Password != "" {
		lines = append(lines, "requirepass "+o.Password, "sentinel sentinel-pass "+o.Password)
	}
	conf := filepath.Join(p.dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	logPath := filepath.Join(p.dir, "sentinel.log")
	out, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	log := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	args := []string{conf, "--sentinel"}
	if o.Certs != nil {
		return p.launchTLS(bin, args, p.dir, out, p.addr, s.tlsCfg, redisWait, log)
	}
	return p.launch(bin, args, p.dir, out, p.addr, redisWait, log)
}

func (p *sentinelProc) kill() { p.server.kill() }

// Addr is every Sentinel's address, comma-separated: fenceproxy's --sentinel.
func (s *Sentinels) Addr() string { return strings.Join(s.Addrs, ",") }

// Args are fenceproxy's flags for these Sentinels (--sentinel,
// --master-name, and --sentinel-tls with the CA and client certificate when
// they speak TLS). Their password, if any, goes in the environment
// (FENCEPROXY_SENTINEL_PASSWORD), which testenv's proxies inherit.
func (s *Sentinels) Args() []string {
	args := []string{"--sentinel", s.Addr(), "--master-name", s.MasterName}
	if c := s.opts.Certs; c != nil {
		args = append(args, "--sentinel-tls", "--backend-tls-ca-cert-file", c.CAFile,
			"--backend-tls-cert-file", c.ClientCert, "--backend-tls-key-file", c.ClientKey)
	}
	return args
}

// Kill SIGKILLs Sentinel i.
func (s *Sentinels) Kill(i int) { s.procs[i].kill() }

// Master returns the master address that Sentinel i names (SENTINEL
// get-master-addr-by-name), or an error.
func (s *Sentinels) Master(i int) (string, error) {
	reply, err := s.do(s.Addrs[i], "SENTINEL", "get-master-addr-by-name", s.MasterName)
	if err != nil {
		return "", err
	}
	parts, ok := SplitArray(reply)
	if !ok || len(parts) != 2 {
		return "", fmt.Errorf("get-master-addr-by-name answered %s", ShowReply(reply))
	}
	host, _ := ParseBulk(parts[0])
	port, _ := ParseBulk(parts[1])
	return net.JoinHostPort(string(host), string(port)), nil
}

// WaitMaster waits (deadline 30s) until every running Sentinel names addr
// as the master, e.g. after the old one was killed.
func (s *Sentinels) WaitMaster(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(sentinelWait)
	for {
		var err error
		for i, p := range s.procs {
			if pr := p.proc(); pr == nil || pr.exited() {
				continue
			}
			var named string
			if named, err = s.Master(i); err == nil && named != addr {
				err = fmt.Errorf("the Sentinel at %s names %s", s.Addrs[i], named)
			}
			if err != nil {
				break
			}
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: Sentinels did not all name %s as master %q within %v: %v\n--- last lines of the first Sentinel's log ---\n%s",
				addr, s.MasterName, sentinelWait, err, tail(filepath.Join(s.procs[0].dir, "sentinel.log"), 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// acquainted reports nil once every Sentinel knows all the others and at
// least replicas replicas of the master.
func (s *Sentinels) acquainted(replicas int) error {
	for _, addr := range s.Addrs {
		reply, err := s.do(addr, "SENTINEL", "MASTER", s.MasterName)
		if err != nil {
			return err
		}
		fields, ok := SplitArray(reply)
		if !ok {
			return fmt.Errorf("%s: SENTINEL MASTER answered %s", addr, ShowReply(reply))
		}
		m := map[string]string{}
		for i := 0; i+1 < len(fields); i += 2 {
			k, _ := ParseBulk(fields[i])
			v, _ := ParseBulk(fields[i+1])
			m[string(k)] = string(v)
		}
		if others, _ := strconv.Atoi(m["num-other-sentinels"]); others < len(s.Addrs)-1 {
			return fmt.Errorf("%s knows %d other Sentinels of %d", addr, others, len(s.Addrs)-1)
		}
		if seen, _ := strconv.Atoi(m["num-slaves"]); seen < replicas {
			return fmt.Errorf("%s knows %d replicas of %d", addr, seen, replicas)
		}
	}
	return nil
}

// do sends one command to a Sentinel (TLS and AUTH as configured).
func (s *Sentinels) do(addr string, args ...string) ([]byte, error) {
	c, err := s.dial(addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if s.opts.Password != "" {
		if reply, err := c.TryDo("AUTH", s.opts.Password); err != nil || string(reply) != "+OK\r\n" {
			return nil, fmt.Errorf("AUTH on %s: %q %v", addr, reply, err)
		}
	}
	return c.TryDo(args...)
}

func (s *Sentinels) dial(addr string) (*Conn, error) {
	if s.opts.Certs != nil {
		return TryDialTLS(addr, s.tlsCfg)
	}
	return dialConn(addr, time.Second)
}

// redisInfo reads INFO replication of a Redis the Sentinels monitor.
func (s *Sentinels) redisInfo(addr string) (string, error) {
	if s.opts.Certs == nil {
		return infoReplication(addr)
	}
	c, err := TryDialTLS(addr, s.tlsCfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	reply, err := c.TryDo("INFO", "replication")
	return string(reply), err
}
