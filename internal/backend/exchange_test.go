package backend_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/backend"
	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// exchange sends one request on conn and returns its reply.
func exchange(conn *backend.SyncConn, args ...string) *resp.Reply {
	req := make([][]byte, len(args))
	for i, a := range args {
		req[i] = []byte(a)
	}
	p := resp.NewReplyFunc(func() {})
	conn.Exchange(resp.AppendCommand(nil, req), []*resp.Reply{p})
	return p
}

// TestSyncConnClosedWhileIdle: a SyncConn that Redis closed while no batch
// was out (here CLIENT KILL; a restart alike) is found closed before the
// next batch is sent, which then goes on a new connection and is answered,
// rather than be written into the dead one and fail with ErrLost (an
// unknown outcome, for requests Redis never got: the lock writer's first
// grant after a Redis restart was answered "lost contact with Redis").
// Plaintext, and TLS, where Redis's close_notify waits on the socket
// before its end of stream.
func TestSyncConnClosedWhileIdle(t *testing.T) {
	t.Run("plaintext", func(t *testing.T) {
		redis := testenv.StartRedis(t, testenv.RedisOptions{})
		closedWhileIdle(t, backend.Options{Addr: redis.Addr}, testenv.Dial(t, redis.Addr))
	})
	t.Run("tls", func(t *testing.T) {
		certs := testenv.MakeCerts(t)
		redis := testenv.StartTLSRedis(t, certs, nil)
		cfg := certs.ClientConfig(t, true)
		closedWhileIdle(t, backend.Options{Addr: redis.Addr, TLS: cfg}, testenv.DialTLS(t, redis.Addr, cfg))
	})
}

func closedWhileIdle(t *testing.T, opts backend.Options, admin *testenv.Conn) {
	opts.DialTimeout, opts.ReplyTimeout = time.Second, 5*time.Second
	conn, err := backend.DialSync(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if p := exchange(conn, "PING"); p.Err != nil || string(p.Buf) != "+PONG\r\n" {
		t.Fatalf("PING = %q, %v", p.Buf, p.Err)
	}
	before := conn.LocalAddr()
	if r := admin.Do("CLIENT", "KILL", "ADDR", before); string(r) != ":1\r\n" {
		t.Fatalf("CLIENT KILL ADDR %s = %q", before, r)
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Contains(string(admin.Do("CLIENT", "LIST")), "addr="+before+" ") {
		if time.Now().After(deadline) {
			t.Fatal("the killed connection is still in CLIENT LIST")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 2 { // the second on the new connection, whose deadline tlsClosed moved
		if p := exchange(conn, "PING"); p.Err != nil || string(p.Buf) != "+PONG\r\n" {
			t.Fatalf("PING %d after Redis closed the idle connection = %q, %v; want +PONG on a new connection", i+1, p.Buf, p.Err)
		}
	}
	if after := conn.LocalAddr(); after == before || after == "" {
		t.Fatalf("local address after the redial %q, before %q: want a new connection", after, before)
	}
}

// depthHolder counts how deep it is held and how many times.
type depthHolder struct{ depth, holds int }

func (h *depthHolder) HoldCommits()    { h.depth++; h.holds++ }
func (h *depthHolder) ReleaseCommits() { h.depth-- }

// TestExchangeHeldReleasesBeforeWaiting: ExchangeHeld holds while it
// completes replies that are in, and lets go before it waits on the socket
// for the next: a reply that comes 100 ms after the first (BLPOP's
// timeout) is completed under a hold of its own, and none is left held.
func TestExchangeHeldReleasesBeforeWaiting(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	conn, err := backend.DialSync(backend.Options{Addr: redis.Addr})
	if err != nil {
		t.Fatal(err)
	}
	h := &depthHolder{}
	var depths []int
	done := func() { depths = append(depths, h.depth) }
	replies := []*resp.Reply{resp.NewReplyFunc(done), resp.NewReplyFunc(done)}
	req := resp.AppendCommand(nil, [][]byte{[]byte("PING")})
	req = resp.AppendCommand(req, [][]byte{[]byte("BLPOP"), []byte("nothing"), []byte("0.1")})
	conn.ExchangeHeld(req, replies, h)
	if len(depths) != 2 || depths[0] != 1 || depths[1] != 1 || h.holds != 2 || h.depth != 0 {
		t.Fatalf("depth at each completion %v, holds %d, left held %d; want [1 1], 2 (one a read), 0", depths, h.holds, h.depth)
	}
	for i, p := range replies {
		if p.Err != nil {
			t.Fatalf("reply %d: %v", i, p.Err)
		}
	}
}

// TestExchangeHeldReleasesForAPartReply: a reply of which only a part is
// in when the one before it completes is a wait away too: the hold is let
// go before it and taken again once it is whole. Redis writes both replies
// at once; a Link delivers them in 1,000-byte chunks 30 ms apart, so the
// first chunk holds the small reply and the big one's start.
func TestExchangeHeldReleasesForAPartReply(t *testing.T) {
	redis := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.Dial(t, redis.Addr).Do("SET", "big", strings.Repeat("x", 3000))
	link := testenv.StartLink(t, redis.Addr)
	conn, err := backend.DialSync(backend.Options{Addr: link.Addr})
	if err != nil {
		t.Fatal(err)
	}
	link.Slice(t, testenv.Downstream, 1000, 30*time.Millisecond)
	h := &depthHolder{}
	var depths []int
	done := func() { depths = append(depths, h.depth) }
	replies := []*resp.Reply{resp.NewReplyFunc(done), resp.NewReplyFunc(done)}
	req := resp.AppendCommand(nil, [][]byte{[]byte("PING")})
	req = resp.AppendCommand(req, [][]byte{[]byte("GET"), []byte("big")})
	conn.ExchangeHeld(req, replies, h)
	if len(depths) != 2 || depths[0] != 1 || depths[1] != 1 || h.holds != 2 || h.depth != 0 {
		t.Fatalf("depth at each completion %v, holds %d, left held %d; want [1 1], 2 (let go while the big reply came in), 0", depths, h.holds, h.depth)
	}
	if replies[1].Err != nil || len(replies[1].Buf) < 3000 {
		t.Fatalf("GET big through the sliced link: %v, %d bytes", replies[1].Err, len(replies[1].Buf))
	}
}
