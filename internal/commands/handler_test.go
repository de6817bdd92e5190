package commands

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestLocalCommands: what the proxy answers itself, byte for byte, for a
// client of a standalone master.
func TestLocalCommands(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{}, false)
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"PING"}, "+PONG\r\n"},
		{[]string{"ping", "hello"}, "$5\r\nhello\r\n"},
		{[]string{"PING", "a", "b"}, "-ERR wrong number of arguments for 'ping' command\r\n"},
		{[]string{"ECHO", "x y"}, "$3\r\nx y\r\n"},
		{[]string{"ECHO"}, "-ERR wrong number of arguments for 'echo' command\r\n"},
		{[]string{"SELECT", "0"}, "+OK\r\n"},
		{[]string{"SELECT", "16"}, "-ERR DB index is out of range\r\n"},
		{[]string{"SELECT", "x"}, "-ERR value is not an integer or out of range\r\n"},
		{[]string{"CLIENT", "GETNAME"}, "$-1\r\n"},
		{[]string{"CLIENT", "SETNAME", "worker-1"}, "+OK\r\n"},
		{[]string{"CLIENT", "GETNAME"}, "$8\r\nworker-1\r\n"},
		{[]string{"CLIENT", "SETNAME", "two words"}, "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"},
		{[]string{"CLIENT", "SETINFO", "lib-name", "testlib"}, "+OK\r\n"},
		{[]string{"CLIENT", "SETINFO", "lib-ver", "1.2"}, "+OK\r\n"},
		{[]string{"CLIENT", "SETINFO", "colour", "red"}, "-ERR Unrecognized option 'colour'\r\n"},
		{[]string{"CLIENT", "NO-EVICT", "on"}, "+OK\r\n"},
		{[]string{"CLIENT", "NO-TOUCH", "maybe"}, "-ERR syntax error\r\n"},
		{[]string{"CLIENT", "ID", "extra"}, "-ERR wrong number of arguments for 'client|id' command\r\n"},
		{[]string{"CLIENT", "KILL", "ID", "99999"}, ":0\r\n"},
		{[]string{"CLIENT", "PAUSE", "10"}, "-ERR fenceproxy: CLIENT PAUSE is not supported by fenceproxy\r\n"},
		{[]string{"CLIENT"}, "-ERR wrong number of arguments for 'client' command\r\n"},
		{[]string{"SHUTDOWN"}, "-ERR fenceproxy: SHUTDOWN is not forwarded: fenceproxy's locks depend on that Redis; stop it directly\r\n"},
		{[]string{"HELLO", "x"}, "-ERR Protocol version is not an integer or out of range\r\n"},
		{[]string{"HELLO", "4"}, "-NOPROTO unsupported protocol version\r\n"},
		{[]string{"HELLO", "2", "BOGUS"}, "-ERR Syntax error in HELLO option 'BOGUS'\r\n"},
		{[]string{"HELLO", "2", "SETNAME", "a b"}, "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"},
	})
	id := wantInt(t, c, "CLIENT", "ID")
	info := string(c.Do("CLIENT", "INFO"))
	for _, field := range []string{"id=" + strconv.FormatInt(id, 10) + " ", " name=worker-1 ", " resp=2 ", " lib-name=testlib ", " lib-ver=1.2", " multi=-1 "} {
		if !strings.Contains(info, field) {
			t.Errorf("CLIENT INFO %q lacks %q", info, field)
		}
	}
	other := p.dial(t)
	other.Do("CLIENT", "SETNAME", "other")
	list := bulk(t, c.Do("CLIENT", "LIST"))
	if !strings.Contains(list, " name=worker-1 ") || !strings.Contains(list, " name=other ") || strings.Count(list, "\n") != 2 {
		t.Errorf("CLIENT LIST: %q, want both clients", list)
	}

	// HELLO 2 answers in RESP2 with the client's id; HELLO 3 switches.
	hello := c.Do("HELLO", "2", "SETNAME", "renamed")
	if !bytes.HasPrefix(hello, []byte("*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:"+strconv.FormatInt(id, 10)+"\r\n")) {
		t.Errorf("HELLO 2: %q", hello)
	}
	hello = c.Do("HELLO", "3")
	if !bytes.HasPrefix(hello, []byte("%7\r\n")) || !bytes.Contains(hello, []byte("$5\r\nproto\r\n:3\r\n")) {
		t.Errorf("HELLO 3: %q", hello)
	}
	run(t, c, []exchange{
		{[]string{"CLIENT", "GETNAME"}, "$7\r\nrenamed\r\n"},
		{[]string{"GET", "no-such-key"}, "_\r\n"}, // Redis's own RESP3 null, over a RESP3 connection
		{[]string{"LOCK.ACQUIRE", "r3", "me", "10000"}, ":1\r\n"},
		{[]string{"LOCK.ACQUIRE", "r3", "you", "10000"}, "_\r\n"},
		{[]string{"RESET"}, "+RESET\r\n"},
		{[]string{"CLIENT", "GETNAME"}, "$-1\r\n"}, // RESET: RESP2 again, and no name
		{[]string{"GET", "no-such-key"}, "$-1\r\n"},
	})
	if info := string(c.Do("CLIENT", "INFO")); !strings.Contains(info, " resp=2 ") || !strings.Contains(info, " lib-name= ") {
		t.Errorf("CLIENT INFO after RESET: %q", info)
	}

	// QUIT: +OK, then the connection ends.
	if got := string(c.Do("QUIT")); got != "+OK\r\n" {
		t.Errorf("QUIT: %q", got)
	}
	if r, err := c.ReadReply(); err != io.EOF {
		t.Errorf("after QUIT: %q, %v; want the connection closed", r, err)
	}
}

// TestInfo: INFO is Redis's sections with the proxy's two after them.
func TestInfo(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{}, false)
	c := p.dial(t)
	c.Do("LOCK.ACQUIRE", "info-r", "me", "10000")
	whole := bulk(t, c.Do("INFO"))
	for _, want := range []string{"# Server\r\n", "redis_version:", "# fenceproxy\r\nfenceproxy_mode:standalone\r\n", "# locks\r\nlocks_held:1\r\n", "lock_acquires:1\r\n"} {
		if !strings.Contains(whole, want) {
			t.Errorf("INFO lacks %q", want)
		}
	}
	if !strings.HasSuffix(whole, "\r\n") || strings.Contains(whole, "\r\n\r\n\r\n") {
		t.Errorf("INFO's sections are not separated as Redis separates them: %q", whole)
	}
	ours := bulk(t, c.Do("INFO", "fenceproxy"))
	if ours != "# fenceproxy\r\nfenceproxy_mode:standalone\r\n" {
		t.Errorf("INFO fenceproxy: %q", ours)
	}
	lockSec := bulk(t, c.Do("info", "LOCKS"))
	if !strings.HasPrefix(lockSec, "# locks\r\nlocks_held:1\r\n") || strings.Contains(lockSec, "# fenceproxy") {
		t.Errorf("INFO locks: %q", lockSec)
	}
	server := bulk(t, c.Do("INFO", "server"))
	if !strings.HasPrefix(server, "# Server\r\n") || strings.Contains(server, "# fenceproxy") || strings.Contains(server, "# locks") {
		t.Errorf("INFO server: %q", server)
	}
	both := bulk(t, c.Do("INFO", "server", "fenceproxy"))
	if !strings.HasPrefix(both, "# Server\r\n") || !strings.Contains(both, "\r\n\r\n# fenceproxy\r\n") {
		t.Errorf("INFO server fenceproxy: %q", both)
	}
	if all := bulk(t, c.Do("INFO", "all")); !strings.Contains(all, "# Keyspace") && !strings.Contains(all, "# locks") {
		t.Errorf("INFO all: %q", all)
	}
}

func bulk(t testing.TB, reply []byte) string {
	t.Helper()
	b, ok := testenv.ParseBulk(reply)
	if !ok {
		t.Fatalf("want a bulk string, got %q", reply)
	}
	return string(b)
}

// TestPassthrough: ordinary commands reach Redis and its replies come back
// untouched, in order, also pipelined; Redis's errors are Redis's.
func TestPassthrough(t *testing.T) {
	p, master := startStandalone(t, proxyOptions{}, false)
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"SET", "k", "v"}, "+OK\r\n"},
		{[]string{"GET", "k"}, "$1\r\nv\r\n"},
		{[]string{"INCR", "k"}, "-ERR value is not an integer or out of range\r\n"},
		{[]string{"NOSUCHCOMMAND", "a"}, "-ERR unknown command 'NOSUCHCOMMAND', with args beginning with: 'a' \r\n"},
		{[]string{"HSET", "h", "f", "1"}, ":1\r\n"},
		{[]string{"HGETALL", "h"}, "*2\r\n$1\r\nf\r\n$1\r\n1\r\n"},
		{[]string{"XREAD", "COUNT", "1", "STREAMS", "nostream", "0"}, "*-1\r\n"},
	})
	if got := string(testenv.Dial(t, master.Addr).Do("GET", "k")); got != "$1\r\nv\r\n" {
		t.Errorf("the write did not reach Redis: %q", got)
	}
	const n = 200
	for i := range n {
		c.Send("INCR", "counter")
		if i%50 == 0 {
			c.Send("PING")
		}
	}
	c.Flush()
	want := 1
	for i := range n {
		r, err := c.ReadReply()
		if err != nil {
			t.Fatal(err)
		}
		if got := string(r); got != ":"+strconv.Itoa(want)+"\r\n" {
			t.Fatalf("pipelined INCR %d: %q", i, got)
		}
		want++
		if i%50 == 0 {
			if r, _ := c.ReadReply(); string(r) != "+PONG\r\n" {
				t.Fatalf("pipelined PING after INCR %d: %q", i, r)
			}
		}
	}
}

// TestAuthWithoutACL: with fenceproxy's users off, AUTH is Redis's to judge.
func TestAuthWithoutACL(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--user", "app", "on", ">app-pass", "~*", "+@all"}})
	p := startProxy(t, proxyOptions{seeds: []string{master.Addr}})
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"AUTH", "app", "app-pass"}, "+OK\r\n"},
		{[]string{"AUTH", "app", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"AUTH", "nopass"}, "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n"},
		{[]string{"AUTH", "a", "b", "c"}, "-ERR syntax error\r\n"},
		{[]string{"HELLO", "2", "AUTH", "app", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
	})
	wantPrefix(t, c, "*14\r\n", "HELLO", "2", "AUTH", "app", "app-pass")
}

// TestACL: with fenceproxy's own users, the proxy authenticates and checks
// every request (commands, keys, channels, lock resources) before it runs.
func TestACL(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{
		acl: "user alice on >alice-pass ~app:* &news +@all -flushall\n" +
			"user bob on >bob-pass ~bob:* +@all\n",
		requirepass: "root-pass",
	}, false)
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"GET", "app:1"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"PING"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"HELLO", "3"}, "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n"},
		{[]string{"AUTH", "alice", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"AUTH", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{[]string{"AUTH", "root-pass"}, "+OK\r\n"},
		{[]string{"ACL", "WHOAMI"}, "$7\r\ndefault\r\n"},
		{[]string{"AUTH", "alice", "alice-pass"}, "+OK\r\n"},
		{[]string{"ACL", "WHOAMI"}, "$5\r\nalice\r\n"},
		{[]string{"ACL", "WHOAMI", "x"}, "-ERR wrong number of arguments for 'acl|whoami' command\r\n"},
		{[]string{"ACL"}, "-ERR wrong number of arguments for 'acl' command\r\n"},
		{[]string{"ACL", "SETUSER", "eve"}, "-ERR fenceproxy: ACL SETUSER is not available: fenceproxy's users are managed in its --aclfile (restart to reload); ACL WHOAMI is answered\r\n"},
		{[]string{"SET", "app:1", "v"}, "+OK\r\n"},
		{[]string{"GET", "app:1"}, "$1\r\nv\r\n"},
		{[]string{"GET", "other:1"}, "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"},
		{[]string{"FLUSHALL"}, "-NOPERM this user has no permissions to run the 'flushall' command\r\n"},
		{[]string{"PUBLISH", "sports", "x"}, "-NOPERM this user has no permissions to access one of the channels used as arguments\r\n"},
		{[]string{"PUBLISH", "news", "x"}, ":0\r\n"},
		{[]string{"LOCK.ACQUIRE", "other:r", "o", "10000"}, "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"},
		{[]string{"LOCK.ACQUIRE", "app:r", "o", "10000"}, ":1\r\n"},
		{[]string{"FENCE.EXEC", "app:r", "1", "AUTH", "x"}, "-ERR fenceproxy: FENCE.EXEC cannot run AUTH, HELLO or ACL\r\n"},
		{[]string{"FENCE.EXEC", "app:r", "1", "SET", "app:fenced", "1"}, "+OK\r\n"},
		{[]string{"FENCE.EXEC", "app:r", "1", "SET", "other:fenced", "1"}, "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"},
	})
	info := string(c.Do("LOCK.INFO", "app:r"))
	if !strings.HasPrefix(info, "*14\r\n$5\r\nowner\r\n$1\r\no\r\n$5\r\ntoken\r\n:1\r\n") {
		t.Errorf("LOCK.INFO to its holder's user: %q", info)
	}
	if top := string(c.Do("LOCK.TOP")); top != "*0\r\n" {
		t.Errorf("LOCK.TOP with nothing contended: %q", top)
	}

	// Another user sees that the lock is held, not by whom, and cannot
	// release, renew or fence with it.
	b := p.dial(t)
	run(t, b, []exchange{
		{[]string{"HELLO", "2", "AUTH", "bob", "wrong"}, "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
	})
	wantPrefix(t, b, "*14\r\n", "HELLO", "2", "AUTH", "bob", "bob-pass")
	run(t, b, []exchange{
		{[]string{"LOCK.INFO", "app:r"}, "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"},
		{[]string{"LOCK.ACQUIRE", "bob:r", "o", "10000"}, ":2\r\n"},
		{[]string{"LOCK.ACQUIRE", "bob:r", "o2", "10000"}, "$-1\r\n"},
		{[]string{"LOCK.TOP"}, "*1\r\n*3\r\n$5\r\nbob:r\r\n:1\r\n:0\r\n"},
	})
	if top := string(c.Do("LOCK.TOP")); top != "*0\r\n" {
		t.Errorf("LOCK.TOP shows alice another user's resource: %q", top)
	}
	if got := string(b.Do("LOCK.SLOWLOG", "GET")); got != "*0\r\n" {
		t.Errorf("LOCK.SLOWLOG GET for bob: %q", got)
	}
	if got := string(c.Do("LOCK.RELEASE", "app:r", "o")); got != ":1\r\n" {
		t.Errorf("LOCK.RELEASE by alice: %q", got)
	}
	// The release was slow (LOCK.SLOWLOG logs every one here): alice sees
	// her entry, bob does not.
	if got := string(c.Do("LOCK.SLOWLOG", "GET")); !strings.HasPrefix(got, "*1\r\n*7\r\n") || !strings.Contains(got, "app:r") {
		t.Errorf("LOCK.SLOWLOG GET for alice: %q", got)
	}
	if got := string(b.Do("LOCK.SLOWLOG", "GET", "-1")); got != "*0\r\n" {
		t.Errorf("LOCK.SLOWLOG GET -1 for bob: %q", got)
	}

	// In a transaction, a refused command makes EXEC abort.
	run(t, c, []exchange{
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"SET", "app:2", "x"}, "+QUEUED\r\n"},
		{[]string{"GET", "other:2"}, "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"},
		{[]string{"AUTH", "bob", "bob-pass"}, "-ERR fenceproxy: AUTH and HELLO cannot be part of a transaction; authenticate before MULTI\r\n"},
		{[]string{"ACL", "WHOAMI"}, "-ERR fenceproxy: ACL is answered by fenceproxy and cannot be queued in a transaction\r\n"},
		{[]string{"EXEC"}, "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{[]string{"GET", "app:2"}, "$-1\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"GET", "other:2"}, "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"},
		{[]string{"DISCARD"}, "+OK\r\n"},
	})

	// RESET goes back to the initial user: default needs its password.
	run(t, c, []exchange{
		{[]string{"RESET"}, "+RESET\r\n"},
		{[]string{"GET", "app:1"}, "-NOAUTH Authentication required.\r\n"},
		{[]string{"QUIT"}, "+OK\r\n"},
	})
}

// TestCommand: COMMAND answers Redis's commands and the proxy's own, in the
// client's protocol.
func TestCommand(t *testing.T) {
	p, master := startStandalone(t, proxyOptions{}, false)
	c := p.dial(t)
	redis := testenv.Dial(t, master.Addr)
	own := int64(len(ownCommands))
	if got, want := wantInt(t, c, "COMMAND", "COUNT"), wantInt(t, redis, "COMMAND", "COUNT")+own; got != want {
		t.Errorf("COMMAND COUNT: %d, want Redis's plus %d = %d", got, own, want)
	}
	all, ok := testenv.SplitArray(c.Do("COMMAND"))
	if !ok || int64(len(all)) != wantInt(t, c, "COMMAND", "COUNT") {
		t.Errorf("COMMAND: %d entries, want COMMAND COUNT's", len(all))
	}
	info := string(c.Do("COMMAND", "INFO", "lock.acquire", "get", "nosuchcommand"))
	unknown := strings.TrimPrefix(string(redis.Do("COMMAND", "INFO", "nosuchcommand")), "*1\r\n") // Redis's null for it
	if !strings.HasPrefix(info, "*3\r\n*10\r\n$12\r\nlock.acquire\r\n:-4\r\n") || !strings.Contains(info, "$3\r\nget\r\n:2\r\n") || !strings.HasSuffix(info, "\r\n"+unknown) {
		t.Errorf("COMMAND INFO lock.acquire get nosuchcommand: %q", info)
	}
	if got := string(c.Do("COMMAND", "INFO", "FENCE.CHECK")); !strings.HasPrefix(got, "*1\r\n*10\r\n$11\r\nfence.check\r\n:3\r\n") {
		t.Errorf("COMMAND INFO FENCE.CHECK: %q", got)
	}
	for _, req := range [][]string{{"COMMAND", "LIST"}, {"COMMAND", "LIST", "FILTERBY", "PATTERN", "LOCK.*"}, {"COMMAND", "LIST", "FILTERBY", "ACLCAT", "lock"}} {
		if got := string(c.Do(req...)); !strings.Contains(got, "$12\r\nlock.acquire\r\n") {
			t.Errorf("%s lacks lock.acquire: %.200q", testenv.ShowCommand(req), got)
		}
	}
	if got := string(c.Do("COMMAND", "LIST", "FILTERBY", "MODULE", "x")); strings.Contains(got, "lock.") {
		t.Errorf("COMMAND LIST FILTERBY MODULE x: %q", got)
	}
	wantPrefix(t, c, "-ERR", "COMMAND", "LIST", "FILTERBY", "BOGUS", "x")
	docs := string(c.Do("COMMAND", "DOCS", "LOCK.ACQUIRE"))
	if !strings.HasPrefix(docs, "*2\r\n$12\r\nlock.acquire\r\n") || !strings.Contains(docs, "summary") {
		t.Errorf("COMMAND DOCS LOCK.ACQUIRE: %q", docs)
	}
	wantPrefix(t, c, "*", "COMMAND", "DOCS")
	wantPrefix(t, c, "*", "COMMAND", "GETKEYS", "GET", "k")
	// RESP3: maps where Redis 7 answers maps.
	wantPrefix(t, c, "%7\r\n", "HELLO", "3")
	if got := string(c.Do("COMMAND", "DOCS", "lock.release")); !strings.HasPrefix(got, "%1\r\n$12\r\nlock.release\r\n%") {
		t.Errorf("COMMAND DOCS over RESP3: %q", got)
	}
	if got := string(c.Do("COMMAND", "INFO", "lock.release")); !strings.HasPrefix(got, "*1\r\n*10\r\n$12\r\nlock.release\r\n:3\r\n~") {
		t.Errorf("COMMAND INFO over RESP3: %q", got)
	}
}
