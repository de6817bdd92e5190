package main

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/fenceproxy/fenceproxy/internal/metrics"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// memoryInfo is INFO's view of the masters' eviction settings: the worst
// policy of any master (the first one that can evict, else noeviction),
// evicted_keys summed over the masters, and one line per master by position
// (in front of a cluster, ordered by first slot; addresses stay out of
// replies). The names match Redis's own INFO fields, so in front of one
// master they read as Redis's do.
func memoryInfo(be upstream.Backend, allowed bool, m *metrics.Metrics) string {
	worst := upstream.NoEviction
	var evicted int64
	evicting := 0
	var per strings.Builder
	for i, n := range be.Masters() {
		p := n.Memory()
		if p.CanEvict() {
			if evicting == 0 {
				worst = policyName(p)
			}
			evicting++
		}
		evicted += max(p.EvictedKeys, 0)
		fmt.Fprintf(&per, "master%d:maxmemory_policy=%s,maxmemory=%d,evicted_keys=%d,can_evict=%d\r\n",
			i, policyName(p), p.MaxMemory, p.EvictedKeys, boolInt(p.CanEvict()))
	}
	refused := metrics.Count(m.Acquires.WithLabelValues("evictable")) + metrics.Count(m.Renewals.WithLabelValues("evictable"))
	return fmt.Sprintf("maxmemory_policy:%s\r\nevicted_keys:%d\r\nmasters_evicting:%d\r\nevictable_locks_allowed:%d\r\n"+
		"evictable_lock_grants:%d\r\nevictable_lock_refusals:%d\r\n",
		worst, evicted, evicting, boolInt(allowed), metrics.Count(m.EvictableGrants), refused) + per.String()
}

func policyName(p upstream.MemoryPolicy) string {
	if p.Policy == "" {
		return "unknown"
	}
	return p.Policy
}

// mastersMemory is every master's reading for the per-master metrics.
func mastersMemory(be upstream.Backend) []metrics.MasterMemory {
	masters := be.Masters()
	out := make([]metrics.MasterMemory, len(masters))
	for i, n := range masters {
		p := n.Memory()
		out[i] = metrics.MasterMemory{Addr: n.Addr, Policy: p.Policy, MaxMemory: p.MaxMemory,
			EvictedKeys: p.EvictedKeys, CanEvict: p.CanEvict()}
	}
	return out
}

// warnEvictable says at start what the lock family will do on masters
// whose policy can evict owner records (each master's own line names it).
func warnEvictable(logger *slog.Logger, be upstream.Backend, allowed bool) {
	n := 0
	for _, m := range be.Masters() {
		if m.Memory().CanEvict() {
			n++
		}
	}
	switch {
	case n == 0:
	case allowed:
		logger.Warn("--allow-evictable-locks: locks are granted on masters whose maxmemory-policy can evict their records; each such grant is logged and counted",
			"masters_evicting", n)
	default:
		logger.Warn("LOCK.ACQUIRE and LOCK.RENEW are refused on masters whose maxmemory-policy can evict lock records, until it is noeviction (or start with --allow-evictable-locks)",
			"masters_evicting", n)
	}
}
