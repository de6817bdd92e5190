package main

import (
	"context"
	"crypto/tls"
	"errors"
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
	"github.com/fenceproxy/fenceproxy/internal/commands"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/lockcmd"
	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/netloop"
	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/recipes"
	"github.com/fenceproxy/fenceproxy/internal/tier"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// How long the start may wait for the backend: to connect and read what the
// proxy needs of it (together), and for the token authority's first round.
const (
	connectTimeout   = 5 * time.Second
	authorityTimeout = 30 * time.Second
)

// proxy is fenceproxy put together: start builds it, serve runs it until a
// signal, close takes it down.
type proxy struct {
	cfg     config
	logger  *slog.Logger
	metrics *metrics.Metrics

	ln     net.Listener // nil with --listen "": TLS clients only
	tlsLn  net.Listener // nil without --tls-listen
	tlsCfg *tls.Config

	store       *persist.Store    // nil in a tier (tier.go)
	tier        *tier.Node        // nil without --peers
	tierAuth    *authority.Leader // the token authority while this tier node leads
	relay       *tier.Relay       // a tier node's link to its leader
	be          upstream.Backend
	backendFlag string                              // how errors name the backend: the flags that chose it
	version     string                              // the backend's redis_version, reported by HELLO
	lockWrites  *lockwriter.Writer                  // the lock scripts' batched writer, for the manager and the authority
	tokens      atomic.Pointer[authority.Authority] // in a tier, the current leadership's (nil on a follower)
	lockManager atomic.Pointer[locks.Manager]       // for a tier node's leadership loss
	srv         *protocol.Server
	startedAt   time.Time     // when it began to serve, for INFO's uptime
	loop        *netloop.Loop // --serve-loop's event loop; nil without

	closers []func() // in the order opened; close runs them backwards
}

// start builds every part in the order a failure is likeliest found (the
// ACL file, the ports, the data dir, the backend) and returns the proxy
// ready to serve; on error what was opened is closed again.
func start(cfg config) (*proxy, error) {
	p := &proxy{cfg: cfg}
	if err := p.build(); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *proxy) build() error {
	if err := p.startLogging(); err != nil {
		return err
	}
	p.metrics = metrics.New()
	// The ACL file first: a typo in it stops the start before anything
	// else is touched.
	aclSpecs, err := p.readACLFile()
	if err != nil {
		return err
	}
	// The ports next: the cheapest check and the likeliest clash. They are
	// only tried here and opened once the proxy is ready (openListeners).
	if err := p.tryPorts(); err != nil {
		return err
	}
	backendTLS, err := p.cfg.tls.backendConfig()
	if err != nil {
		return err
	}
	if err := p.openStore(); err != nil {
		return err
	}
	if err := p.startLoop(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := p.connectBackend(ctx, backendTLS); err != nil {
		return err
	}
	keyTable, err := p.readBackend(ctx)
	if err != nil {
		return err
	}
	cancel()
	acl, err := p.compileACL(aclSpecs, keyTable)
	if err != nil {
		return err
	}
	if err := p.startAuthority(); err != nil {
		return err
	}
	p.startedAt = time.Now()
	p.srv = p.newServer(p.newHandler(keyTable, acl))
	if err := p.serveMetrics(); err != nil {
		return err
	}
	if err := p.openListeners(); err != nil {
		return err
	}
	p.logReady()
	return nil
}

// onClose registers fn to run at close, before what was opened earlier.
func (p *proxy) onClose(fn func()) { p.closers = append(p.closers, fn) }

// close closes everything opened, the last opened first.
func (p *proxy) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}

// serve accepts clients until SIGTERM or SIGINT, then drains them within
// --shutdown-timeout. It returns an error only if accepting fails.
func (p *proxy) serve() error {
	// Signals before the first accept: a client that is answered may send
	// SIGTERM at once, and must find it handled (drain, exit 0).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	serveErr := make(chan error, 2)
	if p.ln != nil {
		go func() { serveErr <- p.srv.Serve(p.ln) }()
	}
	if p.tlsLn != nil {
		go func() { serveErr <- p.srv.ServeTLS(p.tlsLn, p.tlsCfg) }()
	}
	select {
	case sig := <-sigs:
		p.logger.Info("draining and shutting down", "signal", sig.String(), "clients", p.srv.Clients())
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.shutdownTimeout)
		defer cancel()
		if err := p.srv.Shutdown(ctx); err != nil {
			p.logger.Warn("shutdown timed out; closed remaining clients", "err", err)
		}
		p.logger.Info("stopped")
		return nil
	case err := <-serveErr:
		return fmt.Errorf("accepting clients: %v", err)
	}
}

// startLogging sets the process's logger at --log-level.
func (p *proxy) startLogging() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(p.cfg.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %v", err)
	}
	p.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(p.logger)
	// go-redis logs dial failures itself; they reach the operator through our
	// own errors and log lines instead.
	redis.SetLogger(quietRedisLogger{p.logger})
	return nil
}

// readACLFile parses --aclfile (nil without one).
func (p *proxy) readACLFile() ([]auth.UserSpec, error) {
	if p.cfg.aclFile == "" {
		return nil, nil
	}
	specs, err := auth.ParseFile(p.cfg.aclFile)
	if err != nil {
		return nil, fmt.Errorf("--aclfile: %v", err)
	}
	return specs, nil
}

// tryPorts binds --listen, --tls-listen and --metrics-listen and lets them
// go again, and loads the TLS certificates, so that a port in use or a bad
// certificate stops the start with one line before anything else is done
// or logged (the metrics port used to be bound last, after lines that read
// as a good start).
func (p *proxy) tryPorts() error {
	if p.cfg.tls.listen != "" {
		cfg, err := p.cfg.tls.serverConfig(p.logger)
		if err != nil {
			return err
		}
		p.tlsCfg = cfg
	}
	for _, try := range []struct{ flag, addr string }{
		{"--listen", p.cfg.listen}, {"--tls-listen", p.cfg.tls.listen}, {"--metrics-listen", p.cfg.metricsListen},
	} {
		if try.addr == "" {
			continue
		}
		if try.flag != "--listen" && (try.addr == p.cfg.listen || try.flag == "--metrics-listen" && try.addr == p.cfg.tls.listen) {
			return fmt.Errorf("%s %s: the same address as another listening flag; give each its own port", try.flag, try.addr)
		}
		ln, err := net.Listen("tcp", try.addr)
		if err != nil {
			return fmt.Errorf("%s %s: %v", try.flag, try.addr, err)
		}
		ln.Close()
	}
	return nil
}

// openListeners binds --listen and --tls-listen for good. It runs last,
// once every part is ready: a client whose connection the kernel accepted
// while the proxy was still starting would have its requests read only
// when the proxy is ready, and a lease counted from that read would leave
// the client, who counts from its send, less than promised (the fault
// suite's late-lease check found it across a restart). Until then a client
// finds the port closed and retries.
func (p *proxy) openListeners() error {
	if p.cfg.listen != "" { // "" with --tls-listen: TLS clients only
		ln, err := net.Listen("tcp", p.cfg.listen)
		if err != nil {
			return fmt.Errorf("--listen %s: %v", p.cfg.listen, err)
		}
		p.ln = ln
		p.onClose(func() { ln.Close() })
	}
	if p.cfg.tls.listen != "" {
		ln, err := net.Listen("tcp", p.cfg.tls.listen)
		if err != nil {
			return fmt.Errorf("--tls-listen %s: %v", p.cfg.tls.listen, err)
		}
		p.tlsLn = ln
		p.onClose(func() { ln.Close() })
	}
	return nil
}

// openStore opens the fence store in --data-dir, or in a tier this
// node's share of the tier's (openTier).
func (p *proxy) openStore() error {
	if p.cfg.tier.on() {
		return p.openTier()
	}
	store, err := persist.Open(p.cfg.dataDir, persist.Options{
		CacheEntries: p.cfg.cacheEntries,
		ObserveSync:  func(d time.Duration) { p.metrics.FsyncSeconds.Observe(d.Seconds()) },
		Logger:       p.logger,
		Shared:       true, // its bound is kept in Redis too (internal/authority)
		TokenFloor:   p.cfg.tokenFloor,
	})
	if err != nil {
		return fmt.Errorf("--data-dir %s: %v", p.cfg.dataDir, err)
	}
	p.store = store
	p.onClose(func() { store.Close() })
	return nil
}

// connectBackend reaches the backend --backend or --sentinel names.
func (p *proxy) connectBackend(ctx context.Context, backendTLS *tls.Config) error {
	cfg := &p.cfg
	sentinelOpts, err := cfg.sentinel.options(&cfg.tls)
	if err != nil {
		return err
	}
	p.backendFlag = "--backend " + cfg.backend
	if sentinelOpts != nil {
		p.backendFlag = cfg.sentinel.String()
	}
	loopPool := cfg.backendConns
	if !cfg.backendConnsSet {
		// One loop writes for every client: one connection per master
		// takes all of a pass's requests in one write, and Redis reads
		// them in one read (measured: 3.6-4.85 us of proxy CPU per
		// request at -c 50 -P 1 against 5.2-5.7 with four, and the best
		// -P 16 rates).
		loopPool = 1
	}
	be, err := upstream.Connect(ctx, upstream.Options{
		Sentinel:       sentinelOpts,
		Seeds:          strings.Split(cfg.backend, ","),
		Username:       cfg.backendUser,
		Password:       cfg.backendPassword,
		PoolSize:       cfg.backendConns,
		LoopPoolSize:   loopPool,
		WriterConns:    cfg.lockConns,
		ReplicaTimeout: cfg.replicaTimeout,
		ObserveReply:   func(d time.Duration) { p.metrics.PassthroughSeconds.Observe(d.Seconds()) },
		Logger:         p.logger,
		TLS:            backendTLS,
		Loop:           p.loop,
		// The token authority's keys (internal/authority): in front of a
		// Redis Cluster, left out of DBSIZE, KEYS and SCAN.
		OwnKeys: authority.Keys(authorityPrefix(cfg.keyPrefix)),
		// After a failover the token authority's heartbeat goes to the
		// new master at once (the authority starts after the backend).
		OnMasterChange: func() {
			if a := p.tokens.Load(); a != nil {
				a.Recheck()
			}
		},
	})
	if err != nil {
		return fmt.Errorf("%s: %v", p.backendFlag, err)
	}
	p.be = be
	p.onClose(be.Close)
	if sentinelOpts != nil {
		cfg.backend = be.Masters()[0].Addr // for the log: the master Sentinel named at start
	}
	return nil
}

// readBackend reads the first master's version and where each command's
// keys are (Backend.Keys, read from Redis's own COMMAND by Connect, which
// fails without it in front of a cluster: slot routing depends on it): ACL
// users' key patterns depend on it too. Without it a standalone proxy
// still serves (keyTable nil).
func (p *proxy) readBackend(ctx context.Context) (*keys.Table, error) {
	master := p.be.Masters()[0]
	p.version = "7.0.0"
	if info, err := master.Client.Info(ctx, "server").Result(); err == nil {
		p.version = upstream.InfoField(info, "redis_version")
	}
	keyTable, err := p.be.Keys()
	if err != nil && (p.cfg.aclFile != "" || p.cfg.requirepass != "") {
		return nil, fmt.Errorf("%s: reading COMMAND (needed to check ACL users' commands and keys): %v", p.backendFlag, err)
	}
	return keyTable, nil
}

// compileACL turns on fenceproxy's own client authentication with
// --aclfile or --requirepass (nil without either).
func (p *proxy) compileACL(specs []auth.UserSpec, keyTable *keys.Table) (*auth.ACL, error) {
	if p.cfg.aclFile == "" && p.cfg.requirepass == "" {
		return nil, nil
	}
	acl, err := auth.Compile(specs, p.cfg.requirepass, commands.ACLCommands(keyTable))
	if err != nil {
		return nil, fmt.Errorf("--aclfile: %v", err)
	}
	p.logger.Info("client authentication on", "users", strings.Join(acl.Users(), ","),
		"default_needs_password", acl.Initial() == nil)
	if names := acl.ScriptingUsers(); len(names) > 0 {
		p.logger.Warn("users confined to key patterns may run scripts, which reach keys beyond their patterns; deny them -@scripting",
			"users", strings.Join(names, ","))
	}
	return acl, nil
}

// startAuthority starts the lock-script writer and the token authority,
// before any lock command: the start fails if another fenceproxy with
// another fence store is live on this backend (StartAlone); otherwise the
// authority's first heartbeat round joins the fence store to the token
// bound kept in Redis.
func (p *proxy) startAuthority() error {
	wo := lockwriter.Options{Backend: p.be, MinReplicas: p.cfg.minReplicas, ReplicaTimeout: p.cfg.replicaTimeout}
	if p.store != nil {
		wo.Commits = p.store // a round's grants share one synced commit
	}
	p.lockWrites = lockwriter.New(wo)
	if p.tier != nil {
		// The tier's leader runs the token authority while it leads
		// (tier.go); closed before the backend, so its member leaves.
		p.tierAuth.Start(authority.Options{Backend: p.be, Writer: p.lockWrites, KeyPrefix: p.cfg.keyPrefix,
			MinReplicas: p.cfg.minReplicas, ReplicaTimeout: p.cfg.replicaTimeout, Logger: p.logger})
		p.onClose(p.tierAuth.Close)
		return nil
	}
	tokens := authority.New(authority.Options{
		Backend: p.be, Writer: p.lockWrites, Store: p.store, KeyPrefix: p.cfg.keyPrefix,
		MinReplicas: p.cfg.minReplicas, ReplicaTimeout: p.cfg.replicaTimeout, Logger: p.logger,
		// Another fenceproxy already serving this backend keeps serving:
		// this one does not start (its member would make both refuse).
		StartAlone: true,
	})
	ctx, cancel := context.WithTimeout(context.Background(), authorityTimeout)
	err := tokens.Start(ctx)
	cancel()
	var conflict *authority.ConflictError
	if errors.As(err, &conflict) {
		return errors.New(conflict.StartReason(p.backendFlag))
	}
	if err != nil {
		return fmt.Errorf("%s: %v", p.backendFlag, err)
	}
	p.onClose(tokens.Close)
	p.tokens.Store(tokens)
	p.metrics.RegisterAuthority(func() metrics.AuthorityStats {
		st := tokens.Stats()
		return metrics.AuthorityStats{StoreID: st.StoreID, RedisBound: st.RedisBound, Floor: st.Floor, Conflict: len(st.Others) > 0, Confirmed: st.Confirmed}
	})
	return nil
}

// newHandler is the command handler: the lock manager and the backend
// behind every command.
func (p *proxy) newHandler(keyTable *keys.Table, acl *auth.ACL) *commands.Handler {
	cfg := &p.cfg
	mgr := locks.New(locks.Options{
		Scripts: p.lockWrites, Store: p.tokenStore(), MinReplicas: cfg.minReplicas,
		KeyPrefix: cfg.keyPrefix, LockDelay: cfg.lockDelay, Metrics: p.metrics, Logger: p.logger,
		MaxWaiters: cfg.maxWaiters, SlowLogLen: cfg.slowLogLen,
		SlowWait: msFlag(cfg.slowWaitMs), SlowHeld: msFlag(cfg.slowHeldMs),
		AllowEvictable:    cfg.allowEvictable,
		Admit:             p.admit,
		AdmitWithin:       p.admitWithin,
		Term:              p.term,
		LeaseSafetyMargin: cfg.leaseMargin,
		FenceMarkTTL:      cfg.fenceMarkTTL,
	})
	p.lockManager.Store(mgr)
	lockKeys, _ := recipes.ParseKeyPatterns(cfg.lockKeys) // checked by parseFlags
	return commands.NewHandler(commands.Options{
		Backend:        p.be,
		Keys:           keyTable,
		Locks:          lockcmd.Locks{Manager: mgr, Tier: p.tierOptions(), LockKeys: lockKeys},
		Metrics:        p.metrics,
		Logger:         p.logger,
		RedisVersion:   p.version,
		ReplicaTimeout: cfg.replicaTimeout,
		KeyPrefix:      cfg.keyPrefix,
		OwnKeys:        authority.Keys(authorityPrefix(cfg.keyPrefix)),
		Info:           p.info,
		ACL:            acl,
		BackendUser:    cfg.backendUser,
	})
}

// startLoop starts --serve-loop's event loop: in front of a standalone
// master or a Redis Cluster (whose single-slot requests the loop serves,
// commands' ServesOnLoop asking the Forwarder). Clients of fenceproxy's own users and of a tier
// node are served there as any other (commands' ServesOnLoop), and
// --timeout's idle clients are closed there too (protocol's loopidle.go).
func (p *proxy) startLoop() error {
	cfg := &p.cfg
	if !cfg.serveLoop || !netloop.Supported {
		return nil
	}
	l, err := netloop.New()
	if err != nil {
		return fmt.Errorf("--serve-loop: %v (run with --serve-loop=false)", err)
	}
	p.loop = l
	p.onClose(l.Close) // after the backend's connections and the clients
	return nil
}

// newServer is the client side, with the client limits.
func (p *proxy) newServer(h protocol.Handler) *protocol.Server {
	srv := protocol.NewServer(h, p.logger)
	if p.loop != nil {
		srv.Loop = p.loop
	}
	srv.MaxClients = p.cfg.maxClients
	p.cfg.limits.apply(srv)
	srv.OnLimitClose = func(reason string) { p.metrics.ClientsClosed.WithLabelValues(reason).Inc() }
	srv.OnConnect = func(delta int) { p.metrics.ConnectedClients.Add(float64(delta)) }
	srv.HandshakeTimeout = p.cfg.tls.handshakeTimeout
	return srv
}

// info is the body of INFO's "# fenceproxy" section.
func (p *proxy) info() string {
	st := p.storeStats()
	be := p.be
	return fmt.Sprintf("fenceproxy_mode:%s\r\nmasters:%d\r\nuptime_in_seconds:%d\r\nconnected_clients:%d\r\nloop_clients:%d\r\ngoroutine_detours:%d\r\nreplicas_seen:%d\r\n"+
		"min_replicas:%d\r\nreplica_timeout_ms:%d\r\nfence_store_healthy:%d\r\ntoken_bound:%d\r\n"+
		"tokens_cached:%d\r\ntoken_cache_hits:%d\r\ntoken_cache_misses:%d\r\n",
		be.Mode(), len(be.Masters()), int(time.Since(p.startedAt).Seconds()), p.srv.Clients(), p.srv.LoopClients(), p.srv.GoroutineDetours(), fewestReplicas(be),
		p.cfg.minReplicas, p.cfg.replicaTimeout.Milliseconds(), boolInt(st.Healthy), st.ReservedBound,
		st.CacheEntries, st.CacheHits, st.CacheMisses) + p.authorityInfo() + limitsInfo(p.srv) + memoryInfo(be, p.cfg.allowEvictable, p.metrics) + p.tierInfo()
}

// serveMetrics serves /metrics, /healthz and /readyz on --metrics-listen.
func (p *proxy) serveMetrics() error {
	p.metrics.WatchMasters(func() []metrics.MasterMemory { return mastersMemory(p.be) })
	if p.cfg.metricsListen == "" {
		return nil
	}
	ms, err := p.metrics.Listen(p.cfg.metricsListen, p.cfg.pprof, p.ready)
	if err != nil {
		return fmt.Errorf("--metrics-listen %s: %v", p.cfg.metricsListen, err)
	}
	p.onClose(func() { ms.Close(context.Background()) })
	return nil
}

// ready is /readyz's answer: nil while every master is reachable and
// written to, the fence store healthy, and (a single node) lock commands
// can be served (locksReady).
func (p *proxy) ready() error {
	for _, n := range p.be.Masters() {
		if !n.Up() {
			return fmt.Errorf("backend Redis master %s unreachable", n.Addr)
		}
		if n.Refusal() != nil {
			return fmt.Errorf("backend Redis %s is not the master now; nothing is sent to it", n.Addr)
		}
	}
	if p.tier != nil {
		return nil // serving passthrough; lock commands say when there is no leader
	}
	if !p.store.Stats().Healthy {
		return errors.New("fence store unhealthy")
	}
	return p.locksReady()
}

// locksReady is nil while lock commands can be served: the token
// authority admits them, and every master has --min-replicas replicas
// connected. A proxy that forwards but can grant no lock is not ready: the
// operator learns it here rather than from every client's -NOREPLICAS.
// A heartbeat round that is merely late (ErrUnconfirmed) passes by itself
// and is not counted.
func (p *proxy) locksReady() error {
	var shortfall *authority.NoReplicasError
	var conflict *authority.ConflictError
	if a := p.tokens.Load(); a != nil {
		switch err := a.Admit(); {
		case errors.As(err, &shortfall):
			return fmt.Errorf("lock commands unavailable: %s", shortfall.Reason())
		case errors.As(err, &conflict):
			return fmt.Errorf("lock commands unavailable: %s", conflict.Reason())
		}
	}
	if fewest := fewestReplicas(p.be); fewest < p.cfg.minReplicas {
		return fmt.Errorf("lock commands unavailable: a master has %d replicas connected, fewer than --min-replicas %d; "+
			"grants answer NOREPLICAS: add replicas, or start with --min-replicas %d", fewest, p.cfg.minReplicas, fewest)
	}
	return nil
}

// logReady logs what the proxy is about to serve, and what needs the
// operator's attention.
func (p *proxy) logReady() {
	cfg, be := &p.cfg, p.be
	var replicas []string
	for _, n := range be.Masters() {
		replicas = append(replicas, n.Replicas()...)
	}
	p.logger.Info("fenceproxy ready",
		"listen", addrOf(p.ln), "tls_listen", addrOf(p.tlsLn), "backend_tls", cfg.tls.backend, "backend", cfg.backend, "sentinel", cfg.sentinel.addrs, "mode", be.Mode(), "masters", len(be.Masters()),
		"redis_version", p.version, "replicas_seen", len(replicas), "replicas", strings.Join(replicas, ","),
		"min_replicas", cfg.minReplicas, "replica_timeout", cfg.replicaTimeout,
		"data_dir", cfg.dataDir, "metrics", cfg.metricsListen)
	if p.store != nil {
		p.logger.Info("fence store", "token_bound", p.store.Stats().ReservedBound, "fence_store_id", p.store.ID(), "token_floor", p.store.Floor())
	}
	if fewest := fewestReplicas(be); fewest < cfg.minReplicas {
		p.logger.Warn(fmt.Sprintf("a master has fewer replicas connected than --min-replicas: lock commands answer NOREPLICAS, and /readyz says not ready, "+
			"until enough replicas are online; add replicas, or start with --min-replicas %d (with 0, a grant dies with the master if it fails over before replicating)", fewest),
			"replicas_seen", fewest, "min_replicas", cfg.minReplicas)
	}
	warnEvictable(p.logger, be, cfg.allowEvictable)
}

// quietRedisLogger sends go-redis's internal messages to the debug log.
type quietRedisLogger struct{ l *slog.Logger }

func (q quietRedisLogger) Printf(_ context.Context, format string, v ...any) {
	q.l.Debug("go-redis: " + fmt.Sprintf(format, v...))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fewestReplicas is the smallest number of replicas any master has: what
// decides whether every resource can be granted under --min-replicas.
func fewestReplicas(be upstream.Backend) int {
	fewest := -1
	for _, n := range be.Masters() {
		if r := len(n.Replicas()); fewest < 0 || r < fewest {
			fewest = r
		}
	}
	return max(fewest, 0)
}

// authorityPrefix is the prefix the token authority's keys are under: the
// lock records' --key-prefix, defaulted as internal/authority does.
func authorityPrefix(prefix string) string {
	if prefix == "" {
		return "fenceproxy:lock:"
	}
	return prefix
}
