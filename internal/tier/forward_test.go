package tier

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// A leader of an earlier version refuses TIER.PEER's version argument: the
// follower tries the version before (2: TIER.RELAY with the time spent),
// then opens the link without it and relays commands as they came
// (version 1); a leader of this version gets version 3.
func TestRelayLinkVersions(t *testing.T) {
	for _, accepts := range []int{1, 2, RelayVersion} {
		old := accepts == 1
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan []string, 8)
		go fakeLeader(ln, accepts, got)
		r := &Relay{node: &Node{opts: Options{NodeID: "n2"}, logger: slog.Default()}, secret: "s"}
		c, rd, version, err := r.dial(context.Background(), relayKey{addr: ln.Addr().String()})
		if err != nil {
			t.Fatal(err)
		}
		if version != accepts {
			t.Fatalf("a leader of version %d: link version %d", accepts, version)
		}
		rc := &relayConn{c: c, rd: rd, version: version}
		if _, err := rc.do(context.Background(), time.Now().Add(-time.Second), [][]byte{[]byte("LOCK.ACQUIRE"), []byte("r"), []byte("o"), []byte("5000")}, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		c.Close()
		ln.Close()
		var cmds []string
		for len(got) > 0 {
			cmds = append(cmds, <-got...)
		}
		last := cmds[len(cmds)-1]
		switch {
		case old && last != "LOCK.ACQUIRE r o 5000":
			t.Fatalf("relayed to an earlier leader as %q, want the command as it came", last)
		case !old && (!strings.HasPrefix(last, "TIER.RELAY ") || !strings.HasSuffix(last, " LOCK.ACQUIRE r o 5000")):
			t.Fatalf("relayed as %q, want TIER.RELAY elapsed-us LOCK.ACQUIRE r o 5000", last)
		case !old:
			us, err := strconv.ParseInt(strings.Fields(last)[1], 10, 64)
			if err != nil || us < 1e6 {
				t.Fatalf("relayed as %q: elapsed %d us, want at least the second the request waited", last, us)
			}
		}
	}
}

// fakeLeader answers TIER.PEER as a leader of relay version accepts (1:
// only five arguments; else a sixth up to accepts), and +OK to anything
// else, reporting every command it reads, on the first connection it
// accepts.
func fakeLeader(ln net.Listener, accepts int, got chan<- []string) {
	c, err := ln.Accept()
	if err != nil {
		return
	}
	serveFake(c, accepts, got)
}

func serveFake(c net.Conn, accepts int, got chan<- []string) {
	defer c.Close()
	rd := bufio.NewReader(c)
	for {
		reply, err := resp.AppendReply(nil, rd)
		if err != nil {
			return
		}
		elems, _ := resp.Elements(reply)
		var args []string
		for _, e := range elems {
			if len(e) > 0 && e[0] == '$' {
				_, body, _ := strings.Cut(string(e), "\r\n")
				args = append(args, strings.TrimSuffix(body, "\r\n"))
			}
		}
		if got != nil {
			got <- []string{strings.Join(args, " ")}
		}
		if len(args) > 0 && strings.EqualFold(args[0], "tier.peer") && len(args) == 6 && args[5] > strconv.Itoa(accepts) {
			c.Write([]byte("-ERR fenceproxy: not a tier peer\r\n"))
			continue
		}
		c.Write([]byte("+OK\r\n"))
	}
}

// A pooled link is used only while it can carry a request: one whose
// leader end closed while it was idle (a leader restarted, a link dropped)
// or that sat idle past relayIdleMax is closed and another dialed, so a
// request is never written where it would be lost.
func TestRelaySkipsDeadPooledLinks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
			go serveFake(c, RelayVersion, nil)
		}
	}()
	r := &Relay{node: &Node{opts: Options{NodeID: "n2"}, logger: slog.Default()}, secret: "s", idle: map[relayKey][]*relayConn{}}
	key := relayKey{addr: ln.Addr().String()}
	pooled := func(idleFor time.Duration) *relayConn {
		c, rd, version, err := r.dial(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		rc := &relayConn{c: c, rd: rd, version: version, idle: time.Now().Add(-idleFor)}
		r.idle[key] = append(r.idle[key], rc)
		return rc
	}
	acquire := [][]byte{[]byte("LOCK.ACQUIRE"), []byte("r"), []byte("o"), []byte("5000")}

	live := pooled(0)
	<-accepted
	if rc, err := r.get(context.Background(), key); err != nil || rc != live {
		t.Fatalf("a live pooled link was not reused (err %v)", err)
	}

	dead := pooled(0)
	(<-accepted).Close() // the leader's end
	for deadline := time.Now().Add(10 * time.Second); connAlive(dead.c); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a link whose leader end closed still looks alive after 10s")
		}
	}
	rc, err := r.get(context.Background(), key)
	if err != nil || rc == dead {
		t.Fatalf("the pooled link whose leader end closed was used again (err %v)", err)
	}
	if reply, err := rc.do(context.Background(), time.Now(), acquire, 5*time.Second); err != nil || string(reply) != "+OK\r\n" {
		t.Fatalf("the redialed link: %q, %v", reply, err)
	}

	stale := pooled(relayIdleMax + time.Second)
	if rc, err := r.get(context.Background(), key); err != nil || rc == stale {
		t.Fatalf("a link idle past relayIdleMax was used again (err %v)", err)
	}
}
