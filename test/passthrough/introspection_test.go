package passthrough

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// fields splits a CLIENT LIST line into its names, in order, and values.
func fields(line string) (names []string, values map[string]string) {
	values = map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		names = append(names, k)
		values[k] = v
	}
	return names, values
}

// TestClientListLikeRedis: CLIENT INFO and LIST describe the proxy's
// clients with Redis's fields in Redis's order (unit/introspection "CLIENT
// LIST", "CLIENT INFO"), and flags, subscriptions, MULTI, blocking,
// tracking and the last command as Redis would show them for that client;
// INFO's connected_clients counts them (unit/introspection "CLIENT KILL
// SKIPME YES/NO"); CLIENT LIST TYPE and ID filter them.
func TestClientListLikeRedis(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	pb, _ := testenv.ParseBulk(proxy.Do("CLIENT", "INFO"))
	db, _ := testenv.ParseBulk(direct.Do("CLIENT", "INFO"))
	pn, pv := fields(string(pb))
	dn, dv := fields(string(db))
	if got, want := strings.Join(pn, " "), strings.Join(dn, " "); !strings.HasPrefix(got, want) {
		t.Errorf("CLIENT INFO fields via the proxy:\n %s\non Redis:\n %s", got, want)
	}
	for _, k := range []string{"flags", "sub", "psub", "ssub", "multi", "qbuf", "argv-mem", "obl", "oll", "omem", "events", "cmd", "user", "redir", "resp"} {
		if pv[k] != dv[k] {
			t.Errorf("CLIENT INFO %s = %q via the proxy, %q on Redis", k, pv[k], dv[k])
		}
	}

	multi := testenv.Dial(t, pr.Proxy.Addr)
	multi.Do("MULTI")
	multi.Do("SET", "k", "v")
	multi.Do("GET", "k")
	blocked := testenv.Dial(t, pr.Proxy.Addr)
	blockedID := strings.TrimSpace(string(blocked.Do("CLIENT", "ID")[1:]))
	blocked.Send("BLPOP", "nothing", "0")
	blocked.Flush()
	sub := testenv.Dial(t, pr.Proxy.Addr)
	sub.Send("SUBSCRIBE", "a", "b")
	sub.Send("PSUBSCRIBE", "p*")
	sub.Flush()
	for range 3 {
		sub.ReadReply()
	}
	track := testenv.Dial(t, pr.Proxy.Addr)
	track.Do("HELLO", "3")
	track.Do("CLIENT", "TRACKING", "ON", "BCAST")
	track.Do("CLIENT", "NO-EVICT", "on")
	idle := testenv.Dial(t, pr.Proxy.Addr)
	idle.Do("EXISTS", "whatever")

	byID := map[string]map[string]string{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := testenv.ParseBulk(proxy.Do("CLIENT", "LIST"))
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			_, v := fields(line)
			byID[v["id"]] = v
		}
		if byID[blockedID]["flags"] == "b" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := func(c *testenv.Conn, field, value string) {
		t.Helper()
		var id string
		switch c {
		case blocked:
			id = blockedID
		case sub:
			id = byIDOf(byID, "cmd", "psubscribe")
		default:
			id = strings.TrimSpace(string(c.Do("CLIENT", "ID")[1:]))
		}
		if got := byID[id][field]; got != value {
			t.Errorf("CLIENT LIST of client %s: %s=%q, want %q (%v)", id, field, got, value, byID[id])
		}
	}
	want(blocked, "flags", "b")
	want(blocked, "cmd", "blpop")
	want(sub, "flags", "P")
	want(sub, "sub", "2")
	want(sub, "psub", "1")
	want(track, "flags", "tBe")
	want(track, "resp", "3")
	want(idle, "cmd", "exists")
	if got := byID[byIDOf(byID, "cmd", "exists")]["flags"]; got != "N" {
		t.Errorf("an idle client's flags = %q", got)
	}
	multiLine := byID[byIDOf(byID, "multi", "2")]
	if multiLine["flags"] != "x" || multiLine["cmd"] != "get" {
		t.Errorf("a client in MULTI with two commands queued: %v", multiLine)
	}
	if b, _ := testenv.ParseBulk(proxy.Do("CLIENT", "LIST", "TYPE", "pubsub")); strings.Count(string(b), "\n") != 1 || !strings.Contains(string(b), "flags=P") {
		t.Errorf("CLIENT LIST TYPE pubsub = %q, want the subscribed client alone", b)
	}
	if b, _ := testenv.ParseBulk(proxy.Do("CLIENT", "LIST", "ID", blockedID)); !strings.HasPrefix(string(b), "id="+blockedID+" ") || strings.Count(string(b), "\n") != 1 {
		t.Errorf("CLIENT LIST ID %s = %q", blockedID, b)
	}
	same(t, proxy, direct, "CLIENT", "LIST", "TYPE", "bogus")
	same(t, proxy, direct, "CLIENT", "LIST", "ID", "0")
	same(t, proxy, direct, "CLIENT", "LIST", "ID", "abc")
	same(t, proxy, direct, "CLIENT", "LIST", "ID")
	same(t, proxy, direct, "CLIENT", "LIST", "WHAT")
	info, _ := testenv.ParseBulk(proxy.Do("INFO", "clients"))
	if !strings.Contains(string(info), "\r\nconnected_clients:7\r\n") {
		t.Errorf("INFO clients through the proxy with 7 clients: %q", info)
	}
	blocked.Close()
	pr.alive(t)
}

// byIDOf is the id of the first client whose field has value.
func byIDOf(byID map[string]map[string]string, field, value string) string {
	for id, v := range byID {
		if v[field] == value {
			return id
		}
	}
	return ""
}

// TestClientKillLikeRedis: CLIENT KILL acts on the proxy's clients, with
// Redis's errors and counts (unit/introspection "CLIENT KILL with illegal
// arguments", "CLIENT KILL SKIPME YES/NO will kill all clients"): a killed
// client's connection closes, one that kills itself gets its answer first.
func TestClientKillLikeRedis(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	for _, cmd := range [][]string{
		c("CLIENT", "KILL"), c("CLIENT", "KILL", "id", "10", "wrong_arg"), c("CLIENT", "KILL", "id", "str"),
		c("CLIENT", "KILL", "id", "-1"), c("CLIENT", "KILL", "id", "0"), c("CLIENT", "KILL", "type", "wrong_type"),
		c("CLIENT", "KILL", "user", "wrong_user"), c("CLIENT", "KILL", "skipme", "yes_or_no"),
		c("CLIENT", "KILL", "127.0.0.1:1"), c("CLIENT", "KILL", "id", "99999"), c("CLIENT", "KILL", "bogus", "x"),
	} {
		same(t, proxy, direct, cmd...)
	}
	victim := testenv.Dial(t, pr.Proxy.Addr)
	id := strings.TrimSpace(string(victim.Do("CLIENT", "ID")[1:]))
	if got := proxy.Do("CLIENT", "KILL", "ID", id); string(got) != ":1\r\n" {
		t.Fatalf("CLIENT KILL ID %s = %q", id, got)
	}
	victim.SetTimeout(5 * time.Second)
	if _, err := victim.TryDo("PING"); err == nil {
		t.Fatal("the killed client's connection still answers")
	}
	other := testenv.Dial(t, pr.Proxy.Addr)
	other.Do("PING")
	addr := other.NetConn().LocalAddr().String()
	if got := proxy.Do("CLIENT", "KILL", addr); string(got) != "+OK\r\n" {
		t.Fatalf("CLIENT KILL %s = %q", addr, got)
	}
	testenv.Dial(t, pr.Proxy.Addr).Do("PING")
	if got := proxy.Do("CLIENT", "KILL", "USER", "default", "SKIPME", "yes"); !bytes.HasPrefix(got, []byte(":")) || string(got) == ":0\r\n" {
		t.Fatalf("CLIENT KILL USER default SKIPME yes = %q", got)
	}
	if got := proxy.Do("CLIENT", "KILL", "SKIPME", "no"); string(got) != ":1\r\n" {
		t.Fatalf("CLIENT KILL SKIPME no, the client alone = %q (its own answer comes before it is closed)", got)
	}
	proxy.SetTimeout(5 * time.Second)
	if _, err := proxy.TryDo("PING"); err == nil {
		t.Fatal("a client that killed itself still answers")
	}
	pr.alive(t)
}

// monitorLines reads MONITOR lines up to the one holding until, each
// without its time and address ("[db addr] " kept as "[db] "), and
// without a client's SELECT 9 (the proxy answers SELECT itself: Redis
// never sees it).
func monitorLines(t *testing.T, c *testenv.Conn, until string) []string {
	t.Helper()
	var lines []string
	for {
		b, err := c.ReadReply()
		if err != nil {
			t.Fatalf("MONITOR: %v after %q", err, lines)
		}
		line := strings.TrimSpace(string(b))
		if open, end := strings.Index(line, " ["), strings.Index(line, "] "); open >= 0 && end > open {
			db, who, _ := strings.Cut(line[open+2:end], " ")
			if who != "lua" {
				who = ""
			}
			line = "[" + db + " " + who + "] " + line[end+2:]
		}
		if strings.HasSuffix(line, `] "SELECT" "9"`) {
			continue
		}
		lines = append(lines, line)
		if strings.Contains(line, until) {
			return lines
		}
	}
}

// TestMonitorLikeRedis: MONITOR through the proxy shows what the clients
// sent, scripts' commands included, as Redis shows it, and not what the
// proxy does on its own meanwhile: the authority's heartbeat, the probe's
// INFO, a new pinned connection's setup and its SELECT as it is handed to
// a client in database 9 (unit/introspection's MONITOR tests; refused
// before, which ended the unit). RESET ends MONITOR (unit/other).
func TestMonitorLikeRedis(t *testing.T) {
	pr := startPair(t)
	beats := watchHeartbeats(t, pr.A.Addr)
	mons := map[string]*testenv.Conn{}
	for _, addr := range []string{pr.Proxy.Addr, pr.B.Addr} {
		m := testenv.Dial(t, addr)
		m.SetTimeout(10 * time.Second)
		if got := m.Do("MONITOR"); string(got) != "+OK\r\n" {
			t.Fatalf("MONITOR = %q", got)
		}
		mons[addr] = m
	}
	proxy, direct := pr.conns(t)
	write := func(cmd ...string) { same(t, proxy, direct, cmd...) }
	write("SET", "foo", "bar")
	write("GET", "foo")
	beats(3)
	write("SELECT", "9") // answered by the proxy: Redis's line for it is left out below
	write("MULTI")
	write("SET", "foo", "bar")
	write("EXEC")
	write("EVAL", "return redis.call('set', KEYS[1], ARGV[1])", "1", "foo", "baz")
	write("SET", "marker", "done")
	got, want := monitorLines(t, mons[pr.Proxy.Addr], `"marker"`), monitorLines(t, mons[pr.B.Addr], `"marker"`)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("MONITOR through the proxy:\n%s\nfrom Redis:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	m := mons[pr.Proxy.Addr]
	if got := m.Do("RESET"); string(got) != "+RESET\r\n" {
		t.Fatalf("RESET in MONITOR = %q", got)
	}
	if b, _ := testenv.ParseBulk(proxy.Do("CLIENT", "LIST")); strings.Contains(string(b), "flags=O") {
		t.Errorf("CLIENT LIST after the monitor's RESET still shows it monitoring: %q", b)
	}
	pr.alive(t)
}

// TestClientListWhileClientsLeaveTheLoop: CLIENT LIST reads every client's
// socket descriptor (fd=) while clients move from the serve loop to a
// goroutine of their own (a client that sent only CLIENT ID is on the loop;
// its BLPOP moves it), which replaces the socket and its descriptor. The
// descriptor is read where the move writes it (the proxy, built with -race,
// reported a data race on the connection's net.Conn before), and every fd=
// is a number.
func TestClientListWhileClientsLeaveTheLoop(t *testing.T) {
	pr := startPair(t)
	lister := testenv.Dial(t, pr.Proxy.Addr)
	stop := make(chan struct{})
	type result struct {
		listed int
		bad    string
	}
	out := make(chan result, 1)
	go func() {
		var r result
		defer func() { out <- r }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			reply, err := lister.TryDo("CLIENT", "LIST")
			if err != nil {
				r.bad = err.Error()
				return
			}
			r.listed++
			list, _ := testenv.ParseBulk(reply)
			for _, f := range strings.Fields(string(list)) {
				if v, ok := strings.CutPrefix(f, "fd="); ok {
					if _, err := strconv.Atoi(v); err != nil {
						r.bad = "fd=" + v
						return
					}
				}
			}
		}
	}()
	for range 20 {
		c := testenv.Dial(t, pr.Proxy.Addr)
		c.Do("CLIENT", "ID")
		c.Do("BLPOP", "loop:leave", "0.01")
	}
	close(stop)
	r := <-out
	if r.bad != "" {
		t.Fatalf("CLIENT LIST while clients left the loop: %s", r.bad)
	}
	if r.listed == 0 {
		t.Fatal("no CLIENT LIST ran while clients left the loop")
	}
	pr.alive(t)
}
