package locking

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// How long a test waits for the proxy to notice a policy changed at runtime
// (it reads it every couple of seconds). A bound against hangs only.
const noticeWithin = 30 * time.Second

// evictingPolicies are Redis 7's maxmemory-policies other than noeviction:
// under each, Redis may evict an owner record (it has a TTL, so volatile-*
// picks it as readily as allkeys-*; volatile-ttl picks it first).
var evictingPolicies = []string{
	"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
	"allkeys-lru", "allkeys-lfu", "allkeys-random",
}

// pollUntil runs do every 50ms until ok holds for its reply, for at most d,
// and returns that reply.
func pollUntil(t *testing.T, d time.Duration, what string, do func() []byte, ok func([]byte) bool) []byte {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		r := do()
		if ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s within %v; last reply %q", what, d, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// refusedFor reports whether r is the error that refuses a lock because the
// master's maxmemory-policy is policy.
func refusedFor(r []byte, policy string) bool {
	s := string(r)
	return strings.HasPrefix(s, "-ERR ") && strings.Contains(s, "maxmemory-policy is "+policy+",") &&
		strings.Contains(s, "--allow-evictable-locks")
}

func isToken(r []byte) bool { _, ok := testenv.ParseInt(r); return ok && r[0] == ':' }

// metricLine returns the value of the series named exactly series in the
// proxy's /metrics ("" if absent).
func metricLine(t *testing.T, p *testenv.Proxy, series string) string {
	t.Helper()
	for _, line := range strings.Split(scrape(t, p), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestEvictingPolicyRefusesLocks: in front of a Redis whose maxmemory-policy
// is allkeys-lru, LOCK.ACQUIRE and LOCK.RENEW are refused with an error that
// names the policy and the way out, nothing is written to Redis, and INFO
// and /metrics show the policy and the refusals.
func TestEvictingPolicyRefusesLocks(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"}})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	direct := testenv.Dial(t, master.Addr)

	r := c.Do("LOCK.ACQUIRE", "ev", "a", "10000")
	if !refusedFor(r, "allkeys-lru") {
		t.Fatalf("LOCK.ACQUIRE on an allkeys-lru master = %q, want -ERR naming allkeys-lru and --allow-evictable-locks", r)
	}
	if strings.Contains(string(r), "127.0.0.1") {
		t.Fatalf("the refusal %q names the backend's address", r)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if shown := strings.TrimSuffix(string(r), "\r\n"); !strings.Contains(string(readme), "\n"+shown+"\n") {
		t.Errorf("README.md does not show the refusal as a client gets it: %q", shown)
	}
	if got := c.Do("LOCK.ACQUIRE", "ev", "a", "10000", "WAIT", "100"); !refusedFor(got, "allkeys-lru") {
		t.Fatalf("LOCK.ACQUIRE ... WAIT on an allkeys-lru master = %q, want the same refusal", got)
	}
	if got := c.Do("LOCK.RENEW", "ev", "a", "10000"); !refusedFor(got, "allkeys-lru") {
		t.Fatalf("LOCK.RENEW on an allkeys-lru master = %q, want the same refusal", got)
	}
	if got := direct.Do("EXISTS", "fenceproxy:lock:{ev}"); string(got) != ":0\r\n" {
		t.Fatalf("EXISTS of the owner record after a refusal = %q, want 0: nothing may be written", got)
	}
	if got := c.Do("PING"); string(got) != "+PONG\r\n" {
		t.Fatalf("PING after the refusals = %q: the connection must stay usable", got)
	}
	info := c.Do("INFO", "fenceproxy")
	for field, want := range map[string]string{
		"maxmemory_policy":        "allkeys-lru",
		"masters_evicting":        "1",
		"evictable_locks_allowed": "0",
		"evictable_lock_grants":   "0",
		"evictable_lock_refusals": "3",
		"master0":                 "maxmemory_policy=allkeys-lru,maxmemory=2097152,evicted_keys=0,can_evict=1",
	} {
		if got := infoField(info, field); got != want {
			t.Errorf("INFO fenceproxy %s = %q, want %q", field, got, want)
		}
	}
	for series, want := range map[string]string{
		`fenceproxy_lock_acquires_total{result="evictable"}`:                                   "2",
		`fenceproxy_lock_renewals_total{result="evictable"}`:                                   "1",
		`fenceproxy_lock_acquires_total{result="granted"}`:                                     "0",
		`fenceproxy_master_evicting_policy{master="` + master.Addr + `",policy="allkeys-lru"}`: "1",
		`fenceproxy_master_maxmemory_bytes{master="` + master.Addr + `"}`:                      "2.097152e+06",
	} {
		if got := metricLine(t, p, series); got != want {
			t.Errorf("%s = %q, want %q", series, got, want)
		}
	}
	if !strings.Contains(p.Log(), "maxmemory-policy can evict lock records") {
		t.Errorf("the proxy's log does not warn of the evicting policy")
	}
}

// TestAllowEvictableLocksUnderMemoryPressure: with --allow-evictable-locks
// the same master grants, and the grant is counted and logged. Then
// ordinary SETs through the proxy fill Redis's 2 MB until it evicts:
// evicted_keys rises in INFO and /metrics, the owner record is among the
// evicted keys, and another owner is granted the resource while the first
// lease has most of its minute left. That is the risk the refusal guards
// against; the fencing token (newer for the second owner, so FENCE.CHECK
// calls the first stale) is what is left of the guarantee.
func TestAllowEvictableLocksUnderMemoryPressure(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"}})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0, Args: []string{"--allow-evictable-locks"}})
	c := testenv.Dial(t, p.Addr)
	direct := testenv.Dial(t, master.Addr)

	first := c.Do("LOCK.ACQUIRE", "ev", "a", "60000")
	if !isToken(first) {
		t.Fatalf("LOCK.ACQUIRE with --allow-evictable-locks = %q, want a token", first)
	}
	if got := metricLine(t, p, "fenceproxy_evictable_lock_grants_total"); got != "1" {
		t.Fatalf("fenceproxy_evictable_lock_grants_total = %q after one grant, want 1", got)
	}
	if got := infoField(c.Do("INFO", "fenceproxy"), "evictable_locks_allowed"); got != "1" {
		t.Fatalf("INFO evictable_locks_allowed = %q, want 1", got)
	}
	waitFor(t, noticeWithin, "the grant logged", func() bool {
		return strings.Contains(p.Log(), "lock granted although Redis may evict its record")
	})

	// Fill: 1 KB values, pipelined 100 at a time, until the record is gone
	// (TYPE does not touch a key's LRU clock, so asking does not protect
	// it). 20 000 values are ten times what fits: the bound ends a test
	// that could never see an eviction.
	value := strings.Repeat("x", 1024)
	evicted := false
	i := 0
	for ; i < 20000 && !evicted; i += 100 {
		for j := i; j < i+100; j++ {
			c.Send("SET", "fill:"+strconv.Itoa(j), value)
		}
		c.Flush()
		for j := i; j < i+100; j++ {
			if r, err := c.ReadReply(); err != nil || string(r) != "+OK\r\n" {
				t.Fatalf("SET fill:%d = %q, %v; want +OK (allkeys-lru makes room)", j, r, err)
			}
		}
		evicted = string(direct.Do("TYPE", "fenceproxy:lock:{ev}")) == "+none\r\n"
	}
	if !evicted {
		t.Fatalf("the owner record survived 20 000 SETs of 1 KB into maxmemory 2mb")
	}
	t.Logf("the owner record was evicted within %d SETs of 1 KB", i)
	pollUntil(t, noticeWithin, "evicted_keys above 0 in INFO", func() []byte { return c.Do("INFO", "fenceproxy") }, func(r []byte) bool {
		n, _ := strconv.Atoi(infoField(r, "evicted_keys"))
		return n > 0
	})
	if got := metricLine(t, p, `fenceproxy_master_evicted_keys_total{master="`+master.Addr+`"}`); got == "" || got == "0" {
		t.Fatalf("fenceproxy_master_evicted_keys_total = %q after evictions, want above 0", got)
	}

	// The lease "a" was promised for a minute is free now.
	second := c.Do("LOCK.ACQUIRE", "ev", "b", "60000")
	t1, _ := testenv.ParseInt(first)
	t2, ok := testenv.ParseInt(second)
	if !ok || t2 <= t1 {
		t.Fatalf("LOCK.ACQUIRE by b after the record's eviction = %q, want a token above %d (a's lease is gone)", second, t1)
	}
	if got := c.Do("FENCE.CHECK", "ev", strconv.FormatInt(t1, 10)); string(got) != ":0\r\n" {
		t.Fatalf("FENCE.CHECK of a's token = %q, want 0 (stale)", got)
	}
	if got := metricLine(t, p, "fenceproxy_evictable_lock_grants_total"); got != "2" {
		t.Fatalf("fenceproxy_evictable_lock_grants_total = %q after two grants, want 2", got)
	}
}

// TestPolicyChangedAtRuntime: the proxy starts in front of a noeviction
// master and grants; each evicting policy set with CONFIG SET is refused
// once the periodic check has read it (maxmemory stays 0: the policy alone
// counts, since setting a limit later evicts at once), renewals included;
// back to noeviction, the same owner is granted again.
func TestPolicyChangedAtRuntime(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	direct := testenv.Dial(t, master.Addr)
	acquire := func() []byte { return c.Do("LOCK.ACQUIRE", "rt", "a", "60000") }

	if r := acquire(); !isToken(r) {
		t.Fatalf("LOCK.ACQUIRE on a noeviction master = %q, want a token", r)
	}
	for _, policy := range evictingPolicies {
		if r := direct.Do("CONFIG", "SET", "maxmemory-policy", policy); string(r) != "+OK\r\n" {
			t.Fatalf("CONFIG SET maxmemory-policy %s = %q", policy, r)
		}
		pollUntil(t, noticeWithin, "LOCK.ACQUIRE refused under "+policy, acquire, func(r []byte) bool { return refusedFor(r, policy) })
		if r := c.Do("LOCK.RENEW", "rt", "a", "60000"); !refusedFor(r, policy) {
			t.Fatalf("LOCK.RENEW under %s = %q, want the refusal naming it", policy, r)
		}
		if got := infoField(c.Do("INFO", "fenceproxy"), "maxmemory_policy"); got != policy {
			t.Fatalf("INFO maxmemory_policy = %q, want %q", got, policy)
		}
	}
	direct.Do("CONFIG", "SET", "maxmemory-policy", "noeviction")
	pollUntil(t, noticeWithin, "LOCK.ACQUIRE granted again under noeviction", acquire, isToken)
	if r := c.Do("LOCK.RENEW", "rt", "a", "60000"); !isToken(r) {
		t.Fatalf("LOCK.RENEW under noeviction = %q, want the token", r)
	}
	if got := infoField(c.Do("INFO", "fenceproxy"), "masters_evicting"); got != "0" {
		t.Fatalf("INFO masters_evicting = %q under noeviction, want 0", got)
	}
}

// TestEvictingPolicyOnOneClusterMaster: in front of a Redis Cluster where
// one master is switched to allkeys-lru, resources on that master are
// refused and resources on the others are still granted.
func TestEvictingPolicyOnOneClusterMaster(t *testing.T) {
	cl := testenv.StartCluster(t, testenv.ClusterOptions{ReplicasPerMaster: -1})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: cl.Seeds(), MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)

	// One resource per master.
	byMaster := map[string]string{}
	for i := 0; len(byMaster) < len(cl.Masters) && i < 1000; i++ {
		r := "cl-" + strconv.Itoa(i)
		m := cl.MasterForSlot(t, testenv.KeySlot("fenceproxy:lock:{"+r+"}"))
		if _, ok := byMaster[m.Addr]; !ok {
			byMaster[m.Addr] = r
		}
	}
	if len(byMaster) != len(cl.Masters) {
		t.Fatalf("found resources on %d of %d masters", len(byMaster), len(cl.Masters))
	}
	evicting := cl.Masters[1]
	if r := testenv.Dial(t, evicting.Addr).Do("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"); string(r) != "+OK\r\n" {
		t.Fatalf("CONFIG SET on %s = %q", evicting.Addr, r)
	}
	pollUntil(t, noticeWithin, "a resource on the allkeys-lru master refused",
		func() []byte { return c.Do("LOCK.ACQUIRE", byMaster[evicting.Addr], "o", "60000") },
		func(r []byte) bool { return refusedFor(r, "allkeys-lru") })
	for _, m := range cl.Masters {
		if m == evicting {
			continue
		}
		if r := c.Do("LOCK.ACQUIRE", byMaster[m.Addr], "o", "60000"); !isToken(r) {
			t.Fatalf("LOCK.ACQUIRE of %s on a noeviction master = %q, want a token", byMaster[m.Addr], r)
		}
	}
	info := c.Do("INFO", "fenceproxy")
	if got := infoField(info, "masters_evicting"); got != "1" {
		t.Errorf("INFO masters_evicting = %q, want 1", got)
	}
	if got := infoField(info, "maxmemory_policy"); got != "allkeys-lru" {
		t.Errorf("INFO maxmemory_policy = %q, want the worst master's allkeys-lru", got)
	}
	if got := metricLine(t, p, `fenceproxy_master_evicting_policy{master="`+evicting.Addr+`",policy="allkeys-lru"}`); got != "1" {
		t.Errorf("fenceproxy_master_evicting_policy of the allkeys-lru master = %q, want 1", got)
	}
	if got := metricLine(t, p, `fenceproxy_master_evicting_policy{master="`+cl.Masters[0].Addr+`",policy="noeviction"}`); got != "0" {
		t.Errorf("fenceproxy_master_evicting_policy of a noeviction master = %q, want 0", got)
	}
}

// TestPolicyUnreadable: a backend user that may run neither INFO memory nor
// CONFIG GET cannot learn the policy, which then counts as one that can
// evict: grants are refused with an error that says the policy could not be
// read, and INFO says "unknown". A user that may run CONFIG GET (but still
// not INFO memory) is served by the fallback and granted.
func TestPolicyUnreadable(t *testing.T) {
	// Two servers, one proxy each: two proxies with two fence stores must
	// not share one backend.
	users := []string{
		"--user", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info", "+info|replication", "+info|cluster", "+info|server", "-config",
		"--user", "configget", "on", ">pw", "~*", "&*", "+@all", "-info", "+info|replication", "+info|cluster", "+info|server", "+info|stats", "-config", "+config|get",
	}
	master := testenv.StartRedis(t, testenv.RedisOptions{Args: users})
	other := testenv.StartRedis(t, testenv.RedisOptions{Args: users})
	t.Setenv("FENCEPROXY_BACKEND_PASSWORD", "pw")

	blind := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0, Args: []string{"--backend-user", "noinfo"}})
	c := testenv.Dial(t, blind.Addr)
	r := c.Do("LOCK.ACQUIRE", "un", "a", "10000")
	if !strings.HasPrefix(string(r), "-ERR ") || !strings.Contains(string(r), "cannot read the Redis master's maxmemory-policy") ||
		!strings.Contains(string(r), "--allow-evictable-locks") {
		t.Fatalf("LOCK.ACQUIRE with an unreadable policy = %q, want -ERR saying it cannot be read", r)
	}
	if got := infoField(c.Do("INFO", "fenceproxy"), "maxmemory_policy"); got != "unknown" {
		t.Fatalf("INFO maxmemory_policy = %q with an unreadable policy, want unknown", got)
	}
	if !strings.Contains(blind.Log(), "cannot read the Redis master's maxmemory-policy") {
		t.Fatalf("the proxy's log does not say the policy cannot be read")
	}

	fallback := testenv.StartProxy(t, testenv.ProxyOptions{Backend: other.Addr, MinReplicas: 0, Args: []string{"--backend-user", "configget"}})
	c2 := testenv.Dial(t, fallback.Addr)
	if r := c2.Do("LOCK.ACQUIRE", "fb", "a", "10000"); !isToken(r) {
		t.Fatalf("LOCK.ACQUIRE with the policy read by CONFIG GET = %q, want a token", r)
	}
	if got := infoField(c2.Do("INFO", "fenceproxy"), "maxmemory_policy"); got != "noeviction" {
		t.Fatalf("INFO maxmemory_policy via CONFIG GET = %q, want noeviction", got)
	}
}
