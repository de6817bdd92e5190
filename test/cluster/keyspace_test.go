package cluster

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// keyspaceListener is a client subscribed through the proxy to keyspace
// notifications, reading what it hears.
type keyspaceListener struct {
	t *testing.T
	c *testenv.Conn
}

// push is a pub/sub message as Redis writes it, in RESP2 (*) or RESP3 (>).
func push(kind byte, fields ...string) string {
	s := fmt.Sprintf("%c%d\r\n", kind, len(fields))
	for _, f := range fields {
		s += fmt.Sprintf("$%d\r\n%s\r\n", len(f), f)
	}
	return s
}

// confirmation is a (p)subscribe confirmation with its count.
func confirmation(kind byte, what, name string, count int) string {
	return fmt.Sprintf("%c3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n:%d\r\n", kind, len(what), what, len(name), name, count)
}

// read reads the next message within d, but those about the token
// authority's keys, which the proxy writes every second.
func (l *keyspaceListener) read(d time.Duration) ([]byte, error) {
	deadline := time.Now().Add(d)
	for {
		l.c.SetTimeout(max(time.Until(deadline), time.Millisecond))
		got, err := l.c.ReadReply()
		if err != nil || !strings.Contains(string(got), lockPrefix+"{authority}") {
			return got, err
		}
	}
}

// expectEvents reads messages until it has every message of want (each
// exactly once), failing on any other message; then it makes sure nothing
// more comes for a moment (a duplicate from a second master).
func (l *keyspaceListener) expectEvents(what string, want []string) {
	l.t.Helper()
	left := map[string]int{}
	for _, w := range want {
		left[w]++
	}
	for n := len(want); n > 0; n-- {
		got, err := l.read(10 * time.Second)
		if err != nil {
			var missing []string
			for m, k := range left {
				if k > 0 {
					missing = append(missing, testenv.ShowReply([]byte(m)))
				}
			}
			sort.Strings(missing)
			l.t.Fatalf("%s: heard %d of %d messages, then %v; missing:\n%s", what, len(want)-n, len(want), err, lines(missing))
		}
		if left[string(got)] == 0 {
			l.t.Fatalf("%s: heard %s, not expected (or heard twice)", what, testenv.ShowReply(got))
		}
		left[string(got)]--
	}
	if got, err := l.read(300 * time.Millisecond); err == nil {
		l.t.Fatalf("%s: heard %s after every expected message (a duplicate?)", what, testenv.ShowReply(got))
	}
}

// TestKeyspaceNotificationsEveryMaster: in front of a Redis Cluster, CONFIG
// SET notify-keyspace-events reaches every master, and a client subscribed
// through the proxy to keyspace channels (a pattern in RESP2, a channel in
// RESP3) hears the event of every key, whichever master holds it, exactly
// once; an ordinary channel's message is heard once too; the
// confirmations are one node's; PUBSUB NUMSUB counts the subscriber once.
// After a slot moves to another master its keys' events are still heard.
func TestKeyspaceNotificationsEveryMaster(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	proxy := e.dial(t)
	if got := proxy.Do("CONFIG", "SET", "notify-keyspace-events", "KEA"); string(got) != "+OK\r\n" {
		t.Fatalf("CONFIG SET notify-keyspace-events KEA: %s", testenv.ShowReply(got))
	}
	for _, m := range e.cl.Masters {
		if got := testenv.Dial(t, m.Addr).Do("CONFIG", "GET", "notify-keyspace-events"); !strings.Contains(string(got), "AKE") {
			t.Errorf("CONFIG GET notify-keyspace-events on master %s after CONFIG SET through the proxy: %q", m.Addr, got)
		}
	}

	pat := e.dial(t) // RESP2, a pattern and an ordinary channel
	if got := pat.Do("PSUBSCRIBE", "__keyevent@0__:*"); string(got) != confirmation('*', "psubscribe", "__keyevent@0__:*", 1) {
		t.Fatalf("PSUBSCRIBE: %s", testenv.ShowReply(got))
	}
	if got := pat.Do("SUBSCRIBE", "news"); string(got) != confirmation('*', "subscribe", "news", 2) {
		t.Fatalf("SUBSCRIBE news: %s", testenv.ShowReply(got))
	}
	ch := e.dial(t) // RESP3, one keyevent channel
	if got := ch.Do("HELLO", "3"); len(got) == 0 || got[0] != '%' {
		t.Fatalf("HELLO 3: %s", testenv.ShowReply(got))
	}
	if got := ch.Do("SUBSCRIBE", "__keyevent@0__:del"); string(got) != confirmation('>', "subscribe", "__keyevent@0__:del", 1) {
		t.Fatalf("SUBSCRIBE __keyevent@0__:del in RESP3: %s", testenv.ShowReply(got))
	}
	if got := proxy.Do("PUBSUB", "NUMSUB", "__keyevent@0__:del", "news"); string(got) != "*4\r\n$18\r\n__keyevent@0__:del\r\n:1\r\n$4\r\nnews\r\n:1\r\n" {
		t.Errorf("PUBSUB NUMSUB: %s, want each channel's one subscriber", testenv.ShowReply(got))
	}
	if got := proxy.Do("PUBSUB", "NUMPAT"); string(got) != ":1\r\n" {
		t.Errorf("PUBSUB NUMPAT: %s, want :1", testenv.ShowReply(got))
	}

	var keys []string
	for _, m := range e.cl.Masters {
		keys = append(keys, st.keysOn(m, "ks:", 20)...)
	}
	for _, k := range keys {
		if got := proxy.Do("SET", k, "v"); string(got) != "+OK\r\n" {
			t.Fatalf("SET %s: %s", k, testenv.ShowReply(got))
		}
	}
	var wantPat, wantCh []string
	for _, k := range keys {
		wantPat = append(wantPat, push('*', "pmessage", "__keyevent@0__:*", "__keyevent@0__:set", k))
	}
	pl := &keyspaceListener{t, pat}
	pl.expectEvents("SET of keys on every master (RESP2 pattern)", wantPat)

	wantPat = nil
	for _, k := range keys {
		if got := proxy.Do("DEL", k); string(got) != ":1\r\n" {
			t.Fatalf("DEL %s: %s", k, testenv.ShowReply(got))
		}
		wantPat = append(wantPat, push('*', "pmessage", "__keyevent@0__:*", "__keyevent@0__:del", k))
		wantCh = append(wantCh, push('>', "message", "__keyevent@0__:del", k))
	}
	if got := proxy.Do("PUBLISH", "news", "hello"); len(got) == 0 || got[0] != ':' {
		t.Fatalf("PUBLISH news: %s", testenv.ShowReply(got))
	}
	pl.expectEvents("DEL of keys on every master, and PUBLISH news (RESP2)", append(wantPat, push('*', "message", "news", "hello")))
	cl := &keyspaceListener{t, ch}
	cl.expectEvents("DEL of keys on every master (RESP3 channel)", wantCh)

	// A pattern that matches everything is mirrored too; an ordinary
	// message, which every node relays, still comes once.
	star := e.dial(t)
	if got := star.Do("PSUBSCRIBE", "*"); string(got) != confirmation('*', "psubscribe", "*", 1) {
		t.Fatalf("PSUBSCRIBE *: %s", testenv.ShowReply(got))
	}
	proxy.Do("PUBLISH", "news", "again")
	sl := &keyspaceListener{t, star}
	sl.expectEvents("PUBLISH news with PSUBSCRIBE *", []string{push('*', "pmessage", "*", "news", "again")})
	pl.expectEvents("PUBLISH news", []string{push('*', "message", "news", "again")})
	star.Close() // its subscriptions go with it, on every master

	// A key's slot moves to another master: its event comes from there.
	k := keys[0]
	from, to := st.of(k), e.cl.Masters[2]
	if from == to {
		to = e.cl.Masters[1]
	}
	proxy.Do("SET", k, "v")
	pl.expectEvents("SET before the move", []string{push('*', "pmessage", "__keyevent@0__:*", "__keyevent@0__:set", k)})
	cl.expectEvents("nothing but del", nil)
	migrateSlot(t, e.cl, testenv.KeySlot(k), from, to)
	// MIGRATE itself deletes the key on from and restores it on to
	// (events "del" and "restore"): read what came, then DEL through the
	// proxy once it routes there.
	for {
		got, err := pl.read(2 * time.Second)
		if err != nil {
			break
		}
		if !strings.Contains(string(got), k) {
			t.Fatalf("during the migration of %s heard %s", k, testenv.ShowReply(got))
		}
	}
	for {
		if _, err := cl.read(2 * time.Second); err != nil {
			break
		}
	}
	if got := proxy.Do("DEL", k); string(got) != ":1\r\n" {
		t.Fatalf("DEL %s after its slot moved: %s", k, testenv.ShowReply(got))
	}
	pl.expectEvents("DEL after the slot moved (RESP2)", []string{push('*', "pmessage", "__keyevent@0__:*", "__keyevent@0__:del", k)})
	cl.expectEvents("DEL after the slot moved (RESP3)", []string{push('>', "message", "__keyevent@0__:del", k)})

	// Leaving: one node's confirmations, and the mirrors let go too.
	pat.Send("PUNSUBSCRIBE", "__keyevent@0__:*")
	pat.Flush()
	if got, err := pl.read(5 * time.Second); string(got) != confirmation('*', "punsubscribe", "__keyevent@0__:*", 1) {
		t.Fatalf("PUNSUBSCRIBE: %s, %v", testenv.ShowReply(got), err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, m := range e.cl.Masters {
		for {
			got := testenv.Dial(t, m.Addr).Do("PUBSUB", "NUMPAT")
			if string(got) == ":0\r\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("PUBSUB NUMPAT on master %s after PUNSUBSCRIBE: %s, want :0 (a mirror kept the pattern)", m.Addr, got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestKeyspaceNotificationsAfterFailover: a master fails over (CLUSTER
// FAILOVER on its replica); the promoted replica is given what clients set
// through the proxy with CONFIG SET (notify-keyspace-events), and a client
// subscribed before the failover hears the events of the new master's keys
// once the proxy has subscribed there, each exactly once (the old master,
// now a replica, publishes the same events: they are not relayed).
func TestKeyspaceNotificationsAfterFailover(t *testing.T) {
	e := startEnv(t, 1, 0)
	proxy := e.dial(t)
	if got := proxy.Do("CONFIG", "SET", "notify-keyspace-events", "Kg$"); string(got) != "+OK\r\n" {
		t.Fatalf("CONFIG SET: %s", testenv.ShowReply(got))
	}
	sub := e.dial(t)
	if got := sub.Do("PSUBSCRIBE", "__keyspace@0__:fo:*"); string(got) != confirmation('*', "psubscribe", "__keyspace@0__:fo:*", 1) {
		t.Fatalf("PSUBSCRIBE: %s", testenv.ShowReply(got))
	}
	set := testenv.Dial(t, e.cl.Masters[0].Addr).Do("CONFIG", "GET", "notify-keyspace-events")
	victim := e.cl.Masters[1]
	replica := e.cl.ReplicasOf(victim)[0]
	if cfg := testenv.Dial(t, replica.Addr).Do("CONFIG", "GET", "notify-keyspace-events"); string(cfg) == string(set) {
		t.Fatalf("the replica %s has notify-keyspace-events %q before the failover: the test proves nothing", replica.Addr, cfg)
	}
	e.cl.Failover(t, replica)
	deadline := time.Now().Add(15 * time.Second)
	for {
		numpat := testenv.Dial(t, replica.Addr).Do("PUBSUB", "NUMPAT")
		cfg := testenv.Dial(t, replica.Addr).Do("CONFIG", "GET", "notify-keyspace-events")
		if string(numpat) == ":1\r\n" && string(cfg) == string(set) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the failover the promoted master %s has PUBSUB NUMPAT %q and notify-keyspace-events %q: want the proxy's mirror and the setting made through it", replica.Addr, numpat, cfg)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := readSlots(t, e.cl)
	var keys, want []string
	for _, m := range e.cl.Masters {
		keys = append(keys, st.keysOn(m, "fo:", 10)...)
	}
	for _, k := range keys {
		if got := proxy.Do("SET", k, "v"); string(got) != "+OK\r\n" {
			t.Fatalf("SET %s: %s", k, testenv.ShowReply(got))
		}
		want = append(want, push('*', "pmessage", "__keyspace@0__:fo:*", "__keyspace@0__:"+k, "set"))
	}
	l := &keyspaceListener{t, sub}
	l.expectEvents("SET of keys on every master after a failover", want)
}

// TestPubsubConnectionNeverRedirected: a client that used pub/sub (here an
// UNSUBSCRIBE with no subscription, as Redis's suite does; or RESP3, which
// may send anything while subscribed) and then sends keyed commands on that
// connection gets their own replies, in order, whichever master holds the
// keys: never MOVED; CONFIG SET and DBSIZE there cover every master. Before, a key of another master than the pub/sub
// connection's got an error (a MOVED turned into -CROSSSLOT), and Redis's
// unit/pubsub ended there.
func TestPubsubConnectionNeverRedirected(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	c := e.dial(t)
	if got := c.Do("UNSUBSCRIBE"); string(got) != "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n" {
		t.Fatalf("UNSUBSCRIBE: %s", testenv.ShowReply(got))
	}
	var ks []string
	for _, m := range e.cl.Masters {
		ks = append(ks, st.keysOn(m, "tun:", 1)[0])
	}
	for i, k := range ks {
		c.Send("SET", k, "v"+itoa(int64(i)))
		c.Send("PING")
		c.Send("GET", k)
	}
	c.Flush()
	for i, k := range ks {
		for _, want := range []string{"+OK\r\n", "+PONG\r\n", "$2\r\nv" + itoa(int64(i)) + "\r\n"} {
			got, err := c.ReadReply()
			noRedirect(t, "a command on a pub/sub connection", got)
			if err != nil || string(got) != want {
				t.Fatalf("pipelined SET/PING/GET of %s on a pub/sub connection: %s (%v), want %q", k, testenv.ShowReply(got), err, want)
			}
		}
	}

	// Commands about the whole cluster reach every master, as from a
	// connection that never used pub/sub.
	if got := c.Do("CONFIG", "SET", "notify-keyspace-events", "KEA"); string(got) != "+OK\r\n" {
		t.Fatalf("CONFIG SET on a pub/sub connection: %s", testenv.ShowReply(got))
	}
	for _, m := range e.cl.Masters {
		if got := testenv.Dial(t, m.Addr).Do("CONFIG", "GET", "notify-keyspace-events"); !strings.Contains(string(got), "AKE") {
			t.Errorf("CONFIG SET notify-keyspace-events on a pub/sub connection: master %s has %s", m.Addr, testenv.ShowReply(got))
		}
	}
	if got, want := c.Do("DBSIZE"), e.dial(t).Do("DBSIZE"); string(got) != string(want) || string(got) != ":3\r\n" {
		t.Errorf("DBSIZE on a pub/sub connection %s, on another %s; want :3", testenv.ShowReply(got), testenv.ShowReply(want))
	}

	// RESP3, subscribed: messages and replies in one stream.
	r3 := e.dial(t)
	r3.Do("HELLO", "3")
	if got := r3.Do("SUBSCRIBE", "tun-ch"); string(got) != confirmation('>', "subscribe", "tun-ch", 1) {
		t.Fatalf("SUBSCRIBE (RESP3): %s", testenv.ShowReply(got))
	}
	for i, k := range ks {
		if got := r3.Do("SET", k, "w"); string(got) != "+OK\r\n" {
			t.Fatalf("RESP3 subscribed: SET %s: %s", k, testenv.ShowReply(got))
		}
		if got := r3.Do("GET", k); string(got) != "$1\r\nw\r\n" {
			t.Fatalf("RESP3 subscribed: GET %s: %s", k, testenv.ShowReply(got))
		}
		e.dial(t).Do("PUBLISH", "tun-ch", "m"+itoa(int64(i)))
		if got, err := r3.ReadReply(); err != nil || string(got) != push('>', "message", "tun-ch", "m"+itoa(int64(i))) {
			t.Fatalf("RESP3 subscribed: the message after PUBLISH: %s (%v)", testenv.ShowReply(got), err)
		}
	}
}
