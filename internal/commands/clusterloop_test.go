package commands

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestClusterServesOnLoop: in front of a Redis Cluster, a client's
// requests of one slot are served on the loop, each reaching its slot's
// master (keys on all three), one by one and pipelined; after a slot
// moved to another master behind the proxy's back, the loop's GET is
// redirected (MOVED) and answered with the value, never with MOVED, and
// the loop goes on serving the client by the new view; a request whose
// keys span slots (MGET) is split on the loop, and so are commands about
// every master (KEYS, FLUSHALL, DBSIZE) and SCAN, pipelined behind others.
func TestClusterServesOnLoop(t *testing.T) {
	cl := testenv.StartCluster(t, testenv.ClusterOptions{ReplicasPerMaster: -1})
	po := proxyOptions{seeds: []string{cl.Masters[0].Addr}}
	w := watchLoop(&po)
	p := startProxy(t, po)
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"SET", "{a}k", "A"}, "+OK\r\n"},
		{[]string{"SET", "{b}k", "B"}, "+OK\r\n"},
		{[]string{"SET", "{c}k", "C"}, "+OK\r\n"},
		{[]string{"GET", "{c}k"}, "$1\r\nC\r\n"},
		{[]string{"GET", "{a}k"}, "$1\r\nA\r\n"},
		{[]string{"GET", "{b}k"}, "$1\r\nB\r\n"},
	})
	// Each value is on its slot's master.
	for key, want := range map[string]string{"{a}k": "$1\r\nA\r\n", "{b}k": "$1\r\nB\r\n", "{c}k": "$1\r\nC\r\n"} {
		m := cl.MasterForSlot(t, testenv.KeySlot(key))
		if got := string(testenv.Dial(t, m.Addr).Do("GET", key)); got != want {
			t.Fatalf("GET %s on its master %s: %q, want %q", key, m.Addr, got, want)
		}
	}
	// Pipelined over the three masters: replies in request order.
	for i := range 20 {
		for _, tag := range []string{"{a}", "{b}", "{c}"} {
			c.Send("SET", tag+"p", tag+strconv.Itoa(i))
			c.Send("GET", tag+"p")
		}
	}
	c.Flush()
	for i := range 20 {
		for _, tag := range []string{"{a}", "{b}", "{c}"} {
			v := tag + strconv.Itoa(i)
			for j, want := range []string{"+OK\r\n", "$" + strconv.Itoa(len(v)) + "\r\n" + v + "\r\n"} {
				if got, err := c.ReadReply(); err != nil || string(got) != want {
					t.Fatalf("pipelined %d %s reply %d: %q, %v; want %q", i, tag, j, got, err, want)
				}
			}
		}
	}
	const served = "SET:loop SET:loop SET:loop GET:loop GET:loop GET:loop"
	if got := w.take(); got[:len(served)] != served || containsOtherThan(got, ":loop") {
		t.Fatalf("ServesOnLoop answered\n%s\nwant every request :loop", got)
	}

	// {a}'s slot moves to another master: the proxy learns it from the
	// MOVED its next request meets there.
	slot := testenv.KeySlot("{a}k")
	from := cl.MasterForSlot(t, slot)
	to := cl.Masters[0]
	if to == from {
		to = cl.Masters[1]
	}
	cl.MigrateSlot(t, slot, from, to, 0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := cl.MasterForSlot(t, slot); m == to {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %d never moved to %s", slot, to.Addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	run(t, c, []exchange{
		{[]string{"GET", "{a}k"}, "$1\r\nA\r\n"},
		{[]string{"SET", "{a}k", "A2"}, "+OK\r\n"},
		{[]string{"GET", "{a}k"}, "$2\r\nA2\r\n"},
	})
	// Pipelined after the move: the first request of the batch routes by
	// the new view at once, those behind it by the same.
	c.Send("GET", "{a}k")
	c.Send("GET", "{b}k")
	c.Send("GET", "{a}k")
	c.Flush()
	for i, want := range []string{"$2\r\nA2\r\n", "$1\r\nB\r\n", "$2\r\nA2\r\n"} {
		if got, err := c.ReadReply(); err != nil || string(got) != want {
			t.Fatalf("after the move, pipelined reply %d: %q, %v; want %q", i, got, err, want)
		}
	}
	if got, want := w.take(), "GET:loop SET:loop GET:loop GET:loop GET:loop GET:loop"; got != want {
		t.Fatalf("after the move, ServesOnLoop answered\n%s\nwant\n%s", got, want)
	}
	if got := string(testenv.Dial(t, to.Addr).Do("GET", "{a}k")); got != "$2\r\nA2\r\n" {
		t.Fatalf("GET {a}k on its new master: %q", got)
	}

	// Keys of three slots: split on the loop too.
	run(t, c, []exchange{
		{[]string{"MGET", "{a}k", "{b}k", "{c}k"}, "*3\r\n$2\r\nA2\r\n$1\r\nB\r\n$1\r\nC\r\n"},
		{[]string{"GET", "{b}k"}, "$1\r\nB\r\n"},
		{[]string{"GET", "{c}k"}, "$1\r\nC\r\n"},
		{[]string{"GET", "{a}k"}, "$2\r\nA2\r\n"},
	})
	if got, want := w.take(), "MGET:loop GET:loop GET:loop GET:loop"; got != want {
		t.Fatalf("MGET: ServesOnLoop answered\n%s\nwant\n%s", got, want)
	}

	// Commands about every master (a broadcast, DBSIZE) and SCAN, pipelined
	// behind single-slot requests: on the loop too, each part on its
	// master's connection, merged into one reply in its place.
	reqs := [][]string{{"SET", "{a}k", "A3"}, {"DBSIZE"}, {"KEYS", "{*}k"}, {"GET", "{a}k"}, {"SCAN", "0", "MATCH", "{a}k"}, {"FLUSHALL"}, {"DBSIZE"}}
	for _, r := range reqs {
		c.Send(r...)
	}
	c.Flush()
	replies := make([]string, len(reqs))
	for i := range reqs {
		got, err := c.ReadReply()
		if err != nil {
			t.Fatalf("broadcasts, reply %d (%q): %v", i, reqs[i], err)
		}
		replies[i] = string(got)
	}
	keysReply := replies[2]
	for _, want := range []string{"{a}k", "{b}k", "{c}k"} {
		if !strings.Contains(keysReply, want) {
			t.Errorf("KEYS {*}k through the proxy = %q, want every master's keys (%s missing)", keysReply, want)
		}
	}
	// DBSIZE before FLUSHALL counts every master's keys ({a,b,c}k and
	// {a,b,c}p: 6), after it none; the SCAN of one master's keys ends at
	// that master or moves on to the next (a cursor, then the key).
	for i, want := range map[int]string{0: "+OK\r\n", 1: ":6\r\n", 3: "$2\r\nA3\r\n", 5: "+OK\r\n", 6: ":0\r\n"} {
		if replies[i] != want {
			t.Errorf("broadcasts, reply %d (%q) = %q, want %q", i, reqs[i], replies[i], want)
		}
	}
	if !strings.HasPrefix(replies[4], "*2\r\n") {
		t.Errorf("SCAN 0 MATCH {a}k = %q, want a cursor and keys", replies[4])
	}
	if got, want := w.take(), "SET:loop DBSIZE:loop KEYS:loop GET:loop SCAN:loop FLUSHALL:loop DBSIZE:loop"; got != want {
		t.Fatalf("broadcasts: ServesOnLoop answered\n%s\nwant\n%s", got, want)
	}
}

// containsOtherThan reports whether a loopWatcher's answers hold one that
// does not end in suffix.
func containsOtherThan(answers, suffix string) bool {
	for _, a := range strings.Fields(answers) {
		if len(a) < len(suffix) || a[len(a)-len(suffix):] != suffix {
			return true
		}
	}
	return false
}

// TestClusterSubscriptionsOnTheLoop: in front of a Redis Cluster, a
// subscription is the serve loop's, and so is everything it dials: the
// home connection, a shard channel's master, a keyspace channel's mirrors
// on every master, each off the loop's thread. While a shard master sleeps
// (DEBUG SLEEP) under an SSUBSCRIBE's dial, another client's GET from
// another master is answered: the loop did not wait for the dial.
// Mutation: with MayDial false, the dial ran on the loop, and the GET was
// answered only once the master woke (its DEBUG SLEEP reply was in).
// Before, every first subscription took a goroutine detour.
func TestClusterSubscriptionsOnTheLoop(t *testing.T) {
	cl := testenv.StartCluster(t, testenv.ClusterOptions{ReplicasPerMaster: -1})
	po := proxyOptions{seeds: []string{cl.Masters[0].Addr}}
	w := watchLoop(&po)
	p := startProxy(t, po)
	for _, m := range cl.Masters {
		testenv.Dial(t, m.Addr).Do("CONFIG", "SET", "notify-keyspace-events", "KA")
	}
	sub := p.dial(t)
	other := p.dial(t)
	run(t, sub, []exchange{
		{[]string{"SUBSCRIBE", "ch"}, "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"},
		{[]string{"SUBSCRIBE", "__keyspace@0__:{k}x"}, "*3\r\n$9\r\nsubscribe\r\n$19\r\n__keyspace@0__:{k}x\r\n:2\r\n"},
	})
	run(t, other, []exchange{{[]string{"SET", "{k}x", "1"}, "+OK\r\n"}})
	if got, err := sub.ReadReply(); err != nil || string(got) != "*3\r\n$7\r\nmessage\r\n$19\r\n__keyspace@0__:{k}x\r\n$3\r\nset\r\n" {
		t.Fatalf("keyspace message of SET {k}x: %q, %v", got, err)
	}
	w.expect(t, "SUBSCRIBE:loop SUBSCRIBE:loop SET:loop")

	// A shard channel whose master sleeps, and a key on another master.
	channel := "{s}ch"
	asleep := cl.MasterForSlot(t, testenv.KeySlot(channel))
	key := ""
	for i := 0; key == ""; i++ {
		if k := "{o" + strconv.Itoa(i) + "}k"; cl.MasterForSlot(t, testenv.KeySlot(k)) != asleep {
			key = k
		}
	}
	run(t, other, []exchange{{[]string{"SET", key, "v"}, "+OK\r\n"}})
	whileAsleep(t, asleep.Addr, "3", func() {
		sub.Send("SSUBSCRIBE", channel)
		sub.Flush()
	}, other, exchange{[]string{"GET", key}, "$1\r\nv\r\n"}, "the SSUBSCRIBE's dial")
	if got, err := sub.ReadReply(); err != nil || string(got) != "*3\r\n$10\r\nssubscribe\r\n$5\r\n{s}ch\r\n:1\r\n" {
		t.Fatalf("SSUBSCRIBE %s: %q, %v", channel, got, err)
	}
	run(t, other, []exchange{{[]string{"SPUBLISH", channel, "hi"}, ":1\r\n"}})
	if got, err := sub.ReadReply(); err != nil || string(got) != "*3\r\n$8\r\nsmessage\r\n$5\r\n{s}ch\r\n$2\r\nhi\r\n" {
		t.Fatalf("smessage: %q, %v", got, err)
	}
	run(t, sub, []exchange{{[]string{"SUNSUBSCRIBE", channel}, "*3\r\n$12\r\nsunsubscribe\r\n$5\r\n{s}ch\r\n:0\r\n"}})
	w.expect(t, "SET:loop SSUBSCRIBE:loop GET:loop SPUBLISH:loop SUNSUBSCRIBE:loop")
}

// TestClusterTrackingOnTheLoop: in front of a Redis Cluster, a tracking
// client (whose requests go on connections of its own, one to each
// master: package upstream/tracking) is the serve loop's: CLIENT TRACKING
// ON's round trips and the opening of its connections to the other
// masters run off the loop, and while one master sleeps (DEBUG SLEEP)
// under them another client's GET from another master is answered. Then
// its reads on every master, an invalidation push ahead of the reply Redis
// sent after it, TRACKINGINFO, a transaction (on the connection its tracker
// lends), OFF, and RESET of a client that tracks (its
// tracker turns tracking off on every master, off the loop). Mutation:
// with Ready true for every tracker and a request's first try dialling (as
// before), the dials ran on the loop and the GET waited for the master.
// Before, every request of such a client took a goroutine detour.
func TestClusterTrackingOnTheLoop(t *testing.T) {
	cl := testenv.StartCluster(t, testenv.ClusterOptions{ReplicasPerMaster: -1})
	po := proxyOptions{seeds: []string{cl.Masters[0].Addr}}
	w := watchLoop(&po)
	p := startProxy(t, po)
	writer := p.dial(t)
	tracker := p.dial(t)
	keys := []string{"{a}k", "{b}k", "{c}k"} // one on each master
	for _, k := range keys {
		run(t, writer, []exchange{{[]string{"SET", k, k}, "+OK\r\n"}})
	}
	hello(t, tracker, "3")
	asleep := cl.MasterForSlot(t, testenv.KeySlot("{b}k"))
	if asleep == cl.MasterForSlot(t, testenv.KeySlot("{a}k")) {
		t.Fatal("{a}k and {b}k on one master")
	}
	w.take()

	whileAsleep(t, asleep.Addr, "1", func() {
		tracker.Send("CLIENT", "TRACKING", "ON")
		for _, k := range keys {
			tracker.Send("GET", k)
		}
		tracker.Flush()
	}, writer, exchange{[]string{"GET", "{a}k"}, "$4\r\n{a}k\r\n"}, "the tracker's dial")
	for i, want := range []string{"+OK\r\n", "$4\r\n{a}k\r\n", "$4\r\n{b}k\r\n", "$4\r\n{c}k\r\n"} {
		if got, err := tracker.ReadReply(); err != nil || string(got) != want {
			t.Fatalf("tracking client: reply %d: %q, %v; want %q", i, got, err, want)
		}
	}
	w.expect(t, "CLIENT TRACKING:loop GET:loop GET:loop GET:loop GET:loop")

	// Another client's write of what it read: the push comes ahead of the
	// reply Redis sent after it on that master's connection.
	run(t, writer, []exchange{{[]string{"SET", "{c}k", "v2"}, "+OK\r\n"}})
	tracker.Send("GET", "{c}k")
	tracker.Flush()
	if got, err := tracker.ReadReply(); err != nil || string(got) != ">2\r\n$10\r\ninvalidate\r\n*1\r\n$4\r\n{c}k\r\n" {
		t.Fatalf("tracking client: %q, %v; want the invalidation push of {c}k", got, err)
	}
	if got, err := tracker.ReadReply(); err != nil || string(got) != "$2\r\nv2\r\n" {
		t.Fatalf("tracking client: GET {c}k after the push: %q, %v", got, err)
	}
	run(t, tracker, []exchange{
		{[]string{"MGET", "{a}k", "{b}k"}, "*2\r\n$4\r\n{a}k\r\n$4\r\n{b}k\r\n"},
		// Every master's, less the proxy's own keys (on the shared
		// connections, once the earlier replies are in: a continuation).
		{[]string{"DBSIZE"}, ":3\r\n"},
		{[]string{"CLIENT", "GETREDIR"}, ":0\r\n"}, // tracking, no redirect
	})
	if got := string(tracker.Do("CLIENT", "TRACKINGINFO")); !strings.Contains(got, "$5\r\nflags\r\n~1\r\n$2\r\non\r\n") {
		t.Fatalf("CLIENT TRACKINGINFO = %q, want flags on", got)
	}
	// A transaction, on the connection its tracker lends.
	run(t, tracker, []exchange{
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"GET", "{a}k"}, "+QUEUED\r\n"},
		{[]string{"EXEC"}, "*1\r\n$4\r\n{a}k\r\n"},
		{[]string{"CLIENT", "TRACKING", "OFF"}, "+OK\r\n"},
		{[]string{"GET", "{b}k"}, "$4\r\n{b}k\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON"}, "+OK\r\n"},
		{[]string{"GET", "{b}k"}, "$4\r\n{b}k\r\n"},
		{[]string{"RESET"}, "+RESET\r\n"},
		{[]string{"GET", "{b}k"}, "$4\r\n{b}k\r\n"}, // RESP2 again
	})
	w.expect(t, "SET:loop GET:loop MGET:loop DBSIZE:loop CLIENT GETREDIR:loop CLIENT TRACKINGINFO:loop "+
		"MULTI:loop GET:loop EXEC:loop CLIENT TRACKING:loop GET:loop CLIENT TRACKING:loop GET:loop RESET:loop GET:loop")
}

// TestClusterTrackingCachingBeforeBlocking: in front of a Redis Cluster, a
// tracking client in OPTIN mode that sends CLIENT CACHING yes and then a
// blocking read (XREAD … BLOCK, on the connection its tracker lends) is
// told when another client changes the stream: the flag goes ahead of the
// read. On f9d3c4a's parent the last request of a batch (DoNow) skipped
// the lender, the flag never reached Redis, and no invalidation came.
func TestClusterTrackingCachingBeforeBlocking(t *testing.T) {
	cl := testenv.StartCluster(t, testenv.ClusterOptions{ReplicasPerMaster: -1})
	p := startProxy(t, proxyOptions{seeds: []string{cl.Masters[0].Addr}, loop: true})
	writer := p.dial(t)
	tracker := p.dial(t)
	run(t, writer, []exchange{{[]string{"XADD", "{a}s", "1-1", "f", "v"}, "$3\r\n1-1\r\n"}})
	hello(t, tracker, "3")
	run(t, tracker, []exchange{
		{[]string{"CLIENT", "TRACKING", "ON", "OPTIN"}, "+OK\r\n"},
		{[]string{"CLIENT", "CACHING", "yes"}, "+OK\r\n"},
	})
	if got := string(tracker.Do("XREAD", "BLOCK", "100", "STREAMS", "{a}s", "0")); !strings.Contains(got, "1-1") {
		t.Fatalf("XREAD BLOCK = %q, want the entry 1-1", got)
	}
	run(t, writer, []exchange{{[]string{"XADD", "{a}s", "1-2", "f", "v"}, "$3\r\n1-2\r\n"}})
	tracker.Send("PING")
	tracker.Flush()
	if got, err := tracker.ReadReply(); err != nil || string(got) != ">2\r\n$10\r\ninvalidate\r\n*1\r\n$4\r\n{a}s\r\n" {
		t.Fatalf("tracking client: %q, %v; want the invalidation push of {a}s, read under CLIENT CACHING yes", got, err)
	}
}

// whileAsleep puts the master at addr to sleep (DEBUG SLEEP secs), then has
// send start what dials it, and checks that other's exchange is answered
// while the master still sleeps (its DEBUG SLEEP reply not in): the serve
// loop did not wait for the dial (what names it). It returns once the
// master woke.
func whileAsleep(t *testing.T, addr, secs string, send func(), other *testenv.Conn, ex exchange, what string) {
	t.Helper()
	sleeper := testenv.Dial(t, addr)
	sleeper.Send("DEBUG", "SLEEP", secs)
	sleeper.Flush()
	time.Sleep(50 * time.Millisecond) // asleep before the dial
	send()
	run(t, other, []exchange{ex})
	sleeper.SetTimeout(100 * time.Millisecond)
	if got, err := sleeper.ReadReply(); err == nil {
		t.Fatalf("%s was answered only once the master woke (DEBUG SLEEP: %q): the loop waited for %s", ex.req, got, what)
	}
	sleeper.SetTimeout(10 * time.Second)
	if got, err := sleeper.ReadReply(); err != nil || string(got) != "+OK\r\n" {
		t.Fatalf("DEBUG SLEEP: %q, %v", got, err)
	}
}
