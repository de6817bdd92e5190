package commands

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/auth"
	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/lockcmd"
	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/netloop"
	"github.com/fenceproxy/fenceproxy/internal/persist"
	"github.com/fenceproxy/fenceproxy/internal/protocol"
	"github.com/fenceproxy/fenceproxy/internal/recipes"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// The tests of this package that serve whole requests do it as a client
// would: a Handler in front of real redis-server processes, served by a
// protocol.Server on a loopback port, spoken to over TCP, requests in and
// reply bytes out. They hold whatever the package looks like inside;
// startProxy is the one place that knows how the parts are put together.

// proxyOptions says what startProxy puts in front of the backend.
type proxyOptions struct {
	seeds       []string // the backend: a master, or a cluster's seeds
	acl         string   // ACL file text; "" (and no requirepass) leaves authentication off
	requirepass string
	minReplicas int
	// wrap, if set, serves the Handler through what it returns (to watch
	// the protocol.Handler calls).
	wrap func(*Handler) protocol.Handler
	// loop serves plaintext clients and the masters' shared connections
	// from an event loop (fenceproxy's --serve-loop).
	loop bool
	// lockKeys is --lock-keys ("": none).
	lockKeys string
}

// testProxy is a running in-process proxy.
type testProxy struct {
	Addr    string
	Handler *Handler
	Backend upstream.Backend
	Server  *protocol.Server
	Metrics *metrics.Metrics
	Loop    *netloop.Loop // nil unless proxyOptions.loop
	log     *lockedBuffer
}

// startProxy serves a Handler for po on 127.0.0.1 until the test ends.
func startProxy(t testing.TB, po proxyOptions) *testProxy {
	t.Helper()
	logBuf := &lockedBuffer{}
	logger := slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the proxy's log:\n%s", logBuf.String())
		}
	})
	store, err := persist.Open(t.TempDir(), persist.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := metrics.New()
	var loop *netloop.Loop
	if po.loop {
		if !netloop.Supported {
			t.Skip("no event loops here")
		}
		if loop, err = netloop.New(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(loop.Close) // after the server and the backend
	}
	be, err := upstream.Connect(ctx, upstream.Options{
		Seeds: po.seeds, PoolSize: 2, WriterConns: 1, ReplicaTimeout: time.Second, Logger: logger,
		Loop: loop, LoopPoolSize: 1,
	})
	if err != nil {
		t.Fatalf("connecting to %v: %v", po.seeds, err)
	}
	t.Cleanup(be.Close)
	master := be.Masters()[0]
	command, err := master.Raw(ctx, "COMMAND")
	if err != nil {
		t.Fatal(err)
	}
	kt, err := keys.Load(command)
	if err != nil {
		t.Fatal(err)
	}
	var acl *auth.ACL
	if po.acl != "" || po.requirepass != "" {
		specs, err := auth.Parse(strings.NewReader(po.acl), "test.acl")
		if err != nil {
			t.Fatal(err)
		}
		if acl, err = auth.Compile(specs, po.requirepass, ACLCommands(kt)); err != nil {
			t.Fatal(err)
		}
	}
	lockKeys, err := recipes.ParseKeyPatterns(po.lockKeys)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(Options{
		Backend: be,
		Keys:    kt,
		Locks: lockcmd.Locks{LockKeys: lockKeys, Manager: locks.New(locks.Options{
			Scripts: lockwriter.New(lockwriter.Options{Backend: be, MinReplicas: po.minReplicas, ReplicaTimeout: time.Second}),
			Store:   locks.PersistStore(store), MinReplicas: po.minReplicas, Metrics: m, Logger: logger,
			MaxWaiters: 2, SlowLogLen: 16, SlowWait: 0, SlowHeld: 0,
		})},
		Metrics:        m,
		Logger:         logger,
		RedisVersion:   "7.0.15",
		ReplicaTimeout: time.Second,
		KeyPrefix:      "fenceproxy:lock:",
		Info:           func() string { return "fenceproxy_mode:" + be.Mode() + "\r\n" },
		ACL:            acl,
	})
	var served protocol.Handler = h
	if po.wrap != nil {
		served = po.wrap(h)
	}
	srv := protocol.NewServer(served, logger)
	if loop != nil {
		srv.Loop = loop
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return &testProxy{Addr: ln.Addr().String(), Handler: h, Backend: be, Server: srv, Metrics: m, Loop: loop, log: logBuf}
}

// startStandalone starts a master (and, with a replica, one replica) and a
// proxy in front of it.
func startStandalone(t testing.TB, po proxyOptions, replica bool) (*testProxy, *testenv.Redis) {
	t.Helper()
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	if replica {
		testenv.StartReplica(t, master)
	}
	po.seeds = []string{master.Addr}
	return startProxy(t, po), master
}

// Log is what the proxy logged so far.
func (p *testProxy) Log() string { return p.log.String() }

// dial connects a client to the proxy.
func (p *testProxy) dial(t testing.TB) *testenv.Conn {
	t.Helper()
	return testenv.Dial(t, p.Addr)
}

// lockedBuffer is a log destination written by many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// exchange is one request and the reply it must get.
type exchange struct {
	req  []string
	want string
}

// run sends each request in turn and checks each reply's bytes.
func run(t testing.TB, c *testenv.Conn, exchanges []exchange) {
	t.Helper()
	for _, e := range exchanges {
		if got := string(c.Do(e.req...)); got != e.want {
			t.Errorf("%s: got %q, want %q", testenv.ShowCommand(e.req), got, e.want)
		}
	}
}

// wantPrefix checks that the reply to req starts with prefix.
func wantPrefix(t testing.TB, c *testenv.Conn, prefix string, req ...string) []byte {
	t.Helper()
	got := c.Do(req...)
	if !bytes.HasPrefix(got, []byte(prefix)) {
		t.Errorf("%s: got %q, want a reply starting %q", testenv.ShowCommand(req), got, prefix)
	}
	return got
}

// wantInt returns the integer reply to req.
func wantInt(t testing.TB, c *testenv.Conn, req ...string) int64 {
	t.Helper()
	got := c.Do(req...)
	n, ok := testenv.ParseInt(got)
	if !ok {
		t.Fatalf("%s: got %q, want an integer", testenv.ShowCommand(req), got)
	}
	return n
}
