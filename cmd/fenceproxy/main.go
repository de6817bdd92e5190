// Command fenceproxy is a Redis proxy that adds durable, fenced locks.
//
// It listens for RESP clients, forwards every ordinary command to the
// backend Redis, and serves the lock family (LOCK.ACQUIRE, LOCK.RENEW,
// LOCK.RELEASE, FENCE.CHECK, LOCK.INFO) itself. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/internal/auth"
	"github.com/fenceproxy/fenceproxy/internal/authority"
	"github.com/fenceproxy/fenceproxy/internal/cluster"
	"github.com/fenceproxy/fenceproxy/internal/commands"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
)

// config is every setting, with its default filled in by flags.
type config struct {
	listen          string
	backend         string
	sentinel        sentinelFlags
	backendUser     string
	backendPassword string
	dataDir         string
	minReplicas     int
	replicaTimeout  time.Duration
	leaseMargin     float64
	metricsListen   string
	maxClients      int
	backendConns    int
	lockConns       int
	keyPrefix       string
	lockDelay       time.Duration
	maxWaiters      int
	slowWaitMs      int
	slowHeldMs      int
	slowLogLen      int
	cacheEntries    int
	tokenFloor      uint64
	shutdownTimeout time.Duration
	logLevel        string
	pprof           bool
	limits          limits
	tls             tlsFlags
	aclFile         string // fenceproxy's own client users (internal/auth)
	requirepass     string
	allowEvictable  bool // --allow-evictable-locks
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("fenceproxy", flag.ContinueOnError)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:7379", "`host:port` where RESP clients connect")
	fs.StringVar(&c.backend, "backend", "127.0.0.1:6379", "the backend: a Redis master `host:port`, or seed nodes of a Redis Cluster, comma-separated (detected)")
	c.sentinel.register(fs)
	fs.StringVar(&c.backendUser, "backend-user", "", "ACL user for the backend (with the password from $FENCEPROXY_BACKEND_PASSWORD)")
	fs.StringVar(&c.dataDir, "data-dir", "./fenceproxy-data", "`dir`ectory of the fence store; created if missing")
	fs.IntVar(&c.minReplicas, "min-replicas", 1, "replicas that must acknowledge a lock write before it is granted")
	fs.DurationVar(&c.replicaTimeout, "replica-timeout", 500*time.Millisecond, "how long a lock write waits for replica acknowledgements")
	fs.Float64Var(&c.leaseMargin, "lease-safety-margin", 0.1, "the `fraction` of a lease (0 to 0.9) that a grant's or renewal's reply must still leave, after the time since the request was received and Redlock's drift allowance (1% + 2ms); a later one is undone and answered -TRYAGAIN")
	fs.StringVar(&c.metricsListen, "metrics-listen", "127.0.0.1:9121", "`host:port` for /metrics, /healthz and /readyz; empty disables")
	fs.IntVar(&c.maxClients, "max-clients", 10000, "most client connections at once")
	fs.IntVar(&c.backendConns, "backend-conns", 4, "pipelined connections to each master shared by all clients")
	fs.IntVar(&c.lockConns, "lock-conns", 4, "connections to each master that run batched lock writes")
	fs.StringVar(&c.keyPrefix, "key-prefix", "fenceproxy:lock:", "prefix of owner-record keys in Redis")
	fs.DurationVar(&c.lockDelay, "lock-delay", 0, "after a lease runs out without a release, grant the resource to nobody for this long (0: off)")
	fs.IntVar(&c.maxWaiters, "max-waiters", 10000, "LOCK.ACQUIRE ... WAIT requests that may wait for one resource at once; more get -QUEUEFULL (0: no waiting)")
	fs.IntVar(&c.slowWaitMs, "slowlock-log-slower-than", 100, "log an acquire that waited longer than this many `ms` in LOCK.SLOWLOG (-1: never)")
	fs.IntVar(&c.slowHeldMs, "slowlock-held-longer-than", 30000, "log a lease released after being held longer than this many `ms` in LOCK.SLOWLOG (-1: never); an expired lease is always logged")
	fs.IntVar(&c.slowLogLen, "slowlock-log-max-len", 128, "LOCK.SLOWLOG entries kept")
	fs.IntVar(&c.cacheEntries, "token-cache", 1<<18, "resources whose newest token is cached in memory")
	fs.Uint64Var(&c.tokenFloor, "token-floor", 0, "no token at or below `N` is ever issued or honoured (after restoring a data dir while Redis also lost its data); kept in the data dir")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long SIGTERM waits for in-flight requests")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&c.allowEvictable, "allow-evictable-locks", false, "grant locks even on a Redis master whose maxmemory-policy can evict their records (each such grant is logged and counted); without it they are refused")
	fs.BoolVar(&c.pprof, "pprof", false, "serve Go's profiler under /debug/pprof/ on --metrics-listen")
	c.limits.register(fs)
	c.tls.register(fs)
	fs.StringVar(&c.aclFile, "aclfile", "", "`file` of client users in Redis ACL syntax (\"user <name> <rules>\" per line); turns on client authentication")
	fs.StringVar(&c.requirepass, "requirepass", "", "password of the \"default\" client user (prefer $FENCEPROXY_REQUIREPASS: flags show in ps); turns on client authentication")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := c.limits.check(); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := c.sentinel.check(fs); err != nil {
		return c, err
	}
	c.backendPassword = os.Getenv("FENCEPROXY_BACKEND_PASSWORD")
	if c.requirepass == "" {
		c.requirepass = os.Getenv("FENCEPROXY_REQUIREPASS")
	}
	switch {
	case c.minReplicas < 0:
		return c, errors.New("--min-replicas must be 0 or more")
	case c.replicaTimeout < time.Millisecond:
		return c, errors.New("--replica-timeout must be at least 1ms (Redis's WAIT 0 would block forever)")
	case !(c.leaseMargin >= 0 && c.leaseMargin <= 0.9):
		return c, errors.New("--lease-safety-margin must be a fraction from 0 to 0.9 (0.1: a reply leaves at least a tenth of the lease)")
	case c.backendConns < 1 || c.lockConns < 1:
		return c, errors.New("--backend-conns and --lock-conns must be at least 1")
	case c.lockDelay < 0:
		return c, errors.New("--lock-delay must be 0 or more")
	case c.maxWaiters < 0:
		return c, errors.New("--max-waiters must be 0 or more")
	case c.slowWaitMs < -1 || c.slowHeldMs < -1:
		return c, errors.New("--slowlock-log-slower-than and --slowlock-held-longer-than must be -1 (never) or more")
	case c.slowLogLen < 0:
		return c, errors.New("--slowlock-log-max-len must be 0 or more")
	case c.dataDir == "":
		return c, errors.New("--data-dir must name a directory")
	case c.tokenFloor >= persist.MaxToken:
		return c, fmt.Errorf("--token-floor must be from 0 to %d", uint64(persist.MaxToken)-1)
	}
	return c, c.tls.check(c.listen)
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "fenceproxy: %v\n", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "fenceproxy: cannot start: %v\n", err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(logger)
	// go-redis logs dial failures itself; they reach the operator through our
	// own errors and log lines instead.
	redis.SetLogger(quietRedisLogger{logger})
	m := metrics.New()
	// The ACL file first: a typo in it stops the start before anything
	// else is touched.
	var aclSpecs []auth.UserSpec
	if cfg.aclFile != "" {
		var err error
		if aclSpecs, err = auth.ParseFile(cfg.aclFile); err != nil {
			return fmt.Errorf("--aclfile: %v", err)
		}
	}

	// The port first: it is the cheapest check and the likeliest clash.
	var ln net.Listener
	if cfg.listen != "" { // "" with --tls-listen: TLS clients only
		var err error
		if ln, err = net.Listen("tcp", cfg.listen); err != nil {
			return fmt.Errorf("--listen %s: %v", cfg.listen, err)
		}
		defer ln.Close()
	}
	tlsLn, tlsCfg, err := cfg.tls.open(logger)
	if err != nil {
		return err
	}
	if tlsLn != nil {
		defer tlsLn.Close()
	}
	backendTLS, err := cfg.tls.backendConfig()
	if err != nil {
		return err
	}

	store, err := persist.Open(cfg.dataDir, persist.Options{
		CacheEntries: cfg.cacheEntries,
		ObserveSync:  func(d time.Duration) { m.FsyncSeconds.Observe(d.Seconds()) },
		Logger:       logger,
		Shared:       true, // its bound is kept in Redis too (internal/authority)
		TokenFloor:   cfg.tokenFloor,
	})
	if err != nil {
		return fmt.Errorf("--data-dir %s: %v", cfg.dataDir, err)
	}
	defer store.Close()

	sentinelOpts, err := cfg.sentinel.options(&cfg.tls)
	if err != nil {
		return err
	}
	backendFlag := "--backend " + cfg.backend
	if sentinelOpts != nil {
		backendFlag = cfg.sentinel.String()
	}
	var tokensRef atomic.Pointer[authority.Authority]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	be, err := cluster.Connect(ctx, cluster.Options{
		Sentinel:       sentinelOpts,
		Seeds:          strings.Split(cfg.backend, ","),
		Username:       cfg.backendUser,
		Password:       cfg.backendPassword,
		PoolSize:       cfg.backendConns,
		WriterConns:    cfg.lockConns,
		ReplicaTimeout: cfg.replicaTimeout,
		ObserveReply:   func(d time.Duration) { m.PassthroughSeconds.Observe(d.Seconds()) },
		Logger:         logger,
		TLS:            backendTLS,
		// After a failover the token authority's heartbeat goes to the
		// new master at once (the authority starts after the backend).
		OnMasterChange: func() {
			if a := tokensRef.Load(); a != nil {
				a.Recheck()
			}
		},
	})
	if err != nil {
		cancel()
		return fmt.Errorf("%s: %v", backendFlag, err)
	}
	defer be.Close()
	if sentinelOpts != nil {
		cfg.backend = be.Masters()[0].Addr // for the log: the master Sentinel named at start
	}
	master := be.Masters()[0]
	version := "7.0.0"
	if info, err := master.Client.Info(ctx, "server").Result(); err == nil {
		version = cluster.InfoField(info, "redis_version")
	}
	// Where each command's keys are, from Redis's own COMMAND: slot routing
	// in front of a cluster depends on it.
	commandTable, err := master.Raw(ctx, "COMMAND")
	var keyTable *keys.Table
	if err == nil {
		keyTable, err = keys.Load(commandTable)
	}
	cancel()
	if err != nil && be.Mode() == "cluster" {
		return fmt.Errorf("%s: reading COMMAND (needed to route by slot): %v", backendFlag, err)
	}
	var acl *auth.ACL
	if cfg.aclFile != "" || cfg.requirepass != "" {
		if err != nil {
			return fmt.Errorf("%s: reading COMMAND (needed to check ACL users' commands and keys): %v", backendFlag, err)
		}
		if acl, err = auth.Compile(aclSpecs, cfg.requirepass, commands.ACLCommands(keyTable)); err != nil {
			return fmt.Errorf("--aclfile: %v", err)
		}
		logger.Info("client authentication on", "users", strings.Join(acl.Users(), ","),
			"default_needs_password", acl.Initial() == nil)
		if names := acl.ScriptingUsers(); len(names) > 0 {
			logger.Warn("users confined to key patterns may run scripts, which reach keys beyond their patterns; deny them -@scripting",
				"users", strings.Join(names, ","))
		}
	}

	// The token authority before any lock command: its first heartbeat
	// round finds another fenceproxy live on this backend, or joins the
	// fence store to the token bound kept in Redis.
	lockWrites := locks.NewWriter(locks.WriterOptions{Backend: be, MinReplicas: cfg.minReplicas, ReplicaTimeout: cfg.replicaTimeout})
	tokens := authority.New(authority.Options{
		Backend: be, Writer: lockWrites, Store: store, KeyPrefix: cfg.keyPrefix,
		MinReplicas: cfg.minReplicas, ReplicaTimeout: cfg.replicaTimeout, Logger: logger,
	})
	actx, acancel := context.WithTimeout(context.Background(), 30*time.Second)
	aerr := tokens.Start(actx)
	acancel()
	if aerr != nil {
		return fmt.Errorf("%s: %v", backendFlag, aerr)
	}
	defer tokens.Close()
	tokensRef.Store(tokens)
	m.RegisterAuthority(func() metrics.AuthorityStats {
		st := tokens.Stats()
		return metrics.AuthorityStats{StoreID: st.StoreID, RedisBound: st.RedisBound, Floor: st.Floor, Conflict: len(st.Others) > 0, Confirmed: st.Confirmed}
	})
	var srv *protocol.Server
	startedAt := time.Now()
	info := func() string {
		st := store.Stats()
		return fmt.Sprintf("fenceproxy_mode:%s\r\nmasters:%d\r\nuptime_in_seconds:%d\r\nconnected_clients:%d\r\nreplicas_seen:%d\r\n"+
			"min_replicas:%d\r\nreplica_timeout_ms:%d\r\nfence_store_healthy:%d\r\ntoken_bound:%d\r\n"+
			"tokens_cached:%d\r\ntoken_cache_hits:%d\r\ntoken_cache_misses:%d\r\n",
			be.Mode(), len(be.Masters()), int(time.Since(startedAt).Seconds()), srv.Clients(), fewestReplicas(be),
			cfg.minReplicas, cfg.replicaTimeout.Milliseconds(), boolInt(st.Healthy), st.ReservedBound,
			st.CacheEntries, st.CacheHits, st.CacheMisses) + tokens.Info() + limitsInfo(srv) + memoryInfo(be, cfg.allowEvictable, m)
	}
	handler := commands.NewHandler(commands.Options{
		Backend: be,
		Keys:    keyTable,
		Locks: locks.New(locks.Options{
			Scripts: lockWrites, Store: locks.PersistStore(store), MinReplicas: cfg.minReplicas,
			KeyPrefix: cfg.keyPrefix, LockDelay: cfg.lockDelay, Metrics: m, Logger: logger,
			MaxWaiters: cfg.maxWaiters, SlowLogLen: cfg.slowLogLen,
			SlowWait: msFlag(cfg.slowWaitMs), SlowHeld: msFlag(cfg.slowHeldMs),
			AllowEvictable:    cfg.allowEvictable,
			Admit:             tokens.Admit,
			LeaseSafetyMargin: cfg.leaseMargin,
		}),
		Metrics:        m,
		Logger:         logger,
		RedisVersion:   version,
		ReplicaTimeout: cfg.replicaTimeout,
		KeyPrefix:      cfg.keyPrefix,
		Info:           info,
		ACL:            acl,
	})
	srv = protocol.NewServer(handler, logger)
	srv.MaxClients = cfg.maxClients
	cfg.limits.apply(srv)
	srv.OnLimitClose = func(reason string) { m.ClientsClosed.WithLabelValues(reason).Inc() }
	srv.OnConnect = func(delta int) { m.ConnectedClients.Add(float64(delta)) }
	srv.HandshakeTimeout = cfg.tls.handshakeTimeout

	m.WatchMasters(func() []metrics.MasterMemory { return mastersMemory(be) })
	if cfg.metricsListen != "" {
		ms, err := m.Listen(cfg.metricsListen, cfg.pprof, func() error {
			for _, n := range be.Masters() {
				if !n.Up() {
					return fmt.Errorf("backend Redis master %s unreachable", n.Addr)
				}
				if n.Refusal() != nil {
					return fmt.Errorf("backend Redis %s is not the master now; nothing is sent to it", n.Addr)
				}
			}
			if !store.Stats().Healthy {
				return errors.New("fence store unhealthy")
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("--metrics-listen %s: %v", cfg.metricsListen, err)
		}
		defer ms.Close(context.Background())
	}

	var replicas []string
	for _, n := range be.Masters() {
		replicas = append(replicas, n.Replicas()...)
	}
	logger.Info("fenceproxy ready",
		"listen", addrOf(ln), "tls_listen", addrOf(tlsLn), "backend_tls", cfg.tls.backend, "backend", cfg.backend, "sentinel", cfg.sentinel.addrs, "mode", be.Mode(), "masters", len(be.Masters()),
		"redis_version", version, "replicas_seen", len(replicas), "replicas", strings.Join(replicas, ","),
		"min_replicas", cfg.minReplicas, "replica_timeout", cfg.replicaTimeout,
		"data_dir", cfg.dataDir, "token_bound", store.Stats().ReservedBound, "fence_store_id", store.ID(), "token_floor", store.Floor(), "metrics", cfg.metricsListen)
	if fewest := fewestReplicas(be); fewest < cfg.minReplicas {
		logger.Warn("a master has fewer replicas connected than --min-replicas: LOCK.ACQUIRE answers NOREPLICAS for its resources until enough replicas are online",
			"replicas_seen", fewest, "min_replicas", cfg.minReplicas)
	}

	warnEvictable(logger, be, cfg.allowEvictable)

	// Signals before the first accept: a client that is answered may send
	// SIGTERM at once, and must find it handled (drain, exit 0).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	serveErr := make(chan error, 2)
	if ln != nil {
		go func() { serveErr <- srv.Serve(ln) }()
	}
	if tlsLn != nil {
		go func() { serveErr <- srv.ServeTLS(tlsLn, tlsCfg) }()
	}
	select {
	case sig := <-sigs:
		logger.Info("draining and shutting down", "signal", sig.String(), "clients", srv.Clients())
		sctx, scancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
		defer scancel()
		if err := srv.Shutdown(sctx); err != nil {
			logger.Warn("shutdown timed out; closed remaining clients", "err", err)
		}
		logger.Info("stopped")
		return nil
	case err := <-serveErr:
		return fmt.Errorf("accepting clients: %v", err)
	}
}

// quietRedisLogger sends go-redis's internal messages to the debug log.
type quietRedisLogger struct{ l *slog.Logger }

func (q quietRedisLogger) Printf(_ context.Context, format string, v ...any) {
	q.l.Debug("go-redis: " + fmt.Sprintf(format, v...))
}

// msFlag turns a millisecond flag into a duration; -1 (never) stays negative.
func msFlag(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fewestReplicas is the smallest number of replicas any master has: what
// decides whether every resource can be granted under --min-replicas.
func fewestReplicas(be cluster.Backend) int {
	fewest := -1
	for _, n := range be.Masters() {
		if r := len(n.Replicas()); fewest < 0 || r < fewest {
			fewest = r
		}
	}
	return max(fewest, 0)
}
