package sentinel_test

import (
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// TestSelectAcrossFailover: through Sentinel, a client in database 4 keeps
// its database across a failover: what it wrote there before is read from
// the new master's database 4, and its new writes land there, not in 0. So
// does a client of another Redis user its user. Both are served on the
// serve loop throughout: the new master's connections of their database
// and user are dialled off the loop before their first request there
// (goroutine_detours does not move).
func TestSelectAcrossFailover(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	for _, r := range []*testenv.Redis{master, replica} {
		testenv.Dial(t, r.Addr).Do("ACL", "SETUSER", "bob", "on", ">bobpw", "~*", "+@all")
	}
	sentinels := testenv.StartSentinels(t, master, testenv.SentinelOptions{})
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{Sentinels: sentinels, MinReplicas: 0})
	observer := testenv.Dial(t, proxy.Addr)
	detours := func() string {
		return upstream.InfoField(string(observer.Do("INFO", "fenceproxy")), "goroutine_detours")
	}
	c := testenv.Dial(t, proxy.Addr)
	if r := c.Do("SELECT", "4"); string(r) != "+OK\r\n" {
		t.Fatalf("SELECT 4 = %s", testenv.ShowReply(r))
	}
	c.Do("SET", "in4", "before")
	bob := testenv.Dial(t, proxy.Addr)
	if r := bob.Do("AUTH", "bob", "bobpw"); string(r) != "+OK\r\n" {
		t.Fatalf("AUTH bob = %s", testenv.ShowReply(r))
	}
	before := detours()
	rc := testenv.Dial(t, replica.Addr)
	until(t, 10*time.Second, "the write replicated", func() (bool, string) {
		rc.Do("SELECT", "4")
		r := rc.Do("GET", "in4")
		return string(r) == "$6\r\nbefore\r\n", testenv.ShowReply(r)
	})

	master.Kill()
	sentinels.WaitMaster(t, replica.Addr)
	replica.Promoted()
	until(t, 30*time.Second, "serving SET in database 4 from the new master", func() (bool, string) {
		r, err := c.TryDo("SET", "after4", "x")
		if err != nil { // the connection may have been cut: dial again, in 4
			c = testenv.Dial(t, proxy.Addr)
			c.Do("SELECT", "4")
			return false, err.Error()
		}
		return string(r) == "+OK\r\n", testenv.ShowReply(r)
	})
	if r := c.Do("GET", "in4"); string(r) != "$6\r\nbefore\r\n" {
		t.Fatalf("GET in4 in database 4 after the failover = %s", testenv.ShowReply(r))
	}
	direct := testenv.Dial(t, replica.Addr)
	if r := direct.Do("GET", "after4"); string(r) != "$-1\r\n" {
		t.Fatalf("the new master's database 0 has after4 (%s): the write went to the wrong database", testenv.ShowReply(r))
	}
	direct.Do("SELECT", "4")
	if r := direct.Do("GET", "after4"); string(r) != "$1\r\nx\r\n" {
		t.Fatalf("the new master's database 4: GET after4 = %s", testenv.ShowReply(r))
	}
	until(t, 10*time.Second, "bob's client served by the new master as bob", func() (bool, string) {
		r, err := bob.TryDo("ACL", "WHOAMI")
		if err != nil { // cut: dial again, as bob
			bob = testenv.Dial(t, proxy.Addr)
			bob.Do("AUTH", "bob", "bobpw")
			return false, err.Error()
		}
		return string(r) == "$3\r\nbob\r\n", testenv.ShowReply(r)
	})
	if after := detours(); after != before {
		t.Fatalf("goroutine_detours went from %s to %s across the failover", before, after)
	}
}
