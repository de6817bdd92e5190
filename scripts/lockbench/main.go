// Command lockbench is a load harness that compares lock recipes on plain
// Redis with fenceproxy's LOCK.ACQUIRE/LOCK.RELEASE.
//
//	go run ./scripts/lockbench -system S -addr HOST:PORT [-clients 50]
//	    [-duration 5s] [-resources 100000] [-hot] [-checks N]
//
// Systems:
//
//	redis         SET key owner NX PX ttl; release by Lua compare-and-delete
//	redis-fenced  Lua SET NX PX + INCR of a fence counter (the token), then
//	              WAIT 1 timeout on the same connection; Lua release
//	fenceproxy    LOCK.ACQUIRE resource owner ttl; LOCK.RELEASE resource owner
//
// Distinct mode (the default): every client loops acquire+release on random
// resources; the result is cycles/s and the p50/p99 of a whole cycle. With
// -checks N (fenceproxy only) a holder also sends N FENCE.CHECKs of its
// token between the two, as a resource that checks the token before each of
// N writes would: the fencing half of a lock cycle.
//
// Hot mode (-hot): every client contends for one resource. Redis clients poll
// with 1-3 ms jittered sleeps after a failed attempt; fenceproxy clients block
// with LOCK.ACQUIRE ... WAIT 5000. The result is handoffs/s and the p50/p99 of
// the acquire wait (from the first attempt until the lock is held). Hot mode
// also checks mutual exclusion and, where there are tokens, that they only go
// up.
//
// One line per run starts with RESULT and holds key=value pairs.
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

	"github.com/redis/go-redis/v9"
)

const (
	// acquireScript takes the lock and bumps the resource's fence counter
	// in one step; it returns the token, or nil when the lock is taken.
	acquireScript = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false`
	// releaseScript deletes the lock only if ARGV[1] still owns it.
	releaseScript = `if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`
	maxErrorSamples = 5
)

type config struct {
	system      string
	addr        string
	clients     int
	duration    time.Duration
	resources   int
	hot         bool
	ttl         time.Duration
	waitTimeout time.Duration // redis-fenced: WAIT 1 <this>
	blockWait   time.Duration // fenceproxy -hot: LOCK.ACQUIRE ... WAIT <this>
	checks      int           // fenceproxy distinct: FENCE.CHECKs a cycle
	prefix      string
	spread      bool // distinct mode: names start with a hash of their number
}

// stats is what one client goroutine measured; merged at the end.
type stats struct {
	ops       int64           // completed cycles (distinct) or handoffs (hot)
	lat       []time.Duration // cycle latency (distinct) or acquire wait (hot)
	busy      int64           // acquire found the resource held (distinct) / timed out (hot)
	attempts  int64           // acquire attempts (hot: polls)
	errs      int64
	notHeld   int64 // release said we did not hold it
	noReplica int64 // redis-fenced: WAIT acknowledged by fewer than 1 replica
}

// errorLog counts errors and keeps the first few distinct messages.
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

// locker is one client's view of a lock system, on one pinned connection.
type locker interface {
	// acquire returns ok=false when another owner holds the resource.
	acquire(ctx context.Context, resource string) (token int64, ok bool, err error)
	release(ctx context.Context, resource string) (released bool, err error)
	hasTokens() bool
}

type redisLocker struct {
	conn    *redis.Conn
	owner   string
	cfg     *config
	fenced  bool
	st      *stats
	acqSHA  string
	relSHA  string
	ttlArg  int64
	waitArg time.Duration
}

func (l *redisLocker) lockKey(r string) string  { return l.cfg.prefix + "lock:{" + r + "}" }
func (l *redisLocker) fenceKey(r string) string { return l.cfg.prefix + "fence:{" + r + "}" }
func (l *redisLocker) hasTokens() bool          { return l.fenced }

func (l *redisLocker) acquire(ctx context.Context, r string) (int64, bool, error) {
	if !l.fenced {
		ok, err := l.conn.SetNX(ctx, l.lockKey(r), l.owner, l.cfg.ttl).Result()
		return 0, ok, err
	}
	var eval *redis.Cmd
	var wait *redis.Cmd
	_, err := l.conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		eval = p.EvalSha(ctx, l.acqSHA, []string{l.lockKey(r), l.fenceKey(r)}, l.owner, l.ttlArg)
		wait = p.Do(ctx, "WAIT", 1, l.waitArg.Milliseconds())
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, false, err
	}
	tok, err := eval.Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if n, err := wait.Int64(); err != nil {
		return tok, true, err
	} else if n < 1 {
		l.st.noReplica++
		return tok, true, errors.New("WAIT 1: no replica acknowledged")
	}
	return tok, true, nil
}

func (l *redisLocker) release(ctx context.Context, r string) (bool, error) {
	n, err := l.conn.EvalSha(ctx, l.relSHA, []string{l.lockKey(r)}, l.owner).Int64()
	return n == 1, err
}

type proxyLocker struct {
	conn   *redis.Conn
	owner  string
	ttlArg int64
	wait   int64 // 0: do not block
}

func (l *proxyLocker) hasTokens() bool { return true }

func (l *proxyLocker) acquire(ctx context.Context, r string) (int64, bool, error) {
	args := []any{"LOCK.ACQUIRE", r, l.owner, l.ttlArg}
	if l.wait > 0 {
		args = append(args, "WAIT", l.wait)
	}
	tok, err := l.conn.Do(ctx, args...).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return tok, true, nil
}

// check is FENCE.CHECK of token: whether it is still the resource's newest.
func (l *proxyLocker) check(ctx context.Context, r string, token int64) (bool, error) {
	n, err := l.conn.Do(ctx, "FENCE.CHECK", r, token).Int64()
	return n == 1, err
}

func (l *proxyLocker) release(ctx context.Context, r string) (bool, error) {
	n, err := l.conn.Do(ctx, "LOCK.RELEASE", r, l.owner).Int64()
	return n == 1, err
}

func main() {
	var cfg config
	flag.StringVar(&cfg.system, "system", "", "redis, redis-fenced or fenceproxy")
	flag.StringVar(&cfg.addr, "addr", "127.0.0.1:6379", "`host:port` of Redis (redis, redis-fenced) or fenceproxy")
	flag.IntVar(&cfg.clients, "clients", 50, "concurrent clients, each on its own connection with its own owner")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "how long to run")
	flag.IntVar(&cfg.resources, "resources", 100000, "distinct mode: number of resources picked at random")
	flag.BoolVar(&cfg.hot, "hot", false, "all clients contend for one resource")
	flag.DurationVar(&cfg.ttl, "ttl", 10*time.Second, "lock lease")
	flag.DurationVar(&cfg.waitTimeout, "wait-timeout", 500*time.Millisecond, "redis-fenced: timeout of WAIT 1")
	flag.DurationVar(&cfg.blockWait, "block-wait", 5*time.Second, "fenceproxy -hot: LOCK.ACQUIRE ... WAIT timeout")
	flag.IntVar(&cfg.checks, "checks", 0, "fenceproxy distinct mode: FENCE.CHECKs of the token between acquire and release")
	flag.StringVar(&cfg.prefix, "prefix", "", "resource name prefix (default: unique per run)")
	flag.BoolVar(&cfg.spread, "spread", false, "distinct mode: start each resource name with 4 hex digits of a hash of its number, so that the names spread over the key space (a fence store grown by lockload -spread has them among its own)")
	flag.Parse()
	if err := run(&cfg); err != nil {
		fmt.Fprintf(os.Stderr, "lockbench: %v\n", err)
		os.Exit(1)
	}
}

func run(cfg *config) error {
	switch cfg.system {
	case "redis", "redis-fenced", "fenceproxy":
	default:
		return fmt.Errorf("-system must be redis, redis-fenced or fenceproxy, not %q", cfg.system)
	}
	switch {
	case flag.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", flag.Arg(0))
	case cfg.clients < 1 || cfg.clients > 10000:
		return errors.New("-clients must be in 1..10000")
	case cfg.duration <= 0 || cfg.duration > 10*time.Minute:
		return errors.New("-duration must be in (0, 10m]")
	case cfg.resources < 1:
		return errors.New("-resources must be at least 1")
	case cfg.checks < 0 || cfg.checks > 1000 || cfg.checks > 0 && (cfg.system != "fenceproxy" || cfg.hot):
		return errors.New("-checks must be in 0..1000, and only with -system fenceproxy without -hot")
	case cfg.ttl < time.Millisecond || cfg.waitTimeout < time.Millisecond || cfg.blockWait < time.Millisecond:
		return errors.New("-ttl, -wait-timeout and -block-wait must be at least 1ms")
	}
	if cfg.prefix == "" {
		cfg.prefix = fmt.Sprintf("lb:%d:%x:", os.Getpid(), time.Now().UnixNano())
	}

	readTimeout := 5 * time.Second
	if cfg.hot && cfg.system == "fenceproxy" {
		readTimeout = cfg.blockWait + 5*time.Second
	}
	rdb := redis.NewClient(&redis.Options{
		Addr:            cfg.addr,
		Protocol:        2,
		DisableIdentity: true,
		PoolSize:        cfg.clients + 2,
		MaxRetries:      -1, // an error is a result here, not something to hide
		DialTimeout:     5 * time.Second,
		ReadTimeout:     readTimeout,
		WriteTimeout:    5 * time.Second,
	})
	defer rdb.Close()

	setup, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var acqSHA, relSHA string
	if cfg.system != "fenceproxy" {
		var err error
		if acqSHA, err = rdb.ScriptLoad(setup, acquireScript).Result(); err != nil {
			return fmt.Errorf("SCRIPT LOAD: %w", err)
		}
		if relSHA, err = rdb.ScriptLoad(setup, releaseScript).Result(); err != nil {
			return fmt.Errorf("SCRIPT LOAD: %w", err)
		}
	}

	// Open and check every connection before the clock starts.
	runID := fmt.Sprintf("%d-%x", os.Getpid(), time.Now().UnixNano()&0xffffffff)
	lockers := make([]locker, cfg.clients)
	all := make([]*stats, cfg.clients)
	conns := make([]*redis.Conn, cfg.clients)
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i := range cfg.clients {
		conns[i] = rdb.Conn()
		if err := conns[i].Ping(setup).Err(); err != nil {
			return fmt.Errorf("connection %d to %s: %w", i, cfg.addr, err)
		}
		all[i] = &stats{lat: make([]time.Duration, 0, 4096)}
		owner := fmt.Sprintf("lockbench-%s-c%d", runID, i)
		ttlMs := cfg.ttl.Milliseconds()
		if cfg.system == "fenceproxy" {
			pl := &proxyLocker{conn: conns[i], owner: owner, ttlArg: ttlMs}
			if cfg.hot {
				pl.wait = cfg.blockWait.Milliseconds()
			}
			lockers[i] = pl
		} else {
			lockers[i] = &redisLocker{
				conn: conns[i], owner: owner, cfg: cfg, fenced: cfg.system == "redis-fenced",
				st: all[i], acqSHA: acqSHA, relSHA: relSHA, ttlArg: ttlMs, waitArg: cfg.waitTimeout,
			}
		}
	}

	var (
		elog      errorLog
		wg        sync.WaitGroup
		holders   atomic.Int32 // hot mode: clients that think they hold the lock
		overlaps  atomic.Int64 // hot mode: mutual exclusion violations seen
		lastTok   atomic.Int64 // hot mode: newest token seen
		regress   atomic.Int64 // hot mode: tokens not above the previous one
		hotTarget = cfg.prefix + "hot"
	)
	start := time.Now()
	deadline := start.Add(cfg.duration)
	// Hard stop for anything still blocked after the deadline.
	ctx, stop := context.WithDeadline(context.Background(), deadline.Add(cfg.blockWait+10*time.Second))
	defer stop()

	for i := range cfg.clients {
		wg.Add(1)
		go func(l locker, st *stats, seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(start.UnixNano())))
			if cfg.hot {
				hotClient(ctx, cfg, l, st, rng, deadline, hotTarget, &elog, &holders, &overlaps, &lastTok, &regress)
			} else {
				distinctClient(ctx, cfg, l, st, rng, deadline, &elog)
			}
		}(lockers[i], all[i], uint64(i))
	}
	wg.Wait()
	elapsed := time.Since(start)
	if d := cfg.duration; elapsed > d {
		elapsed = d // ops are only counted before the deadline
	}

	var tot stats
	perClient := make([]int64, 0, cfg.clients)
	for _, st := range all {
		tot.ops += st.ops
		tot.busy += st.busy
		tot.attempts += st.attempts
		tot.errs += st.errs
		tot.notHeld += st.notHeld
		tot.noReplica += st.noReplica
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
	fmt.Fprintf(&b, "RESULT system=%s mode=%s clients=%d duration_s=%.2f ops=%d ops_per_sec=%.0f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f errors=%d",
		cfg.system, mode, cfg.clients, elapsed.Seconds(), tot.ops, float64(tot.ops)/elapsed.Seconds(),
		ms(pct(tot.lat, 0.50)), ms(pct(tot.lat, 0.99)), ms(pct(tot.lat, 1)), tot.errs)
	fmt.Fprintf(&b, " not_held=%d", tot.notHeld)
	if cfg.checks > 0 {
		fmt.Fprintf(&b, " checks=%d", cfg.checks)
	}
	if cfg.system == "redis-fenced" {
		fmt.Fprintf(&b, " noreplica=%d", tot.noReplica)
	}
	if cfg.hot {
		fmt.Fprintf(&b, " timeouts=%d attempts=%d client_min=%d client_max=%d overlaps=%d token_regressions=%d",
			tot.busy, tot.attempts, perClient[0], perClient[len(perClient)-1], overlaps.Load(), regress.Load())
	} else {
		fmt.Fprintf(&b, " busy=%d", tot.busy)
	}
	fmt.Println(b.String())
	for _, s := range elog.samples {
		fmt.Printf("ERROR_SAMPLE system=%s mode=%s %s\n", cfg.system, mode, s)
	}
	return nil
}

// spreadOf is 16 bits of a multiplicative hash of i (lockload's too).
func spreadOf(i uint64) uint64 { return (i * 0x9E3779B97F4A7C15) >> 48 }

func distinctClient(ctx context.Context, cfg *config, l locker, st *stats, rng *rand.Rand,
	deadline time.Time, elog *errorLog) {
	for {
		t0 := time.Now()
		if !t0.Before(deadline) {
			return
		}
		i := rng.IntN(cfg.resources)
		r := fmt.Sprintf("%sr%d", cfg.prefix, i)
		if cfg.spread {
			r = fmt.Sprintf("%04x:%s", spreadOf(uint64(i)), r)
		}
		token, ok, err := l.acquire(ctx, r)
		if err != nil {
			st.errs++
			elog.add("acquire", err)
			if ok { // held but not durable: give it back, don't count it
				if _, err := l.release(ctx, r); err != nil {
					elog.add("release", err)
				}
			}
			pause(ctx, 10*time.Millisecond) // don't spin on a broken connection
			continue
		}
		if !ok {
			st.busy++
			continue
		}
		for range cfg.checks {
			current, err := l.(*proxyLocker).check(ctx, r, token)
			if err == nil && !current {
				err = fmt.Errorf("FENCE.CHECK %s %d: stale while held", r, token)
			}
			if err != nil {
				st.errs++
				elog.add("check", err)
				break
			}
		}
		released, err := l.release(ctx, r)
		if err != nil {
			st.errs++
			elog.add("release", err)
			continue
		}
		if !released {
			st.notHeld++
			continue
		}
		st.lat = append(st.lat, time.Since(t0))
		st.ops++
	}
}

func hotClient(ctx context.Context, cfg *config, l locker, st *stats, rng *rand.Rand,
	deadline time.Time, r string, elog *errorLog,
	holders *atomic.Int32, overlaps, lastTok, regress *atomic.Int64) {
	blocking := cfg.system == "fenceproxy"
	for time.Now().Before(deadline) {
		t0 := time.Now()
		var tok int64
		got := false
		for time.Now().Before(deadline) {
			st.attempts++
			var err error
			tok, got, err = l.acquire(ctx, r)
			if err != nil {
				st.errs++
				elog.add("acquire", err)
				if got { // the lock is ours but not durable: give it back
					if _, err := l.release(ctx, r); err != nil {
						elog.add("release", err)
					}
					got = false
				}
				pause(ctx, 10*time.Millisecond)
				continue
			}
			if got {
				break
			}
			if blocking {
				st.busy++ // WAIT timed out
				continue
			}
			pause(ctx, time.Millisecond+time.Duration(rng.Int64N(int64(2*time.Millisecond))))
		}
		if !got {
			return
		}
		waited := time.Since(t0)
		if holders.Add(1) != 1 {
			overlaps.Add(1)
		}
		if l.hasTokens() {
			if prev := lastTok.Swap(tok); tok <= prev {
				regress.Add(1)
			}
		}
		// A grant that arrives after the deadline is handed back, not counted.
		counted := time.Now().Before(deadline)
		holders.Add(-1)
		released, err := l.release(ctx, r)
		switch {
		case err != nil:
			st.errs++
			elog.add("release", err)
		case !released:
			st.notHeld++
		}
		if counted {
			st.ops++
			st.lat = append(st.lat, waited)
		}
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
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
