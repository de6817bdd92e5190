package passthrough

import (
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestRedisUserThroughProxy: a client that authenticates as a Redis user
// other than the proxy's runs as that user in Redis, as it would connected
// directly: its commands, keys and scripts' ACL checks are that user's
// (unit/scripting "Script ACL check": before, it ran as the proxy's user
// on a shared connection), ACL WHOAMI names it, other clients are not
// affected, RESET puts it back, and its database is the one it had
// selected, although bob may not SELECT (unit/scripting without
// --singledb: TRYAGAIN before); AUTH inside MULTI is refused (EXEC would
// have authenticated a connection the proxy gives other clients after).
func TestRedisUserThroughProxy(t *testing.T) {
	pr := startPair(t)
	pr.setUser(t, "bob", "on", ">123", "+@scripting", "+set", "+get", "+acl|whoami", "+reset", "+ping", "~x*")
	proxy, direct := pr.conns(t)
	other := testenv.Dial(t, pr.Proxy.Addr)
	for _, cmd := range [][]string{
		c("SELECT", "9"), // bob may not SELECT: its connection is in 9 all the same
		c("AUTH", "bob", "123"),
		c("ACL", "WHOAMI"),
		c("SET", "xx", "1"),
		c("SET", "yy", "1"),
		c("GET", "xx"),
		c("HSET", "xx", "f", "1"),
		c("EVAL", "return redis.acl_check_cmd('set','xx',1)", "1", "xx"),
		c("EVAL", "return redis.acl_check_cmd('hset','xx','f',1)", "1", "xx"),
		c("EVAL", "return redis.acl_check_cmd('set','yy',1)", "0"),
		c("EVAL", "return redis.call('set','yy',1)", "0"),
		c("AUTH", "bob", "wrong"),
		c("ACL", "WHOAMI"),
	} {
		same(t, proxy, direct, cmd...)
	}
	if got := other.Do("SET", "yy", "1"); string(got) != "+OK\r\n" {
		t.Errorf("another client's SET yy while bob is authenticated on the first = %q", got)
	}
	same(t, proxy, direct, "RESET")
	same(t, proxy, direct, "ACL", "WHOAMI")
	same(t, proxy, direct, "SET", "yy", "2")
	if got := proxy.Do("MULTI"); string(got) != "+OK\r\n" {
		t.Fatalf("MULTI = %q", got)
	}
	if got := proxy.Do("AUTH", "bob", "123"); string(got) != "-ERR fenceproxy: AUTH and HELLO cannot be part of a transaction; authenticate before MULTI\r\n" {
		t.Errorf("AUTH inside MULTI = %q", got)
	}
	if got := proxy.Do("EXEC"); string(got) != "-EXECABORT Transaction discarded because of previous errors.\r\n" {
		t.Errorf("EXEC after a refused AUTH = %q", got)
	}
	same(t, proxy, direct, "ACL", "WHOAMI")
	pr.alive(t)
}

// TestRedisUsersShareConnections: the clients of one Redis user share that
// user's connections, as the proxy's own clients share the proxy's: many
// clients authenticated as bob hold a few Redis connections as bob, not one
// each, and each still gets exactly Redis's answers under bob's ACL, in a
// transaction (its connection of its own opened as bob) and for a blocking
// command bob may not run.
func TestRedisUsersShareConnections(t *testing.T) {
	pr := startPair(t)
	pr.setUser(t, "bob", "on", ">123", "+@transaction", "+set", "+get", "+incr", "+acl|whoami", "+ping", "~x*")
	const clients = 24
	for range clients { // every client stays connected (and authenticated) meanwhile
		proxy, direct := pr.conns(t)
		for _, cmd := range [][]string{
			c("AUTH", "bob", "123"),
			c("ACL", "WHOAMI"),
			c("INCR", "xcount"),
			c("SET", "y", "1"), // outside bob's keys
			c("MULTI"),
			c("INCR", "xcount"),
			c("SET", "y", "1"),
			c("EXEC"),
			c("BLPOP", "xlist", "0.01"), // bob may not
			c("GET", "xcount"),
		} {
			same(t, proxy, direct, cmd...)
		}
	}
	list := string(testenv.Dial(t, pr.A.Addr).Do("CLIENT", "LIST"))
	bobs := strings.Count(list, " user=bob ")
	if bobs == 0 || bobs >= clients/2 {
		t.Fatalf("%d clients of bob through the proxy hold %d Redis connections as bob; want a few shared ones:\n%s", clients, bobs, list)
	}
	pr.alive(t)
}

// setUser makes the Redis user name with rules on both Redis servers (the
// proxy's and the direct one).
func (pr *pair) setUser(t *testing.T, name string, rules ...string) {
	t.Helper()
	for _, addr := range []string{pr.A.Addr, pr.B.Addr} {
		if got := testenv.Dial(t, addr).Do(append([]string{"ACL", "SETUSER", name}, rules...)...); string(got) != "+OK\r\n" {
			t.Fatalf("ACL SETUSER %s on %s: %q", name, addr, got)
		}
	}
}
