package commands

import (
	"strconv"
	"testing"
)

// BenchmarkLockCycle is one LOCK.ACQUIRE + LOCK.RELEASE through a whole
// in-process proxy (client connection, handler, lock runner, manager,
// writer) in front of a real master with one replica, --min-replicas 1,
// on rotating resources. Its allocations per cycle are the figure to
// compare between versions (this machine is too noisy for the times); they
// include the test client's own, which the ping pair shows alone.
func BenchmarkLockCycle(b *testing.B) {
	p, _ := startStandalone(b, proxyOptions{minReplicas: 1}, true)
	c := p.dial(b)
	resources := make([]string, 1024)
	for i := range resources {
		resources[i] = "bench-" + strconv.Itoa(i)
	}
	b.Run("lock", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			r := resources[i%len(resources)]
			if reply := c.Do("LOCK.ACQUIRE", r, "owner", "10000"); reply[0] != ':' {
				b.Fatalf("acquire: %q", reply)
			}
			if reply := c.Do("LOCK.RELEASE", r, "owner"); string(reply) != ":1\r\n" {
				b.Fatalf("release: %q", reply)
			}
		}
	})
	b.Run("ping", func(b *testing.B) { // the client's and the connection's share
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			c.Do("PING")
			c.Do("PING")
		}
	})
}
