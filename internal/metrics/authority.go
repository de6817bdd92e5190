package metrics

import "github.com/prometheus/client_golang/prometheus"

// AuthorityStats is what the token authority's gauges read (see
// internal/authority).
type AuthorityStats struct {
	StoreID    string
	RedisBound uint64 // the token bound kept in Redis (0: missing)
	Floor      uint64 // no token at or below it is issued or current
	Conflict   bool   // another fenceproxy with another fence store is live on the backend
	Confirmed  bool   // lock commands are admitted now
}

// RegisterAuthority adds the token authority's gauges, each reading stats
// when scraped. Call it once.
func (m *Metrics) RegisterAuthority(stats func() AuthorityStats) {
	gauge := func(name, help string, v func(AuthorityStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return v(stats()) })
	}
	info := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "fenceproxy_fence_store_info",
		Help:        "Always 1; the store_id label is the fence store's id (one per data dir, shown in the heartbeat on Redis).",
		ConstLabels: prometheus.Labels{"store_id": stats().StoreID},
	}, func() float64 { return 1 })
	m.Registry.MustRegister(info,
		gauge("fenceproxy_token_bound_redis", "The token bound kept in Redis (0: missing, rewritten within a heartbeat).",
			func(s AuthorityStats) float64 { return float64(s.RedisBound) }),
		gauge("fenceproxy_token_floor", "No token at or below the floor is issued or judged current (a new or restored data dir, or --token-floor).",
			func(s AuthorityStats) float64 { return float64(s.Floor) }),
		gauge("fenceproxy_token_authority_conflict", "1 while another fenceproxy with another fence store is live on the backend (lock commands refused).",
			func(s AuthorityStats) float64 { return boolGauge(s.Conflict) }),
		gauge("fenceproxy_token_authority_confirmed", "1 while lock commands are admitted (no conflict, bound in Redis, heartbeat recent).",
			func(s AuthorityStats) float64 { return boolGauge(s.Confirmed) }),
	)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
