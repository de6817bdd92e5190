package metrics

import "github.com/prometheus/client_golang/prometheus"

// TierStats is a tier node's state, read at each scrape.
type TierStats struct {
	Role                  string // leader, follower, candidate or none
	Ready                 bool   // the leader has committed its LeaderStart and serves lock commands
	Term                  uint64
	CommitIndex, Applied  uint64
	LogWrites, LogEntries uint64
	// BatchEntries and BatchOps: the Batch entries this node proposed as
	// leader and the token ops (reservations, confirmations) they carried.
	BatchEntries, BatchOps uint64
	Peers                  []TierPeer // on the leader: every other node
}

// TierPeer is one other node as the leader sees it.
type TierPeer struct {
	ID       string
	Healthy  bool
	Lag      uint64
	LagKnown bool // no lag series until the peer has reported to this leader
}

var (
	tierRoleDesc     = prometheus.NewDesc("fenceproxy_tier_role", "1 for this node's current role in the tier.", []string{"role"}, nil)
	tierReadyDesc    = prometheus.NewDesc("fenceproxy_tier_ready", "1 while this node is the tier's leader and serves lock commands.", nil, nil)
	tierTermDesc     = prometheus.NewDesc("fenceproxy_tier_term", "The Raft term this node is in.", nil, nil)
	tierCommitDesc   = prometheus.NewDesc("fenceproxy_tier_commit_index", "The Raft commit index this node knows.", nil, nil)
	tierAppliedDesc  = prometheus.NewDesc("fenceproxy_tier_applied_index", "The Raft index applied to this node's token state.", nil, nil)
	tierWritesDesc   = prometheus.NewDesc("fenceproxy_tier_log_writes_total", "Raft log writes (each one fsync) on this node.", nil, nil)
	tierEntriesDesc  = prometheus.NewDesc("fenceproxy_tier_log_entries_total", "Raft log entries written on this node (entries per write: the group commit).", nil, nil)
	tierBatchesDesc  = prometheus.NewDesc("fenceproxy_tier_batch_entries_total", "Batch log entries this node proposed as leader (each carries the token ops of many grants).", nil, nil)
	tierBatchOpsDesc = prometheus.NewDesc("fenceproxy_tier_batch_ops_total", "Token ops (reservations, confirmations, cancellations) carried by this node's Batch entries (ops per entry: the batching).", nil, nil)
	tierHealthyDesc  = prometheus.NewDesc("fenceproxy_tier_peer_healthy", "On the leader: 1 while the peer answers heartbeats.", []string{"peer"}, nil)
	tierLagDesc      = prometheus.NewDesc("fenceproxy_tier_peer_lag", "On the leader: log entries the peer's applied index was behind the leader's last when the peer last reported it (every second); absent until the peer has reported to this leader.", []string{"peer"}, nil)
)

// RegisterTier exports a tier node's gauges, read from stats at each scrape.
func (m *Metrics) RegisterTier(stats func() TierStats) {
	m.Registry.MustRegister(tierCollector(stats))
}

type tierCollector func() TierStats

func (tierCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{tierRoleDesc, tierReadyDesc, tierTermDesc, tierCommitDesc, tierAppliedDesc, tierWritesDesc, tierEntriesDesc, tierBatchesDesc, tierBatchOpsDesc, tierHealthyDesc, tierLagDesc} {
		ch <- d
	}
}

func (c tierCollector) Collect(ch chan<- prometheus.Metric) {
	s := c()
	for _, role := range []string{"leader", "follower", "candidate", "none"} {
		ch <- prometheus.MustNewConstMetric(tierRoleDesc, prometheus.GaugeValue, boolGauge(s.Role == role), role)
	}
	ch <- prometheus.MustNewConstMetric(tierReadyDesc, prometheus.GaugeValue, boolGauge(s.Ready))
	ch <- prometheus.MustNewConstMetric(tierTermDesc, prometheus.GaugeValue, float64(s.Term))
	ch <- prometheus.MustNewConstMetric(tierCommitDesc, prometheus.GaugeValue, float64(s.CommitIndex))
	ch <- prometheus.MustNewConstMetric(tierAppliedDesc, prometheus.GaugeValue, float64(s.Applied))
	ch <- prometheus.MustNewConstMetric(tierWritesDesc, prometheus.CounterValue, float64(s.LogWrites))
	ch <- prometheus.MustNewConstMetric(tierEntriesDesc, prometheus.CounterValue, float64(s.LogEntries))
	ch <- prometheus.MustNewConstMetric(tierBatchesDesc, prometheus.CounterValue, float64(s.BatchEntries))
	ch <- prometheus.MustNewConstMetric(tierBatchOpsDesc, prometheus.CounterValue, float64(s.BatchOps))
	for _, p := range s.Peers {
		ch <- prometheus.MustNewConstMetric(tierHealthyDesc, prometheus.GaugeValue, boolGauge(p.Healthy), p.ID)
		if p.LagKnown {
			ch <- prometheus.MustNewConstMetric(tierLagDesc, prometheus.GaugeValue, float64(p.Lag), p.ID)
		}
	}
}
