package locks

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// BenchmarkAcquireRelease is one LOCK.ACQUIRE + LOCK.RELEASE cycle through
// the Manager against a real Redis (no replica, so no WAIT), on rotating
// resources. Its allocations per cycle are the figure to compare between
// versions: the time is dominated by Redis and the fsync, and this machine
// is too noisy to compare those.
func BenchmarkAcquireRelease(b *testing.B) {
	master := testenv.StartRedis(b, testenv.RedisOptions{})
	store, err := persist.Open(b.TempDir(), persist.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	be := benchBackend(b, master.Addr)
	m := newBenchManager(be, store)
	resources := make([]string, 1024)
	for i := range resources {
		resources[i] = "bench-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := resources[i%len(resources)]
		if _, err := acquireForBench(ctx, m, r); err != nil {
			b.Fatal(err)
		}
		if ok, err := m.Release(ctx, r, "owner"); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// benchBackend is a standalone backend over addr with one lock connection
// of each kind, closed when b ends.
func benchBackend(b *testing.B, addr string) upstream.Backend {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	be, err := upstream.Connect(ctx, upstream.Options{Seeds: []string{addr}, PoolSize: 1, WriterConns: 1, ReplicaTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(be.Close)
	return be
}

func newBenchManager(be upstream.Backend, store *persist.Store) *Manager {
	return New(Options{Scripts: lockwriter.New(lockwriter.Options{Backend: be, ReplicaTimeout: time.Second}), Store: PersistStore(store), Metrics: metrics.New(), MaxWaiters: 10, SlowWait: 100 * time.Millisecond, SlowHeld: 30 * time.Second, SlowLogLen: 128})
}

func acquireForBench(ctx context.Context, m *Manager, r string) (uint64, error) {
	return m.Acquire(ctx, r, "owner", "127.0.0.1:50000", 10*time.Second, 0, time.Now())
}
