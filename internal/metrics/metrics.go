// Package metrics defines fenceproxy's Prometheus metrics and serves them,
// with health and readiness endpoints, over HTTP.
//
// Every metric is an aggregate: no label carries a resource, owner or key,
// since those are unbounded (a hot-resource view belongs in a top-K, not in
// label cardinality). The one exception is the master label of the
// per-master memory-policy series (masters.go): masters are few.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Metrics holds every collector fenceproxy updates.
type Metrics struct {
	Registry *prometheus.Registry

	// The lock commands' requests by result; the results each one counts
	// are listed with the command (the command table in package commands).
	Acquires            *prometheus.CounterVec // result: granted, busy, queuefull, noreplicas, evictable (refused: see EvictableGrants), late (undone: too little lease left to reply), invalid (bad arguments), error
	AcquireSeconds      prometheus.Histogram
	Renewals            *prometheus.CounterVec // result: renewed, lost, noreplicas, evictable, late, invalid, error
	Releases            *prometheus.CounterVec // result: released, notheld, invalid, error
	FenceChecks         *prometheus.CounterVec // result: current, stale, invalid (bad or never-issued token), error (the proxy could not answer)
	ReplicaAckSeconds   prometheus.Histogram
	ReplicaShortfalls   prometheus.Counter
	FsyncSeconds        prometheus.Histogram
	PassthroughCommands prometheus.Counter
	PassthroughSeconds  prometheus.Histogram
	ConnectedClients    prometheus.Gauge
	ClientsClosed       *prometheus.CounterVec // reason: output-buffer-normal, output-buffer-pubsub, query-buffer, idle-timeout
	LockWaiters         prometheus.Gauge
	LocksHeld           prometheus.Gauge
	LockExpirations     prometheus.Counter
	SlowLockEntries     *prometheus.CounterVec // kind: wait, held, expired
	EvictableGrants     prometheus.Counter     // grants and renewals made under --allow-evictable-locks
	ForeignTokens       prometheus.Counter     // acquires refused: the owner record carries a token no fence store issued
	OwnKeyWritesRefused prometheus.Counter     // client requests refused for writing one of the proxy's own keys
	LockRequestCourses  *prometheus.CounterVec // course: callbacks, worker
}

// latencyBuckets span 50µs to about 3s.
var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 17)

// New creates the metrics in a registry of their own, with Go runtime and
// process metrics beside them.
func New() *Metrics {
	r := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	m := &Metrics{
		Registry: r,
		Acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_lock_acquires_total", Help: "LOCK.ACQUIRE requests by result.",
		}, []string{"result"}),
		AcquireSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fenceproxy_lock_acquire_seconds", Help: "LOCK.ACQUIRE latency, waiting included.", Buckets: latencyBuckets,
		}),
		Renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_lock_renewals_total", Help: "LOCK.RENEW requests by result.",
		}, []string{"result"}),
		Releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_lock_releases_total", Help: "LOCK.RELEASE requests by result.",
		}, []string{"result"}),
		FenceChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_fence_checks_total", Help: "FENCE.CHECK requests by result (stale: a newer token exists).",
		}, []string{"result"}),
		ReplicaAckSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fenceproxy_replica_ack_seconds", Help: "Time for a lock write and its WAIT for replica acknowledgements.", Buckets: latencyBuckets,
		}),
		ReplicaShortfalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_replica_shortfalls_total", Help: "Lock writes that fewer than --min-replicas replicas acknowledged in time.",
		}),
		FsyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fenceproxy_fence_store_sync_seconds", Help: "Fence store synced-commit latency.", Buckets: latencyBuckets,
		}),
		PassthroughCommands: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_passthrough_commands_total", Help: "Commands forwarded to Redis.",
		}),
		PassthroughSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "fenceproxy_passthrough_seconds", Help: "Forwarded command latency, proxy to Redis and back.", Buckets: latencyBuckets,
		}),
		ConnectedClients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenceproxy_connected_clients", Help: "Open client connections.",
		}),
		ClientsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_clients_closed_total", Help: "Clients the proxy disconnected for a limit, by reason.",
		}, []string{"reason"}),
		LockWaiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenceproxy_lock_waiters", Help: "LOCK.ACQUIRE requests waiting for a resource.",
		}),
		LocksHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fenceproxy_locks_held", Help: "Leases granted through this proxy and not yet seen released or expired (at most 65536 tracked).",
		}),
		LockExpirations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_lock_expirations_total", Help: "Leases granted through this proxy that ran out without a release.",
		}),
		SlowLockEntries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_slowlock_entries_total", Help: "Slow-lock log entries by kind (wait: waited over --slowlock-log-slower-than; held: released after over --slowlock-held-longer-than; expired).",
		}, []string{"kind"}),
		EvictableGrants: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_evictable_lock_grants_total", Help: "Lock grants and renewals made under --allow-evictable-locks on a Redis master whose maxmemory-policy can evict owner records.",
		}),
		ForeignTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_lock_foreign_tokens_total", Help: "Acquires refused because the resource's owner record in Redis carries a token above every token a fence store could have issued (written by a client, not by fenceproxy); the token is not adopted.",
		}),
		OwnKeyWritesRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fenceproxy_own_key_writes_refused_total", Help: "Client requests refused because they write or delete a key under --key-prefix (fenceproxy's owner records, guards and token-authority keys).",
		}),
		LockRequestCourses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceproxy_lock_request_courses_total",
			Help: "Lock requests (lock family and recipes) by how they ran: callbacks (each step run where the one before completed, no goroutine of their own: LOCK.ACQUIRE without WAIT and LOCK.RELEASE, when the resource's turn is free and nobody waits in line) or worker (on a lock worker goroutine that waits on each step).",
		}, []string{"course"}),
	}
	f(m.Acquires)
	f(m.AcquireSeconds)
	f(m.LockRequestCourses)
	f(m.Renewals)
	f(m.Releases)
	f(m.FenceChecks)
	f(m.ReplicaAckSeconds)
	f(m.ReplicaShortfalls)
	f(m.FsyncSeconds)
	f(m.PassthroughCommands)
	f(m.PassthroughSeconds)
	f(m.ConnectedClients)
	f(m.ClientsClosed)
	f(m.LockWaiters)
	f(m.LocksHeld)
	f(m.LockExpirations)
	f(m.SlowLockEntries)
	f(m.EvictableGrants)
	f(m.ForeignTokens)
	f(m.OwnKeyWritesRefused)
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Server serves /metrics, /healthz (the process is up) and /readyz (health
// returns nil: the backend and the fence store are usable).
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr and starts serving in the background. With profiling,
// Go's profiler is served under /debug/pprof/ too.
func (m *Metrics) Listen(addr string, profiling bool, ready func() error) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener closed under us; nothing to report to
		}
	}()
	return s, nil
}

// Addr is where the server listens.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server.
func (s *Server) Close(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Count reads a counter's (or gauge's) current value, for INFO: the metrics
// are the one record of what was counted.
func Count(c prometheus.Metric) uint64 {
	var d dto.Metric
	if c.Write(&d) != nil {
		return 0
	}
	switch {
	case d.Counter != nil:
		return uint64(d.Counter.GetValue())
	case d.Gauge != nil:
		return uint64(max(d.Gauge.GetValue(), 0))
	}
	return 0
}
