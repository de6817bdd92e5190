package passthrough

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/resp"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestSelectLikeRedis: SELECT n in front of a standalone Redis keeps each
// client in its database as Redis does, MOVE, SWAPDB and COPY ... DB
// included, and transactions SELECT inside; every reply is Redis's, byte
// for byte.
func TestSelectLikeRedis(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	for _, cmd := range [][]string{
		c("SELECT", "3"), c("SET", "k", "in3"), c("GET", "k"), c("DBSIZE"),
		c("SELECT", "0"), c("GET", "k"), c("SET", "k", "in0"), c("GET", "k"),
		c("MOVE", "k", "3"), c("DEL", "k"), c("SET", "only0", "v"), c("MOVE", "only0", "3"), c("GET", "only0"),
		c("SELECT", "3"), c("GET", "only0"), c("GET", "k"), c("EXISTS", "k", "only0", "k5"), c("DBSIZE"),
		c("COPY", "k", "k5", "DB", "5"), c("SELECT", "5"), c("GET", "k5"),
		c("SWAPDB", "5", "0"), c("GET", "k5"), c("SELECT", "0"), c("GET", "k5"),
		c("SELECT", "5"), c("MULTI"), c("SET", "m", "1"), c("SELECT", "6"), c("SET", "m", "2"), c("EXEC"),
		c("GET", "m"), c("SELECT", "5"), c("GET", "m"),
		c("MULTI"), c("SELECT", "99"), c("GET", "m"), c("EXEC"), c("GET", "m"),
		c("WATCH", "w"), c("SELECT", "7"), c("SET", "w", "x"), c("MULTI"), c("GET", "w"), c("EXEC"), c("GET", "w"),
		c("SELECT", "16"), c("SELECT", "-1"), c("SELECT", "x"), c("SELECT", "99999999999"),
		c("SELECT", "99999999999999999999"), c("SELECT", "01"), c("GET", "w"),
	} {
		same(t, proxy, direct, cmd...)
	}
	// HELLO keeps the database, as in Redis (its id differs: not compared).
	proxy.Do("HELLO", "3")
	direct.Do("HELLO", "3")
	same(t, proxy, direct, "GET", "w")
	proxy.Do("HELLO", "2")
	direct.Do("HELLO", "2")
	same(t, proxy, direct, "GET", "w")
	if ci, _ := testenv.ParseBulk(proxy.Do("CLIENT", "INFO")); !strings.Contains(string(ci), " db=7 ") {
		t.Errorf("CLIENT INFO in database 7 = %q", ci)
	}
	if cl, _ := testenv.ParseBulk(testenv.Dial(t, pr.Proxy.Addr).Do("CLIENT", "LIST")); !strings.Contains(string(cl), " db=7\n") &&
		!strings.Contains(string(cl), " db=7 ") {
		t.Errorf("CLIENT LIST does not show the client in database 7: %q", cl)
	}
	same(t, proxy, direct, "RESET")
	same(t, proxy, direct, "GET", "w")
	same(t, proxy, direct, "GET", "k5")
	// Lock commands stay in database 0: their keys are not in 7.
	proxy.Do("SELECT", "7")
	if got := proxy.Do("LOCK.ACQUIRE", "sel-res", "me", "10000"); !bytes.HasPrefix(got, []byte(":")) {
		t.Fatalf("LOCK.ACQUIRE in database 7 = %q", got)
	}
	other := testenv.Dial(t, pr.Proxy.Addr)
	if got := other.Do("LOCK.ACQUIRE", "sel-res", "other", "10000"); string(got) != "$-1\r\n" {
		t.Fatalf("LOCK.ACQUIRE from database 0 of a lock held from database 7 = %q, want null (one lock)", got)
	}
	pr.alive(t)
}

// TestSelectPipelinedLikeRedis: SELECTs in a pipeline between writes and
// reads of the same key names in several databases, MOVE and SWAPDB among
// them, give Redis's bytes: every request runs in the database the client
// was in when it sent it.
func TestSelectPipelinedLikeRedis(t *testing.T) {
	pr := startPair(t)
	var raw []byte
	for i := range 30 {
		db := []string{"0", "1", "2", "3"}[i%4]
		raw = resp.AppendCommand(raw, args("SELECT", db))
		raw = resp.AppendCommand(raw, args("INCR", "n"))
		raw = resp.AppendCommand(raw, args("APPEND", "s", db))
		if i%7 == 3 {
			raw = resp.AppendCommand(raw, args("MOVE", "s", "2"))
		}
		if i%9 == 4 {
			raw = resp.AppendCommand(raw, args("SWAPDB", "1", "3"))
		}
		raw = resp.AppendCommand(raw, args("GET", "s"))
		raw = resp.AppendCommand(raw, args("DBSIZE"))
	}
	raw = resp.AppendCommand(raw, args("PING"))
	got, want := untilPong(t, pr.Proxy.Addr, raw), untilPong(t, pr.B.Addr, raw)
	if !bytes.Equal(got, want) {
		t.Fatalf("pipelined SELECTs:\n proxy %q\n redis %q", got, want)
	}
	pr.alive(t)
}

// TestSelectBlockingPop: a client blocked in database 2 is woken by a push
// to its key in database 2, not by one to the same key name in 0.
func TestSelectBlockingPop(t *testing.T) {
	pr := startPair(t)
	blocked := testenv.Dial(t, pr.Proxy.Addr)
	if got := blocked.Do("SELECT", "2"); string(got) != "+OK\r\n" {
		t.Fatalf("SELECT 2 = %q", got)
	}
	blocked.Send("BLPOP", "q", "10")
	blocked.Flush()
	in0 := testenv.Dial(t, pr.Proxy.Addr)
	in0.Do("RPUSH", "q", "from0")
	in2 := testenv.Dial(t, pr.Proxy.Addr)
	in2.Do("SELECT", "2")
	in2.Do("RPUSH", "q", "from2")
	got, err := blocked.ReadReply()
	if err != nil || string(got) != "*2\r\n$1\r\nq\r\n$5\r\nfrom2\r\n" {
		t.Fatalf("BLPOP in database 2 = %q, %v; want from2", got, err)
	}
	if got := in0.Do("LRANGE", "q", "0", "-1"); string(got) != "*1\r\n$5\r\nfrom0\r\n" {
		t.Fatalf("database 0's list = %q, want from0 untouched", got)
	}
	// The blocked client's own connection went back in database 0: the next
	// client pinned gets 0's keys.
	if got := blocked.Do("GET", "q"); !bytes.HasPrefix(got, []byte("$-1")) && !bytes.HasPrefix(got, []byte("-WRONGTYPE")) {
		t.Fatalf("GET q after BLPOP in database 2 = %q", got)
	}
	w := testenv.Dial(t, pr.Proxy.Addr)
	w.Do("WATCH", "q")
	if got := w.Do("LRANGE", "q", "0", "-1"); string(got) != "*1\r\n$5\r\nfrom0\r\n" {
		t.Fatalf("a pinned client in database 0 sees %q, want database 0's list", got)
	}
	pr.alive(t)
}

func args(a ...string) [][]byte {
	out := make([][]byte, len(a))
	for i, s := range a {
		out[i] = []byte(s)
	}
	return out
}
