package locks

import "github.com/fenceproxy/fenceproxy/internal/ratelog"

// EvictableError: the resource's Redis master runs a maxmemory-policy
// under which Redis may evict owner records (or its policy could not be
// read), and Options.AllowEvictable is off. Nothing was granted or
// extended.
type EvictableError struct {
	// Policy is the master's maxmemory-policy; "" if it could not be read.
	Policy string
}

func (e *EvictableError) Error() string {
	if e.Policy == "" {
		return "locks: the master's maxmemory-policy could not be read, so owner records may be evictable"
	}
	return "locks: the master's maxmemory-policy " + e.Policy + " can evict owner records"
}

// evictableGrantLog rate-limits the line each grant under
// --allow-evictable-locks logs.
var evictableGrantLog ratelog.EverySecond

// evictionGuard is the check each acquire attempt and each renewal makes
// before it writes: it reads the last memory-policy reading of the master
// of key, the resource's record (ScriptRunner.MemoryPolicy; no I/O). A
// policy that can evict owner records refuses the request with an
// EvictableError, unless Options.AllowEvictable; then risky is true and
// the caller reports the grant with evictableGranted.
//
// A renewal is refused too, not only a new grant: its reply promises the
// lease for another ttl, which a record Redis may drop at any moment cannot
// back, and LOCK.ACQUIRE's same-owner re-arm, which does what a renewal
// does, is refused as well. The holder learns now, and why, instead of
// working on in a lease that may already be gone; releases stay allowed.
func (m *Manager) evictionGuard(key string) (risky bool, err error) {
	p, ok := m.opts.Scripts.MemoryPolicy(key)
	if !ok {
		return false, nil // the write meets the unreachable master and says so
	}
	if !p.CanEvict() {
		return false, nil
	}
	if !m.opts.AllowEvictable {
		return false, &EvictableError{Policy: p.Policy}
	}
	return true, nil
}

// evictableGranted counts and logs a grant or renewal made under
// --allow-evictable-locks on a master whose policy can evict it (key is
// the resource's record).
func (m *Manager) evictableGranted(key, resource string, token uint64) {
	m.opts.Metrics.EvictableGrants.Inc()
	policy := "unknown"
	if p, ok := m.opts.Scripts.MemoryPolicy(key); ok && p.Policy != "" {
		policy = p.Policy
	}
	evictableGrantLog.Warn(m.opts.Logger, "lock granted although Redis may evict its record (--allow-evictable-locks)",
		"resource", resource, "token", token, "maxmemory_policy", policy)
}
