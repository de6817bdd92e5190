package commands

import (
	"fmt"
	"strings"
	"testing"
)

// expect reads one reply from lc's client and checks it.
func (lc *loopClient) expect(t *testing.T, what, want string) {
	t.Helper()
	if got, err := lc.c.ReadReply(); err != nil || string(got) != want {
		t.Fatalf("%s: %q, %v; want %q", what, got, err, want)
	}
}

// subscribeOnTheLoop runs a subscription on lc's client, whose replies to
// GET a are getA: pipelined GET a and SUBSCRIBE ch, messages another
// client PUBLISHes, then UNSUBSCRIBE and GET a, all on the loop, on the
// fd the client always had. msg and confirm are the client's protocol's
// message and (un)subscribe confirmation.
func subscribeOnTheLoop(t *testing.T, lc *loopClient, getA string,
	confirm func(kind string, n int) string, msg func(payload string) string) {
	t.Helper()
	pub := lc.p.dial(t) // on the loop (the admin's CLIENT LIST took it off)
	pub.Do("SET", "a", "1")
	lc.count = lc.p.Server.LoopClients() // with pub
	lc.w.take()
	lc.c.Send("GET", "a")
	lc.c.Send("SUBSCRIBE", "ch")
	lc.c.Flush()
	lc.expect(t, "GET a before SUBSCRIBE", getA)
	lc.expect(t, "SUBSCRIBE ch", confirm("subscribe", 1))
	lc.stays(t, "GET a, SUBSCRIBE ch", "GET:loop SUBSCRIBE:loop")
	for i := range 3 {
		m := fmt.Sprintf("m%d-%s", i, strings.Repeat("x", i*1000))
		if got := string(pub.Do("PUBLISH", "ch", m)); got != ":1\r\n" {
			t.Fatalf("PUBLISH: %q, want one receiver", got)
		}
		lc.expect(t, "message "+m[:2], msg(m))
	}
	lc.stays(t, "messages", "PUBLISH:loop PUBLISH:loop PUBLISH:loop")
	lc.c.Send("UNSUBSCRIBE", "ch")
	lc.c.Send("GET", "a")
	lc.c.Flush()
	lc.expect(t, "UNSUBSCRIBE ch", confirm("unsubscribe", 0))
	lc.expect(t, "GET a after UNSUBSCRIBE", getA)
	lc.stays(t, "UNSUBSCRIBE ch, GET a", "UNSUBSCRIBE:loop GET:loop")
}

// TestPubSubOnTheLoop: a RESP2 client's subscription stays on the serve
// loop: the replies before SUBSCRIBE come first, then Redis's stream in
// order and exact, and its later requests are the loop's too.
func TestPubSubOnTheLoop(t *testing.T) {
	lc := startLoopClient(t)
	subscribeOnTheLoop(t, lc, "$1\r\n1\r\n",
		func(kind string, n int) string {
			return fmt.Sprintf("*3\r\n$%d\r\n%s\r\n$2\r\nch\r\n:%d\r\n", len(kind), kind, n)
		},
		func(m string) string {
			return fmt.Sprintf("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$%d\r\n%s\r\n", len(m), m)
		})
}

// TestPubSubOnTheLoopRESP3: the same for a RESP3 client, which switched
// with HELLO 3 on the loop.
func TestPubSubOnTheLoopRESP3(t *testing.T) {
	lc := startLoopClient(t)
	if got, err := lc.c.TryDo("HELLO", "3"); err != nil || !strings.HasPrefix(string(got), "%7\r\n") {
		t.Fatalf("HELLO 3: %q, %v", got, err)
	}
	run(t, lc.c, []exchange{{[]string{"ECHO", "e"}, "$1\r\ne\r\n"}, {[]string{"ECHO", "e"}, "$1\r\ne\r\n"}, {[]string{"ECHO", "e"}, "$1\r\ne\r\n"}})
	if got, want := lc.w.take(), "HELLO:loop ECHO:loop ECHO:loop ECHO:loop"; got != want {
		t.Fatalf("HELLO 3, then ECHO: ServesOnLoop answered %q, want %q", got, want)
	}
	subscribeOnTheLoop(t, lc, "$1\r\n1\r\n",
		func(kind string, n int) string {
			return fmt.Sprintf(">3\r\n$%d\r\n%s\r\n$2\r\nch\r\n:%d\r\n", len(kind), kind, n)
		},
		func(m string) string {
			return fmt.Sprintf(">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$%d\r\n%s\r\n", len(m), m)
		})
}

// TestMonitorOnTheLoop: MONITOR's stream is written by the serve loop,
// with another client's commands in it, and RESET ends it there.
func TestMonitorOnTheLoop(t *testing.T) {
	lc := startLoopClient(t)
	other := lc.p.dial(t)
	other.Do("PING")
	lc.count = lc.p.Server.LoopClients() // with other
	lc.w.take()
	lc.c.Send("ECHO", "before")
	lc.c.Send("MONITOR")
	lc.c.Flush()
	lc.expect(t, "ECHO before MONITOR", "$6\r\nbefore\r\n")
	lc.expect(t, "MONITOR", "+OK\r\n")
	lc.stays(t, "ECHO, MONITOR", "ECHO:loop MONITOR:loop")
	for _, k := range []string{"k1", "k2"} {
		other.Do("SET", k, "v-"+k)
		line, err := lc.c.ReadReply()
		if err != nil || !strings.HasPrefix(string(line), "+") || !strings.HasSuffix(string(line), `"SET" "`+k+`" "v-`+k+"\"\r\n") {
			t.Fatalf("MONITOR line for SET %s: %q, %v", k, line, err)
		}
	}
	lc.stays(t, "MONITOR lines", "SET:loop SET:loop")
	run(t, lc.c, []exchange{{[]string{"RESET"}, "+RESET\r\n"}})
	lc.stays(t, "RESET", "RESET:loop")
}
