package testenv

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// quiet is how long a test watches for a byte that must not come. Its
// length proves nothing by itself: each test then heals the Link and
// checks that the held bytes do come, or that the other side saw them.
const quiet = 300 * time.Millisecond

// expectNoReply fails if c receives anything within quiet.
func expectNoReply(t *testing.T, c *Conn, what string) {
	t.Helper()
	c.SetTimeout(quiet)
	defer c.SetTimeout(DefaultTimeout)
	reply, err := c.ReadReply()
	if err == nil {
		t.Fatalf("%s: got %s through a cut Link", what, ShowReply(reply))
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: the connection failed instead of waiting: %v", what, err)
	}
}

// readReply reads one reply with testenv's usual bound.
func readReply(t *testing.T, c *Conn) string {
	t.Helper()
	reply, err := c.ReadReply()
	if err != nil {
		t.Fatalf("reading the held reply after Heal: %v", err)
	}
	return string(reply)
}

// waitKey polls Redis directly until key has value want (bounded).
func waitKey(t *testing.T, direct *Conn, key, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := ParseBulk(direct.Do("GET", key))
		if string(got) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s straight from Redis = %q, want %q", key, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// linked starts a Redis with a Link in front of it and returns the Link, a
// connection straight to Redis, and one through the Link that has relayed
// a PING already, so that it exists before any fault.
func linked(t *testing.T) (l *Link, direct, c *Conn) {
	t.Helper()
	r := StartRedis(t, RedisOptions{})
	l = StartLink(t, r.Addr)
	direct, c = Dial(t, r.Addr), Dial(t, l.Addr)
	if got := string(c.Do("PING")); got != "+PONG\r\n" {
		t.Fatalf("PING through the Link = %q", got)
	}
	return l, direct, c
}

func TestLinkRelays(t *testing.T) {
	r := StartRedis(t, RedisOptions{})
	l := StartLink(t, r.Addr)
	if l.Port() == 0 || l.Upstream != r.Addr {
		t.Fatalf("Link Addr %s Port %d Upstream %s", l.Addr, l.Port(), l.Upstream)
	}
	c := Dial(t, l.Addr)
	defer c.Close()
	if got := string(c.Do("SET", "k", "v")); got != "+OK\r\n" {
		t.Fatalf("SET through the Link = %q", got)
	}
	direct := Dial(t, r.Addr)
	defer direct.Close()
	waitKey(t, direct, "k", "v")
}

// A cut both ways holds a request and its reply, on an open connection
// and on one made during the cut, and Heal delivers both in order on the
// same connections.
func TestLinkCutBothWaysHoldsAndHeals(t *testing.T) {
	l, direct, c := linked(t)

	l.Cut(t, BothWays)
	if !l.Faulty() {
		t.Fatal("Faulty() = false during a cut")
	}
	c.Send("SET", "both", "1")
	c.Send("INCR", "ctr")
	c.Flush()
	later, err := net.DialTimeout("tcp", l.Addr, 5*time.Second)
	if err != nil {
		t.Fatalf("connecting during the cut: %v", err)
	}
	defer later.Close()
	if _, err := later.Write(AppendCommand(nil, "SET", "later", "1")); err != nil {
		t.Fatal(err)
	}
	expectNoReply(t, c, "SET during a cut both ways")
	if got, _ := ParseBulk(direct.Do("GET", "both")); got != nil {
		t.Fatalf("Redis ran a request sent through a cut Link: GET both = %q", got)
	}

	l.Heal(t)
	if l.Faulty() {
		t.Fatal("Faulty() = true after Heal")
	}
	if got := readReply(t, c); got != "+OK\r\n" {
		t.Fatalf("held SET answered %q after Heal", got)
	}
	if got := readReply(t, c); got != ":1\r\n" {
		t.Fatalf("held INCR answered %q after Heal", got)
	}
	waitKey(t, direct, "later", "1")
	if got := string(c.Do("GET", "both")); got != "$1\r\n1\r\n" {
		t.Fatalf("GET after Heal = %q", got)
	}
}

// A cut of the upstream direction only: Redis never sees the request until
// Heal.
func TestLinkCutUpstreamHoldsRequests(t *testing.T) {
	l, direct, c := linked(t)

	l.Cut(t, Upstream)
	c.Send("SET", "up", "1")
	c.Flush()
	expectNoReply(t, c, "SET with the upstream cut")
	if got, _ := ParseBulk(direct.Do("GET", "up")); got != nil {
		t.Fatalf("Redis ran a request held upstream: GET up = %q", got)
	}
	l.Heal(t)
	if got := readReply(t, c); got != "+OK\r\n" {
		t.Fatalf("held SET answered %q after Heal", got)
	}
	waitKey(t, direct, "up", "1")
}

// A cut of the downstream direction only: Redis runs the request at once,
// its reply waits for Heal. This is the one-way cut that makes an outcome
// unknown to the client although it happened.
func TestLinkCutDownstreamHoldsReplies(t *testing.T) {
	l, direct, c := linked(t)

	l.Cut(t, Downstream)
	c.Send("SET", "down", "1")
	c.Flush()
	waitKey(t, direct, "down", "1") // the request went through
	expectNoReply(t, c, "SET with the downstream cut")
	l.Heal(t)
	if got := readReply(t, c); got != "+OK\r\n" {
		t.Fatalf("held reply %q after Heal", got)
	}
}

// Drop discards the bytes and Heal closes the connections it cut: the
// request that crossed is done, its reply never comes, and a new
// connection works.
func TestLinkDropClosesAtHeal(t *testing.T) {
	l, direct, c := linked(t)

	l.Drop(t, Downstream)
	c.Send("SET", "dropped", "1")
	c.Flush()
	waitKey(t, direct, "dropped", "1")
	expectNoReply(t, c, "SET with replies dropped")
	l.Heal(t)
	if reply, err := c.ReadReply(); err == nil {
		t.Fatalf("a dropped reply came after Heal: %s", ShowReply(reply))
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the cut connection was not closed at Heal: %v", err)
	}
	fresh := Dial(t, l.Addr)
	defer fresh.Close()
	if got := string(fresh.Do("GET", "dropped")); got != "$1\r\n1\r\n" {
		t.Fatalf("GET on a new connection after Heal = %q", got)
	}
}

// Delay slows a round trip by at least the delay each way; a lower bound,
// which a slow machine cannot break.
func TestLinkDelay(t *testing.T) {
	l, _, c := linked(t)
	const d = 40 * time.Millisecond
	l.Delay(t, BothWays, d)
	start := time.Now()
	if got := string(c.Do("PING")); got != "+PONG\r\n" {
		t.Fatalf("PING = %q", got)
	}
	if took := time.Since(start); took < 2*d {
		t.Fatalf("a round trip through a Link delayed %v each way took %v", d, took)
	}
	l.Heal(t)
	if got := string(c.Do("PING")); got != "+PONG\r\n" {
		t.Fatalf("PING after Heal = %q", got)
	}
}

// A Link whose upstream is down closes each client connection at once:
// the client sees the upstream as gone, and nothing hangs.
func TestLinkUpstreamDown(t *testing.T) {
	r := StartRedis(t, RedisOptions{})
	l := StartLink(t, r.Addr)
	r.Kill()
	c, err := TryDial(l.Addr, 5*time.Second)
	if err != nil {
		return // refused: as good
	}
	defer c.Close()
	if reply, err := c.TryDo("PING"); err == nil {
		t.Fatalf("PING through a Link to a dead upstream = %s", ShowReply(reply))
	}
	r.Restart(t)
	again := Dial(t, l.Addr)
	defer again.Close()
	if got := string(again.Do("PING")); got != "+PONG\r\n" {
		t.Fatalf("PING after the upstream came back = %q", got)
	}
}

// Sentinels that reach every Redis through a Link name the Links, before
// and after a failover, so a proxy that follows them reaches Redis through
// the Links too; the replica's link to its master is up all along.
func TestSentinelsThroughLinks(t *testing.T) {
	master := StartRedis(t, RedisOptions{})
	replica := StartReplica(t, master)
	ml, rl := StartLink(t, master.Addr), StartLink(t, replica.Addr)
	master.AnnounceVia(t, ml)
	replica.AnnounceVia(t, rl)
	s := StartSentinels(t, master, SentinelOptions{MasterPort: ml.Port()})
	s.WaitMaster(t, ml.Addr)
	reply, err := s.do(s.Addrs[0], "SENTINEL", "REPLICAS", s.MasterName)
	if err != nil || !strings.Contains(string(reply), strconv.Itoa(rl.Port())) {
		t.Fatalf("SENTINEL REPLICAS = %s (err %v), want the replica's Link port %d", ShowReply(reply), err, rl.Port())
	}
	master.Kill()
	s.WaitMaster(t, rl.Addr)
	replica.Promoted()
	master.Restart(t)
	master.Follow(t, replica) // waits for the replica's announced port in INFO
}
