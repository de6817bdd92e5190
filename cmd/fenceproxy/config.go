package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/recipes"
)

// config is every setting. defaultConfig fills in the defaults, the flags
// (parseFlags) override them, and the environment supplies the secrets.
type config struct {
	listen          string
	backend         string
	sentinel        sentinelFlags
	backendUser     string
	backendPassword string // $FENCEPROXY_BACKEND_PASSWORD
	dataDir         string
	minReplicas     int
	replicaTimeout  time.Duration
	leaseMargin     float64
	metricsListen   string
	maxClients      int
	backendConns    int
	backendConnsSet bool // --backend-conns was given (else 1 with the serve loop)
	lockConns       int
	keyPrefix       string
	lockDelay       time.Duration
	fenceMarkTTL    time.Duration // --fence-mark-ttl
	maxWaiters      int
	slowWaitMs      int
	slowHeldMs      int
	slowLogLen      int
	cacheEntries    int
	tokenFloor      uint64
	shutdownTimeout time.Duration
	logLevel        string
	pprof           bool
	serveLoop       bool // --serve-loop
	limits          limits
	tls             tlsFlags
	aclFile         string // fenceproxy's own client users (internal/auth)
	requirepass     string // or $FENCEPROXY_REQUIREPASS
	allowEvictable  bool   // --allow-evictable-locks
	tier            tierFlags
	lockKeys        string // --lock-keys: globs of SET NX lock keys
}

// defaultConfig is every setting's default, in one place: what the flags
// start from and what -help shows.
func defaultConfig() config {
	return config{
		listen:          "127.0.0.1:7379",
		backend:         "127.0.0.1:6379",
		dataDir:         "./fenceproxy-data",
		minReplicas:     1,
		replicaTimeout:  500 * time.Millisecond,
		leaseMargin:     0.1,
		fenceMarkTTL:    24 * time.Hour,
		metricsListen:   "127.0.0.1:9121",
		maxClients:      10000,
		backendConns:    4,
		lockConns:       1,
		keyPrefix:       "fenceproxy:lock:",
		maxWaiters:      10000,
		slowWaitMs:      100,
		slowHeldMs:      30000,
		slowLogLen:      128,
		cacheEntries:    1 << 18,
		shutdownTimeout: 10 * time.Second,
		logLevel:        "info",
		serveLoop:       true,
		// Redis's own defaults for the client limits.
		limits: limits{
			normalOutput:    protocol.DefaultNormalOutput,
			pubsubOutput:    protocol.DefaultPubSubOutput,
			queryBufLimit:   protocol.DefaultLimits.MaxQueryBuf,
			protoMaxBulkLen: protocol.DefaultLimits.MaxBulkLen,
		},
		tls: tlsFlags{handshakeTimeout: 10 * time.Second},
	}
}

// parseFlags returns the configuration args ask for, checked.
func parseFlags(args []string) (config, error) {
	c := defaultConfig()
	fs := flag.NewFlagSet("fenceproxy", flag.ContinueOnError)
	fs.StringVar(&c.listen, "listen", c.listen, "`host:port` where RESP clients connect")
	fs.StringVar(&c.backend, "backend", c.backend, "the backend: a Redis master `host:port`, or seed nodes of a Redis Cluster, comma-separated (detected)")
	c.sentinel.register(fs)
	fs.StringVar(&c.backendUser, "backend-user", c.backendUser, "ACL user for the backend (with the password from $FENCEPROXY_BACKEND_PASSWORD)")
	fs.StringVar(&c.dataDir, "data-dir", c.dataDir, "`dir`ectory of the fence store; created if missing")
	fs.IntVar(&c.minReplicas, "min-replicas", c.minReplicas, "replicas that must acknowledge a lock write before it is granted")
	fs.DurationVar(&c.replicaTimeout, "replica-timeout", c.replicaTimeout, "how long a lock write waits for replica acknowledgements")
	fs.Float64Var(&c.leaseMargin, "lease-safety-margin", c.leaseMargin, "the `fraction` of a lease (0 to 0.9) that a grant's or renewal's reply must still leave, after the time since the request was received and Redlock's drift allowance (1% + 2ms); a later one is undone and answered -TRYAGAIN")
	fs.StringVar(&c.metricsListen, "metrics-listen", c.metricsListen, "`host:port` for /metrics, /healthz and /readyz; empty disables")
	fs.IntVar(&c.maxClients, "max-clients", c.maxClients, "most client connections at once")
	fs.IntVar(&c.backendConns, "backend-conns", c.backendConns, "pipelined connections to each master shared by all clients (when the --serve-loop serves them, 1 unless given)")
	fs.IntVar(&c.lockConns, "lock-conns", c.lockConns, "connections of each kind (with WAIT, without) to each master that run batched lock writes")
	fs.StringVar(&c.keyPrefix, "key-prefix", c.keyPrefix, "prefix of owner-record keys in Redis")
	fs.DurationVar(&c.lockDelay, "lock-delay", c.lockDelay, "after a lease runs out without a release, grant the resource to nobody for this long (0: off)")
	fs.DurationVar(&c.fenceMarkTTL, "fence-mark-ttl", c.fenceMarkTTL, "how long a resource's fence mark (the newest token that was granted or wrote, checked inside Redis by FENCE.EXEC) is kept after its last grant or fenced write; a FENCE.EXEC whose write reaches Redis more than half of it after its check is refused")
	fs.IntVar(&c.maxWaiters, "max-waiters", c.maxWaiters, "LOCK.ACQUIRE ... WAIT requests that may wait for one resource at once; more get -QUEUEFULL (0: no waiting)")
	fs.IntVar(&c.slowWaitMs, "slowlock-log-slower-than", c.slowWaitMs, "log an acquire that waited longer than this many `ms` in LOCK.SLOWLOG (-1: never)")
	fs.IntVar(&c.slowHeldMs, "slowlock-held-longer-than", c.slowHeldMs, "log a lease released after being held longer than this many `ms` in LOCK.SLOWLOG (-1: never); an expired lease is always logged")
	fs.IntVar(&c.slowLogLen, "slowlock-log-max-len", c.slowLogLen, "LOCK.SLOWLOG entries kept")
	fs.IntVar(&c.cacheEntries, "token-cache", c.cacheEntries, "resources whose newest token is cached in memory")
	fs.Uint64Var(&c.tokenFloor, "token-floor", c.tokenFloor, "no token at or below `N` is ever issued or honoured (after restoring a data dir while Redis also lost its data); kept in the data dir")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", c.shutdownTimeout, "how long SIGTERM waits for in-flight requests")
	fs.StringVar(&c.logLevel, "log-level", c.logLevel, "debug, info, warn or error")
	fs.BoolVar(&c.allowEvictable, "allow-evictable-locks", c.allowEvictable, "grant locks even on a Redis master whose maxmemory-policy can evict their records (each such grant is logged and counted); without it they are refused")
	fs.BoolVar(&c.pprof, "pprof", c.pprof, "serve Go's profiler under /debug/pprof/ on --metrics-listen")
	fs.BoolVar(&c.serveLoop, "serve-loop", c.serveLoop, "serve clients' forwarded requests (TLS clients too, after their handshake), and the shared connections to the masters (a standalone master's, or each Redis Cluster master's), from one event loop (epoll) instead of goroutines; a client stays on the loop for its whole life, and a request the loop's thread cannot serve without waiting (CLIENT TRACKING, AUTH as another Redis user...) is served on a goroutine meanwhile")
	fs.StringVar(&c.lockKeys, "lock-keys", c.lockKeys, "comma-separated `globs` of keys whose SET key value NX [PX|EX] is a lock grant of a client's own recipe (redis-py, redsync...): replied only after --min-replicas acknowledgements, with a fencing token (empty: none)")
	c.limits.register(fs)
	c.tier.register(fs)
	c.tls.register(fs)
	fs.StringVar(&c.aclFile, "aclfile", c.aclFile, "`file` of client users in Redis ACL syntax (\"user <name> <rules>\" per line); turns on client authentication")
	fs.StringVar(&c.requirepass, "requirepass", c.requirepass, "password of the \"default\" client user (prefer $FENCEPROXY_REQUIREPASS: flags show in ps); turns on client authentication")
	version := fs.Bool("version", false, "print the version and exit")
	if err := parseArgs(fs, args); err != nil {
		return c, err
	}
	if *version {
		fmt.Println(versionLine())
		return c, errVersion
	}
	if err := c.limits.check(); err != nil {
		return c, err
	}
	fs.Visit(func(f *flag.Flag) { c.backendConnsSet = c.backendConnsSet || f.Name == "backend-conns" })
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := c.sentinel.check(fs); err != nil {
		return c, err
	}
	if err := c.tier.check(); err != nil {
		return c, err
	}
	c.backendPassword = os.Getenv("FENCEPROXY_BACKEND_PASSWORD")
	if c.requirepass == "" {
		c.requirepass = os.Getenv("FENCEPROXY_REQUIREPASS")
	}
	if c.tier.secret = os.Getenv("FENCEPROXY_TIER_SECRET"); c.tier.secret == "" {
		c.tier.secret = c.requirepass
	}
	if c.tier.on() && c.aclFile != "" && c.tier.secret == "" {
		return c, errors.New("a tier with --aclfile needs $FENCEPROXY_TIER_SECRET (or --requirepass): it authenticates the nodes' relay links, which act as any user")
	}
	if err := c.check(); err != nil {
		return c, err
	}
	if _, err := recipes.ParseKeyPatterns(c.lockKeys); err != nil {
		return c, err
	}
	return c, c.tls.check(c.listen)
}

// check rejects settings out of range, naming the flag.
func (c *config) check() error {
	switch {
	case c.minReplicas < 0:
		return errors.New("--min-replicas must be 0 or more")
	case c.replicaTimeout < time.Millisecond:
		return errors.New("--replica-timeout must be at least 1ms (Redis's WAIT 0 would block forever)")
	case !(c.leaseMargin >= 0 && c.leaseMargin <= 0.9):
		return errors.New("--lease-safety-margin must be a fraction from 0 to 0.9 (0.1: a reply leaves at least a tenth of the lease)")
	case c.backendConns < 1 || c.lockConns < 1:
		return errors.New("--backend-conns and --lock-conns must be at least 1")
	case c.lockDelay < 0:
		return errors.New("--lock-delay must be 0 or more")
	case c.fenceMarkTTL < time.Minute:
		return errors.New("--fence-mark-ttl must be at least 1m (half of it bounds how late a fenced write may reach Redis, clock differences included; 24h by default)")
	case c.maxWaiters < 0:
		return errors.New("--max-waiters must be 0 or more")
	case c.slowWaitMs < -1 || c.slowHeldMs < -1:
		return errors.New("--slowlock-log-slower-than and --slowlock-held-longer-than must be -1 (never) or more")
	case c.slowLogLen < 0:
		return errors.New("--slowlock-log-max-len must be 0 or more")
	case c.dataDir == "":
		return errors.New("--data-dir must name a directory")
	case c.maxClients < 0:
		return errors.New("--max-clients must be 0 (no limit) or more")
	case c.shutdownTimeout < 0:
		return errors.New("--shutdown-timeout must be 0 or more, with a unit (10s by default)")
	case c.keyPrefix == "":
		return errors.New("--key-prefix must not be empty: the owner records would mix with the application's keys (fenceproxy:lock: by default)")
	case c.tokenFloor >= persist.MaxToken:
		return fmt.Errorf("--token-floor must be from 0 to %d", uint64(persist.MaxToken)-1)
	}
	return nil
}

// msFlag turns a millisecond flag into a duration; -1 (never) stays negative.
func msFlag(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
