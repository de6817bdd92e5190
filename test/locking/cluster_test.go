package locking

import (
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestObservabilityInFrontOfCluster: in front of a Redis Cluster, LOCK.INFO's
// acquired-at and client-addr are read from the record on whichever master
// owns the resource's slot, and an expiry on any master is found by the
// proxy (its check reads the record on that master).
func TestObservabilityInFrontOfCluster(t *testing.T) {
	cl := testenv.StartCluster(t, testenv.ClusterOptions{ReplicasPerMaster: -1})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: cl.Seeds(), MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	admin := testenv.Dial(t, p.Addr)
	addr := c.NetConn().LocalAddr().String()

	// Resources until every master owns one.
	owners := map[string]bool{}
	var resources []string
	for i := 0; len(owners) < len(cl.Masters) && i < 1000; i++ {
		r := "obs-" + strconv.Itoa(i)
		m := cl.MasterForSlot(t, testenv.KeySlot("fenceproxy:lock:{"+r+"}"))
		if !owners[m.Addr] {
			owners[m.Addr] = true
			resources = append(resources, r)
		}
	}
	if len(resources) != len(cl.Masters) {
		t.Fatalf("found resources on %d of %d masters", len(resources), len(cl.Masters))
	}
	for _, r := range resources {
		before := time.Now().UnixMilli()
		c.Do("LOCK.ACQUIRE", r, "o", "300")
		li := lockInfo(t, admin, r)
		if string(li.ClientAddr) != addr || li.AcquiredAt < before {
			t.Fatalf("LOCK.INFO %s = %q, want client-addr %s, acquired-at >= %d", r, li.Raw, addr, before)
		}
	}
	waitFor(t, 20*time.Second, "an expired entry per master", func() bool {
		return slowlogLen(t, admin) == int64(len(resources))
	})
	seen := map[string]bool{}
	for _, e := range slowlog(t, admin, "-1") {
		if e.kind != "expired" || e.addr != addr {
			t.Fatalf("entry %+v, want expired from %s", e, addr)
		}
		seen[e.res] = true
	}
	if len(seen) != len(resources) {
		t.Fatalf("expired entries for %v, want one for each of %v", seen, resources)
	}
}
