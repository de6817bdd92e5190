package cluster

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// allBytes is every byte value once, CR LF pairs included. As a key it holds
// "{|}", so its slot is the slot of "|".
func allBytes() string {
	b := make([]byte, 0, 260)
	for i := range 256 {
		b = append(b, byte(i))
	}
	return string(b) + "\r\n\r\n"
}

// unit is commands whose keys all hash to the slot of route; sent directly,
// they go to that slot's master.
type unit struct {
	route string
	cmds  [][]string
}

// groupCorpus is the ordinary-command corpus on keys tagged {tag}, so every
// multi-key command in it stays in one slot. Every reply depends only on the
// data: no time, randomness or node-specific state.
func groupCorpus(tag string) unit {
	k := func(name string) string { return "{" + tag + "}:" + name }
	bin := allBytes()
	shortBin := "\x00\r\n\xff\x80 \"'\\"
	return unit{route: k(""), cmds: [][]string{
		// strings
		cmd("SET", k("s1"), "hello"),
		cmd("GET", k("s1")),
		cmd("GET", k("missing")),
		cmd("SET", k("n"), "10"),
		cmd("INCR", k("n")),
		cmd("INCRBY", k("n"), "-25"),
		cmd("INCR", k("s1")),
		cmd("INCRBYFLOAT", k("f"), "3.0e3"),
		cmd("INCRBYFLOAT", k("f"), "0.1"),
		cmd("APPEND", k("s1"), " world"),
		cmd("GETRANGE", k("s1"), "-5", "-1"),
		cmd("SETRANGE", k("pad"), "5", "x"),
		cmd("GET", k("pad")),
		cmd("STRLEN", k("s1")),
		cmd("MSET", k("m1"), "a", k("m2"), "b", k("m3"), "c"),
		cmd("MGET", k("m1"), k("missing"), k("m2"), k("m3"), k("m1")),
		cmd("MSETNX", k("m1"), "z", k("m4"), "d"),
		cmd("GETDEL", k("m1")),
		cmd("GETDEL", k("m1")),
		cmd("SET", k("s2"), "v", "NX"),
		cmd("SET", k("s2"), "w", "XX", "GET"),
		cmd("SET", k("none"), "w", "XX", "GET"),
		cmd("SET", k("px"), "v", "PX", "notanumber"),
		cmd("GETSET", k("s2"), "old"),
		cmd("LCS", k("m2"), k("m3")),
		// binary values
		cmd("SET", k("bin"), bin),
		cmd("GET", k("bin")),
		cmd("SET", k("crlf"), "\r\n*1\r\n$4\r\nPING\r\n"),
		cmd("GET", k("crlf")),
		cmd("SET", k("empty"), ""),
		cmd("GET", k("empty")),
		// lists
		cmd("RPUSH", k("l"), "a", "b", "c", bin, "", "e"),
		cmd("LPUSH", k("l"), "z"),
		cmd("LRANGE", k("l"), "0", "-1"),
		cmd("LRANGE", k("lmissing"), "0", "-1"),
		cmd("LINDEX", k("l"), "100"),
		cmd("RPOP", k("l"), "2"),
		cmd("LPOP", k("lmissing")),
		cmd("LPOP", k("lmissing"), "2"),
		cmd("LPOS", k("l"), "b"),
		cmd("LSET", k("l"), "100", "set"),
		cmd("LMOVE", k("l"), k("l2"), "LEFT", "RIGHT"),
		cmd("LRANGE", k("l2"), "0", "-1"),
		cmd("OBJECT", "ENCODING", k("l")),
		// hashes (listpack: insertion order)
		cmd("HSET", k("h"), "f1", "v1", "f2", "2", "f3", shortBin),
		cmd("HGET", k("h"), "nope"),
		cmd("HMGET", k("h"), "f1", "nope", "f2"),
		cmd("HGETALL", k("h")),
		cmd("HGETALL", k("hmissing")),
		cmd("HINCRBYFLOAT", k("h"), "f2", "0.25"),
		cmd("HINCRBY", k("h"), "f1", "1"),
		cmd("HDEL", k("h"), "f3", "nope"),
		cmd("HSCAN", k("h"), "0"),
		// sets
		cmd("SADD", k("set"), "pear", "apple", "fig", "apple"),
		cmd("SORT", k("set"), "ALPHA"),
		cmd("SMISMEMBER", k("set"), "fig", "kiwi"),
		cmd("SADD", k("iset"), "3", "1", "2"),
		cmd("SMEMBERS", k("iset")),
		cmd("SADD", k("set2"), "fig", "kiwi"),
		cmd("SINTER", k("set"), k("set2")),
		cmd("SUNIONSTORE", k("set3"), k("set"), k("set2")),
		cmd("SINTERCARD", "2", k("set"), k("set2")),
		// sorted sets
		cmd("ZADD", k("z"), "1", "one", "2.5", "two", "-inf", "low", "+inf", "high", "0.1", "tenth"),
		cmd("ZRANGE", k("z"), "0", "-1", "WITHSCORES"),
		cmd("ZRANGEBYSCORE", k("z"), "(0", "3", "WITHSCORES", "LIMIT", "1", "2"),
		cmd("ZSCORE", k("z"), "tenth"),
		cmd("ZMSCORE", k("z"), "one", "nope", "high"),
		cmd("ZINCRBY", k("z"), "0.1", "two"),
		cmd("ZPOPMAX", k("z"), "2"),
		cmd("ZADD", k("z"), "nan", "x"),
		cmd("ZUNIONSTORE", k("z2"), "2", k("z"), k("zmissing")),
		// streams, explicit IDs only
		cmd("XADD", k("st"), "1-1", "f", "v"),
		cmd("XADD", k("st"), "1-2", "a", "1", "b", bin),
		cmd("XADD", k("st"), "1-0", "f", "old"),
		cmd("XLEN", k("st")),
		cmd("XRANGE", k("st"), "-", "+"),
		cmd("XREVRANGE", k("st"), "+", "-", "COUNT", "1"),
		cmd("XREAD", "COUNT", "2", "STREAMS", k("st"), "0"),
		cmd("XREAD", "STREAMS", k("st"), "99-0"),
		cmd("XDEL", k("st"), "1-2"),
		// keys
		cmd("EXPIRE", k("s1"), "1000"),
		cmd("TTL", k("s1")),
		cmd("TTL", k("missing")),
		cmd("PERSIST", k("s1")),
		cmd("TYPE", k("s1")), cmd("TYPE", k("l")), cmd("TYPE", k("h")), cmd("TYPE", k("z")), cmd("TYPE", k("st")),
		cmd("TYPE", k("missing")),
		cmd("EXISTS", k("s1"), k("s1"), k("missing"), k("l")),
		cmd("RENAME", k("s2"), k("s3")),
		cmd("RENAME", k("missing"), k("s4")),
		cmd("COPY", k("l2"), k("l3")),
		cmd("DUMP", k("n")),
		cmd("DEL", k("s3"), k("missing"), k("m2")),
		cmd("UNLINK", k("m3")),
		cmd("TOUCH", k("n"), k("missing"), k("n")),
		// scripts: one key, no key, loaded by SHA
		cmd("EVAL", "return redis.call('GET', KEYS[1])", "1", k("bin")),
		cmd("EVAL", "return redis.call('HGETALL', KEYS[1])", "1", k("h")),
		cmd("EVAL", "return redis.pcall('INCR', KEYS[1])", "1", k("l")),
		cmd("EVAL", "return {KEYS[1], KEYS[2], ARGV[1]}", "2", k("a"), k("b"), bin),
		cmd("EVAL", "return redis.call('INCR', KEYS[1])", "1", k("l")),
		cmd("EVAL", "return {1, 'two', {3, 'four'}, redis.status_reply('ok'), true, false, 2.5}", "0"),
		cmd("EVAL", "return redis.error_reply('MYCODE my message')", "0"),
		cmd("EVAL", "this is not lua", "0"),
		cmd("SCRIPT", "LOAD", "return redis.call('GET', KEYS[1])"),
		cmd("SCRIPT", "EXISTS", "d3c21d0c2b9ca22f82737626a27bcaf5d288f99f", "0000000000000000000000000000000000000000"),
		cmd("EVALSHA", "d3c21d0c2b9ca22f82737626a27bcaf5d288f99f", "1", k("empty")),
		cmd("EVALSHA", "0000000000000000000000000000000000000000", "1", k("empty")),
		cmd("EVAL_RO", "return redis.call('GET', KEYS[1])", "1", k("n")),
		// errors of every kind, nulls
		cmd("LPUSH", k("s1"), "x"),
		cmd("GET", k("l")),
		cmd("HGET", k("l"), "f"),
		cmd("NOSUCHCOMMAND", k("a"), "b"),
		cmd("GET"),
		cmd("GET", k("a"), k("b")),
		cmd("SET", k("a")),
		cmd("SET", k("a"), "v", "BOGUS"),
		cmd("INCRBY", k("n"), "1.5"),
		cmd("LRANGE", k("l"), "a", "b"),
		cmd("LPOP", k("nothing"), "5"),
		cmd("MGET", k("nothing"), k("nothing")),
		cmd("ZRANGE", k("nothing"), "0", "-1"),
		cmd("HMGET", k("nothing"), "a"),
	}}
}

// plainUnits are single-key commands on keys without a hash tag, many keys
// so that they land all over the slot space, and a binary key.
func plainUnits(n int) []unit {
	var out []unit
	for i := range n {
		k := "plain:" + strconv.Itoa(i)
		l, missing := "{"+k+"}:l", "{"+k+"}:missing" // in k's slot
		out = append(out, unit{route: k, cmds: [][]string{
			cmd("SET", k, "v"+strconv.Itoa(i)+"\x00\r\n"),
			cmd("APPEND", k, "+"),
			cmd("GET", k),
			cmd("INCR", k),
			cmd("RPUSH", l, k),
			cmd("LRANGE", l, "0", "-1"),
			cmd("GET", l),
			cmd("GET", missing),
		}})
	}
	bin := allBytes()
	out = append(out, unit{route: bin, cmds: [][]string{
		cmd("SET", bin, "binary key"),
		cmd("GET", bin),
		cmd("HSET", bin+"x", "f", bin), // the same hash tag, "|"
		cmd("HGETALL", bin+"x"),
		cmd("EXISTS", bin, bin+"x"),
		cmd("DEL", bin, bin+"x"),
	}})
	return out
}

// TestFidelityCorpus: a corpus of ordinary commands (every data type, binary
// keys and values, scripts with one key, WRONGTYPE and arity errors, nulls),
// on keys all over the slot space, gets the same reply bytes through the
// proxy as from the owning master directly.
//
// Both runs use the same key names on the same cluster, so the replies are
// comparable even where they echo a key: the corpus first runs through the
// proxy, every reply kept; then every master is flushed (data and scripts),
// and the corpus runs again, each unit sent straight to the master that owns
// its slot. Each run starts from an empty cluster and the corpus is
// deterministic, so any difference is the proxy's.
func TestFidelityCorpus(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)

	var units []unit
	for g := range 24 {
		units = append(units, groupCorpus("g"+strconv.Itoa(g)))
	}
	units = append(units, plainUnits(300)...)
	perMaster := map[*testenv.Redis]int{}
	for _, u := range units {
		perMaster[st.of(u.route)]++
	}
	for _, m := range e.cl.Masters {
		if perMaster[m] == 0 {
			t.Fatalf("no unit of the corpus lands on master %s; pick other keys", m.Addr)
		}
	}

	// FLUSHALL through the proxy empties every master.
	proxy := e.dial(t)
	for _, m := range e.cl.Masters {
		testenv.Dial(t, m.Addr).Do("SET", st.keysOn(m, "preexisting:", 1)[0], "x")
	}
	if got := proxy.Do("FLUSHALL"); string(got) != "+OK\r\n" {
		t.Fatalf("FLUSHALL via proxy: %s", testenv.ShowReply(got))
	}
	for _, m := range e.cl.Masters {
		if keys := clientKeysOn(t, m.Addr); len(keys) > 0 {
			t.Fatalf("keys on %s after FLUSHALL via proxy: %q, want none (FLUSHALL goes to every master)", m.Addr, keys)
		}
	}

	var viaProxy [][][]byte
	for _, u := range units {
		var replies [][]byte
		for _, c := range u.cmds {
			got, err := proxy.TryDo(c...)
			if err != nil {
				t.Fatalf("%s via proxy: %v", testenv.ShowCommand(c), err)
			}
			noRedirect(t, testenv.ShowCommand(c), got)
			replies = append(replies, got)
		}
		viaProxy = append(viaProxy, replies)
	}
	// DBSIZE through the proxy is the sum over the masters less the token
	// authority's keys (read again if the heartbeat wrote them in between).
	deadline := time.Now().Add(5 * time.Second)
	for {
		dbsize := proxy.Do("DBSIZE")
		var sum int64
		for _, m := range e.cl.Masters {
			n, _ := testenv.ParseInt(testenv.Dial(t, m.Addr).Do("DBSIZE"))
			sum += n
			for _, k := range authorityKeys {
				if got := testenv.Dial(t, m.Addr).Do("EXISTS", k); string(got) == ":1\r\n" {
					sum--
				}
			}
		}
		if want := ":" + itoa(sum) + "\r\n"; string(dbsize) == want {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("DBSIZE via proxy = %s, want %q (the sum over the masters)", testenv.ShowReply(dbsize), want)
		}
	}

	flushDirect(t, e.cl)
	direct := map[*testenv.Redis]*testenv.Conn{}
	for _, m := range e.cl.Masters {
		direct[m] = testenv.Dial(t, m.Addr)
	}
	diffs := 0
	for i, u := range units {
		c := direct[st.of(u.route)]
		for j, args := range u.cmds {
			want, err := c.TryDo(args...)
			if err != nil {
				t.Fatalf("%s direct: %v", testenv.ShowCommand(args), err)
			}
			if redirect(want) {
				t.Fatalf("%s sent directly to the owner of slot %d: %s (a bug in the test: the unit's keys are not all in its route's slot)", testenv.ShowCommand(args), testenv.KeySlot(u.route), testenv.ShowReply(want))
			}
			if got := viaProxy[i][j]; !bytes.Equal(got, want) {
				if diffs++; diffs <= 20 {
					t.Errorf("%s (slot %d):\n proxy  %s\n redis  %s", testenv.ShowCommand(args), testenv.KeySlot(u.route), testenv.ShowReply(got), testenv.ShowReply(want))
				}
			}
		}
	}
	if diffs > 20 {
		t.Errorf("… %d replies differ in all", diffs)
	}
}

// TestEverySlot writes one key in each of the 16384 slots through the proxy,
// pipelined, and reads each back through the proxy and from its owner.
func TestEverySlot(t *testing.T) {
	e := startEnv(t, -1, 0)
	st := readSlots(t, e.cl)
	keys := everySlotKeys("slot:")
	val := func(s int) string { return fmt.Sprintf("v%d\x00\r\n{%d}", s, s) }

	proxy := e.dial(t)
	pipeline := func(what string, args func(s int) []string, want func(s int) string) {
		t.Helper()
		const chunk = 2048 // pipelined requests per write
		bad := 0
		for from := 0; from < len(keys); from += chunk {
			for s := from; s < from+chunk; s++ {
				proxy.Send(args(s)...)
			}
			proxy.Flush()
			for s := from; s < from+chunk; s++ {
				got, err := proxy.ReadReply()
				if err != nil {
					t.Fatalf("%s slot %d: %v", what, s, err)
				}
				noRedirect(t, what, got)
				if string(got) != want(s) {
					if bad++; bad <= 10 {
						t.Errorf("%s %s (slot %d): %s, want %q", what, keys[s], s, testenv.ShowReply(got), want(s))
					}
				}
			}
		}
	}
	pipeline("SET", func(s int) []string { return cmd("SET", keys[s], val(s)) },
		func(int) string { return "+OK\r\n" })
	bulk := func(s int) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(val(s)), val(s)) }
	pipeline("GET", func(s int) []string { return cmd("GET", keys[s]) }, bulk)

	direct := map[*testenv.Redis]*testenv.Conn{}
	for _, m := range e.cl.Masters {
		direct[m] = testenv.Dial(t, m.Addr)
	}
	for s, k := range keys { // about 5500 short requests per master: one write each
		direct[st.owner[s]].Send("GET", k)
	}
	for _, c := range direct {
		c.Flush()
	}
	for s, k := range keys {
		got, err := direct[st.owner[s]].ReadReply()
		if err != nil {
			t.Fatalf("GET %s on its owner: %v", k, err)
		}
		if string(got) != bulk(s) {
			t.Fatalf("GET %s (slot %d) on its owner %s: %s, want %q: the proxy wrote it elsewhere", k, s, st.owner[s].Addr, testenv.ShowReply(got), bulk(s))
		}
	}
	if got := proxy.Do("DBSIZE"); string(got) != ":16384\r\n" {
		t.Errorf("DBSIZE via proxy = %s, want :16384 (not the token authority's 2 keys)", testenv.ShowReply(got))
	}
	pipeline("DEL", func(s int) []string { return cmd("DEL", keys[s]) }, func(int) string { return ":1\r\n" })
	if got := proxy.Do("DBSIZE"); string(got) != ":0\r\n" {
		t.Errorf("DBSIZE via proxy after deleting every key = %s, want :0 (the token authority's keys left out)", testenv.ShowReply(got))
	}
}
