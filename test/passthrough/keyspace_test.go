package passthrough

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestKeyspaceIsTheClients: what a client counts and lists in its database
// is what it wrote, as on Redis (DBSIZE, KEYS, SCAN, RANDOMKEY, in a
// script and in MULTI too): the token authority's two keys (which the
// heartbeat writes again within a round of a FLUSHALL) are in Redis's
// highest database, not in 0 nor in the others clients use; lock owner
// records stay in 0, where they are visible by design.
func TestKeyspaceIsTheClients(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	// The heartbeat has written the authority's keys again since
	// startPair's FLUSHALL: wait for them on the proxy's Redis.
	behind := testenv.Dial(t, pr.A.Addr)
	behind.Do("SELECT", "15")
	deadline := time.Now().Add(20 * time.Second)
	for string(behind.Do("EXISTS", "fenceproxy:lock:{authority}:live", "fenceproxy:lock:{authority}:bound")) != ":2\r\n" {
		if time.Now().After(deadline) {
			t.Fatal("the token authority's keys were not written again within 20s of FLUSHALL")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, db := range []string{"0", "9"} {
		same(t, proxy, direct, "SELECT", db)
		same(t, proxy, direct, "DBSIZE")
		same(t, proxy, direct, "RANDOMKEY")
		same(t, proxy, direct, "KEYS", "*")
		same(t, proxy, direct, "SCAN", "0", "COUNT", "1000")
		same(t, proxy, direct, "SET", "only", "v")
		same(t, proxy, direct, "PSETEX", "short", "100000", "v")
		same(t, proxy, direct, "DBSIZE")
		same(t, proxy, direct, "DEL", "short")
		same(t, proxy, direct, "RANDOMKEY") // "only", never the proxy's
		same(t, proxy, direct, "EVAL", "return redis.call('DBSIZE')", "0")
		same(t, proxy, direct, "MULTI")
		same(t, proxy, direct, "DBSIZE")
		same(t, proxy, direct, "EXEC")
		same(t, proxy, direct, "FLUSHDB")
		same(t, proxy, direct, "DBSIZE")
	}
	// INFO keyspace describes every database, the authority's too: a line
	// for database 15 is all it adds.
	if got, want := keyspaceSection(t, proxy), keyspaceSection(t, direct); got != strings.TrimSpace(want+"\r\ndb15:keys=2,expires=1,avg_ttl=0") &&
		!strings.HasPrefix(got, strings.TrimSpace(want+"\r\ndb15:keys=2,expires=1,")) {
		t.Errorf("INFO keyspace via the proxy %q, on Redis %q", got, want)
	}
	// Lock owner records and fence marks are the lock family's data, in
	// database 0.
	proxy.Do("SELECT", "0")
	if got := proxy.Do("LOCK.ACQUIRE", "ks", "me", "60000"); len(got) == 0 || got[0] != ':' {
		t.Fatalf("LOCK.ACQUIRE = %s", testenv.ShowReply(got))
	}
	got := string(proxy.Do("KEYS", "*"))
	if got != "*2\r\n$20\r\nfenceproxy:lock:{ks}\r\n$26\r\nfenceproxy:lock:{ks}:fence\r\n" &&
		got != "*2\r\n$26\r\nfenceproxy:lock:{ks}:fence\r\n$20\r\nfenceproxy:lock:{ks}\r\n" {
		t.Errorf("KEYS * after LOCK.ACQUIRE = %q, want the owner record and its fence mark alone", got)
	}
	pr.alive(t)
}

// keyspaceSection is INFO keyspace's lines, without the header.
func keyspaceSection(t *testing.T, c *testenv.Conn) string {
	t.Helper()
	b, _ := testenv.ParseBulk(c.Do("INFO", "keyspace"))
	return strings.TrimSpace(strings.TrimPrefix(string(b), "# Keyspace"))
}

// heartbeats waits until the token authority of the proxy in front of
// redisAddr has written its live set n times (watched on a subscription
// to Redis itself, keyspace notifications turned on if they are off), so
// that whatever Redis said of it has been said.
func heartbeats(t *testing.T, redisAddr string, n int) { watchHeartbeats(t, redisAddr)(n) }

// watchHeartbeats subscribes to the authority's heartbeat now, and returns
// heartbeats' wait on that subscription.
func watchHeartbeats(t *testing.T, redisAddr string) func(n int) {
	t.Helper()
	if got := testenv.Dial(t, redisAddr).Do("CONFIG", "GET", "notify-keyspace-events"); bytes.HasSuffix(got, []byte("$0\r\n\r\n")) {
		testenv.Dial(t, redisAddr).Do("CONFIG", "SET", "notify-keyspace-events", "KA")
	}
	watch := testenv.Dial(t, redisAddr)
	watch.SetTimeout(20 * time.Second)
	watch.Do("SUBSCRIBE", "__keyspace@15__:fenceproxy:lock:{authority}:live")
	return func(n int) {
		t.Helper()
		for seen := 0; seen < n; {
			msg, err := watch.ReadReply()
			if err != nil {
				t.Fatalf("waiting for the authority's heartbeat: %v", err)
			}
			if bytes.HasSuffix(msg, []byte("$4\r\nzadd\r\n")) {
				seen++
			}
		}
	}
}

// TestOwnKeysNotRelayed: a client listening to every keyspace notification
// (PSUBSCRIBE *), and a tracking client in BCAST mode with no prefix
// (RESP3 pushes, and RESP2 through REDIRECT) hear about their keys only,
// as on Redis: what Redis says of the authority's heartbeat is not relayed.
func TestOwnKeysNotRelayed(t *testing.T) {
	pr := startPair(t)
	admin := testenv.Dial(t, pr.Proxy.Addr)
	admin.Do("CONFIG", "SET", "notify-keyspace-events", "KEA")
	psub := testenv.Dial(t, pr.Proxy.Addr)
	psub.SetTimeout(10 * time.Second)
	if got := psub.Do("PSUBSCRIBE", "*"); !bytes.HasPrefix(got, []byte("*3\r\n$10\r\npsubscribe\r\n")) {
		t.Fatalf("PSUBSCRIBE * = %q", got)
	}
	bcast := testenv.Dial(t, pr.Proxy.Addr)
	bcast.SetTimeout(10 * time.Second)
	bcast.Do("HELLO", "3")
	if got := bcast.Do("CLIENT", "TRACKING", "ON", "BCAST"); string(got) != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING ON BCAST = %q", got)
	}
	sub := testenv.Dial(t, pr.Proxy.Addr)
	sub.SetTimeout(10 * time.Second)
	id := sub.Do("CLIENT", "ID")
	sub.Do("SUBSCRIBE", "__redis__:invalidate")
	redir := testenv.Dial(t, pr.Proxy.Addr)
	if got := redir.Do("CLIENT", "TRACKING", "ON", "BCAST", "REDIRECT", string(id[1:len(id)-2])); string(got) != "+OK\r\n" {
		t.Fatalf("CLIENT TRACKING ON BCAST REDIRECT = %q", got)
	}

	heartbeats(t, pr.A.Addr, 2)
	admin.Do("SET", "mine", "1")
	if got, err := psub.ReadReply(); err != nil || string(got) != "*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$19\r\n__keyspace@0__:mine\r\n$3\r\nset\r\n" {
		t.Errorf("PSUBSCRIBE *: first message after the heartbeats %q, %v; want mine's set", got, err)
	}
	if got, err := bcast.ReadReply(); err != nil || string(got) != ">2\r\n$10\r\ninvalidate\r\n*1\r\n$4\r\nmine\r\n" {
		t.Errorf("BCAST (RESP3): first push after the heartbeats %q, %v; want mine's invalidation", got, err)
	}
	if got, err := sub.ReadReply(); err != nil || string(got) != "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$4\r\nmine\r\n" {
		t.Errorf("BCAST REDIRECT (RESP2): first message after the heartbeats %q, %v; want mine's invalidation", got, err)
	}
	admin.Do("CONFIG", "SET", "notify-keyspace-events", "")
	pr.alive(t)
}
