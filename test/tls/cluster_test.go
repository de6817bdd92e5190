package tls_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestClusterTLS: in front of a Redis Cluster that speaks only TLS (with
// tls-cluster yes, CLUSTER SLOTS names the nodes' TLS ports), the proxy
// finds every master from one seed, routes keys of every master, splits a
// cross-slot MGET, and grants locks with a replica's acknowledgement.
func TestClusterTLS(t *testing.T) {
	certs := testenv.MakeCerts(t)
	nodes := testenv.StartTLSCluster(t, certs, 3, 1)
	p := testenv.StartProxy(t, testenv.ProxyOptions{
		Backend: nodes[0].Addr, MinReplicas: 1, ReplicaTimeout: 2 * time.Second,
		Args: certs.BackendArgs(),
	})
	c := testenv.Dial(t, p.Addr)
	info := string(c.Do("INFO"))
	if !strings.Contains(info, "fenceproxy_mode:cluster") || !strings.Contains(info, "masters:3") {
		t.Fatalf("INFO does not show a 3-master cluster:\n%s", info)
	}
	mget := []string{"MGET"}
	want := fmt.Sprintf("*%d\r\n", 30)
	for i := range 30 {
		key := fmt.Sprintf("key:%d", i) // spread over the slots of every master
		do(t, c, "+OK\r\n", "SET", key, key)
		mget = append(mget, key)
		want += fmt.Sprintf("$%d\r\n%s\r\n", len(key), key)
	}
	do(t, c, want, mget...)
	for i := range 10 {
		lockFamily(t, c, fmt.Sprintf("cluster:res:%d", i))
	}
}
