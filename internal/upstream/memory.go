package upstream

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// An owner record has a TTL, so Redis may evict it under every
// maxmemory-policy but noeviction (volatile-ttl even picks the records
// nearest their end first), and a held lease is then free with no trace.
// Each master's policy is read when the Node is made (before any lock write
// can reach it), on every topology refresh in front of a cluster, and every
// couple of seconds beside the replica list; the lock path reads the last
// reading through an atomic pointer, with no I/O.
//
// Only noeviction counts as safe, whatever maxmemory is. With maxmemory 0
// Redis evicts nothing (evict.c runs only under a limit), but the policy is
// armed: CONFIG SET maxmemory evicts at once, inside that very call, before
// any periodic check could notice, and a limit set in a hurry is exactly
// what memory pressure brings. Under noeviction the same limit makes lock
// writes fail with -OOM instead, and nothing granted is lost.
//
// The reading comes from INFO memory (maxmemory_policy, maxmemory), which
// the proxy's user may run without admin rights; CONFIG GET is the
// fallback for a server whose INFO lacks the fields. A policy that neither
// gives is unknown, and counts as one that can evict.

// NoEviction is the one maxmemory-policy under which Redis never evicts a key.
const NoEviction = "noeviction"

// MemoryPolicy is a master's eviction settings at its last reading.
type MemoryPolicy struct {
	// Policy is maxmemory-policy; "" when it could not be read.
	Policy string
	// MaxMemory is maxmemory in bytes (0: no limit); -1 if unknown.
	MaxMemory int64
	// EvictedKeys is INFO stats' evicted_keys (since Redis started); -1
	// if unknown.
	EvictedKeys int64
	// Problem says, for the operator's log, why Policy could not be read.
	Problem string
}

// CanEvict reports whether Redis may evict owner records under p: any
// policy but noeviction, and an unknown one.
func (p MemoryPolicy) CanEvict() bool { return p.Policy != NoEviction }

// unreadMemory is a Node's reading before the first one: unknown, so a
// lock write cannot slip in before the policy is known.
var unreadMemory = MemoryPolicy{MaxMemory: -1, EvictedKeys: -1, Problem: "not read yet"}

// Memory returns the master's last memory-policy reading. It does no I/O.
func (n *Node) Memory() MemoryPolicy {
	if p := n.memory.Load(); p != nil {
		return *p
	}
	return unreadMemory
}

// refreshMemory reads the master's memory policy and evicted_keys. A
// failure to reach Redis keeps the last reading (a lock write to an
// unreachable master fails anyway, and a blip must not turn a known policy
// into an unknown one); Redis refusing both ways of asking makes it unknown.
func (n *Node) refreshMemory(ctx context.Context) {
	reading, err := readMemory(ctx, n.probe) // past the gate: a refusing node's policy is still worth knowing
	if err != nil {
		return
	}
	prev := n.memory.Swap(&reading)
	if prev != nil && reading.Policy == prev.Policy && reading.MaxMemory == prev.MaxMemory {
		return
	}
	switch {
	case reading.Policy == "":
		n.logger.Warn("cannot read the Redis master's maxmemory-policy; lock records count as evictable (see --allow-evictable-locks)",
			"master", n.Addr, "problem", reading.Problem)
	case reading.CanEvict():
		n.logger.Warn("the Redis master's maxmemory-policy can evict lock records (see --allow-evictable-locks)",
			"master", n.Addr, "maxmemory_policy", reading.Policy, "maxmemory", reading.MaxMemory)
	case prev != nil && prev.CanEvict():
		n.logger.Info("the Redis master's maxmemory-policy no longer evicts",
			"master", n.Addr, "maxmemory_policy", reading.Policy, "maxmemory", reading.MaxMemory)
	}
}

// readMemory asks INFO memory and INFO stats (two requests: Redis before 7
// takes one section at a time), falling back to CONFIG GET for the policy.
// It fails only when Redis could not be asked at all.
func readMemory(ctx context.Context, client *redis.Client) (MemoryPolicy, error) {
	r := MemoryPolicy{MaxMemory: -1, EvictedKeys: -1}
	sources := []struct {
		name        string
		read        func() (map[string]string, error)
		policy, max string // the fields' names
	}{
		{"INFO memory", func() (map[string]string, error) {
			info, err := client.Info(ctx, "memory").Result()
			return parseInfo(info), err
		}, "maxmemory_policy", "maxmemory"},
		{"CONFIG GET", func() (map[string]string, error) {
			return client.ConfigGet(ctx, "maxmemory*").Result()
		}, "maxmemory-policy", "maxmemory"},
	}
	var refused []string
	for _, src := range sources {
		f, err := src.read()
		switch {
		case err == nil && f[src.policy] != "":
			r.Policy, r.MaxMemory = f[src.policy], intField(f[src.max])
		case err == nil:
			refused = append(refused, src.name+" names no "+src.policy)
		case isRedisError(err):
			refused = append(refused, src.name+": "+err.Error())
		default:
			return r, err
		}
		if r.Policy != "" {
			break
		}
	}
	if r.Policy == "" {
		r.Problem = strings.Join(refused, "; ")
	}
	stats, err := client.Info(ctx, "stats").Result()
	switch {
	case err == nil:
		r.EvictedKeys = intField(parseInfo(stats)["evicted_keys"])
	case !isRedisError(err):
		return r, err
	}
	return r, nil
}

// isRedisError tells Redis's own refusal (NOPERM, an unknown or renamed
// command) from a failure to reach it.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

func intField(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}
