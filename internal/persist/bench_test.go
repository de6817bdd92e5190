package persist

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// BenchmarkRecordParallel measures NextToken, Reserve and Confirm (a grant)
// on the real disk, with b.RunParallel at 1 and 32 goroutines per CPU. It
// reports grants per second, how many grants share one WAL fsync and one
// Pebble commit, and the process's CPU time (user+system, Pebble's
// flushes and compactions included) per grant: on a shared machine
// ns/op is mostly waiting for the disk.
func BenchmarkRecordParallel(b *testing.B) {
	for _, par := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%dxCPU", par), func(b *testing.B) {
			var fsyncs atomic.Int64
			s := openT(b, b.TempDir(), Options{FS: syncCountingFS(vfs.Default, &fsyncs)})
			defer s.Close()
			names := make([][]byte, 10_000)
			for i := range names {
				names[i] = []byte(fmt.Sprintf("lock:%d", i))
			}
			b.SetParallelism(par)
			b.ResetTimer()
			start, syncs0 := time.Now(), fsyncs.Load()
			cpu0, commits0 := cpuTime(b), s.Stats().SyncedCommits
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
				for pb.Next() {
					tok, err := s.NextToken()
					if err == nil {
						err = grant(s, Grant{Resource: names[rng.IntN(len(names))], Token: tok})
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			elapsed, n := time.Since(start), fsyncs.Load()-syncs0
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/grant")
			b.ReportMetric(float64(b.N)/float64(max(s.Stats().SyncedCommits-commits0, 1)), "grants/commit")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "grants/s")
			b.ReportMetric(float64(n)/elapsed.Seconds(), "fsyncs/s")
			b.ReportMetric(float64(b.N)/float64(max(n, 1)), "grants/fsync")
		})
	}
}

// BenchmarkNextToken is the token fast path: no I/O but one sync per window.
func BenchmarkNextToken(b *testing.B) {
	s := openT(b, "/data", Options{FS: vfs.NewMem()})
	defer s.Close()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.NextToken(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkNewestHit is a cached Newest.
func BenchmarkNewestHit(b *testing.B) {
	s := openT(b, "/data", Options{FS: vfs.NewMem()})
	defer s.Close()
	r := []byte("lock:hot")
	if _, err := s.Newest(r); err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Newest(r); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkNewestAbsent measures Newest for resources never recorded (the
// first acquire of a resource: a cache miss that finds nothing in Pebble),
// with 300,000 resources already recorded in ten flushes (several tables,
// as a store that has served for a while has).
func BenchmarkNewestAbsent(b *testing.B) {
	s := openT(b, b.TempDir(), Options{CacheEntries: 1024})
	defer s.Close()
	for f := range 10 {
		batch := s.db.NewBatch()
		for i := range 30_000 {
			if err := putToken(batch, Grant{Resource: []byte(fmt.Sprintf("held:%d:%d", f, i)), Token: 1, AboveAll: true}); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.commitSync(batch); err != nil {
			b.Fatal(err)
		}
		if err := s.db.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	names := make([][]byte, 100_000)
	for i := range names {
		names[i] = []byte(fmt.Sprintf("new:%d", i))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Newest(names[i%len(names)]); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGrowth measures what a grant costs as the store grows: grants
// of distinct new resources (a lock service that sees every resource once),
// from 64 goroutines, CPU per grant (Pebble's flushes and compactions
// included) over the first 600k grants, then over 600k after 1.3M more
// (windows long enough to hold L0 compactions), with the bytes
// compactions wrote per grant. It runs its fixed workload once,
// whatever b.N (run it with -benchtime 1x).
func BenchmarkGrowth(b *testing.B) {
	s := openT(b, b.TempDir(), Options{})
	defer s.Close()
	var seq, named atomic.Uint64 // grants in this run, and ever (for distinct names)
	run := func(n int) (cpuPerGrant, compactedPerGrant float64) {
		cpu0 := cpuTime(b)
		m0 := s.db.Metrics()
		compacted0 := m0.Total().TableBytesCompacted
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq.Load() < uint64(n) {
					seq.Add(1)
					i := named.Add(1)
					tok, err := s.NextToken()
					if err == nil {
						err = grant(s, Grant{Resource: []byte(fmt.Sprintf("lock:%016x", i*0x9E3779B97F4A7C15)), Token: tok, AboveAll: true})
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		done := float64(seq.Load())
		seq.Store(0)
		compacted := s.db.Metrics().Total().TableBytesCompacted - compacted0
		return float64(cpuTime(b)-cpu0) / done, float64(compacted) / done
	}
	for range b.N {
		freshCPU, freshCompacted := run(600_000)
		run(1_300_000)
		grownCPU, grownCompacted := run(600_000)
		b.ReportMetric(freshCPU, "fresh-cpu-ns/grant")
		b.ReportMetric(grownCPU, "grown-cpu-ns/grant")
		b.ReportMetric(freshCompacted, "fresh-compacted-B/grant")
		b.ReportMetric(grownCompacted, "grown-compacted-B/grant")
	}
}
