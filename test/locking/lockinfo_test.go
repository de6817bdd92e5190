package locking

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestLockInfoAcquiredAtAndClientAddr: LOCK.INFO's acquired-at is when the
// token was granted and client-addr the acquiring connection's address as
// the proxy sees it (the client's own local address); a renewal moves only
// renewed-at; all of it is read from the owner record in Redis, so a
// restarted proxy and a second proxy with a data dir of its own report the
// same.
func TestLockInfoAcquiredAtAndClientAddr(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	holder := testenv.Dial(t, p.Addr)
	other := testenv.Dial(t, p.Addr)
	addr := holder.NetConn().LocalAddr().String()

	if li := lockInfo(t, other, "res"); li.AcquiredAt != -1 || li.RenewedAt != -1 || li.ClientAddr != nil {
		t.Fatalf("LOCK.INFO of a free resource = %q, want acquired-at -1, renewed-at -1, client-addr null", li.Raw)
	}
	before := time.Now().UnixMilli()
	tok := holder.Do("LOCK.ACQUIRE", "res", "alice", "60000")
	after := time.Now().UnixMilli()
	li := lockInfo(t, other, "res")
	if string(li.ClientAddr) != addr {
		t.Fatalf("LOCK.INFO = %q, want client-addr %s (the acquiring connection, not the one asking)", li.Raw, addr)
	}
	if li.AcquiredAt < before || li.AcquiredAt > after || li.RenewedAt != li.AcquiredAt {
		t.Fatalf("LOCK.INFO = %q, want acquired-at = renewed-at within [%d, %d] (the acquire's send and reply)", li.Raw, before, after)
	}
	// CLIENT LIST of the proxy names the same address.
	list, _ := testenv.ParseBulk(other.Do("CLIENT", "LIST"))
	if !strings.Contains(string(list), " addr="+addr+" ") {
		t.Fatalf("CLIENT LIST %q has no addr=%s", list, addr)
	}
	acquired := li.AcquiredAt

	// A renewal, and a same-owner re-acquire from another connection: only
	// renewed-at moves.
	for _, args := range [][]string{{"LOCK.RENEW", "res", "alice", "60000"}, {"LOCK.ACQUIRE", "res", "alice", "60000"}} {
		time.Sleep(5 * time.Millisecond) // so that a moved renewed-at shows
		before := time.Now().UnixMilli()
		if r := other.Do(args...); string(r) != string(tok) {
			t.Fatalf("%s = %q, want the token %q", testenv.ShowCommand(args), r, tok)
		}
		after := time.Now().UnixMilli()
		li = lockInfo(t, other, "res")
		if li.AcquiredAt != acquired || string(li.ClientAddr) != addr || li.RenewedAt < before || li.RenewedAt > after {
			t.Fatalf("after %s: LOCK.INFO = %q, want acquired-at %d and client-addr %s unchanged, renewed-at within [%d, %d]",
				testenv.ShowCommand(args), li.Raw, acquired, addr, before, after)
		}
	}
	renewed := li.RenewedAt

	check := func(where string, c *testenv.Conn) {
		t.Helper()
		li := lockInfo(t, c, "res")
		if string(li.Owner) != "alice" || li.AcquiredAt != acquired || li.RenewedAt != renewed || string(li.ClientAddr) != addr {
			t.Fatalf("%s: LOCK.INFO = %q, want owner alice, acquired-at %d, renewed-at %d, client-addr %s", where, li.Raw, acquired, renewed, addr)
		}
	}
	// One fenceproxy at a time: a second one with another fence store does
	// not start beside a live one.
	if _, err := p.Terminate(); err != nil {
		t.Fatal(err)
	}
	p2 := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	check("through a second proxy", testenv.Dial(t, p2.Addr))
	if _, err := p2.Terminate(); err != nil {
		t.Fatal(err)
	}
	p.Restart(t)
	check("after a restart", testenv.Dial(t, p.Addr))
}

// TestLockInfoOlderRecord: an owner record written before acquired-at and
// client-addr existed (only owner and token) still reads, renews and
// releases; the fields it lacks show as unknown.
func TestLockInfoOlderRecord(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	// A token issued by this proxy, then its record rewritten the old way.
	tok := c.Do("LOCK.ACQUIRE", "old", "alice", "60000")
	n, _ := testenv.ParseInt(tok)
	r := testenv.Dial(t, master.Addr)
	key := "fenceproxy:lock:{old}"
	r.Do("DEL", key)
	r.Do("HSET", key, "owner", "alice", "token", strconv.FormatInt(n, 10))
	r.Do("PEXPIRE", key, "60000")

	li := lockInfo(t, c, "old")
	if string(li.Owner) != "alice" || li.Token != n || li.TTL <= 0 || li.AcquiredAt != -1 || li.RenewedAt != -1 || li.ClientAddr != nil {
		t.Fatalf("LOCK.INFO of an older record = %q, want owner alice, token %d, ttl-ms > 0, acquired-at -1, renewed-at -1, client-addr null", li.Raw, n)
	}
	if got := c.Do("LOCK.RENEW", "old", "alice", "60000"); string(got) != string(tok) {
		t.Fatalf("LOCK.RENEW of an older record = %q, want %q", got, tok)
	}
	if li := lockInfo(t, c, "old"); li.RenewedAt <= 0 || li.AcquiredAt != -1 {
		t.Fatalf("LOCK.INFO after renewing an older record = %q, want renewed-at set, acquired-at still -1", li.Raw)
	}
	if got := c.Do("LOCK.RELEASE", "old", "alice"); string(got) != ":1\r\n" {
		t.Fatalf("LOCK.RELEASE of an older record = %q, want :1", got)
	}
}

// TestInfoLocksSection: INFO locks is the "# locks" section alone; INFO and
// INFO all carry it beside Redis's and "# fenceproxy"; its counters move
// with the commands.
func TestInfoLocksSection(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0, Args: []string{"--lock-delay", "5ms"}})
	c := testenv.Dial(t, p.Addr)

	only, _ := testenv.ParseBulk(c.Do("INFO", "locks"))
	if !strings.HasPrefix(string(only), "# locks\r\n") || strings.Count(string(only), "# ") != 1 {
		t.Fatalf("INFO locks = %q, want the # locks section alone", only)
	}
	for _, args := range [][]string{{"INFO"}, {"INFO", "all"}, {"INFO", "default"}} {
		all, _ := testenv.ParseBulk(c.Do(args...))
		for _, sec := range []string{"# Server\r\n", "# fenceproxy\r\n", "\r\n\r\n# locks\r\n"} {
			if !strings.Contains(string(all), sec) {
				t.Fatalf("%s has no %q section", testenv.ShowCommand(args), sec)
			}
		}
	}
	if s, _ := testenv.ParseBulk(c.Do("INFO", "server")); strings.Contains(string(s), "# locks") {
		t.Fatalf("INFO server carries # locks")
	}
	if s, _ := testenv.ParseBulk(c.Do("INFO", "fenceproxy", "locks")); !strings.Contains(string(s), "# fenceproxy\r\n") || !strings.Contains(string(s), "# locks\r\n") {
		t.Fatalf("INFO fenceproxy locks = %q, want both sections", s)
	}

	field := func(name string) int64 {
		t.Helper()
		v := infoField(c.Do("INFO", "locks"), name)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("INFO locks %s = %q, not an integer", name, v)
		}
		return n
	}
	if field("lock_delay_ms") != 5 || field("max_waiters") != 10000 || field("slowlock_log_slower_than_ms") != 100 || field("slowlog_max_len") != 128 {
		t.Fatalf("INFO locks settings do not match the flags (--lock-delay 5ms and defaults): %q", c.Do("INFO", "locks"))
	}
	first := c.Do("LOCK.ACQUIRE", "first", "a", "60000") // the token FENCE.CHECK asks about below
	c.Do("LOCK.RELEASE", "first", "a")
	tok := strconv.FormatInt(func() int64 { n, _ := testenv.ParseInt(first); return n }(), 10)
	steps := []struct {
		args  []string
		moved map[string]int64
	}{
		{[]string{"LOCK.ACQUIRE", "i", "a", "60000"}, map[string]int64{"lock_acquires": 1, "locks_held": 1}},
		{[]string{"LOCK.ACQUIRE", "i", "b", "60000"}, map[string]int64{"lock_acquires_denied": 1}},
		{[]string{"LOCK.RENEW", "i", "a", "60000"}, map[string]int64{"lock_renewals": 1}},
		{[]string{"LOCK.RENEW", "i", "b", "60000"}, map[string]int64{"lock_renewals_lost": 1}},
		{[]string{"FENCE.CHECK", "first", tok}, map[string]int64{"fence_checks": 1}},
		{[]string{"LOCK.RELEASE", "i", "a"}, map[string]int64{"lock_releases": 1, "locks_held": -1}},
		{[]string{"LOCK.RELEASE", "i", "a"}, map[string]int64{"lock_releases_not_held": 1}},
		{[]string{"LOCK.ACQUIRE", "first", "b", "60000"}, map[string]int64{"lock_acquires": 1, "locks_held": 1}},
		{[]string{"FENCE.CHECK", "first", tok}, map[string]int64{"fence_checks": 1, "stale_fence_checks": 1}},
		{[]string{"LOCK.RELEASE", "first", "b"}, map[string]int64{"lock_releases": 1, "locks_held": -1}},
		{[]string{"LOCK.ACQUIRE", "i", "b", "60000"}, map[string]int64{"lock_acquires": 1, "locks_held": 1}},
	}
	names := []string{"locks_held", "lock_acquires", "lock_acquires_denied", "lock_renewals", "lock_renewals_lost",
		"lock_releases", "lock_releases_not_held", "fence_checks", "stale_fence_checks", "lock_waiters"}
	for _, s := range steps {
		before := map[string]int64{}
		for _, n := range names {
			before[n] = field(n)
		}
		c.Do(s.args...)
		for _, n := range names {
			if d := field(n) - before[n]; d != s.moved[n] {
				t.Fatalf("after %s: INFO locks %s moved by %d, want %d", testenv.ShowCommand(s.args), n, d, s.moved[n])
			}
		}
	}
	// A waiter shows in lock_waiters while it waits.
	w := testenv.Dial(t, p.Addr)
	w.Send("LOCK.ACQUIRE", "i", "c", "60000", "WAIT", "30000")
	w.Flush()
	waitFor(t, 10*time.Second, "lock_waiters 1", func() bool { return field("lock_waiters") == 1 })
	c.Do("LOCK.RELEASE", "i", "b")
	if r, err := w.ReadReply(); err != nil || r[0] != ':' {
		t.Fatalf("the waiter got %q, %v", r, err)
	}
	if field("lock_waiters") != 0 || field("locks_held") != 1 {
		t.Fatalf("after the waiter was granted: INFO locks %q, want lock_waiters 0, locks_held 1", c.Do("INFO", "locks"))
	}
}
