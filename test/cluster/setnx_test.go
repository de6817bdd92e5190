package cluster

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// redis-py Lock's release script (docs/design/recipes.md, section 2).
const pyRelease = "c3f8721cbb97f72bc19e972846bd7aaf91901658"

// TestSetNXLocksAcrossMasters: in front of a Redis Cluster, SET NX on a
// --lock-keys key runs as fenceproxy's value twin on the key's master:
// replied once that master's replica has it, with a token (LOCK.TOKEN) and
// released by redis-py's release script. A key whose hash tag puts it in
// another slot than its owner record is forwarded as before (no token).
func TestSetNXLocksAcrossMasters(t *testing.T) {
	cl := testenv.StartCluster(t, testenv.ClusterOptions{Masters: 3, ReplicasPerMaster: 1})
	waitReplicaAcks(t, cl)
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: cl.Seeds(), MinReplicas: 1, ReplicaTimeout: replicaTimeout,
		Args: []string{"--lock-keys", "lock:*,{tagged}*"}})
	st := readSlots(t, cl)
	c := testenv.Dial(t, p.Addr)
	for i, m := range cl.Masters {
		k := st.resourcesOn(m, "lock:"+itoa(int64(i))+":", 1)[0]
		if got := string(c.Do("SET", k, "tok", "NX", "PX", "30000")); got != "+OK\r\n" {
			t.Fatalf("SET %s NX PX = %s, want +OK", k, testenv.ShowReply([]byte(got)))
		}
		r := testenv.Dial(t, cl.ReplicasOf(st.of(k))[0].Addr)
		r.Do("READONLY")
		if got := string(r.Do("GET", k)); got != "$3\r\ntok\r\n" {
			t.Fatalf("replica of %s's master: GET right after the grant = %q, want tok", k, got)
		}
		tok := token(t, c, "LOCK.TOKEN", k, "tok")
		if got := string(c.Do("FENCE.CHECK", k, itoa(tok))); got != ":1\r\n" {
			t.Fatalf("FENCE.CHECK %s %d = %q, want 1", k, tok, got)
		}
		if got := string(c.Do("EVALSHA", pyRelease, "1", k, "tok")); got != ":1\r\n" {
			t.Fatalf("redis-py release of %s = %q, want 1", k, got)
		}
	}
	if got := string(c.Do("SET", "{tagged}lock", "tok", "NX", "PX", "30000")); got != "+OK\r\n" {
		t.Fatalf("SET {tagged}lock NX PX = %q, want +OK (forwarded)", got)
	}
	if got := c.Do("LOCK.TOKEN", "{tagged}lock", "tok"); !testenv.IsNull(got) {
		t.Fatalf("LOCK.TOKEN of a forwarded SET NX = %s, want null (no grant of the proxy's)", testenv.ShowReply(got))
	}
}
