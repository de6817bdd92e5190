package testenv

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Role changes for failover tests: a replica promoted to master, and a
// master (for instance one restarted empty after it was killed) made to
// replicate the new one. Each also changes what Restart does later, so a
// promoted replica restarts as a master and a follower restarts as a
// replica of its new master.

// Promote turns replica r into a master with REPLICAOF NO ONE, as a
// failover does. A later Restart starts it as an (empty) master.
func (r *Redis) Promote(t testing.TB) {
	t.Helper()
	reply, err := tryDo(r.Addr, "REPLICAOF", "NO", "ONE")
	if err != nil || string(reply) != "+OK\r\n" {
		t.Fatalf("testenv: Promote %s: REPLICAOF NO ONE = %q (err %v)", r.Addr, reply, err)
	}
	r.args = withoutReplicaOf(r.args)
	r.master = nil
}

// Promoted records that replica r was made a master by someone else (Redis
// Sentinel, after its master failed): a later Restart starts it as an
// (empty) master.
func (r *Redis) Promoted() {
	r.args = withoutReplicaOf(r.args)
	r.master = nil
}

// Follow makes r, a master, a replica of master with REPLICAOF, and waits
// (deadline 10s) until the link is up and master lists r as online, as
// StartReplica does, and until r acknowledges a write (see WaitReplicas:
// a re-attached replica is online before the master streams it writes).
// A later Restart starts r as master's replica again.
func (r *Redis) Follow(t testing.TB, master *Redis) {
	t.Helper()
	if master.master != nil {
		t.Fatalf("testenv: Follow: %s is itself a replica; chained replicas are not supported", master.Addr)
	}
	reply, err := tryDo(r.Addr, "REPLICAOF", "127.0.0.1", strconv.Itoa(master.Port))
	if err != nil || !strings.HasPrefix(string(reply), "+OK") {
		t.Fatalf("testenv: Follow: REPLICAOF on %s = %q (err %v)", r.Addr, reply, err)
	}
	r.args = append(withoutReplicaOf(r.args), "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	r.master = master
	r.waitLinkUp(t)
	info, _ := infoReplication(master.Addr)
	waitReplicated(t, master.Addr, "testenv:replicated", max(1, strings.Count(info, ",state=online,")))
}

// withoutReplicaOf returns args less any "--replicaof host port".
func withoutReplicaOf(args []string) []string {
	out := slices.Clone(args)
	for i := 0; i+2 < len(out); {
		if out[i] == "--replicaof" {
			out = slices.Delete(out, i, i+3)
			continue
		}
		i++
	}
	return out
}

// TryDial connects to addr with each operation bounded by timeout, for use
// from goroutines other than the test's: it returns an error instead of
// failing the test, and the caller closes the connection. Use only the
// error-returning methods (TryDo, ReadReply, NetConn, Close) on it.
func TryDial(addr string, timeout time.Duration) (*Conn, error) {
	return dialConn(addr, timeout)
}

// tryDo sends one command on a fresh connection.
func tryDo(addr string, args ...string) ([]byte, error) {
	c, err := dialConn(addr, redisWait)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.TryDo(args...)
}
