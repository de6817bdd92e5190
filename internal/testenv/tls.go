package testenv

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Certs is a throw-away PKI made by MakeCerts: a CA, a server certificate
// for 127.0.0.1, ::1 and localhost, and a client certificate, each as PEM
// files in a temp dir. The server certificate may also be used as a client
// one (extended key usage for both), because redis-server presents its
// tls-cert-file when a replica connects to its master.
type Certs struct {
	Dir        string
	CAFile     string
	ServerCert string
	ServerKey  string
	ClientCert string
	ClientKey  string

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// MakeCerts makes a new CA and the certificates it signs, with
// crypto/x509 (no openssl needed). Two calls give two unrelated CAs.
func MakeCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	c := &Certs{
		Dir:        dir,
		CAFile:     filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "server.crt"),
		ServerKey:  filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"),
		ClientKey:  filepath.Join(dir, "client.key"),
	}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(t),
		Subject:               pkix.Name{CommonName: "fenceproxy test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testenv: MakeCerts: %v", err)
	}
	if c.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatalf("testenv: MakeCerts: %v", err)
	}
	c.caKey = key
	writePEM(t, c.CAFile, "CERTIFICATE", der)
	c.RenewServer(t)
	c.issue(t, c.ClientCert, c.ClientKey, "fenceproxy test client", false)
	return c
}

// RenewServer writes a new server certificate and key (same names, new
// serial number) over the old files and returns the new serial number.
func (c *Certs) RenewServer(t testing.TB) *big.Int {
	t.Helper()
	return c.issue(t, c.ServerCert, c.ServerKey, "localhost", true)
}

// issue writes a certificate signed by the CA and its key; a server one
// holds the loopback names.
func (c *Certs) issue(t testing.TB, certFile, keyFile, name string, server bool) *big.Int {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, &key.PublicKey, c.caKey)
	if err != nil {
		t.Fatalf("testenv: issuing %s: %v", certFile, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testenv: issuing %s: %v", certFile, err)
	}
	// The key first and renamed into place, so a reader never pairs a new
	// certificate with the old key for long.
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	writePEM(t, certFile, "CERTIFICATE", der)
	return tmpl.SerialNumber
}

// ClientConfig trusts the CA and, if withCert, presents the client
// certificate.
func (c *Certs) ClientConfig(t testing.TB, withCert bool) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(c.ca)
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if withCert {
		pair, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
		if err != nil {
			t.Fatalf("testenv: ClientConfig: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// ProxyArgs are fenceproxy's flags for TLS clients on tlsAddr with these
// certificates (clients' certificates verified against the CA).
func (c *Certs) ProxyArgs(tlsAddr string) []string {
	return []string{"--tls-listen", tlsAddr, "--tls-cert-file", c.ServerCert,
		"--tls-key-file", c.ServerKey, "--tls-ca-cert-file", c.CAFile}
}

// BackendArgs are fenceproxy's flags for a TLS backend signed by this CA,
// presenting the client certificate.
func (c *Certs) BackendArgs() []string {
	return []string{"--backend-tls", "--backend-tls-ca-cert-file", c.CAFile,
		"--backend-tls-cert-file", c.ClientCert, "--backend-tls-key-file", c.ClientKey}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return key
}

func newSerial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return n
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// DialTLS connects to addr with TLS (handshake included); t.Cleanup closes
// the connection.
func DialTLS(t testing.TB, addr string, cfg *tls.Config) *Conn {
	t.Helper()
	c, err := TryDialTLS(addr, cfg)
	if err != nil {
		t.Fatalf("testenv: DialTLS %s: %v", addr, err)
	}
	c.t = t
	t.Cleanup(c.Close)
	return c
}

// TryDialTLS is DialTLS returning its error (the handshake's, for a
// refused certificate) instead of failing the test; the caller closes the
// connection. In TLS 1.3 the server judges the client's certificate after
// the client's side of the handshake is done, so a refusal may only show
// at the first read.
func TryDialTLS(addr string, cfg *tls.Config) (*Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: DefaultTimeout}, Config: cfg}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Conn{nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc), timeout: DefaultTimeout}, nil
}

// pingTLS is ping over TLS.
func pingTLS(addr string, cfg *tls.Config) error {
	c, err := TryDialTLS(addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetTimeout(500 * time.Millisecond)
	reply, err := c.TryDo("PING")
	if err != nil {
		return err
	}
	if string(reply) != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", reply)
	}
	return nil
}

// launchTLS is server.launch for a server that answers PING only over TLS.
func (s *server) launchTLS(bin string, args []string, dir string, out *os.File, addr string, cfg *tls.Config, wait time.Duration, log func() string) error {
	pr, err := startProc(bin, args, dir, out)
	out.Close()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.p = pr
	s.mu.Unlock()
	deadline := time.Now().Add(wait)
	for {
		if pr.exited() {
			if portTaken(log()) {
				return fmt.Errorf("%w: %v", errPortTaken, pr.cmd.ProcessState)
			}
			return fmt.Errorf("%w (%v)", errExited, pr.cmd.ProcessState)
		}
		last := pingTLS(addr, cfg)
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			_ = pr.kill()
			return fmt.Errorf("testenv: %s did not answer PING over TLS within %v: %v", addr, wait, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartTLSRedis starts a redis-server that speaks only TLS (--port 0,
// --tls-port), with Redis's default tls-auth-clients yes (clients need a
// certificate signed by the CA) and tls-replication yes. If master is not
// nil it replicates master over TLS, and StartTLSRedis waits until the
// link is up. Addr is the TLS address. extra are more redis-server
// arguments. Restart is not supported on it.
func StartTLSRedis(t testing.TB, certs *Certs, master *Redis, extra ...string) *Redis {
	t.Helper()
	bin, err := redisServerBin(t)
	if err != nil {
		t.Fatal(err)
	}
	cfg := certs.ClientConfig(t, true)
	r := &Redis{Dir: t.TempDir(), bin: bin, master: master}
	t.Cleanup(r.Kill)
	for attempt := 1; ; attempt++ {
		r.Port = FreePort(t)
		r.Addr = fmt.Sprintf("127.0.0.1:%d", r.Port)
		r.args = []string{
			"--port", "0",
			"--tls-port", strconv.Itoa(r.Port),
			"--tls-cert-file", certs.ServerCert,
			"--tls-key-file", certs.ServerKey,
			"--tls-ca-cert-file", certs.CAFile,
			"--tls-replication", "yes",
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--dir", r.Dir,
			"--logfile", r.logPath(),
			"--dbfilename", "dump.rdb",
			"--repl-diskless-sync-delay", "0",
		}
		if master != nil {
			r.args = append(r.args, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
		}
		r.args = append(r.args, extra...)
		out, err := os.OpenFile(r.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		err = r.launchTLS(r.bin, r.args, r.Dir, out, r.Addr, cfg, redisWait, func() string {
			log, _ := os.ReadFile(r.logPath())
			return string(log)
		})
		if err == nil {
			break
		}
		if attempt < 3 && errors.Is(err, errPortTaken) {
			continue
		}
		t.Fatalf("testenv: starting redis-server with TLS on %s: %v\n--- last lines of %s ---\n%s",
			r.Addr, err, r.logPath(), tail(r.logPath(), 20))
	}
	if master != nil {
		waitTLSLinkUp(t, r, cfg)
	}
	return r
}

func redisServerBin(t testing.TB) (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found: apt-get install -y redis-server")
	}
	return bin, nil
}

// waitTLSLinkUp waits until replica r, over TLS, reports its master link up.
func waitTLSLinkUp(t testing.TB, r *Redis, cfg *tls.Config) {
	t.Helper()
	deadline := time.Now().Add(redisWait)
	var info string
	for {
		c, err := TryDialTLS(r.Addr, cfg)
		if err == nil {
			reply, derr := c.TryDo("INFO", "replication")
			c.Close()
			info, err = string(reply), derr
		}
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: TLS replica %s not up within %v (err %v):\n%s\n--- last lines of %s ---\n%s",
				r.Addr, redisWait, err, info, r.logPath(), tail(r.logPath(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TLSProxy is a fenceproxy whose clients connect with TLS.
type TLSProxy struct {
	*Proxy             // Addr is the TLS address
	PlainAddr   string // --listen, "" when plaintext is off
	ClientCerts *Certs // signs the proxy's certificate and its clients'
}

// StartTLSProxy runs fenceproxy with --tls-listen on a free port (its Addr)
// and certs' server certificate, client certificates verified against
// certs' CA (--tls-auth-clients yes unless opts.Args says otherwise: they
// come before the TLS flags, which do not include it). With
// plaintext it also listens without TLS on PlainAddr; without, --listen is
// "". It waits until the proxy answers PING over TLS with the client
// certificate. Restart is not supported on it.
func StartTLSProxy(t testing.TB, certs *Certs, plaintext bool, opts ProxyOptions) *TLSProxy {
	t.Helper()
	if opts.Backend == "" && opts.Sentinels == nil {
		t.Fatalf("testenv: StartTLSProxy: ProxyOptions.Backend (or Sentinels) is required")
	}
	bin := BuildProxy(t)
	logDir := t.TempDir()
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(t.TempDir(), "data")
	}
	p := &TLSProxy{ClientCerts: certs, Proxy: &Proxy{
		DataDir: opts.DataDir, bin: bin, opts: opts,
		logPath: filepath.Join(logDir, "fenceproxy.log"),
	}}
	t.Cleanup(func() { p.cleanup(t) })
	cfg := certs.ClientConfig(t, true)
	for attempt := 1; ; attempt++ {
		p.Addr = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		p.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		p.PlainAddr = ""
		if plaintext {
			p.PlainAddr = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		}
		// p.args() names p.Addr as --listen and ends with opts.Args; the
		// flags after them win.
		args := append(p.args(), "--listen", p.PlainAddr)
		args = append(args, certs.ProxyArgs(p.Addr)...)
		out, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(out, "--- testenv %s: %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(args, " "))
		err = p.launchTLS(p.bin, args, logDir, out, p.Addr, cfg, proxyWait, p.Log)
		if err == nil {
			return p
		}
		if attempt < 3 && errors.Is(err, errPortTaken) {
			continue
		}
		t.Fatalf("testenv: starting fenceproxy with TLS on %s: %v\n--- last lines of %s ---\n%s",
			p.Addr, err, p.logPath, tail(p.logPath, 20))
	}
}

// StartTLSCluster starts a Redis Cluster of masters*(1+replicasPerMaster)
// nodes that speak only TLS, clients, cluster bus and replication alike
// (--port 0, --tls-cluster yes, --tls-replication yes), creates it with
// redis-cli --tls --cluster create, and waits (20s) until every node
// reports cluster_state:ok and every master has its replicas online. It
// returns the nodes (Addr is each one's TLS address) in start order.
// Nothing else of Cluster (WaitHealthy, MasterForSlot) works on them.
func StartTLSCluster(t testing.TB, certs *Certs, masters, replicasPerMaster int) []*Redis {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found: apt-get install -y redis-tools")
	}
	var nodes []*Redis
	for range masters * (1 + replicasPerMaster) {
		nodes = append(nodes, StartTLSRedis(t, certs, nil,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000",
			"--cluster-port", strconv.Itoa(FreePort(t)),
			"--tls-cluster", "yes"))
	}
	args := []string{"--tls", "--cacert", certs.CAFile, "--cert", certs.ClientCert, "--key", certs.ClientKey,
		"--cluster", "create"}
	for _, n := range nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	logPath := filepath.Join(t.TempDir(), "cluster-create.log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p, err := startProc(cli, args, filepath.Dir(logPath), out)
	out.Close()
	if err != nil {
		t.Fatalf("testenv: StartTLSCluster: %v", err)
	}
	if !p.wait(clusterWait) || p.exitCode() != 0 {
		_ = p.kill()
		t.Fatalf("testenv: StartTLSCluster: redis-cli --cluster create failed\n%s", tail(logPath, 30))
	}
	cfg := certs.ClientConfig(t, true)
	deadline := time.Now().Add(clusterWait)
	for {
		err := tlsClusterHealthy(nodes, cfg, replicasPerMaster)
		if err == nil {
			return nodes
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: TLS cluster not healthy within %v: %v", clusterWait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tlsClusterHealthy(nodes []*Redis, cfg *tls.Config, replicasPerMaster int) error {
	for _, n := range nodes {
		c, err := TryDialTLS(n.Addr, cfg)
		if err != nil {
			return err
		}
		info, err := c.TryDo("INFO")
		c.Close()
		if err != nil {
			return err
		}
		s := string(info)
		if !strings.Contains(s, "cluster_enabled:1") {
			return fmt.Errorf("%s: not a cluster node", n.Addr)
		}
		if strings.Contains(s, "role:master") && strings.Count(s, ",state=online,") != replicasPerMaster {
			return fmt.Errorf("%s: replicas not all online", n.Addr)
		}
		c, err = TryDialTLS(n.Addr, cfg)
		if err != nil {
			return err
		}
		ci, err := c.TryDo("CLUSTER", "INFO")
		c.Close()
		if err != nil {
			return err
		}
		if !strings.Contains(string(ci), "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state is not ok", n.Addr)
		}
	}
	return nil
}
