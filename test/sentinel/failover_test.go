package sentinel_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestFailoverFollowedWithoutRestart: three Sentinels, a master and its
// replica, the proxy started with --sentinel. The master is killed; once
// Sentinel has promoted the replica, the same proxy process serves ordinary
// commands and locks from the new master: acknowledged grants survived,
// their holders' retries get their tokens back, and new tokens are above
// every earlier one.
func TestFailoverFollowedWithoutRestart(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	sentinels := testenv.StartSentinels(t, master, testenv.SentinelOptions{})
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{Sentinels: sentinels, MinReplicas: 1, ReplicaTimeout: replicaTimeout})
	pid := proxy.Pid()
	c := testenv.Dial(t, proxy.Addr)

	if r := c.Do("SET", "before", "1"); string(r) != "+OK\r\n" {
		t.Fatalf("SET before the failover = %s", testenv.ShowReply(r))
	}
	const n = 5
	tokens := make([]int64, n)
	for i := range tokens {
		tokens[i] = acquire(t, c, "fo:"+strconv.Itoa(i), "owner-"+strconv.Itoa(i))
	}

	master.Kill()
	sentinels.WaitMaster(t, replica.Addr)
	replica.Promoted()
	// The old master comes back empty and is made the new master's
	// replica, so grants can be acknowledged again.
	master.Restart(t)
	master.Follow(t, replica)

	until(t, 30*time.Second, "serving SET from the new master", func() (bool, string) {
		r, err := c.TryDo("SET", "after", "2")
		if err != nil { // the connection may have been cut: dial again
			c = testenv.Dial(t, proxy.Addr)
			return false, err.Error()
		}
		return string(r) == "+OK\r\n", testenv.ShowReply(r)
	})
	if r := c.Do("GET", "before"); string(r) != "$1\r\n1\r\n" {
		t.Fatalf("GET before (written before the failover, replicated) = %s", testenv.ShowReply(r))
	}
	if got := role(t, replica); got != "master" {
		t.Fatalf("the promoted replica's role is %q", got)
	}
	rc := testenv.Dial(t, replica.Addr)
	if r := rc.Do("GET", "after"); string(r) != "$1\r\n2\r\n" {
		t.Fatalf("GET after on the new master directly = %s: the write went elsewhere", testenv.ShowReply(r))
	}

	for i, old := range tokens {
		res, owner := "fo:"+strconv.Itoa(i), "owner-"+strconv.Itoa(i)
		if r := retried(t, c, "LOCK.ACQUIRE", res, "intruder", "60000"); !testenv.IsNull(r) {
			t.Fatalf("%s: another owner got an acknowledged lock after the failover: %s", res, testenv.ShowReply(r))
		}
		if r := retried(t, c, "LOCK.ACQUIRE", res, owner, "60000"); string(r) != ":"+itoa(old)+"\r\n" {
			t.Fatalf("%s: the holder's retry after the failover = %s, want its token %d", res, testenv.ShowReply(r), old)
		}
		if r := retried(t, c, "LOCK.RELEASE", res, owner); string(r) != ":1\r\n" {
			t.Fatalf("%s: release = %s", res, testenv.ShowReply(r))
		}
		if tok := acquire(t, c, res, "next"); tok <= old {
			t.Fatalf("%s: token after the failover %d, want above %d", res, tok, old)
		}
	}
	if proxy.Pid() != pid {
		t.Fatalf("the proxy was restarted (pid %d, was %d)", proxy.Pid(), pid)
	}
}

// TestOldMasterBackEmptyGetsNothing: the master is killed; once the proxy
// is reconnecting to it, the proxy is stopped (so it hears no
// announcement), Sentinel promotes the replica, and the old master comes
// back empty at its old address before Sentinel reconfigures it. When the
// proxy resumes, its reconnections find a master at the old address; the
// requests it finds waiting (plain writes and lock commands) and every
// later one must still not reach it: Sentinel names another master.
func TestOldMasterBackEmptyGetsNothing(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.StartReplica(t, master)
	sentinels := testenv.StartSentinels(t, master, testenv.SentinelOptions{})
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{Sentinels: sentinels, MinReplicas: 0, ReplicaTimeout: replicaTimeout})
	c := testenv.Dial(t, proxy.Addr)
	acquire(t, c, "held", "owner")

	master.Kill()
	until(t, 10*time.Second, "reconnecting to the dead master", func() (bool, string) {
		return strings.Contains(proxy.Log(), "lost backend connection"), "no such line in the proxy's log"
	})
	proxy.Stop()
	sentinels.WaitMaster(t, replica.Addr)
	replica.Promoted()
	master.Restart(t) // empty, and a master: Sentinel waits some seconds before it reconfigures it
	// Queued while the proxy is stopped: it reads them as soon as it resumes.
	c.Send("SET", "queued", "1")
	c.Send("LOCK.ACQUIRE", "queued-lock", "owner", "60000")
	c.Flush()
	proxy.Cont()
	for range 2 {
		if _, err := c.ReadReply(); err != nil {
			c = testenv.Dial(t, proxy.Addr) // cut with the old master's connections: fine
			break
		}
	}
	until(t, 30*time.Second, "serving from the new master", func() (bool, string) {
		r, err := c.TryDo("SET", "after", "1")
		if err != nil {
			c = testenv.Dial(t, proxy.Addr)
			return false, err.Error()
		}
		return string(r) == "+OK\r\n", testenv.ShowReply(r)
	})
	for i := range 20 {
		c.Do("SET", "k"+strconv.Itoa(i), "v")
		c.Do("LOCK.ACQUIRE", "r"+strconv.Itoa(i), "owner", "60000")
	}
	c.Do("LOCK.INFO", "held")

	if got := role(t, master); got != "master" {
		t.Fatalf("the old master was reconfigured (role %q) before the check: inconclusive, the check needs it still a master", got)
	}
	if n := dbsize(t, master); n != 0 {
		keys := direct(t, master, "KEYS", "*")
		t.Fatalf("the old master, back empty while Sentinel names another, holds %d keys written through the proxy: %s", n, testenv.ShowReply(keys))
	}
	rc := testenv.Dial(t, replica.Addr)
	if r := rc.Do("EXISTS", "after", "k19"); string(r) != ":2\r\n" {
		t.Fatalf("EXISTS after k19 on the new master = %s", testenv.ShowReply(r))
	}
}
