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
// follower opens the link without it and relays commands as they came
// (version 1); a leader of this version gets TIER.RELAY with the time spent.
func TestRelayLinkVersions(t *testing.T) {
	for _, old := range []bool{true, false} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan []string, 8)
		go fakeLeader(ln, old, got)
		r := &Relay{node: &Node{opts: Options{NodeID: "n2"}, logger: slog.Default()}, secret: "s"}
		c, rd, version, err := r.dial(context.Background(), relayKey{addr: ln.Addr().String()})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 1, false: 2}[old]; version != want {
			t.Fatalf("old leader %v: link version %d, want %d", old, version, want)
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

// fakeLeader answers TIER.PEER as a leader of an earlier version (old: only
// five arguments) or of this one, and +OK to anything else, reporting every
// command it reads.
func fakeLeader(ln net.Listener, old bool, got chan<- []string) {
	c, err := ln.Accept()
	if err != nil {
		return
	}
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
		got <- []string{strings.Join(args, " ")}
		if len(args) > 0 && strings.EqualFold(args[0], "tier.peer") && old && len(args) != 5 {
			c.Write([]byte("-ERR fenceproxy: not a tier peer\r\n"))
			continue
		}
		c.Write([]byte("+OK\r\n"))
	}
}
