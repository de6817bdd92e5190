package passthrough

import (
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
	// Lock owner records are the lock family's data, in database 0.
	proxy.Do("SELECT", "0")
	if got := proxy.Do("LOCK.ACQUIRE", "ks", "me", "60000"); len(got) == 0 || got[0] != ':' {
		t.Fatalf("LOCK.ACQUIRE = %s", testenv.ShowReply(got))
	}
	if got := string(proxy.Do("KEYS", "*")); got != "*1\r\n$20\r\nfenceproxy:lock:{ks}\r\n" {
		t.Errorf("KEYS * after LOCK.ACQUIRE = %q, want the owner record alone", got)
	}
	pr.alive(t)
}

// keyspaceSection is INFO keyspace's lines, without the header.
func keyspaceSection(t *testing.T, c *testenv.Conn) string {
	t.Helper()
	b, _ := testenv.ParseBulk(c.Do("INFO", "keyspace"))
	return strings.TrimSpace(strings.TrimPrefix(string(b), "# Keyspace"))
}
