package upstream

import (
	"context"
	"sync"

	"github.com/fenceproxy/fenceproxy/internal/upstream/fanout"
)

// INFO in front of a Redis Cluster: one node's report for the whole
// cluster. Every master is asked for the same sections and the texts merge
// into one, in the first master's order of sections and fields (Redis's
// own), so a client that reads INFO as one node's sees every key and every
// command:
//
//   - Keyspace: each database's keys and expires summed, avg_ttl the
//     average weighted by expires;
//   - Stats: counters summed (rates too: the cluster's ops per second is
//     the masters' sum); latest_fork_usec, current_eviction_exceeded_time
//     and current_active_defrag_time are the largest, expired_stale_perc
//     the average; pubsub_channels and pubsub_patterns the largest, since
//     a keyspace channel a client subscribes to through the proxy is
//     subscribed on every master (package pubsub) and the rest all on one;
//   - Commandstats and Errorstats: each command's (each error's) counts
//     summed, usec_per_call recomputed;
//   - Clients: blocked_clients, tracking_clients and
//     clients_in_timeout_table summed (a client blocked through the proxy
//     is blocked on its key's master);
//   - everything else (Server, the rest of Clients, Memory, Replication, CPU, Cluster,
//     Latencystats, ...) is the first master's: a node's own facts, which
//     do not add up.
//
// A standalone master's INFO is its own.

// Info returns the INFO text of the backend for sections (Redis's, none:
// the default ones): a standalone master's own, a Redis Cluster's masters'
// merged as above.
func Info(ctx context.Context, b Backend, sections ...string) (string, error) {
	masters := b.Masters()
	if len(masters) == 0 {
		return "", ErrUnavailable
	}
	if len(masters) == 1 || b.Mode() != "cluster" {
		return masters[0].Client.Info(ctx, sections...).Result()
	}
	texts := make([]string, len(masters))
	errs := make([]error, len(masters))
	var wg sync.WaitGroup
	for i, n := range masters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			texts[i], errs[i] = n.Client.Info(ctx, sections...).Result()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return "", err
		}
	}
	return fanout.MergeInfo(texts), nil
}
