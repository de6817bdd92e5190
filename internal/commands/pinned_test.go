package commands

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestTransactions: MULTI/EXEC, DISCARD and WATCH run on a connection of
// the client's own and answer as Redis does.
func TestTransactions(t *testing.T) {
	p, master := startStandalone(t, proxyOptions{}, false)
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"EXEC"}, "-ERR EXEC without MULTI\r\n"},
		{[]string{"DISCARD"}, "-ERR DISCARD without MULTI\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"MULTI"}, "-ERR MULTI calls can not be nested\r\n"},
		{[]string{"SET", "tx", "1"}, "+QUEUED\r\n"},
		{[]string{"INCR", "tx"}, "+QUEUED\r\n"},
		{[]string{"LOCK.INFO", "r"}, "-ERR fenceproxy: LOCK.INFO cannot run inside MULTI: the lock family is the proxy's own and Redis cannot queue it, so EXEC will discard this transaction (EXECABORT); send it before MULTI or after EXEC\r\n"}, // refused, and the transaction aborts as Redis's would
		{[]string{"EXEC"}, "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{[]string{"GET", "tx"}, "$-1\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"SET", "tx", "1"}, "+QUEUED\r\n"},
		{[]string{"INCR", "tx"}, "+QUEUED\r\n"},
		{[]string{"EXEC"}, "*2\r\n+OK\r\n:2\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"INCR", "tx"}, "+QUEUED\r\n"},
		{[]string{"WATCH", "tx"}, "-ERR WATCH inside MULTI is not allowed\r\n"},
		{[]string{"DISCARD"}, "+OK\r\n"},
		{[]string{"GET", "tx"}, "$1\r\n2\r\n"},
		{[]string{"UNWATCH"}, "+OK\r\n"},
	})

	// WATCH: a write by someone else between WATCH and EXEC aborts it.
	redis := testenv.Dial(t, master.Addr)
	run(t, c, []exchange{
		{[]string{"WATCH", "tx"}, "+OK\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"INCR", "tx"}, "+QUEUED\r\n"},
	})
	redis.Do("SET", "tx", "100")
	run(t, c, []exchange{
		{[]string{"EXEC"}, "*-1\r\n"},
		{[]string{"WATCH", "tx"}, "+OK\r\n"},
		{[]string{"HELLO", "3"}, "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:1\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"}, // its own connection too
		{[]string{"GET", "tx"}, "$3\r\n100\r\n"},
		{[]string{"HELLO", "2"}, "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:2\r\n$2\r\nid\r\n:1\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"},
		{[]string{"UNWATCH"}, "+OK\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"INCR", "tx"}, "+QUEUED\r\n"},
		{[]string{"EXEC"}, "*1\r\n:101\r\n"},
	})

	// The pinned connection breaks in the middle of a transaction: the
	// transaction is reported lost, never carried on over another one.
	run(t, c, []exchange{
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"INCR", "tx"}, "+QUEUED\r\n"},
	})
	redis.Do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	got := string(c.Do("INCR", "tx"))
	if !strings.HasPrefix(got, "-ERR fenceproxy: lost the connection to Redis") {
		t.Errorf("a command queued on a lost connection: %q", got)
	}
	if got := string(c.Do("EXEC")); got != "-EXECABORT Transaction discarded because of previous errors.\r\n" {
		t.Errorf("EXEC on a lost connection: %q", got)
	}
	waitFor(t, func() bool { return string(c.Do("GET", "tx")) == "$3\r\n101\r\n" })
}

// TestResetInTransaction: RESET ends a transaction and gives its
// connection up (never reused: it holds MULTI).
func TestResetInTransaction(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{}, false)
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"SET", "rk", "1"}, "+QUEUED\r\n"},
		{[]string{"RESET"}, "+RESET\r\n"},
		{[]string{"EXEC"}, "-ERR EXEC without MULTI\r\n"},
		{[]string{"GET", "rk"}, "$-1\r\n"},
	})
}

// TestBlockingCommands: a blocking pop waits on the client's own
// connection, is answered when data comes, and ends when the client goes.
func TestBlockingCommands(t *testing.T) {
	p, master := startStandalone(t, proxyOptions{}, true)
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"BLPOP", "q", "0.01"}, "*-1\r\n"},
		{[]string{"RPUSH", "q", "a"}, ":1\r\n"},
		{[]string{"BLPOP", "q", "1"}, "*2\r\n$1\r\nq\r\n$1\r\na\r\n"},
		{[]string{"XREAD", "BLOCK", "10", "STREAMS", "s", "$"}, "*-1\r\n"},
		{[]string{"SET", "w", "1"}, "+OK\r\n"},
	})
	// WAIT counts the replicas of the client's writes, made over shared
	// connections, as if they were its own. (It returns as soon as the
	// replica has them; the timeout only bounds a lost replica.)
	c.SetTimeout(30 * time.Second)
	run(t, c, []exchange{
		{[]string{"WAIT", "1", "20000"}, ":1\r\n"},
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"BLPOP", "q", "0"}, "+QUEUED\r\n"}, // queued: it will not block
		{[]string{"EXEC"}, "*1\r\n*-1\r\n"},
	})

	// Data pushed by another client wakes the blocked one.
	c.Send("BLPOP", "q2", "10")
	c.Flush()
	redis := testenv.Dial(t, master.Addr)
	waitFor(t, func() bool { return strings.Contains(string(redis.Do("CLIENT", "LIST")), "cmd=blpop") })
	redis.Do("RPUSH", "q2", "b")
	if r, err := c.ReadReply(); err != nil || string(r) != "*2\r\n$2\r\nq2\r\n$1\r\nb\r\n" {
		t.Fatalf("woken BLPOP: %q, %v", r, err)
	}

	// A client that leaves while blocked: its Redis connection ends too.
	gone := p.dial(t)
	gone.Send("BLPOP", "q3", "0")
	gone.Flush()
	waitFor(t, func() bool { return strings.Contains(string(redis.Do("CLIENT", "LIST")), "cmd=blpop") })
	gone.Close()
	waitFor(t, func() bool { return !strings.Contains(string(redis.Do("CLIENT", "LIST")), "cmd=blpop") })
	redis.Do("RPUSH", "q3", "kept")
	if got := string(redis.Do("LRANGE", "q3", "0", "-1")); got != "*1\r\n$4\r\nkept\r\n" {
		t.Errorf("a gone client's BLPOP took an element: %q", got)
	}
}

// TestPubSub: the first SUBSCRIBE turns the client's connection into a
// stream from Redis; messages published anywhere reach it.
func TestPubSub(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{}, false)
	sub := p.dial(t)
	pub := p.dial(t)
	if got := string(sub.Do("SUBSCRIBE", "news")); got != "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n" {
		t.Fatalf("SUBSCRIBE: %q", got)
	}
	waitFor(t, func() bool { return string(pub.Do("PUBSUB", "NUMSUB", "news")) == "*2\r\n$4\r\nnews\r\n:1\r\n" })
	run(t, pub, []exchange{{[]string{"PUBLISH", "news", "hello"}, ":1\r\n"}})
	if r, err := sub.ReadReply(); err != nil || string(r) != "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n" {
		t.Fatalf("message: %q, %v", r, err)
	}
	run(t, sub, []exchange{
		{[]string{"PING"}, "*2\r\n$4\r\npong\r\n$0\r\n\r\n"}, // Redis's own, in subscribed mode
		{[]string{"PSUBSCRIBE", "n*"}, "*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:2\r\n"},
		{[]string{"UNSUBSCRIBE", "news"}, "*3\r\n$11\r\nunsubscribe\r\n$4\r\nnews\r\n:1\r\n"},
	})
	if got := string(sub.Do("QUIT")); got != "+OK\r\n" {
		t.Errorf("QUIT while subscribed: %q", got)
	}
	if r, err := sub.ReadReply(); err == nil {
		t.Errorf("after QUIT: %q, want the connection closed", r)
	}

	// SUBSCRIBE inside MULTI is queued, as in Redis.
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"MULTI"}, "+OK\r\n"},
		{[]string{"SUBSCRIBE", "x"}, "+QUEUED\r\n"},
		{[]string{"DISCARD"}, "+OK\r\n"},
		{[]string{"PING"}, "+PONG\r\n"},
	})
}

// TestPubSubWithACL: a subscribed client's refused requests are refused in
// the stream's order, by Redis, and AUTH cannot reach Redis through it.
func TestPubSubWithACL(t *testing.T) {
	p, _ := startStandalone(t, proxyOptions{acl: "user u on >p ~* &allowed +@all\n"}, false)
	c := p.dial(t)
	run(t, c, []exchange{
		{[]string{"AUTH", "u", "p"}, "+OK\r\n"},
		{[]string{"SUBSCRIBE", "allowed"}, "*3\r\n$9\r\nsubscribe\r\n$7\r\nallowed\r\n:1\r\n"},
		{[]string{"SUBSCRIBE", "other"}, "-ERR unknown command 'fenceproxy.refused', with args beginning with: 'NOPERM this user has no permissions to access one of the channels used as arguments' \r\n"},
		{[]string{"AUTH", "u", "p"}, "-ERR unknown command 'fenceproxy.refused', with args beginning with: 'ERR fenceproxy: AUTH and HELLO cannot be used on a connection in pub/sub mode; authenticate before subscribing' \r\n"},
		{[]string{"ACL", "WHOAMI"}, "-ERR unknown command 'fenceproxy.refused', with args beginning with: 'ERR fenceproxy: ACL is not available on a connection in pub/sub mode' \r\n"},
	})
}

// TestRefusedNode: a standalone master that reports itself a replica is
// sent nothing; every command gets its refusal.
func TestRefusedNode(t *testing.T) {
	p, master := startStandalone(t, proxyOptions{}, false)
	c := p.dial(t)
	run(t, c, []exchange{{[]string{"SET", "a", "1"}, "+OK\r\n"}})
	other := testenv.StartRedis(t, testenv.RedisOptions{})
	redis := testenv.Dial(t, master.Addr)
	redis.Do("REPLICAOF", "127.0.0.1", strings.Split(other.Addr, ":")[1])
	// The proxy notices at its next role check or broken connection.
	redis.Do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	deadline := time.Now().Add(15 * time.Second)
	var got []byte
	for time.Now().Before(deadline) {
		if got = c.Do("SET", "a", "2"); bytes.HasPrefix(got, []byte("-READONLY")) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !bytes.HasPrefix(got, []byte("-READONLY")) {
		t.Fatalf("SET to a master turned replica: %q", got)
	}
	for _, req := range [][]string{{"MULTI"}, {"BLPOP", "q", "1"}, {"SUBSCRIBE", "ch"}, {"LOCK.ACQUIRE", "r", "o", "1000"}} {
		if got := c.Do(req...); !bytes.HasPrefix(got, []byte("-")) || bytes.Contains(got, []byte("127.0.0.1")) {
			t.Errorf("%s to a refused node: %q, want an error naming no address", testenv.ShowCommand(req), got)
		}
	}
}
