package testenv

import (
	"net"
	"sync"
	"testing"
)

// handedOut remembers the ports FreePort returned in this process, so two
// servers of one test binary are never given the same port even if the kernel
// offers it twice before either binds it.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort returns a free TCP port on 127.0.0.1.
//
// The port is free when FreePort returns; another process may still take it
// before the caller binds it. StartRedis and StartProxy retry with a new port
// when that happens.
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = make(map[int]bool)
	}
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testenv: finding a free port: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
	t.Fatalf("testenv: no unused free port after 100 tries")
	return 0
}
