package tls_test

import (
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestBackendTLS: in front of a master and a replica that speak only TLS
// (no plaintext port, client certificates required, replication over
// TLS), every kind of backend connection works: the shared pipelines
// (RESP2 and RESP3), lock writes with a replica's acknowledgement, a
// transaction and a blocking pop on pinned connections, and a pub/sub
// tunnel. Clients use TLS too. With the replica gone, a lock is refused
// with -NOREPLICAS: the grants before did wait for it.
func TestBackendTLS(t *testing.T) {
	certs := testenv.MakeCerts(t)
	master := testenv.StartTLSRedis(t, certs, nil)
	replica := testenv.StartTLSRedis(t, certs, master)
	p := testenv.StartTLSProxy(t, certs, false, testenv.ProxyOptions{
		Backend: master.Addr, MinReplicas: 1, ReplicaTimeout: 2 * time.Second,
		Args: certs.BackendArgs(),
	})
	dial := func() *testenv.Conn { return testenv.DialTLS(t, p.Addr, certs.ClientConfig(t, true)) }
	c := dial()
	do(t, c, "+OK\r\n", "SET", "k", "v")
	do(t, c, "$1\r\nv\r\n", "GET", "k")
	lockFamily(t, c, "backend:res")
	if info := string(c.Do("INFO")); !strings.Contains(info, "replicas_seen:1") {
		t.Fatalf("INFO does not show the TLS replica:\n%s", info)
	}

	// RESP3 clients go over the RESP3 pool.
	do(t, c, ":1\r\n", "HSET", "h", "f", "v")
	c3 := dial()
	c3.Do("HELLO", "3")
	do(t, c3, "%1\r\n$1\r\nf\r\n$1\r\nv\r\n", "HGETALL", "h")

	// A transaction and a blocking pop run on pinned connections.
	tx := dial()
	do(t, tx, "+OK\r\n", "MULTI")
	do(t, tx, "+QUEUED\r\n", "INCR", "n")
	do(t, tx, "*1\r\n:1\r\n", "EXEC")
	blocked := dial()
	blocked.Send("BLPOP", "list", "10")
	blocked.Flush()
	do(t, c, ":1\r\n", "LPUSH", "list", "x")
	if reply, err := blocked.ReadReply(); err != nil || string(reply) != "*2\r\n$4\r\nlist\r\n$1\r\nx\r\n" {
		t.Fatalf("BLPOP = %q, %v", reply, err)
	}

	// Pub/sub tunnels to Redis over TLS.
	sub := dial()
	do(t, sub, "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n", "SUBSCRIBE", "ch")
	do(t, c, ":1\r\n", "PUBLISH", "ch", "hi")
	if reply, err := sub.ReadReply(); err != nil || string(reply) != "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n" {
		t.Fatalf("message = %q, %v", reply, err)
	}

	replica.Kill()
	if reply := c.Do("LOCK.ACQUIRE", "backend:res2", "a", "10000"); !strings.HasPrefix(string(reply), "-NOREPLICAS") {
		t.Fatalf("LOCK.ACQUIRE with the replica gone = %s, want -NOREPLICAS", testenv.ShowReply(reply))
	}
}

// TestBackendServerName: --backend-tls-server-name replaces the address's
// host in the certificate check: "localhost" (in the certificate) works.
func TestBackendServerName(t *testing.T) {
	certs := testenv.MakeCerts(t)
	master := testenv.StartTLSRedis(t, certs, nil)
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr,
		Args: append(certs.BackendArgs(), "--backend-tls-server-name", "localhost")})
	do(t, testenv.Dial(t, p.Addr), "+OK\r\n", "SET", "k", "v")
}
