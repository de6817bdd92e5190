package lockwriter

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// BenchmarkWriterBatches is lock writes through the Writer against a real
// master with a replica, from one client (a batch per write) and from 50 (a
// batch carries many): each a script call by SHA followed by its batch's
// WAIT, what a grant costs the writer. cpu-µs/op is the process's CPU (user
// and system, from getrusage) per write, the figure to compare between
// versions of the writer's I/O; Redis's CPU is not in it.
func BenchmarkWriterBatches(b *testing.B) {
	master := testenv.StartRedis(b, testenv.RedisOptions{})
	testenv.StartReplica(b, master)
	be := benchBackend(b, master.Addr)
	wr := New(Options{Backend: be, MinReplicas: 1, ReplicaTimeout: time.Second})
	const script = "return redis.call('INCR', KEYS[1])"
	call := ScriptCall{Source: script, SHA: resp.ScriptSHA(script), Keys: []string{"bench"}}
	ctx := context.Background()
	if _, err := wr.Start(ctx, "bench", call, true).Acks(); err != nil {
		b.Fatal(err)
	}
	write := func(b *testing.B) bool {
		w := wr.Start(ctx, "bench", call, true)
		if _, err := w.Reply(); err != nil {
			b.Error(err)
			return false
		}
		if n, err := w.Acks(); err != nil || n != 1 {
			b.Error(n, err)
			return false
		}
		return true
	}
	for _, clients := range []int{1, 50} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			b.ReportAllocs()
			before := cpuTime()
			if clients == 1 {
				for i := 0; i < b.N && write(b); i++ {
				}
			} else {
				b.SetParallelism((clients + 1) / 2) // GOMAXPROCS is 2 here
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() && write(b) {
					}
				})
			}
			b.ReportMetric(float64((cpuTime()-before).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
		})
	}
}

// cpuTime is the CPU the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
