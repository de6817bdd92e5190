//go:build linux

package netloop

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// LastDataAge reads the same last_data_recv as the whole tcp_info does,
// from a real loopback socket, and allocates nothing.
func TestLastDataAge(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	if _, err := client.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(60 * time.Millisecond)
	raw, err := server.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var age time.Duration
	var ok bool
	var whole *unix.TCPInfo
	var allocs float64
	raw.Control(func(fd uintptr) {
		age, ok = LastDataAge(int(fd))
		whole, _ = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		allocs = testing.AllocsPerRun(100, func() { LastDataAge(int(fd)) })
	})
	if !ok || age < 30*time.Millisecond || age > 5*time.Second {
		t.Fatalf("LastDataAge 60 ms after the write = %v, %v; want about 60 ms", age, ok)
	}
	if wholeAge := time.Duration(whole.Last_data_recv) * time.Millisecond; wholeAge-age > 20*time.Millisecond || age-wholeAge > 20*time.Millisecond {
		t.Fatalf("LastDataAge = %v, the whole tcp_info's last_data_recv = %v", age, wholeAge)
	}
	if allocs != 0 {
		t.Fatalf("LastDataAge allocates %v times a call, want 0", allocs)
	}
	if _, ok := LastDataAge(-1); ok {
		t.Fatal("LastDataAge(-1) ok, want not")
	}
}
