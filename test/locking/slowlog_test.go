package locking

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// slowEntry is one LOCK.SLOWLOG GET entry.
type slowEntry struct {
	id, at, ms int64
	kind, res  string
	token      int64
	addr       string // "" for null
}

func slowlog(t *testing.T, c *testenv.Conn, args ...string) []slowEntry {
	t.Helper()
	raw := c.Do(append([]string{"LOCK.SLOWLOG", "GET"}, args...)...)
	elems, ok := testenv.SplitArray(raw)
	if !ok {
		t.Fatalf("LOCK.SLOWLOG GET = %q, want an array", raw)
	}
	var out []slowEntry
	for _, e := range elems {
		f, ok := testenv.SplitArray(e)
		if !ok || len(f) != 7 {
			t.Fatalf("LOCK.SLOWLOG GET entry %q, want 7 fields", e)
		}
		var s slowEntry
		var ok1, ok2, ok3, ok4 bool
		s.id, ok1 = testenv.ParseInt(f[0])
		s.at, ok2 = testenv.ParseInt(f[1])
		s.ms, ok3 = testenv.ParseInt(f[2])
		s.token, ok4 = testenv.ParseInt(f[5])
		kind, ok5 := testenv.ParseBulk(f[3])
		res, ok6 := testenv.ParseBulk(f[4])
		addr, ok7 := testenv.ParseBulk(f[6])
		if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && (ok7 || testenv.IsNull(f[6]))) {
			t.Fatalf("LOCK.SLOWLOG GET entry %q: wrong field types", e)
		}
		s.kind, s.res, s.addr = string(kind), string(res), string(addr)
		out = append(out, s)
	}
	return out
}

func slowlogLen(t *testing.T, c *testenv.Conn) int64 {
	t.Helper()
	n, ok := testenv.ParseInt(c.Do("LOCK.SLOWLOG", "LEN"))
	if !ok {
		t.Fatalf("LOCK.SLOWLOG LEN is not an integer")
	}
	return n
}

// TestSlowlogWaitExpiryHeld: a lease that runs out unreleased is logged as
// expired, found by the proxy itself with no later acquire; a waiter that
// waited is logged as a wait (with its own address and the token it got);
// a release after the held threshold as held. Newest first, ids rising,
// the owner never shown; RESET empties it; each entry is logged.
func TestSlowlogWaitExpiryHeld(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0,
		Args: []string{"--slowlock-log-slower-than", "0", "--slowlock-held-longer-than", "0"}})
	holder := testenv.Dial(t, p.Addr)
	waiter := testenv.Dial(t, p.Addr)
	waiter.SetTimeout(30 * time.Second)
	admin := testenv.Dial(t, p.Addr)

	// 1. Expiry with nobody after it: the proxy notices by itself.
	before := time.Now().UnixMilli()
	t1, _ := testenv.ParseInt(holder.Do("LOCK.ACQUIRE", "lapse", "secret-owner-1", "200"))
	waitFor(t, 10*time.Second, "an expired entry", func() bool { return slowlogLen(t, admin) == 1 })
	e := slowlog(t, admin)[0]
	if e.kind != "expired" || e.res != "lapse" || e.token != t1 || e.addr != holder.NetConn().LocalAddr().String() || e.ms < 200 || e.at < before+200 {
		t.Fatalf("entry %+v, want expired lapse token %d addr %s, duration >= 200ms (the lease), at its end", e, t1, holder.NetConn().LocalAddr())
	}

	// 2. A waiter behind a lease that runs out: expired, then wait.
	t2, _ := testenv.ParseInt(holder.Do("LOCK.ACQUIRE", "hot", "secret-owner-1", "300"))
	got := waiter.Do("LOCK.ACQUIRE", "hot", "secret-owner-2", "60000", "WAIT", "20000")
	t3, ok := testenv.ParseInt(got)
	if !ok || t3 <= t2 {
		t.Fatalf("waiter got %q", got)
	}
	// 3. A release: held.
	waiter.Do("LOCK.RELEASE", "hot", "secret-owner-2")

	entries := slowlog(t, admin, "-1")
	if len(entries) != 4 {
		t.Fatalf("LOCK.SLOWLOG GET -1 = %+v, want 4 entries", entries)
	}
	waddr := waiter.NetConn().LocalAddr().String()
	want := []struct {
		kind  string
		token int64
		addr  string
	}{{"held", t3, waddr}, {"wait", t3, waddr}, {"expired", t2, holder.NetConn().LocalAddr().String()}, {"expired", t1, holder.NetConn().LocalAddr().String()}}
	for i, w := range want {
		e := entries[i]
		if e.kind != w.kind || e.token != w.token || e.addr != w.addr {
			t.Fatalf("entry %d (newest first) = %+v, want %s token %d addr %s; all: %+v", i, e, w.kind, w.token, w.addr, entries)
		}
		if i > 0 && e.id >= entries[i-1].id {
			t.Fatalf("ids not falling newest first: %+v", entries)
		}
	}
	if entries[1].ms <= 0 {
		t.Fatalf("wait entry %+v: want the time waited", entries[1])
	}
	raw := string(admin.Do("LOCK.SLOWLOG", "GET", "-1"))
	if strings.Contains(raw, "secret-owner") || strings.Contains(p.Log(), "secret-owner") {
		t.Fatalf("an owner string shows in the slow-lock log or the proxy's log")
	}
	if n := len(slowlog(t, admin, "2")); n != 2 {
		t.Fatalf("LOCK.SLOWLOG GET 2 gave %d entries", n)
	}
	if n := len(slowlog(t, admin)); n != 4 {
		t.Fatalf("LOCK.SLOWLOG GET (default 10) gave %d entries, want all 4", n)
	}
	for _, kind := range []string{"kind=expired resource=lapse", "kind=wait resource=hot", "kind=held resource=hot"} {
		if !strings.Contains(p.Log(), `msg="slow lock"`) || !strings.Contains(p.Log(), kind) {
			t.Fatalf("the proxy's log has no slow lock line with %s", kind)
		}
	}
	if !strings.Contains(scrape(t, p), `fenceproxy_slowlock_entries_total{kind="expired"} 2`) {
		t.Fatalf("/metrics does not count 2 expired slow-lock entries")
	}
	if v := infoField(admin.Do("INFO", "locks"), "slowlog_len"); v != "4" {
		t.Fatalf("INFO locks slowlog_len = %q, want 4", v)
	}

	if r := admin.Do("LOCK.SLOWLOG", "RESET"); string(r) != "+OK\r\n" {
		t.Fatalf("LOCK.SLOWLOG RESET = %q", r)
	}
	if n := slowlogLen(t, admin); n != 0 {
		t.Fatalf("LOCK.SLOWLOG LEN after RESET = %d", n)
	}
	if r := admin.Do("LOCK.SLOWLOG", "GET"); string(r) != "*0\r\n" {
		t.Fatalf("LOCK.SLOWLOG GET after RESET = %q", r)
	}
	// Ids keep rising after a reset, as Redis's do.
	holder.Do("LOCK.ACQUIRE", "again", "o", "60000")
	holder.Do("LOCK.RELEASE", "again", "o")
	if e := slowlog(t, admin); len(e) != 1 || e[0].kind != "held" || e[0].id <= entries[0].id {
		t.Fatalf("after RESET and a release: %+v, want one held entry with an id above %d", e, entries[0].id)
	}
}

// TestSlowlogThresholds: with the defaults (100ms wait, 30s held), a quick
// release and a wait that never happened log nothing; -1 turns waits off;
// --slowlock-log-max-len keeps only the newest.
func TestSlowlogThresholds(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0,
		Args: []string{"--slowlock-log-slower-than", "-1", "--slowlock-log-max-len", "2"}})
	c := testenv.Dial(t, p.Addr)
	w := testenv.Dial(t, p.Addr)
	w.SetTimeout(30 * time.Second)
	c.Do("LOCK.ACQUIRE", "q", "a", "60000")
	c.Do("LOCK.RELEASE", "q", "a") // held far below 30s
	c.Do("LOCK.ACQUIRE", "q", "a", "60000", "WAIT", "1000")
	w.Send("LOCK.ACQUIRE", "q", "b", "60000", "WAIT", "20000")
	w.Flush()
	waitFor(t, 10*time.Second, "the waiter in line", func() bool { return lockInfo(t, c, "q").Waiters == 1 })
	c.Do("LOCK.RELEASE", "q", "a")
	if r, err := w.ReadReply(); err != nil || r[0] != ':' {
		t.Fatalf("waiter: %q, %v", r, err)
	}
	if n := slowlogLen(t, c); n != 0 {
		t.Fatalf("LOCK.SLOWLOG = %+v, want nothing (waits off, releases quick)", slowlog(t, c))
	}
	// Three expiries, two kept: the newest.
	for i := 0; i < 3; i++ {
		c.Do("LOCK.ACQUIRE", "x"+strconv.Itoa(i), "a", "50")
		waitFor(t, 10*time.Second, "expiry "+strconv.Itoa(i)+" logged", func() bool {
			e := slowlog(t, c)
			return len(e) > 0 && e[0].res == "x"+strconv.Itoa(i)
		})
	}
	if e := slowlog(t, c, "-1"); len(e) != 2 || e[0].res != "x2" || e[1].res != "x1" {
		t.Fatalf("with --slowlock-log-max-len 2: %+v, want x2 then x1", e)
	}
}

// TestSlowlogRenewedElsewhere: a lease granted through one proxy and
// renewed where it cannot see (straight on Redis here: a second fenceproxy
// with another fence store refuses lock commands while this one is live)
// is not called expired at its first end; the granting proxy logs one
// expiry, at the renewed lease's end.
func TestSlowlogRenewedElsewhere(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p1 := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c1, direct := testenv.Dial(t, p1.Addr), testenv.Dial(t, master.Addr)
	if tok, ok := testenv.ParseInt(c1.Do("LOCK.ACQUIRE", "moved", "a", "300")); !ok || tok <= 0 {
		t.Fatal("LOCK.ACQUIRE moved: no token")
	}
	if r := direct.Do("PEXPIRE", "fenceproxy:lock:{moved}", "1500"); string(r) != ":1\r\n" {
		t.Fatalf("renewing the record on Redis = %q", r)
	}
	waitFor(t, 10*time.Second, "the expiry logged", func() bool { return slowlogLen(t, c1) > 0 })
	e := slowlog(t, c1, "-1")
	if len(e) != 1 || e[0].kind != "expired" || e[0].ms < 1400 {
		t.Fatalf("first proxy's slow-lock log = %+v, want one expired entry lasting at least the renewed 1500ms (not the first 300ms)", e)
	}
}

// TestSlowlogBadArgs: arity and syntax errors of LOCK.SLOWLOG, and bad
// values of the new flags, get errors that say what is wrong.
func TestSlowlogBadArgs(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	p := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 0})
	c := testenv.Dial(t, p.Addr)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"LOCK.SLOWLOG"}, "-ERR wrong number of arguments for 'lock.slowlog' command\r\n"},
		{[]string{"LOCK.SLOWLOG", "GET", "x"}, "-ERR value is not an integer or out of range\r\n"},
		{[]string{"LOCK.SLOWLOG", "GET", "-2"}, "-ERR count should be greater than or equal to -1\r\n"},
		{[]string{"LOCK.SLOWLOG", "GET", "1", "2"}, "-ERR wrong number of arguments for 'lock.slowlog|get' command\r\n"},
		{[]string{"LOCK.SLOWLOG", "LEN", "1"}, "-ERR wrong number of arguments for 'lock.slowlog|len' command\r\n"},
		{[]string{"LOCK.SLOWLOG", "RESET", "1"}, "-ERR wrong number of arguments for 'lock.slowlog|reset' command\r\n"},
		{[]string{"LOCK.SLOWLOG", "bogus"}, "-ERR unknown subcommand 'bogus'. Try LOCK.SLOWLOG HELP.\r\n"},
		{[]string{"lock.slowlog", "len"}, ":0\r\n"},
	} {
		if got := c.Do(tc.args...); string(got) != tc.want {
			t.Errorf("%s = %q, want %q", testenv.ShowCommand(tc.args), got, tc.want)
		}
	}
	if help, ok := testenv.SplitArray(c.Do("LOCK.SLOWLOG", "HELP")); !ok || len(help) < 5 {
		t.Errorf("LOCK.SLOWLOG HELP: want an array of lines")
	}

	bin := testenv.BuildProxy(t)
	for _, args := range [][]string{{"--max-waiters", "-1"}, {"--slowlock-log-slower-than", "-2"}, {"--slowlock-held-longer-than", "-5"}, {"--slowlock-log-max-len", "-1"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), args[0]) {
			t.Errorf("fenceproxy %s: exit %v, output %q; want exit 2 naming %s", strings.Join(args, " "), err, out, args[0])
		}
	}
}
