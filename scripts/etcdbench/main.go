// Command etcdbench is lockbench's etcd peer: the same two runs (distinct
// resources, one hot resource) against etcd's concurrency.Mutex, printing the
// same RESULT line, so scripts/bench.sh can put etcd in the lock tables.
//
//	go run . -endpoints 127.0.0.1:2379 [-clients 50] [-duration 5s]
//	    [-resources 100000] [-hot]
//
// It is its own Go module on purpose: the etcd client pulls in gRPC, protobuf
// and friends, and none of that may reach fenceproxy's go.mod. The client is
// v3.5, which speaks to the etcd 3.4 server Debian ships (etcd-server).
//
// Every client has its own etcd client (its own gRPC connection) and its own
// session (a lease with keep-alive), as 50 separate processes would.
//
// Distinct mode: each client loops NewMutex(random resource).Lock then Unlock;
// the result is cycles/s and the p50/p99 of a whole cycle.
//
// Hot mode (-hot): every client loops Lock/Unlock on one resource. Mutex.Lock
// queues by creation revision (first come, first served) and blocks until the
// previous holder's key is deleted. The result is handoffs/s and the p50/p99
// of the wait in Lock. It checks mutual exclusion, and that the holder's key
// revision (etcd's fencing token) only goes up.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

const maxErrorSamples = 5

type config struct {
	endpoints  string
	clients    int
	duration   time.Duration
	resources  int
	hot        bool
	sessionTTL int
	opTimeout  time.Duration
	prefix     string
}

type stats struct {
	ops      int64
	lat      []time.Duration
	errs     int64
	attempts int64
	timeouts int64
}

type errorLog struct {
	mu      sync.Mutex
	samples []string
	seen    map[string]bool
}

func (e *errorLog) add(where string, err error) {
	msg := where + ": " + err.Error()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen == nil {
		e.seen = map[string]bool{}
	}
	if !e.seen[msg] && len(e.samples) < maxErrorSamples {
		e.seen[msg] = true
		e.samples = append(e.samples, msg)
	}
}

func main() {
	var cfg config
	flag.StringVar(&cfg.endpoints, "endpoints", "127.0.0.1:2379", "etcd client `endpoints`, comma-separated")
	flag.IntVar(&cfg.clients, "clients", 50, "concurrent clients, each with its own etcd client and session")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "how long to run")
	flag.IntVar(&cfg.resources, "resources", 100000, "distinct mode: number of resources picked at random")
	flag.BoolVar(&cfg.hot, "hot", false, "all clients contend for one resource")
	flag.IntVar(&cfg.sessionTTL, "session-ttl", 10, "session lease TTL in seconds")
	flag.DurationVar(&cfg.opTimeout, "op-timeout", 5*time.Second, "distinct mode: timeout of one Lock or Unlock")
	flag.StringVar(&cfg.prefix, "prefix", "", "key prefix (default: unique per run)")
	flag.Parse()
	if err := run(&cfg); err != nil {
		fmt.Fprintf(os.Stderr, "etcdbench: %v\n", err)
		os.Exit(1)
	}
}

func run(cfg *config) error {
	switch {
	case flag.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", flag.Arg(0))
	case cfg.clients < 1 || cfg.clients > 1000:
		return errors.New("-clients must be in 1..1000")
	case cfg.duration <= 0 || cfg.duration > 10*time.Minute:
		return errors.New("-duration must be in (0, 10m]")
	case cfg.resources < 1:
		return errors.New("-resources must be at least 1")
	case cfg.sessionTTL < 1:
		return errors.New("-session-ttl must be at least 1")
	}
	if cfg.prefix == "" {
		cfg.prefix = fmt.Sprintf("/etcdbench/%d-%x/", os.Getpid(), time.Now().UnixNano()&0xffffffff)
	}

	// Connect every client and open its session before the clock starts.
	clients := make([]*clientv3.Client, cfg.clients)
	sessions := make([]*concurrency.Session, cfg.clients)
	defer func() {
		for i := range clients {
			if sessions[i] != nil {
				_ = sessions[i].Close() // revokes the lease
			}
			if clients[i] != nil {
				_ = clients[i].Close()
			}
		}
	}()
	for i := range cfg.clients {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   strings.Split(cfg.endpoints, ","),
			DialTimeout: 5 * time.Second,
			// Quiet: a Lock cancelled at the deadline logs a retry warning per client.
			Logger: zap.NewNop(),
		})
		if err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
		clients[i] = cli
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(cfg.sessionTTL), concurrency.WithContext(ctx))
		cancel()
		if err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		sessions[i] = s
	}

	var (
		elog     errorLog
		wg       sync.WaitGroup
		holders  atomic.Int32
		overlaps atomic.Int64
		lastRev  atomic.Int64
		regress  atomic.Int64
	)
	all := make([]*stats, cfg.clients)
	start := time.Now()
	deadline := start.Add(cfg.duration)
	for i := range cfg.clients {
		all[i] = &stats{lat: make([]time.Duration, 0, 4096)}
		wg.Add(1)
		go func(s *concurrency.Session, st *stats, seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(start.UnixNano())))
			if cfg.hot {
				hotClient(cfg, s, st, deadline, &elog, &holders, &overlaps, &lastRev, &regress)
			} else {
				distinctClient(cfg, s, st, rng, deadline, &elog)
			}
		}(sessions[i], all[i], uint64(i))
	}
	wg.Wait()
	elapsed := min(time.Since(start), cfg.duration)

	var tot stats
	perClient := make([]int64, 0, cfg.clients)
	for _, st := range all {
		tot.ops += st.ops
		tot.errs += st.errs
		tot.attempts += st.attempts
		tot.timeouts += st.timeouts
		tot.lat = append(tot.lat, st.lat...)
		perClient = append(perClient, st.ops)
	}
	slices.Sort(tot.lat)
	slices.Sort(perClient)
	mode := "distinct"
	if cfg.hot {
		mode = "hot"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "RESULT system=etcd mode=%s clients=%d duration_s=%.2f ops=%d ops_per_sec=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f errors=%d not_held=0",
		mode, cfg.clients, elapsed.Seconds(), tot.ops, float64(tot.ops)/elapsed.Seconds(),
		ms(pct(tot.lat, 0.50)), ms(pct(tot.lat, 0.99)), ms(pct(tot.lat, 1)), tot.errs)
	if cfg.hot {
		fmt.Fprintf(&b, " timeouts=%d attempts=%d client_min=%d client_max=%d overlaps=%d token_regressions=%d",
			tot.timeouts, tot.attempts, perClient[0], perClient[len(perClient)-1], overlaps.Load(), regress.Load())
	} else {
		b.WriteString(" busy=0")
	}
	fmt.Println(b.String())
	for _, s := range elog.samples {
		fmt.Printf("ERROR_SAMPLE system=etcd mode=%s %s\n", mode, s)
	}
	return nil
}

// distinctClient: Lock then Unlock on a random resource until the deadline.
// With 100,000 resources and 50 clients a Lock almost never waits.
func distinctClient(cfg *config, s *concurrency.Session, st *stats, rng *rand.Rand,
	deadline time.Time, elog *errorLog) {
	for {
		t0 := time.Now()
		if !t0.Before(deadline) {
			return
		}
		m := concurrency.NewMutex(s, fmt.Sprintf("%sr%d", cfg.prefix, rng.IntN(cfg.resources)))
		ctx, cancel := context.WithTimeout(context.Background(), cfg.opTimeout)
		err := m.Lock(ctx)
		if err == nil {
			err = m.Unlock(ctx)
			if err != nil {
				elog.add("unlock", err)
			}
		} else {
			elog.add("lock", err)
		}
		cancel()
		if err != nil {
			st.errs++
			time.Sleep(10 * time.Millisecond)
			continue
		}
		st.lat = append(st.lat, time.Since(t0))
		st.ops++
	}
}

// hotClient: Lock (blocking, FIFO) then Unlock on one resource until the
// deadline. A Lock still waiting at the deadline is cancelled; etcd's Lock
// then deletes its waiter key.
func hotClient(cfg *config, s *concurrency.Session, st *stats, deadline time.Time, elog *errorLog,
	holders *atomic.Int32, overlaps, lastRev, regress *atomic.Int64) {
	for time.Now().Before(deadline) {
		m := concurrency.NewMutex(s, cfg.prefix+"hot")
		t0 := time.Now()
		st.attempts++
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := m.Lock(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || !time.Now().Before(deadline) {
				st.timeouts++
				return
			}
			st.errs++
			elog.add("lock", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		waited := time.Since(t0)
		if holders.Add(1) != 1 {
			overlaps.Add(1)
		}
		// The holder's key revision is etcd's fencing token.
		if rev := m.Header().Revision; rev > 0 {
			if prev := lastRev.Swap(rev); rev <= prev {
				regress.Add(1)
			}
		}
		counted := time.Now().Before(deadline)
		holders.Add(-1)
		uctx, ucancel := context.WithTimeout(context.Background(), cfg.opTimeout)
		if err := m.Unlock(uctx); err != nil {
			st.errs++
			elog.add("unlock", err)
		}
		ucancel()
		if counted {
			st.ops++
			st.lat = append(st.lat, waited)
		}
	}
}

// pct returns the q-quantile of sorted (nearest rank); 0 if empty.
func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
