package testenv

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proxyWait bounds the wait for fenceproxy to answer PING. Generous: it only
// ends a hang, and a -race build starting on a crowded 2-core machine has
// been seen to need more than 15 s.
const proxyWait = 40 * time.Second

// ProxyOptions configures StartProxy.
type ProxyOptions struct {
	Backend        string        // --backend; required unless Sentinels is set
	Sentinels      *Sentinels    // --sentinel and --master-name (Sentinels.Args) instead of --backend
	DataDir        string        // --data-dir; a temp dir if empty
	MinReplicas    int           // --min-replicas
	ReplicaTimeout time.Duration // --replica-timeout; the binary's default if zero
	Args           []string      // extra flags, after testenv's own
	// Listen is --listen; a free loopback port if empty (and another one
	// if that was taken meanwhile; a given one is not replaced).
	Listen string
}

// Proxy is one fenceproxy process.
type Proxy struct {
	Addr        string // --listen, 127.0.0.1:<free port>
	MetricsAddr string // --metrics-listen, 127.0.0.1:<free port>
	DataDir     string

	bin     string
	opts    ProxyOptions
	logPath string

	server
}

// StartProxy builds (once) and runs fenceproxy against opts.Backend, with its
// stdout and stderr in a log file, and waits until it answers PING (deadline
// 15s; on failure the message holds the last 20 lines of its log). t.Cleanup
// SIGKILLs it if it is still running, logs the tail of its log if the test
// failed, and fails the test if the log reports a data race.
func StartProxy(t testing.TB, opts ProxyOptions) *Proxy {
	t.Helper()
	return startProxy(t, BuildProxy(t), opts)
}

func startProxy(t testing.TB, bin string, opts ProxyOptions) *Proxy {
	t.Helper()
	if opts.Backend == "" && opts.Sentinels == nil {
		t.Fatalf("testenv: StartProxy: ProxyOptions.Backend (or Sentinels) is required")
	}
	logDir := t.TempDir()
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(t.TempDir(), "data")
	}
	p := &Proxy{
		DataDir: opts.DataDir,
		bin:     bin,
		opts:    opts,
		logPath: filepath.Join(logDir, "fenceproxy.log"),
	}
	t.Cleanup(func() { p.cleanup(t) })
	for attempt := 1; ; attempt++ {
		p.Addr = opts.Listen
		if p.Addr == "" {
			p.Addr = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		}
		p.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		err := p.start()
		if err == nil {
			return p
		}
		if attempt < 3 && errors.Is(err, errPortTaken) && opts.Listen == "" {
			continue
		}
		t.Fatalf("testenv: starting fenceproxy on %s: %v\n--- last lines of %s ---\n%s",
			p.Addr, err, p.logPath, tail(p.logPath, 20))
	}
}

func (p *Proxy) args() []string {
	args := []string{"--listen", p.Addr}
	if p.opts.Sentinels != nil {
		args = append(args, p.opts.Sentinels.Args()...)
	} else {
		args = append(args, "--backend", p.opts.Backend)
	}
	args = append(args,
		"--data-dir", p.DataDir,
		"--min-replicas", strconv.Itoa(p.opts.MinReplicas),
		"--metrics-listen", p.MetricsAddr,
	)
	if p.opts.ReplicaTimeout != 0 {
		args = append(args, "--replica-timeout", p.opts.ReplicaTimeout.String())
	}
	return append(args, p.opts.Args...)
}

// start runs the binary, appending to the log, and waits for PING.
func (p *Proxy) start() error {
	out, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	args := p.args()
	fmt.Fprintf(out, "--- testenv %s: %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(args, " "))
	return p.launch(p.bin, args, filepath.Dir(p.logPath), out, p.Addr, proxyWait, p.Log)
}

// Kill9 sends SIGKILL and waits for the process to exit. It is a no-op if it
// has already exited.
func (p *Proxy) Kill9() { p.kill() }

// Stop sends SIGSTOP and returns once every thread is stopped (proc.stop):
// the process keeps its port and connections, and the
// kernel still accepts clients' bytes, but it reads and answers nothing.
func (p *Proxy) Stop() { p.proc().stop() }

// Cont sends SIGCONT after Stop.
func (p *Proxy) Cont() { p.proc().signal(syscall.SIGCONT) }

// Restart kills the process if it is running and starts fenceproxy again
// with the same options, listen and metrics ports and data dir, appending to
// the same log.
func (p *Proxy) Restart(t testing.TB) {
	t.Helper()
	p.Kill9()
	deadline := time.Now().Add(proxyWait)
	for {
		err := p.start()
		if err == nil {
			return
		}
		if errors.Is(err, errPortTaken) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		t.Fatalf("testenv: restarting fenceproxy on %s: %v\n--- last lines of %s ---\n%s",
			p.Addr, err, p.logPath, tail(p.logPath, 20))
	}
}

// Terminate sends SIGTERM and waits up to 10s for the process to exit. It
// returns the exit code (-1 if a signal ended it) and a nil error whatever
// the code; the error is non-nil only if the process was not running or did
// not exit in time, in which case it has been SIGKILLed.
func (p *Proxy) Terminate() (exitCode int, err error) {
	pr := p.proc()
	if pr == nil || pr.exited() {
		return -1, errors.New("testenv: Terminate: fenceproxy is not running")
	}
	_ = syscall.Kill(pr.pid(), syscall.SIGTERM)
	if !pr.wait(exitWait) {
		kerr := pr.kill()
		return -1, errors.Join(fmt.Errorf("testenv: fenceproxy did not exit within %v of SIGTERM; sent SIGKILL", exitWait), kerr)
	}
	return pr.exitCode(), nil
}

// Log returns the contents of its log so far: the binary's stdout and
// stderr, across restarts, each start headed by a "--- testenv" line.
func (p *Proxy) Log() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.logPath, err)
	}
	return string(b)
}

// LogPath is the path of its log file.
func (p *Proxy) LogPath() string { return p.logPath }

func (p *Proxy) cleanup(t testing.TB) {
	p.Kill9()
	log := p.Log()
	if strings.Contains(log, "WARNING: DATA RACE") {
		t.Errorf("testenv: fenceproxy reported a data race; log %s:\n%s", p.logPath, log)
		return
	}
	if t.Failed() {
		t.Logf("testenv: last lines of fenceproxy log %s:\n%s", p.logPath, tail(p.logPath, 40))
	}
}

// StartFails runs the fenceproxy binary with args, expecting it to refuse to
// start, and returns its exit code and stderr. A binary still running after
// 30 s is killed and fails the test: every start-up error must end the
// process.
func StartFails(t testing.TB, args ...string) (exitCode int, stderr string) {
	t.Helper()
	return RunUntilExit(t, exec.Command(BuildProxy(t), args...))
}

// RunUntilExit runs cmd (a fenceproxy expected to refuse to start) and
// returns its exit code and stderr; one still running after 30 s is
// killed and fails the test.
func RunUntilExit(t testing.TB, cmd *exec.Cmd) (exitCode int, stderr string) {
	t.Helper()
	var out strings.Builder
	cmd.Stderr = &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("fenceproxy %v did not exit; stderr: %s", cmd.Args[1:], out.String())
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// HTTPGet fetches url (the proxy's /metrics, /healthz, /readyz) and returns
// its status and body; a request that fails fails the test.
func HTTPGet(t testing.TB, url string) (status int, body string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
