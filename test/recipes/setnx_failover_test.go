package recipes

import (
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// failoverPair is a master, its replica and three Sentinels watching them.
type failoverPair struct {
	master, replica *testenv.Redis
	sentinels       *testenv.Sentinels
}

func newFailoverPair(t *testing.T) failoverPair {
	t.Helper()
	var f failoverPair
	f.master = testenv.StartRedis(t, testenv.RedisOptions{})
	f.replica = testenv.StartReplica(t, f.master)
	f.sentinels = testenv.StartSentinels(t, f.master, testenv.SentinelOptions{})
	return f
}

// cutReplica stops the replica (SIGSTOP) and closes its link on the
// master, so that no write made after it reaches the replica, which can
// neither read what is already on its socket nor reconnect until Cont.
func (f failoverPair) cutReplica(t *testing.T) {
	t.Helper()
	f.replica.Stop()
	testenv.Dial(t, f.master.Addr).Do("CLIENT", "KILL", "TYPE", "replica")
}

// failover kills the master and waits until Sentinel has promoted the
// replica.
func (f failoverPair) failover(t *testing.T) {
	t.Helper()
	f.master.Kill()
	f.sentinels.WaitMaster(t, f.replica.Addr)
	f.replica.Promoted()
}

// A SET NX lock granted while the grant had not reached the replica, then
// the master killed and the replica promoted by Sentinel: straight at
// Redis, a second client is granted the same lock (the double grant this
// test must be able to show); through fenceproxy the first grant is never
// replied (nil: not acquired), so the lock has one holder at most.
func TestSetNXNoSecondHolderAfterFailover(t *testing.T) {
	const key = "lock:failover"

	// Straight at Redis: the hazard.
	d := newFailoverPair(t)
	m := testenv.Dial(t, d.master.Addr)
	d.cutReplica(t) // the grant does not reach it before the master dies
	first := string(m.Do("SET", key, "A", "NX", "PX", "60000"))
	d.master.Kill()
	d.replica.Cont()
	d.failover(t)
	r := testenv.Dial(t, d.replica.Addr)
	second := string(r.Do("SET", key, "B", "NX", "PX", "60000"))
	if first != "+OK\r\n" || second != "+OK\r\n" {
		t.Fatalf("straight at Redis: A's SET NX = %q, B's after the failover = %q; want both +OK (the double grant this test guards against): inconclusive", first, second)
	}

	// Through fenceproxy: the same steps.
	f := newFailoverPair(t)
	var args []string
	if knowsLockKeys(t) {
		args = []string{"--lock-keys", lockKeys}
	}
	p := testenv.StartProxy(t, testenv.ProxyOptions{Sentinels: f.sentinels, MinReplicas: 1,
		ReplicaTimeout: 300 * time.Millisecond, Args: args})
	c := testenv.Dial(t, p.Addr)
	c.SetTimeout(30 * time.Second)
	f.cutReplica(t)
	first = string(c.Do("SET", key, "A", "NX", "PX", "60000"))
	f.master.Kill()
	f.replica.Cont()
	f.failover(t)
	// The old master comes back empty as the new one's replica, so grants
	// can be acknowledged again; until then they are refused (nil).
	f.master.Restart(t)
	f.master.Follow(t, f.replica)
	deadline := time.Now().Add(30 * time.Second)
	for {
		reply, err := c.TryDo("SET", key, "B", "NX", "PX", "60000")
		if err == nil && string(reply) == "+OK\r\n" {
			second = string(reply)
			break
		}
		if err != nil {
			c = testenv.Dial(t, p.Addr) // cut with the old master's connections
			c.SetTimeout(30 * time.Second)
		}
		if time.Now().After(deadline) {
			t.Fatalf("through fenceproxy, B's SET NX after the failover was never granted: %q (%v); A's was %q", reply, err, first)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if first == "+OK\r\n" && second == "+OK\r\n" {
		t.Fatalf("through fenceproxy, A's SET NX = %q and B's after the failover = %q: two holders of %s", first, second, key)
	}
	if !testenv.IsNull([]byte(first)) {
		t.Fatalf("through fenceproxy, A's SET NX with the replica stopped = %q, want nil (not acquired)", first)
	}
}
