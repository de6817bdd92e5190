package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// exitWait bounds every wait for a process to exit after a signal.
const exitWait = 10 * time.Second

// proc is one started child process. Wait is always called, by the goroutine
// started in startProc; done is closed when it returns.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the result of cmd.Wait; read only after done is closed
}

// startProc starts bin with args, its stdout and stderr going to out, in a
// process group of its own and with SIGKILL as its parent-death signal.
//
// Pdeathsig fires when the OS thread that forked the child exits, not when
// the process does, so the goroutine that starts the child locks its thread
// and keeps it until the child has been waited for.
func startProc(bin string, args []string, dir string, out *os.File) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited and been waited for.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group of p, which is p's own pid. It is a
// no-op once p has exited, so a recycled pid is never signalled.
func (p *proc) signal(sig syscall.Signal) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.pid(), sig)
}

// stop sends SIGSTOP and returns once every thread of p is stopped (or p
// has exited, or after exitWait). A stop signal does not stop a
// multi-threaded process at once: one thread takes it and then stops the
// others, and on a loaded machine the others run on meanwhile (seen: a
// fenceproxy that was sent SIGSTOP still relayed WAIT replies that came in
// a millisecond later). A test that stops a process and then acts on the
// assumption that it does nothing must not act before this.
func (p *proc) stop() {
	p.signal(syscall.SIGSTOP)
	deadline := time.Now().Add(exitWait)
	for !p.exited() && !p.allStopped() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// allStopped reports whether /proc shows every thread of p stopped (state
// T, or t under a tracer).
func (p *proc) allStopped() bool {
	dir := fmt.Sprintf("/proc/%d/task", p.pid())
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(dir + "/" + task.Name() + "/stat")
		if err != nil {
			return false
		}
		// "pid (comm) S ...": the state follows the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || (stat[i+2] != 'T' && stat[i+2] != 't') {
			return false
		}
	}
	return true
}

// wait waits up to d for p to exit and reports whether it did.
func (p *proc) wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.done:
		return true
	case <-timer.C:
		return false
	}
}

// kill sends SIGKILL to p's group and waits for p to exit.
func (p *proc) kill() error {
	p.signal(syscall.SIGKILL)
	if !p.wait(exitWait) {
		return fmt.Errorf("testenv: pid %d did not exit within %v of SIGKILL", p.pid(), exitWait)
	}
	return nil
}

// exitCode is p's exit code, or -1 if it was ended by a signal. Only valid
// after p has exited.
func (p *proc) exitCode() int { return p.cmd.ProcessState.ExitCode() }

// errExited is how waitReady reports that the process exited
// before it became ready.
var errExited = errors.New("testenv: process exited before it answered PING")

// waitReady polls addr with PING until it answers +PONG, p exits, or the
// deadline passes.
func waitReady(p *proc, addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("%w (%v)", errExited, p.cmd.ProcessState)
		}
		if last = ping(addr); last == nil {
			// Someone answered: it must be p. FreePort's ports are kept
			// from other tests and from ":0", but a server outside the
			// tests may still take one before p binds it (a fenceproxy
			// binds its port only after its backend checks), and that
			// server's PONG would pass for p's.
			if owns, known := listensOn(p.pid(), addr); owns || !known {
				return nil
			}
			last = fmt.Errorf("%s is answered by another process", addr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: %s did not answer PING within %v: %v", addr, d, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listensOn reports whether process pid holds the listening socket of
// addr (host:port) by /proc: the socket's inode in /proc/net/tcp, among
// pid's descriptors. known is false where /proc cannot say.
func listensOn(pid int, addr string) (owns, known bool) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false, false
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return false, false
	}
	inodes := map[string]bool{}
	suffix := fmt.Sprintf(":%04X", n)
	for _, path := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		table, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(table), "\n")[1:] {
			f := strings.Fields(line)
			// local_address is f[1], st f[3] (0A: LISTEN), inode f[9]
			if len(f) > 9 && strings.HasSuffix(f[1], suffix) && f[3] == "0A" {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return false, false // a listener /proc does not show: cannot say
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		// Our own child's descriptors are readable while it lives: it
		// has exited (a zombie not yet reaped, say after failing to bind
		// the port another server answers on). Not its listener.
		return false, true
	}
	for _, fd := range fds {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[link] {
			return true, true
		}
	}
	return false, true
}

// ping sends one PING to addr and expects +PONG (or -NOAUTH from a server
// that requires a password: it is up and answering).
func ping(addr string) error {
	c, err := dialConn(addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	reply, err := c.TryDo("PING")
	if err != nil {
		return err
	}
	if string(reply) != "+PONG\r\n" && !strings.HasPrefix(string(reply), "-NOAUTH") {
		return fmt.Errorf("PING answered %q", reply)
	}
	return nil
}

// portTaken reports whether the process could not bind its port.
func portTaken(log string) bool {
	l := strings.ToLower(log)
	return strings.Contains(l, "address already in use")
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// dialable reports whether something accepts connections on addr.
func dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// server is the process behind a Redis or a Proxy: started, replaced on
// restart, and killed the same way for both.
type server struct {
	mu sync.Mutex
	p  *proc
}

// launch starts bin with args (output appended to out, which it closes) and
// waits up to wait for PING on addr. If that fails because the port was
// taken (log tells), the error wraps errPortTaken.
func (s *server) launch(bin string, args []string, dir string, out *os.File, addr string, wait time.Duration, log func() string) error {
	pr, err := startProc(bin, args, dir, out)
	out.Close()
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.p = pr
	s.mu.Unlock()
	if err := waitReady(pr, addr, wait); err != nil {
		_ = pr.kill()
		if portTaken(log()) {
			return fmt.Errorf("%w: %v", errPortTaken, err)
		}
		return err
	}
	return nil
}

func (s *server) proc() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

// Pid is the pid of the current process.
func (s *server) Pid() int { return s.proc().pid() }

// Stop sends SIGSTOP and returns once the process is stopped: it keeps
// its port but does nothing, for instance hears no announcement, until
// Cont.
func (s *server) Stop() { s.proc().stop() }

// Cont sends SIGCONT after Stop.
func (s *server) Cont() { s.proc().signal(syscall.SIGCONT) }

// kill sends SIGKILL and waits for the process to exit; a no-op if it has
// already exited.
func (s *server) kill() {
	if pr := s.proc(); pr != nil {
		if err := pr.kill(); err != nil {
			panic(err) // a SIGKILLed process that does not exit: nothing sane to do
		}
	}
}
