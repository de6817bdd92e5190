package security_test

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestSameRepliesAsRedis sends the same requests, as the same users, to
// fenceproxy and to a redis-server loaded with the same ACL file, and
// compares the reply bytes: NOAUTH, WRONGPASS (wrong password, unknown
// user, disabled user), NOPERM for commands, subcommands, keys (one bad key
// in MGET is enough), %R~ and %W~ patterns and channels, and what is
// allowed.
func TestSameRepliesAsRedis(t *testing.T) {
	e := startEnv(t)
	type step struct {
		user string // "" : a fresh unauthenticated connection
		args []string
	}
	pass := map[string]string{"default": defaultPass, "alice": alicePass, "bob": bobPass, "carol": carolPass, "erin": erinPass}
	steps := []step{
		{"", []string{"GET", "x"}},
		{"", []string{"SET", "x", "1"}},
		{"", []string{"PING"}},
		{"", []string{"ACL", "WHOAMI"}},
		{"", []string{"HELLO", "3"}},
		{"", []string{"AUTH", "wrong"}},
		{"", []string{"AUTH", "alice", "wrong"}},
		{"", []string{"AUTH", "nobody", alicePass}},
		{"", []string{"AUTH", "dis", disPass}},
		{"", []string{"HELLO", "2", "AUTH", "alice", "wrong"}},
		{"", []string{"AUTH", "a", "b", "c"}},
		// Redis checks the command before the user: unknown commands and
		// subcommands and arity errors come before NOAUTH.
		{"", []string{"NOSUCHCOMMAND", "a", "b"}},
		{"", []string{"GET"}},
		{"", []string{"CLIENT"}},
		{"", []string{"CLIENT", "BOGUS"}},
		{"", []string{"CLIENT", "KILL"}},
		{"", []string{"CONFIG", "GET"}},
		{"default", []string{"ACL", "WHOAMI"}},
		{"alice", []string{"ACL", "WHOAMI"}},
		{"alice", []string{"GET", "x"}},
		{"alice", []string{"SET", "x", "1"}},
		{"alice", []string{"GET", "tenant-a:1"}},
		{"alice", []string{"SET", "tenant-a:1", "v"}},
		{"alice", []string{"MGET", "tenant-a:1", "x"}},
		{"alice", []string{"MGET", "tenant-a:1", "tenant-a:2"}},
		{"alice", []string{"MSET", "tenant-a:1", "v", "tenant-b:1", "v"}},
		{"alice", []string{"FLUSHALL"}},
		{"alice", []string{"GET", "shared:1"}},
		{"alice", []string{"SET", "shared:1", "v"}},
		{"alice", []string{"SET", "inbox:1", "v"}},
		{"alice", []string{"GET", "inbox:1"}},
		{"alice", []string{"EXISTS", "inbox:1"}},
		{"alice", []string{"OBJECT", "ENCODING", "x"}},
		{"alice", []string{"LMOVE", "tenant-a:l", "tenant-b:l", "LEFT", "RIGHT"}},
		{"alice", []string{"EVAL", "return 1", "1", "x"}},
		{"alice", []string{"EVAL", "return 1", "1", "tenant-a:x"}},
		{"alice", []string{"PUBLISH", "ch", "m"}},
		// Key flags Redis computes from the arguments, not the specs.
		{"alice", []string{"SET", "inbox:2", "v", "GET"}},
		{"alice", []string{"SET", "inbox:2", "v", "EX", "100"}},
		{"alice", []string{"BITFIELD", "inbox:3", "SET", "u8", "0", "1"}},
		{"alice", []string{"BITFIELD", "shared:3", "GET", "u8", "0"}},
		{"alice", []string{"BITFIELD", "shared:3", "INCRBY", "u8", "0", "1"}},
		{"alice", []string{"SORT", "shared:l", "STORE", "inbox:l"}},
		{"alice", []string{"SORT", "shared:l", "STORE", "shared:m"}},
		{"alice", []string{"SORT", "tenant-a:l", "STORE", "x"}},
		{"alice", []string{"SORT", "tenant-a:l", "BY", "w_*"}},
		{"alice", []string{"SORT", "tenant-a:l", "BY", "nosort"}},
		{"alice", []string{"SORT", "tenant-a:l", "GET", "#"}},
		{"alice", []string{"SORT_RO", "tenant-a:l", "GET", "o_*"}},
		{"bob", []string{"SET", "tenant-b:1", "v"}},
		{"carol", []string{"GET", "anything"}},
		{"carol", []string{"SET", "x", "1"}},
		{"carol", []string{"CONFIG", "GET", "maxmemory"}},
		{"carol", []string{"ACL", "WHOAMI"}},
		{"erin", []string{"PUBLISH", "ch", "m"}},
		{"erin", []string{"PUBLISH", "news.1", "m"}},
		{"erin", []string{"SPUBLISH", "ch", "m"}},
		{"erin", []string{"PSUBSCRIBE", "news.1*"}},
	}
	for _, s := range steps {
		p, r := e.as(t, s.user, pass[s.user]), e.twinAs(t, s.user, pass[s.user])
		got, want := p.Do(s.args...), r.Do(s.args...)
		if s.args[0] == "HELLO" && len(got) > 0 && got[0] != '-' {
			// The id field differs; the reply kind is what matters.
			got, want = got[:1], want[:1]
		}
		if !bytes.Equal(got, want) {
			t.Errorf("as %q, %s: fenceproxy %q, redis-server %q", s.user, testenv.ShowCommand(s.args), got, want)
		}
		p.Close()
		r.Close()
	}
	// The texts themselves, in case both changed.
	c := e.as(t, "", "")
	expect(t, c, replyNoAuth, "GET", "x")
	expect(t, c, replyWrongPass, "AUTH", "alice", "wrong")
	expect(t, c, replyWrongPass, "AUTH", "dis", disPass)
	c = e.as(t, "alice", alicePass)
	expect(t, c, replyNoPermKey, "MGET", "tenant-a:1", "x")
	expect(t, c, noPerm("flushall"), "FLUSHALL")
	c = e.as(t, "carol", carolPass)
	expect(t, c, noPerm("config|get"), "CONFIG", "GET", "maxmemory")
	c = e.as(t, "erin", erinPass)
	expect(t, c, replyNoPermCh, "PUBLISH", "ch", "m")
}

// TestAuthFlow: AUTH password (default), AUTH user password, HELLO with
// AUTH, and RESET back to an unauthenticated connection (default needs a
// password); a failed AUTH keeps the user the connection had.
func TestAuthFlow(t *testing.T) {
	e := startEnv(t)
	c := e.as(t, "", "")
	expect(t, c, replyNoAuth, "LOCK.ACQUIRE", "tenant-a:r", "o", "1000")
	expect(t, c, "+OK\r\n", "AUTH", defaultPass)
	expect(t, c, "$7\r\ndefault\r\n", "ACL", "WHOAMI")
	expect(t, c, "+OK\r\n", "AUTH", "alice", alicePass)
	expect(t, c, "$5\r\nalice\r\n", "ACL", "WHOAMI")
	expect(t, c, replyWrongPass, "AUTH", "bob", "wrong")
	expect(t, c, "$5\r\nalice\r\n", "ACL", "WHOAMI")
	expect(t, c, "+RESET\r\n", "RESET")
	expect(t, c, replyNoAuth, "GET", "tenant-a:1")
	expect(t, c, replyNoAuth, "ACL", "WHOAMI")

	h := e.as(t, "", "")
	reply := string(h.Do("HELLO", "3", "AUTH", "bob", bobPass))
	if !strings.HasPrefix(reply, "%7\r\n") || !strings.Contains(reply, "proto\r\n:3\r\n") {
		t.Fatalf("HELLO 3 AUTH bob: %q, want a RESP3 map with proto 3", reply)
	}
	expect(t, h, "$3\r\nbob\r\n", "ACL", "WHOAMI")
	expect(t, h, "_\r\n", "GET", "tenant-b:nothing") // RESP3 null: the protocol switched
	expect(t, h, replyWrongPass, "HELLO", "2", "AUTH", "bob", "wrong")

	// AUTH never reaches Redis, not from inside a transaction (where it
	// would be queued) nor from a pub/sub connection (a tunnel to Redis).
	expect(t, h, "+OK\r\n", "MULTI")
	if got := string(h.Do("AUTH", "alice", alicePass)); !strings.HasPrefix(got, "-ERR fenceproxy: AUTH and HELLO cannot be part of a transaction") {
		t.Fatalf("AUTH in MULTI: %q", got)
	}
	if got := string(h.Do("EXEC")); !strings.HasPrefix(got, "-EXECABORT") {
		t.Fatalf("EXEC after AUTH in MULTI: %q", got)
	}
	expect(t, h, "$3\r\nbob\r\n", "ACL", "WHOAMI")
	sub := e.as(t, "bob", bobPass)
	expect(t, sub, replyNoPermCh, "SUBSCRIBE", "news.1") // bob has no channels (resetchannels, Redis 7.0's default)
	sub = e.as(t, "erin", erinPass)
	expect(t, sub, "*3\r\n$9\r\nsubscribe\r\n$6\r\nnews.1\r\n:1\r\n", "SUBSCRIBE", "news.1")
	// Subscribed, Redis writes every reply; a refusal comes from it, in
	// order, as an unknown command that carries the NOPERM text.
	expect(t, sub, "-ERR unknown command 'fenceproxy.refused', with args beginning with: '"+
		strings.TrimSuffix(replyNoPermCh[1:], "\r\n")+"' \r\n", "SUBSCRIBE", "other")
	if got := string(sub.Do("ACL", "WHOAMI")); !strings.Contains(got, "fenceproxy: ACL is not available on a connection in pub/sub mode") {
		t.Fatalf("ACL WHOAMI while subscribed: %q", got)
	}
	if got := string(sub.Do("AUTH", "alice", alicePass)); !strings.Contains(got, "fenceproxy: AUTH and HELLO cannot be used on a connection in pub/sub mode") {
		t.Fatalf("AUTH while subscribed: %q", got)
	}

	// Other ACL subcommands are refused with a pointer to the file.
	a := e.as(t, "alice", alicePass)
	got := string(a.Do("ACL", "SETUSER", "mallory", "on", ">x", "~*", "+@all"))
	if !strings.HasPrefix(got, "-ERR fenceproxy: ACL SETUSER is not available") || !strings.Contains(got, "--aclfile") {
		t.Fatalf("ACL SETUSER: %q", got)
	}
	expect(t, e.as(t, "", ""), replyWrongPass, "AUTH", "mallory", "x")
}

// TestResetToDefaultNopass: without --requirepass the default user needs
// no password, so a new connection and one after RESET are "default".
func TestResetToDefaultNopass(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	t.Setenv("FENCEPROXY_REQUIREPASS", "")
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, Args: []string{"--aclfile", writeACL(t, users...)}})
	c := testenv.Dial(t, proxy.Addr)
	expect(t, c, "$7\r\ndefault\r\n", "ACL", "WHOAMI")
	expect(t, c, "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n", "AUTH", "x")
	expect(t, c, "+OK\r\n", "AUTH", "carol", carolPass)
	expect(t, c, noPerm("set"), "SET", "k", "v")
	expect(t, c, "+RESET\r\n", "RESET")
	expect(t, c, "$7\r\ndefault\r\n", "ACL", "WHOAMI")
	expect(t, c, "+OK\r\n", "SET", "k", "v")
}

// TestTransactionWithRefusedCommand: as on Redis, a command refused inside
// MULTI makes EXEC abort, and nothing of the transaction is applied.
func TestTransactionWithRefusedCommand(t *testing.T) {
	e := startEnv(t)
	c := e.as(t, "alice", alicePass)
	expect(t, c, "+OK\r\n", "MULTI")
	expect(t, c, "+QUEUED\r\n", "SET", "tenant-a:tx", "v")
	expect(t, c, replyNoPermKey, "SET", "x", "v")
	expect(t, c, "-EXECABORT Transaction discarded because of previous errors.\r\n", "EXEC")
	expect(t, c, replyNull, "GET", "tenant-a:tx")
	// The connection is usable, and the next transaction runs.
	expect(t, c, "+OK\r\n", "MULTI")
	expect(t, c, "+QUEUED\r\n", "SET", "tenant-a:tx", "w")
	expect(t, c, "*1\r\n+OK\r\n", "EXEC")
	m := testenv.Dial(t, e.master.Addr)
	expect(t, m, "$1\r\nw\r\n", "GET", "tenant-a:tx")
	expect(t, m, replyNull, "GET", "x")
}

// TestClientAuthNeverForwarded: with a backend that has its own password,
// the proxy connects with --backend-user and $FENCEPROXY_BACKEND_PASSWORD;
// a client's AUTH with the backend's password is refused (the proxy's users
// decide), and Redis never sees a client's AUTH (its ACL LOG of failed
// authentications stays empty).
func TestClientAuthNeverForwarded(t *testing.T) {
	const backendPass = "backend-Pa55-4242"
	master := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--requirepass", backendPass}})
	t.Setenv("FENCEPROXY_BACKEND_PASSWORD", backendPass)
	t.Setenv("FENCEPROXY_REQUIREPASS", defaultPass)
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{
		Backend: master.Addr,
		Args:    []string{"--backend-user", "default", "--aclfile", writeACL(t, users...)},
	})
	c := testenv.Dial(t, proxy.Addr)
	expect(t, c, replyWrongPass, "AUTH", backendPass)
	expect(t, c, replyWrongPass, "AUTH", "default", backendPass)
	expect(t, c, replyWrongPass, "AUTH", "alice", "wrong")
	expect(t, c, replyWrongPass, "HELLO", "3", "AUTH", "alice", "wrong")
	expect(t, c, "+OK\r\n", "AUTH", "alice", alicePass)
	expect(t, c, "+OK\r\n", "SET", "tenant-a:k", "v")

	m := testenv.Dial(t, master.Addr)
	expect(t, m, "+OK\r\n", "AUTH", backendPass)
	if log := m.Do("ACL", "LOG"); string(log) != "*0\r\n" {
		t.Fatalf("Redis's ACL LOG has entries: a client's AUTH reached it: %q", log)
	}
	expect(t, m, "$1\r\nv\r\n", "GET", "tenant-a:k")
}

// TestAuthOffUnchanged: without --aclfile and --requirepass nothing
// changes: no AUTH needed, AUTH asks the backend as before, lock owners are
// stored as given.
func TestAuthOffUnchanged(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	t.Setenv("FENCEPROXY_REQUIREPASS", "")
	proxy := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr})
	c := testenv.Dial(t, proxy.Addr)
	expect(t, c, "+OK\r\n", "SET", "x", "1")
	r := testenv.Dial(t, master.Addr)
	expect(t, c, string(r.Do("AUTH", "x")), "AUTH", "x") // the backend's own answer
	expect(t, c, string(r.Do("ACL", "WHOAMI")), "ACL", "WHOAMI")
	if tok, ok := testenv.ParseInt(c.Do("LOCK.ACQUIRE", "res", "owner-1", "10000")); !ok || tok <= 0 {
		t.Fatal("LOCK.ACQUIRE failed")
	}
	if rec, _ := testenv.ReadLockRecord(t, r, "fenceproxy:lock:{res}"); rec.Owner != "owner-1" {
		t.Fatalf("the owner record's owner = %q, want owner-1", rec.Owner)
	}
}

// TestBadACLFile: a rule fenceproxy does not know stops the start with one
// line on stderr naming the file, the line and the rule.
func TestBadACLFile(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	for _, c := range []struct{ acl, want string }{
		{"user alice on >pw ~* +@all sanitize-payload", `:3: user "alice", rule 5: unknown rule "sanitize-payload"`},
		{"user alice on >pw ~* +@nosuch", `:3: user "alice", rule 4: "+@nosuch": unknown command category`},
		{"user alice on >pw ~* +nosuchcommand", `:3: user "alice", rule 4: unknown command "nosuchcommand"`},
		{"alice on", `:3: a line must start with "user <name>"`},
	} {
		path := writeACL(t, c.acl)
		code, out := testenv.StartFails(t, "--listen", "127.0.0.1:"+strconv.Itoa(testenv.FreePort(t)), "--backend", master.Addr,
			"--data-dir", t.TempDir(), "--metrics-listen", "", "--min-replicas", "0", "--aclfile", path)
		out = strings.TrimSpace(out)
		if code == 0 || strings.Count(out, "\n") != 0 || !strings.Contains(out, path+c.want) ||
			!strings.HasPrefix(out, "fenceproxy: cannot start: --aclfile") {
			t.Errorf("aclfile %q: exit %d, stderr %q, want one line containing %q", c.acl, code, out, path+c.want)
		}
		if strings.Contains(out, ">pw") {
			t.Errorf("stderr shows a password: %q", out)
		}
	}
}

// TestSecretsStayOut: after successful and failed AUTH and HELLO AUTH, no
// password appears in the proxy's log (at debug level), in INFO, in CLIENT
// LIST, in /metrics, or on its command line (--requirepass came from the
// environment).
func TestSecretsStayOut(t *testing.T) {
	e := startEnv(t)
	c := e.as(t, "", "")
	c.Do("AUTH", "alice", bobPass)
	c.Do("AUTH", "nobody", carolPass)
	c.Do("HELLO", "2", "AUTH", "bob", erinPass)
	c.Do("AUTH", "dis", disPass)
	c.Do("AUTH", alicePass) // the wrong password for default
	expect(t, c, "+OK\r\n", "AUTH", "alice", alicePass)
	expect(t, c, "+OK\r\n", "AUTH", defaultPass)
	info := string(c.Do("INFO"))
	list := string(c.Do("CLIENT", "LIST"))
	_, metrics := testenv.HTTPGet(t, "http://"+e.proxy.MetricsAddr+"/metrics")
	if !strings.Contains(metrics, "fenceproxy_auth_failures_total 5") {
		t.Errorf("/metrics should count the 5 failed authentications:\n%s", grepLines(metrics, "fenceproxy_auth"))
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(e.proxy.Pid()) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"log": e.proxy.Log(), "INFO": info, "CLIENT LIST": list, "/metrics": metrics, "command line": string(cmdline)} {
		for _, pw := range []string{defaultPass, alicePass, bobPass, carolPass, erinPass, disPass} {
			if strings.Contains(text, pw) {
				t.Errorf("the proxy's %s contains a password", what)
			}
		}
	}
}

func grepLines(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
