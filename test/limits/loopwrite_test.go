package limits

import (
	"bytes"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// clientFD is the fd CLIENT LIST gives the client whose address is addr,
// asked on a connection of its own.
func clientFD(t *testing.T, p *testenv.Proxy, addr string) string {
	t.Helper()
	c := testenv.Dial(t, p.Addr)
	defer c.Close()
	list, _ := testenv.ParseBulk(c.Do("CLIENT", "LIST"))
	for line := range strings.Lines(string(list)) {
		if strings.Contains(line, " addr="+addr+" ") {
			if m := regexp.MustCompile(`\bfd=(-?\d+)`).FindStringSubmatch(line); m != nil {
				return m[1]
			}
		}
	}
	t.Fatalf("CLIENT LIST has no fd for addr=%s:\n%s", addr, list)
	return ""
}

// receivedSome waits until nc's socket holds bytes it has not read.
func receivedSome(t *testing.T, nc net.Conn) {
	t.Helper()
	raw, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "no byte of the reply reached the client", func() bool {
		n := 0
		raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		return n > 0
	})
}

// bigPattern is n bytes that change along their length, so that a reply
// cut, shifted or repeated is seen.
func bigPattern(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte((i/7)%26)
	}
	return string(b)
}

// TestBigReplyReadSlowlyStaysOnTheLoop: a GET whose reply (8 MB) is more
// than the proxy's socket and the client's take together, read by the
// client only once part of it has arrived, is written by the serve loop
// as room comes: the client keeps its fd in CLIENT LIST and its place on
// the loop (INFO's loop_clients) while the reply waits and after, and
// gets the exact bytes.
func TestBigReplyReadSlowlyStaysOnTheLoop(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr})
	value := bigPattern(8 << 20)
	c := testenv.Dial(t, p.Addr)
	c.Do("SET", "big", value)
	c.Close()

	slow, rd := rawDial(t, p.Addr)
	if err := slow.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	get := func(key string) { slow.Write(testenv.AppendCommand(nil, "GET", key)) }
	get("missing")
	if line, err := rd.ReadString('\n'); err != nil || line != "$-1\r\n" {
		t.Fatalf("GET missing = %q, %v", line, err)
	}
	addr := slow.LocalAddr().String()
	fd := clientFD(t, p, addr)
	stillOnLoop := func(when string) {
		t.Helper()
		wantLoopClients(t, p, 1, when+" (the client stays on the serve loop)")
		if got := clientFD(t, p, addr); got != fd {
			t.Fatalf("%s: the client's fd in CLIENT LIST is %s; want %s (it never left the loop)", when, got, fd)
		}
	}
	stillOnLoop("after GET missing")

	for round := range 2 {
		get("big")
		receivedSome(t, slow)
		stillOnLoop("while the reply waits for the client")
		want := "$" + "8388608" + "\r\n" + value + "\r\n"
		got := make([]byte, len(want))
		slow.SetReadDeadline(time.Now().Add(patience))
		if _, err := io.ReadFull(rd, got); err != nil {
			t.Fatalf("round %d: reading the reply: %v", round, err)
		}
		if !bytes.Equal(got, []byte(want)) {
			t.Fatalf("round %d: the reply differs from what was SET", round)
		}
		stillOnLoop("after the reply")
	}
}

// TestSoftLimitOnTheLoop: a client of the serve loop whose reply stays
// above the normal class's soft limit for its seconds (it reads nothing)
// is closed, counted and logged as on a goroutine.
func TestSoftLimitOnTheLoop(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: redis.Addr, Args: []string{
		"--client-output-buffer-limit", "normal 0 1mb 1",
	}})
	c := testenv.Dial(t, p.Addr)
	c.Do("SET", "big", bigPattern(8<<20))
	c.Close()

	slow, rd := rawDial(t, p.Addr)
	slow.(*net.TCPConn).SetReadBuffer(64 << 10)
	slow.Write(testenv.AppendCommand(nil, "GET", "missing"))
	if line, err := rd.ReadString('\n'); err != nil || line != "$-1\r\n" {
		t.Fatalf("GET missing = %q, %v", line, err)
	}
	wantLoopClients(t, p, 1, "after GET missing (the client is on the serve loop)")
	slow.Write(testenv.AppendCommand(nil, "GET", "big"))
	eventually(t, "the client over the soft limit was not closed", func() bool {
		return closedFor(t, p, "output-buffer-normal") == 1
	})
	drainUntilClosed(t, slow)
	if !logHas(p, "closing client for overcoming output buffer limits") || !logHas(p, "limit=soft") {
		t.Errorf("the proxy's log does not say why the client was closed:\n%s", p.Log())
	}
	wantLoopClients(t, p, 0, "after the close")
}
