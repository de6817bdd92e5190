package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// The ports FreePort hands out: below Linux's ephemeral range (32768 and
// up by default), so no listener on ":0" and no outgoing connection is
// ever given one by the kernel, and low enough that a cluster bus at
// port+10000 stays below it too. Go runs test binaries side by side, so
// a port is also reserved across processes: each holds an flock on a
// file named after the port for as long as it lives. (A port taken from
// ":0" and closed was once taken by another package's HTTP server in the
// second before its proxy bound it.)
const (
	firstPort = 15000
	lastPort  = 22700
)

// portLocks is where the reservation files live: one directory per user,
// so that another user's left behind is never in the way.
var portLocks = filepath.Join(os.TempDir(), fmt.Sprintf("fenceproxy-testenv-ports-%d", os.Getuid()))

// handedOut holds the ports FreePort returned in this process and the
// files whose locks reserve them; the files stay open until the process
// ends, which lets the kernel release the locks even after a kill -9.
var handedOut struct {
	sync.Mutex
	ports map[int]*os.File
}

// FreePort returns a TCP port on 127.0.0.1 that is free and that no other
// test process using testenv is given while this one lives.
//
// Something outside the tests may still bind it before the caller does;
// StartRedis and StartProxy retry with a new port when that happens.
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = make(map[int]*os.File)
	}
	if err := os.MkdirAll(portLocks, 0o700); err != nil {
		t.Fatalf("testenv: making the port reservation directory: %v", err)
	}
	start := firstPort + rand.IntN(lastPort-firstPort)
	for i := range lastPort - firstPort {
		port := firstPort + (start-firstPort+i)%(lastPort-firstPort)
		if handedOut.ports[port] != nil {
			continue
		}
		f := reservePort(port)
		if f == nil {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil { // bound by something that is not ours
			f.Close()
			continue
		}
		ln.Close()
		handedOut.ports[port] = f
		return port
	}
	t.Fatalf("testenv: no free port in %d-%d", firstPort, lastPort)
	return 0
}

// reservePort takes the lock on port's file, or returns nil if another
// process holds it.
func reservePort(port int) *os.File {
	f, err := os.OpenFile(filepath.Join(portLocks, fmt.Sprint(port)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		f.Close()
		return nil
	}
	return f
}
