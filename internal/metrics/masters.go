package metrics

import "github.com/prometheus/client_golang/prometheus"

// MasterMemory is one Redis master's eviction settings as last read (see
// upstream.MemoryPolicy), for the per-master series.
type MasterMemory struct {
	Addr        string
	Policy      string // maxmemory-policy; "" if it could not be read
	MaxMemory   int64  // bytes; 0 no limit, -1 unknown
	EvictedKeys int64  // INFO stats evicted_keys; -1 unknown
	CanEvict    bool   // Redis may evict owner records under Policy
}

// The per-master series carry the master's address: masters are few (one,
// or a cluster's shards), so the cardinality stays bounded, and the series
// are made at each scrape from the masters of that moment, so a master
// gone after a failover leaves no series behind.
var (
	evictingDesc = prometheus.NewDesc("fenceproxy_master_evicting_policy",
		"1 if the Redis master's maxmemory-policy can evict owner records (any but noeviction, or unreadable: policy=\"unknown\"), else 0.",
		[]string{"master", "policy"}, nil)
	evictedDesc = prometheus.NewDesc("fenceproxy_master_evicted_keys_total",
		"Keys the Redis master has evicted since it started (INFO stats evicted_keys), as last read.",
		[]string{"master"}, nil)
	maxMemoryDesc = prometheus.NewDesc("fenceproxy_master_maxmemory_bytes",
		"The Redis master's maxmemory (0: no limit), as last read.",
		[]string{"master"}, nil)
)

// mastersCollector makes the per-master series from read at each scrape.
type mastersCollector struct{ read func() []MasterMemory }

// WatchMasters serves the per-master memory series, read from read at each
// scrape (read must not do I/O: it is called on the scrape's goroutine).
func (m *Metrics) WatchMasters(read func() []MasterMemory) {
	m.Registry.MustRegister(mastersCollector{read})
}

func (c mastersCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- evictingDesc
	ch <- evictedDesc
	ch <- maxMemoryDesc
}

func (c mastersCollector) Collect(ch chan<- prometheus.Metric) {
	for _, mm := range c.read() {
		policy, evicting := mm.Policy, 0.0
		if policy == "" {
			policy = "unknown"
		}
		if mm.CanEvict {
			evicting = 1
		}
		ch <- prometheus.MustNewConstMetric(evictingDesc, prometheus.GaugeValue, evicting, mm.Addr, policy)
		if mm.EvictedKeys >= 0 {
			ch <- prometheus.MustNewConstMetric(evictedDesc, prometheus.CounterValue, float64(mm.EvictedKeys), mm.Addr)
		}
		if mm.MaxMemory >= 0 {
			ch <- prometheus.MustNewConstMetric(maxMemoryDesc, prometheus.GaugeValue, float64(mm.MaxMemory), mm.Addr)
		}
	}
}
