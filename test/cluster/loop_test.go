package cluster

import (
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestClientsOnTheLoop: in front of a Redis Cluster, a client's requests
// of one slot are served by the proxy's event loop (INFO fenceproxy's
// loop_clients counts the client) with each reply from its slot's master;
// after a slot moved behind the proxy's back the client still reads its
// value, never MOVED, and stays on the loop; an MGET over three masters
// (gathered once each master's part is in: a continuation on the loop)
// keeps it there too.
func TestClientsOnTheLoop(t *testing.T) {
	e := startEnv(t, -1, 0)
	// One connection asks throughout: a connection dialled per question
	// and closed leaves the count only when the loop sees it go, and CI
	// once counted the previous question's.
	q := e.dial(t)
	loopClients := func() int {
		t.Helper()
		n, err := strconv.Atoi(infoField(q.Do("INFO", "fenceproxy"), "loop_clients"))
		if err != nil {
			t.Fatal("INFO fenceproxy has no loop_clients")
		}
		return n
	}
	// Counted once two reads agree: a connection of the setup's (a
	// readiness PING) may still be leaving.
	before := loopClients()
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		now := loopClients()
		if now == before {
			break
		}
		before = now
	}
	c := e.dial(t)
	for _, tag := range []string{"{a}", "{b}", "{c}"} {
		if got := string(c.Do("SET", tag+"loop", tag)); got != "+OK\r\n" {
			t.Fatalf("SET %sloop: %q", tag, got)
		}
	}
	for _, tag := range []string{"{a}", "{b}", "{c}"} {
		if got, want := string(c.Do("GET", tag+"loop")), "$3\r\n"+tag+"\r\n"; got != want {
			t.Fatalf("GET %sloop: %q, want %q", tag, got, want)
		}
	}
	if got := loopClients(); got != before+1 {
		t.Fatalf("loop_clients %d after a client's SETs and GETs over three masters, want %d", got, before+1)
	}

	slot := testenv.KeySlot("{a}loop")
	from := e.cl.MasterForSlot(t, slot)
	to := e.cl.Masters[0]
	if to == from {
		to = e.cl.Masters[1]
	}
	e.cl.MigrateSlot(t, slot, from, to, 0)
	deadline := time.Now().Add(10 * time.Second)
	for e.cl.MasterForSlot(t, slot) != to {
		if time.Now().After(deadline) {
			t.Fatalf("slot %d never moved to %s", slot, to.Addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		if got := string(c.Do("GET", "{a}loop")); got != "$3\r\n{a}\r\n" {
			t.Fatalf("GET {a}loop after its slot moved: %q", got)
		}
	}
	if got := loopClients(); got != before+1 {
		t.Fatalf("loop_clients %d after GETs of a slot that moved, want %d", got, before+1)
	}

	if got, want := string(c.Do("MGET", "{a}loop", "{b}loop", "{c}loop")), "*3\r\n$3\r\n{a}\r\n$3\r\n{b}\r\n$3\r\n{c}\r\n"; got != want {
		t.Fatalf("MGET over three masters: %q, want %q", got, want)
	}
	if got := loopClients(); got != before+1 {
		t.Fatalf("loop_clients %d after the client's MGET over three masters, want %d", got, before+1)
	}
	for range 3 {
		c.Do("GET", "{b}loop")
	}
	if got := loopClients(); got != before+1 {
		t.Fatalf("loop_clients %d after three GETs, want %d", got, before+1)
	}
}
