package passthrough

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// allBytes is every byte value once, CR LF pairs included.
func allBytes() string {
	b := make([]byte, 0, 260)
	for i := range 256 {
		b = append(b, byte(i))
	}
	return string(b) + "\r\n\r\n"
}

func c(args ...string) []string { return args }

// corpus is deterministic: every reply depends only on the data, never on
// time, randomness or hash seeds (sets are sorted, SCAN sees one key, small
// hashes and sets are listpacks or intsets whose order is insertion order).
func corpus() [][]string {
	bin := allBytes()
	shortBin := "\x00\r\n\xff\x80 \"'\\"
	return [][]string{
		// strings
		c("SET", "s:1", "hello"),
		c("GET", "s:1"),
		c("GET", "s:missing"),
		c("SET", "s:n", "10"),
		c("INCR", "s:n"),
		c("INCRBY", "s:n", "-25"),
		c("DECR", "s:n"),
		c("INCR", "s:1"),
		c("INCRBYFLOAT", "s:f", "3.0e3"),
		c("INCRBYFLOAT", "s:f", "0.1"),
		c("INCRBYFLOAT", "s:f", "-10.5"),
		c("INCRBYFLOAT", "s:1", "1"),
		c("APPEND", "s:1", " world"),
		c("APPEND", "s:new", ""),
		c("GETRANGE", "s:1", "0", "4"),
		c("GETRANGE", "s:1", "-5", "-1"),
		c("GETRANGE", "s:1", "100", "200"),
		c("SETRANGE", "s:1", "6", "WORLD"),
		c("SETRANGE", "s:pad", "5", "x"),
		c("GET", "s:pad"),
		c("STRLEN", "s:1"),
		c("MSET", "m:1", "a", "m:2", "b", "m:3", "c"),
		c("MGET", "m:1", "m:missing", "m:2", "m:3"),
		c("MSETNX", "m:1", "z", "m:4", "d"),
		c("GETDEL", "m:1"),
		c("GETDEL", "m:1"),
		c("SET", "s:2", "v", "NX"),
		c("SET", "s:2", "w", "NX"),
		c("SET", "s:2", "w", "XX", "GET"),
		c("SET", "s:none", "w", "XX"),
		c("SET", "s:none", "w", "XX", "GET"),
		c("SET", "s:px", "v", "PX", "100000"),
		c("SET", "s:px", "v", "PX", "0"),
		c("SET", "s:px", "v", "PX", "notanumber"),
		c("SET", "s:2", "v", "NX", "XX"),
		c("GETSET", "s:2", "old"),
		c("SETNX", "s:2", "x"),
		c("GETEX", "s:2", "PERSIST"),
		c("LCS", "m:2", "m:3"),
		// binary values
		c("SET", "bin", bin),
		c("GET", "bin"),
		c("STRLEN", "bin"),
		c("SET", bin, "binary key"),
		c("GET", bin),
		c("SET", "crlf", "\r\n*1\r\n$4\r\nPING\r\n"),
		c("GET", "crlf"),
		c("ECHO", bin),
		c("SET", "empty", ""),
		c("GET", "empty"),
		// lists
		c("RPUSH", "l", "a", "b", "c", bin, "", "e"),
		c("LPUSH", "l", "z"),
		c("LRANGE", "l", "0", "-1"),
		c("LRANGE", "l", "2", "1"),
		c("LRANGE", "l:missing", "0", "-1"),
		c("LINDEX", "l", "3"),
		c("LINDEX", "l", "100"),
		c("LLEN", "l"),
		c("LPOP", "l"),
		c("RPOP", "l", "2"),
		c("LPOP", "l:missing"),
		c("LPOP", "l:missing", "2"),
		c("LPOS", "l", "b"),
		c("LINSERT", "l", "BEFORE", "b", "ins"),
		c("LSET", "l", "0", "set"),
		c("LSET", "l", "100", "set"),
		c("LREM", "l", "0", "c"),
		c("LTRIM", "l", "0", "2"),
		c("LMOVE", "l", "l2", "LEFT", "RIGHT"),
		c("LRANGE", "l2", "0", "-1"),
		c("OBJECT", "ENCODING", "l"),
		// hashes
		// Values stay under hash-max-listpack-value, so field order is insertion order.
		c("HSET", "h", "f1", "v1", "f2", "2", "f3", shortBin),
		c("HGET", "h", "f1"),
		c("HGET", "h", "nope"),
		c("HMGET", "h", "f1", "nope", "f2"),
		c("HGETALL", "h"),
		c("HGETALL", "h:missing"),
		c("HINCRBY", "h", "f2", "40"),
		c("HINCRBYFLOAT", "h", "f2", "0.25"),
		c("HINCRBY", "h", "f1", "1"),
		c("HKEYS", "h"),
		c("HVALS", "h"),
		c("HLEN", "h"),
		c("HEXISTS", "h", "f1"),
		c("HDEL", "h", "f3", "nope"),
		c("HSET", "h1", "only", "one"),
		c("HRANDFIELD", "h1"),
		c("HRANDFIELD", "h1", "-3", "WITHVALUES"),
		c("HRANDFIELD", "h:missing"),
		c("HRANDFIELD", "h:missing", "2"),
		c("HSCAN", "h", "0"),
		c("OBJECT", "ENCODING", "h"),
		// sets
		c("SADD", "set", "pear", "apple", "fig", "apple"),
		c("SORT", "set", "ALPHA"),
		c("SORT", "set", "ALPHA", "DESC", "LIMIT", "0", "2"),
		c("SCARD", "set"),
		c("SISMEMBER", "set", "fig"),
		c("SMISMEMBER", "set", "fig", "kiwi"),
		c("SADD", "iset", "3", "1", "2"),
		c("SMEMBERS", "iset"),
		c("SSCAN", "iset", "0"),
		c("SMEMBERS", "set:missing"),
		c("SADD", "set2", "fig", "kiwi"),
		c("SINTERCARD", "2", "set", "set2"),
		c("SINTER", "set", "set2"),
		c("SREM", "set", "pear", "nope"),
		c("OBJECT", "ENCODING", "iset"),
		// sorted sets
		c("ZADD", "z", "1", "one", "2.5", "two", "-inf", "low", "+inf", "high", "0.1", "tenth", "1e-7", "tiny", "123456789.123", "big"),
		c("ZRANGE", "z", "0", "-1", "WITHSCORES"),
		c("ZRANGE", "z", "0", "-1"),
		c("ZREVRANGE", "z", "0", "2", "WITHSCORES"),
		c("ZRANGEBYSCORE", "z", "(0", "3", "WITHSCORES", "LIMIT", "1", "2"),
		c("ZSCORE", "z", "two"),
		c("ZSCORE", "z", "tenth"),
		c("ZSCORE", "z", "tiny"),
		c("ZSCORE", "z", "big"),
		c("ZSCORE", "z", "low"),
		c("ZSCORE", "z", "nope"),
		c("ZMSCORE", "z", "one", "nope", "high"),
		c("ZINCRBY", "z", "0.1", "two"),
		c("ZINCRBY", "z", "1", "high"),
		c("ZRANK", "z", "one"),
		c("ZRANK", "z", "nope"),
		c("ZCARD", "z"),
		c("ZCOUNT", "z", "-inf", "+inf"),
		c("ZPOPMIN", "z"),
		c("ZPOPMAX", "z", "2"),
		c("ZADD", "z", "NX", "INCR", "5", "one"),
		c("ZADD", "z", "XX", "GT", "CH", "9", "one"),
		c("ZADD", "z", "nan", "x"),
		c("ZSCAN", "z", "0"),
		// streams, explicit IDs only
		c("XADD", "st", "1-1", "f", "v"),
		c("XADD", "st", "1-2", "a", "1", "b", bin),
		c("XADD", "st", "2-0", "f", "v2"),
		c("XADD", "st", "1-0", "f", "old"),
		c("XADD", "st", "0-0", "f", "zero"),
		c("XLEN", "st"),
		c("XRANGE", "st", "-", "+"),
		c("XRANGE", "st", "-", "+", "COUNT", "1"),
		c("XREVRANGE", "st", "+", "-"),
		c("XRANGE", "st:missing", "-", "+"),
		c("XREAD", "COUNT", "2", "STREAMS", "st", "0"),
		c("XREAD", "STREAMS", "st", "99-0"),
		c("XDEL", "st", "1-2"),
		c("XINFO", "STREAM", "st", "FULL"),
		c("XTRIM", "st", "MAXLEN", "1"),
		// bitmaps
		c("SETBIT", "bits", "7", "1"),
		c("SETBIT", "bits", "100", "1"),
		c("GETBIT", "bits", "7"),
		c("GETBIT", "bits", "8"),
		c("BITCOUNT", "bits"),
		c("BITPOS", "bits", "1"),
		c("BITOP", "NOT", "bits2", "bits"),
		c("GET", "bits"),
		c("GET", "bits2"),
		c("BITFIELD", "bf", "SET", "u8", "0", "255", "GET", "u4", "0", "INCRBY", "i5", "100", "1"),
		// HyperLogLog
		c("PFADD", "hll", "a", "b", "c", "d"),
		c("PFADD", "hll", "a"),
		c("PFCOUNT", "hll"),
		c("PFADD", "hll2", "x"),
		c("PFMERGE", "hll3", "hll", "hll2"),
		c("PFCOUNT", "hll3"),
		c("GET", "hll2"),
		// geo
		c("GEOADD", "geo", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"),
		c("GEODIST", "geo", "Palermo", "Catania"),
		c("GEODIST", "geo", "Palermo", "Catania", "km"),
		c("GEODIST", "geo", "Palermo", "Nowhere"),
		c("GEOPOS", "geo", "Palermo", "Nowhere", "Catania"),
		c("GEOHASH", "geo", "Palermo"),
		c("GEOSEARCH", "geo", "FROMLONLAT", "15", "37", "BYRADIUS", "200", "km", "ASC", "WITHCOORD", "WITHDIST", "WITHHASH"),
		c("GEOADD", "geo", "200", "100", "Bad"),
		// keys
		c("EXPIRE", "s:1", "100"),
		c("TTL", "s:1"),
		c("TTL", "s:2"),
		c("TTL", "s:missing"),
		c("PERSIST", "s:1"),
		c("PERSIST", "s:1"),
		c("TTL", "s:1"),
		c("EXPIRE", "s:missing", "100"),
		c("EXPIRE", "s:1", "100", "NX"),
		c("EXPIRE", "s:1", "notanint"),
		c("TYPE", "s:1"), c("TYPE", "l"), c("TYPE", "h"), c("TYPE", "set"), c("TYPE", "z"),
		c("TYPE", "st"), c("TYPE", "nope"),
		c("EXISTS", "s:1", "s:1", "nope", "l"),
		c("OBJECT", "ENCODING", "s:1"),
		c("OBJECT", "ENCODING", "s:n"),
		c("OBJECT", "ENCODING", "nope"),
		c("RENAME", "s:2", "s:3"),
		c("RENAME", "nope", "s:4"),
		c("DEL", "s:3", "nope", "m:2"),
		c("UNLINK", "m:3"),
		c("SET", "scan:only", "1"),
		c("SCAN", "0", "MATCH", "scan:*", "COUNT", "1000"),
		c("SCAN", "0", "MATCH", "nomatch:*", "COUNT", "1000"),
		c("SCAN", "0", "MATCH", "scan:*", "COUNT", "1000", "TYPE", "string"),
		c("COPY", "l2", "l3"),
		c("DUMP", "s:n"),
		// scripts
		c("EVAL", "return redis.status_reply('FINE')", "0"),
		c("EVAL", "return 'bulk'", "0"),
		c("EVAL", "return 42", "0"),
		c("EVAL", "return 3.99", "0"),
		c("EVAL", "return -7", "0"),
		c("EVAL", "return nil", "0"),
		c("EVAL", "return true", "0"),
		c("EVAL", "return false", "0"),
		c("EVAL", "return {}", "0"),
		c("EVAL", "return {1, 'two', {3, 'four', {}}, redis.error_reply('ERR inner'), redis.status_reply('ok'), true, false, 2.5}", "0"),
		c("EVAL", "return {1, nil, 3}", "0"),
		c("EVAL", "return redis.error_reply('MYCODE my message')", "0"),
		c("EVAL", "return redis.error_reply('no code')", "0"),
		c("EVAL", "return {err='CUSTOM table error'}", "0"),
		c("EVAL", "return redis.call('GET', KEYS[1])", "1", "bin"),
		c("EVAL", "return redis.call('HGETALL', KEYS[1])", "1", "h"),
		c("EVAL", "return redis.call('INCR', KEYS[1])", "1", "l"),
		c("EVAL", "return redis.pcall('INCR', KEYS[1])", "1", "l"),
		c("EVAL", "return ARGV", "0", "a", "", bin),
		c("EVAL", "error('boom')", "0"),
		c("EVAL", "this is not lua", "0"),
		c("EVAL", "return 1", "notanumber"),
		c("EVAL", "return 1", "5", "k"),
		c("EVALSHA", "0000000000000000000000000000000000000000", "0"),
		c("EVALSHA", "short", "0"),
		c("SCRIPT", "LOAD", "return 'loaded'"),
		c("SCRIPT", "EXISTS", "d9b8bc32ab70b74aa69ca8ca4c0b5f71de9e5b9e", "0000000000000000000000000000000000000000"),
		c("EVALSHA", "d9b8bc32ab70b74aa69ca8ca4c0b5f71de9e5b9e", "0"),
		c("SCRIPT", "FLUSH"),
		c("SCRIPT", "EXISTS", "d9b8bc32ab70b74aa69ca8ca4c0b5f71de9e5b9e"),
		c("EVALSHA", "d9b8bc32ab70b74aa69ca8ca4c0b5f71de9e5b9e", "0"),
		c("EVAL_RO", "return redis.call('GET', KEYS[1])", "1", "empty"),
		// errors of every kind
		c("LPUSH", "s:1", "x"),
		c("GET", "l"),
		c("HGET", "l", "f"),
		c("NOSUCHCOMMAND", "a", "b"),
		c("nosuchcommand"),
		c("GET"),
		c("GET", "a", "b"),
		c("SET", "k"),
		c("ECHO"),
		c("EcHo", "a", "b"),
		c("PING", "a", "b"),
		c("SET", "k", "v", "BOGUS"),
		c("INCR", "s:1"),
		c("INCRBY", "s:n", "1.5"),
		c("INCRBY", "s:n", "99999999999999999999"),
		c("INCRBY", "s:n", "9223372036854775807"),
		c("HINCRBYFLOAT", "h", "f2", "abc"),
		c("LRANGE", "l", "a", "b"),
		c("ZADD", "z", "notafloat", "m"),
		c("CONFIG", "GET", "maxmemory-policy"),
		c("OBJECT", "NOSUCHSUB"),
		// null bulk vs null array vs empty array
		c("GET", "nothing"),
		c("LPOP", "nothing", "5"),
		c("LRANGE", "nothing", "0", "-1"),
		c("MGET", "nothing", "nothing"),
		c("ZRANGE", "nothing", "0", "-1"),
		c("HMGET", "nothing", "a"),
		c("EXISTS", "nothing"),
	}
}

// clientKeys lists every key (KEYS *), sorted. The token authority's two
// keys are not among them: they live in Redis's highest database.
func clientKeys(t *testing.T, c *testenv.Conn) string {
	t.Helper()
	elems, ok := testenv.SplitArray(c.Do("KEYS", "*"))
	if !ok {
		t.Fatal("KEYS *: not an array")
	}
	var keys []string
	for _, el := range elems {
		k, _ := testenv.ParseBulk(el)
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	return fmt.Sprintf("%q", keys)
}

func TestFidelityCorpus(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	for _, cmd := range corpus() {
		same(t, proxy, direct, cmd...)
	}
	// Everything written must read back the same through both: the same
	// keys, the proxy's own aside.
	if got, want := clientKeys(t, proxy), clientKeys(t, direct); got != want {
		t.Errorf("keys via proxy %s, on Redis %s", got, want)
	}
	pr.alive(t)
}

// TestFidelityLargeValues moves 1 MB and 20 MB values both ways.
func TestFidelityLargeValues(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	proxy.SetTimeout(30 * time.Second)
	direct.SetTimeout(30 * time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1 << 20, 20 << 20} {
		v := make([]byte, size)
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		key := "big:" + strconv.Itoa(size)
		same(t, proxy, direct, "SET", key, string(v))
		got := same(t, proxy, direct, "GET", key)
		if body, ok := testenv.ParseBulk(got); !ok || !bytes.Equal(body, v) {
			t.Fatalf("GET %s via proxy did not return the %d bytes written", key, size)
		}
		same(t, proxy, direct, "STRLEN", key)
		same(t, proxy, direct, "GETRANGE", key, strconv.Itoa(size-10), "-1")
		same(t, proxy, direct, "APPEND", key, "tail")
		same(t, proxy, direct, "EVAL", "return string.len(ARGV[1])", "0", string(v))
	}
	same(t, proxy, direct, "RPUSH", "biglist", strings.Repeat("x", 1<<20), strings.Repeat("y", 1<<20))
	same(t, proxy, direct, "LRANGE", "biglist", "0", "-1")
	pr.alive(t)
}

// TestFidelityLongSimpleReplies: a script can make Redis send a status or
// error line of any length; the proxy must relay it like any other reply,
// without dropping its backend connection (which other clients share).
// testenv.Conn refuses lines over 64 KB, so this reads raw bytes: each EVAL
// is followed by a PING and everything up to its +PONG is compared.
func TestFidelityLongSimpleReplies(t *testing.T) {
	pr := startPair(t)
	for _, n := range []int{1000, 70000, 200000} {
		for _, script := range []string{
			fmt.Sprintf("return redis.status_reply(string.rep('s', %d))", n),
			fmt.Sprintf("return redis.error_reply('ERR ' .. string.rep('e', %d))", n),
			fmt.Sprintf("return {1, redis.status_reply(string.rep('s', %d))}", n),
		} {
			raw := testenv.AppendCommand(nil, "EVAL", script, "0")
			raw = testenv.AppendCommand(raw, "PING")
			got := untilPong(t, pr.Proxy.Addr, raw)
			want := untilPong(t, pr.B.Addr, raw)
			if !bytes.Equal(got, want) {
				t.Errorf("EVAL %q:\n proxy  %s\n redis  %s", script, testenv.ShowReply(got), testenv.ShowReply(want))
			}
		}
	}
	pr.alive(t)
}

// untilPong writes raw to a new connection and reads until the bytes end
// in +PONG, the peer closes, or 10s pass.
func untilPong(t *testing.T, addr string, raw []byte) []byte {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(raw); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 64<<10)
	for !bytes.HasSuffix(got, []byte("+PONG\r\n")) && len(got) < 4<<20 {
		n, err := nc.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	return got
}

// mixedPipeline is n commands over a small keyspace, from a seeded generator:
// writes, reads, errors, local commands and nulls interleaved.
func mixedPipeline(n int, seed uint64) [][]string {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	key := func(kind string) string { return fmt.Sprintf("p:%s:%d", kind, rng.IntN(8)) }
	val := func() string {
		switch rng.IntN(4) {
		case 0:
			return ""
		case 1:
			return strconv.Itoa(rng.IntN(1000) - 500)
		case 2:
			return allBytes()[rng.IntN(200):]
		default:
			return strings.Repeat("v", rng.IntN(5000))
		}
	}
	gens := []func() []string{
		func() []string { return c("SET", key("s"), val()) },
		func() []string { return c("GET", key("s")) },
		func() []string { return c("INCR", key("s")) },
		func() []string { return c("APPEND", key("s"), val()) },
		func() []string { return c("MGET", key("s"), key("s"), key("l")) },
		func() []string { return c("RPUSH", key("l"), val(), val()) },
		func() []string { return c("LRANGE", key("l"), "0", "-1") },
		func() []string { return c("LPOP", key("l"), "2") },
		// short values: a listpack hash replies in insertion order on both
		func() []string {
			return c("HSET", key("h"), "f"+strconv.Itoa(rng.IntN(4)), strconv.Itoa(rng.IntN(1000)))
		},
		func() []string { return c("HGETALL", key("h")) },
		func() []string {
			return c("ZADD", key("z"), strconv.Itoa(rng.IntN(100))+".5", "m"+strconv.Itoa(rng.IntN(5)))
		},
		func() []string { return c("ZRANGE", key("z"), "0", "-1", "WITHSCORES") },
		func() []string { return c("DEL", key("s"), key("l")) },
		func() []string { return c("EXISTS", key("h"), key("z")) },
		func() []string { return c("TYPE", key("s")) },
		func() []string { return c("PING") },
		func() []string { return c("PING", val()) },
		func() []string { return c("ECHO", val()) },
		func() []string { return c("NOSUCH", "x") },
		func() []string { return c("GET") },
		func() []string {
			return c("EVAL", "return {KEYS[1], ARGV[1], redis.status_reply('S')}", "1", key("s"), val())
		},
		func() []string { return c("EVAL", "return redis.pcall('INCR', KEYS[1])", "1", key("l")) },
	}
	out := make([][]string, n)
	for i := range out {
		out[i] = gens[rng.IntN(len(gens))]()
	}
	return out
}

// TestFidelityPipeline sends 500 mixed commands in one write to each and
// compares the replies in order.
func TestFidelityPipeline(t *testing.T) {
	pr := startPair(t)
	cmds := mixedPipeline(500, 7)
	var raw []byte
	for _, cmd := range cmds {
		raw = testenv.AppendCommand(raw, cmd...)
	}
	proxy, direct := pr.conns(t)
	proxy.WriteRaw(raw)
	direct.WriteRaw(raw)
	for i, cmd := range cmds {
		got, err := proxy.ReadReply()
		if err != nil {
			t.Fatalf("reply %d (%s) via proxy: %v", i, testenv.ShowCommand(cmd), err)
		}
		want, err := direct.ReadReply()
		if err != nil {
			t.Fatalf("reply %d (%s) direct: %v", i, testenv.ShowCommand(cmd), err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("reply %d (%s):\n proxy  %s\n redis  %s", i, testenv.ShowCommand(cmd), testenv.ShowReply(got), testenv.ShowReply(want))
		}
	}
	same(t, proxy, direct, "PING", "after the pipeline")
	pr.alive(t)
}

// TestPipelineConcurrentIncr: 50 connections each pipeline INCRs on a key of
// their own, all at once; each must read 1..N in order.
func TestPipelineConcurrentIncr(t *testing.T) {
	const conns, perConn = 50, 2000 // 100,000 INCRs in all
	pr := startPair(t)
	cs := make([]*testenv.Conn, conns)
	for i := range cs {
		cs[i] = testenv.Dial(t, pr.Proxy.Addr)
		cs[i].SetTimeout(60 * time.Second)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*conns)
	for i, cn := range cs {
		key := "incr:" + strconv.Itoa(i)
		var raw []byte
		for range perConn {
			raw = testenv.AppendCommand(raw, "INCR", key)
		}
		wg.Add(2)
		go func() { // write while the reader drains, so neither side stalls
			defer wg.Done()
			if _, err := cn.NetConn().Write(raw); err != nil {
				errs <- fmt.Errorf("conn %d: write: %v", i, err)
			}
		}()
		go func() {
			defer wg.Done()
			for n := 1; n <= perConn; n++ {
				got, err := cn.ReadReply()
				if err != nil {
					errs <- fmt.Errorf("conn %d: reply %d: %v", i, n, err)
					return
				}
				if want := ":" + strconv.Itoa(n) + "\r\n"; string(got) != want {
					errs <- fmt.Errorf("conn %d: reply %d is %q, want %q", i, n, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	pr.alive(t)
}

// TestLocalCommands covers what the proxy answers itself.
func TestLocalCommands(t *testing.T) {
	pr := startPair(t)
	proxy, direct := pr.conns(t)
	for _, cmd := range [][]string{
		c("PING"), c("ping"), c("PING", "hello"), c("PING", ""), c("PING", allBytes()),
		c("PING", "a", "b"), c("ECHO", "x"), c("ECHO", ""), c("ECHO"),
		c("SELECT", "0"), c("SELECT"), c("SELECT", "x"), c("SELECT", "0", "1"),
		c("CLIENT", "GETNAME"), c("CLIENT", "SETNAME", "bad name"), c("CLIENT", "SETNAME", "n1"),
		c("CLIENT", "GETNAME"), c("CLIENT", "SETNAME", ""), c("CLIENT", "GETNAME"),
		c("CLIENT", "SETNAME"), c("CLIENT", "GETNAME", "x"), c("CLIENT"),
		c("HELLO", "x"), c("HELLO", "1"), c("HELLO", "4"),
		c("AUTH", "default", "whatever"),
	} {
		same(t, proxy, direct, cmd...)
	}
	id, ok := testenv.ParseInt(proxy.Do("CLIENT", "ID"))
	if !ok || id <= 0 {
		t.Errorf("CLIENT ID: not a positive integer")
	}
	if id2, _ := testenv.ParseInt(testenv.Dial(t, pr.Proxy.Addr).Do("CLIENT", "ID")); id2 == id {
		t.Errorf("two connections share CLIENT ID %d", id)
	}

	// HELLO 2: the same map as Redis's, except the connection id.
	checkHello := func(args ...string) {
		t.Helper()
		got, ok1 := testenv.SplitArray(proxy.Do(args...))
		want, ok2 := testenv.SplitArray(direct.Do(args...))
		if !ok1 || !ok2 || len(got) != len(want) || len(got) != 14 {
			t.Fatalf("%s: proxy %d elements, redis %d", testenv.ShowCommand(args), len(got), len(want))
		}
		for i := 0; i < len(got); i += 2 {
			if !bytes.Equal(got[i], want[i]) {
				t.Errorf("%s field %d: proxy %q, redis %q", testenv.ShowCommand(args), i/2, got[i], want[i])
			}
			if string(got[i]) == "$2\r\nid\r\n" {
				if n, ok := testenv.ParseInt(got[i+1]); !ok || n != id {
					t.Errorf("%s id: %q, want :%d (CLIENT ID)", testenv.ShowCommand(args), got[i+1], id)
				}
				continue
			}
			if !bytes.Equal(got[i+1], want[i+1]) {
				t.Errorf("%s %q: proxy %q, redis %q", testenv.ShowCommand(args), got[i], got[i+1], want[i+1])
			}
		}
	}
	checkHello("HELLO")
	checkHello("HELLO", "2")
	checkHello("HELLO", "2", "SETNAME", "viahello")
	if got := proxy.Do("CLIENT", "GETNAME"); string(got) != "$8\r\nviahello\r\n" {
		t.Errorf("CLIENT GETNAME after HELLO SETNAME: %q", got)
	}
	same(t, proxy, direct, "HELLO", "4")
	same(t, proxy, direct, "HELLO", "x")
	same(t, proxy, direct, "PING") // still RESP2, still usable

	// QUIT: +OK, then the proxy closes.
	q := testenv.Dial(t, pr.Proxy.Addr)
	q.Send("QUIT")
	q.Send("PING")
	q.Flush()
	if got, err := q.ReadReply(); err != nil || string(got) != "+OK\r\n" {
		t.Fatalf("QUIT: %q %v", got, err)
	}
	if got, err := q.ReadReply(); err == nil {
		t.Fatalf("after QUIT the connection answered %q; want it closed", got)
	}
	pr.alive(t)
}

// TestRefusedCommands: what the proxy cannot do yet gets a clear error,
// never a wrong answer, and the connection stays usable.
func TestRefusedCommands(t *testing.T) {
	pr := startPair(t)
	proxy := testenv.Dial(t, pr.Proxy.Addr)
	for _, cmd := range [][]string{
		c("CLIENT", "PAUSE", "10"), c("SHUTDOWN"), c("PSYNC", "?", "-1"), c("REPLCONF", "listening-port", "1"),
	} {
		got := proxy.Do(cmd...)
		if !bytes.HasPrefix(got, []byte("-ERR fenceproxy:")) {
			t.Errorf("%s: %q, want -ERR fenceproxy: …", testenv.ShowCommand(cmd), got)
		}
		if got := proxy.Do("PING"); string(got) != "+PONG\r\n" {
			t.Fatalf("after %s: PING answered %q", testenv.ShowCommand(cmd), got)
		}
	}
	// XREAD without BLOCK is an ordinary command; a key named "block" is not the option.
	proxy.Do("XADD", "st", "1-1", "f", "v")
	proxy.Do("XADD", "block", "1-1", "f", "v")
	if got := proxy.Do("XREAD", "STREAMS", "st", "0"); !bytes.HasPrefix(got, []byte("*1\r\n")) {
		t.Errorf("XREAD STREAMS st 0: %q", got)
	}
	if got := proxy.Do("XREAD", "STREAMS", "block", "0"); !bytes.HasPrefix(got, []byte("*1\r\n")) {
		t.Errorf("XREAD STREAMS block 0: %q", got)
	}
	pr.alive(t)
}
