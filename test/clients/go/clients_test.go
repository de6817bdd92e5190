// Package clients_test is the Go client compatibility suite for fenceproxy:
// go-redis v9 (with its default options, which speak RESP3 after HELLO 3,
// and with Protocol: 2) and rueidis (AlwaysRESP2 without a cache, and with
// its client-side cache over RESP3: CLIENT TRACKING through the proxy).
//
// It runs only when FENCEPROXY_ADDR names a running proxy (test/clients/run.sh
// sets it); `go test ./...` without it skips. Each case prints
// `PASS go: NAME` or `FAIL go <client>: NAME: CALL -> REPLY`, and the run ends
// with `go totals: N passed, M failed`. Cases named `tx: ...` need
// MULTI/EXEC/WATCH through the proxy; cases named `pubsub: ...` subscribe.
package clients_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

var (
	addr    = os.Getenv("FENCEPROXY_ADDR")
	runID   string
	passed  atomic.Int64
	failedN atomic.Int64
)

func TestMain(m *testing.M) {
	if addr == "" {
		fmt.Println("go client suite: FENCEPROXY_ADDR is not set; skipping (test/clients/run.sh sets it)")
		os.Exit(0)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	runID = hex.EncodeToString(b)
	code := m.Run()
	fmt.Println("go covered: go-redis v9 default options (RESP3) and Protocol 2: data commands, " +
		"Pipelined, TxPipelined, Watch conflict, Do(LOCK.*), errors, pub/sub (Subscribe, PSubscribe, Lua PUBLISH, SSubscribe); " +
		"rueidis: data commands, DoMulti, lock family via Arbitrary, Receive(SUBSCRIBE), client-side cache (DoCache invalidated)")
	fmt.Printf("go totals: %d passed, %d failed\n", passed.Load(), failedN.Load())
	os.Exit(code)
}

// key names a case's key; one hash tag per run and client, so a case's keys
// share a slot and multi-key commands and transactions are valid in front of
// a Redis Cluster too.
func key(client, name string) string { return "clients:go:{" + runID + ":" + client + "}:" + name }

// published is what a test expects PUBLISH to have counted: in front of a
// Redis Cluster (run.sh --cluster) PUBLISH counts only the subscribers of the
// node it runs on, so 0 is as good as 1 there; delivery is checked apart.
func published(n int64) int64 {
	if n == 0 && os.Getenv("FENCEPROXY_CLUSTER") == "1" {
		return 1
	}
	return n
}

// fail reports CALL -> REPLY for CLIENT and stops the case.
func fail(t *testing.T, client, call string, reply any, want any) {
	t.Helper()
	msg := fmt.Sprintf("%s -> %s", call, show(reply))
	if want != nil {
		msg += fmt.Sprintf(" (want %v)", want)
	}
	t.Fatalf("FAIL go %s: %s: %s", client, t.Name(), msg)
}

func show(v any) string {
	if err, ok := v.(error); ok {
		return fmt.Sprintf("error(%v)", err)
	}
	return fmt.Sprintf("%#v", v)
}

// run runs one case as a subtest and counts it.
func run(t *testing.T, name string, fn func(t *testing.T)) {
	start := time.Now()
	ok := t.Run(name, fn)
	if ok {
		passed.Add(1)
		fmt.Printf("PASS go: %s/%s (%d ms)\n", t.Name(), name, time.Since(start).Milliseconds())
	} else {
		failedN.Add(1)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ---- go-redis --------------------------------------------------------------------

func goRedis(proto int) *redis.Client {
	opt := &redis.Options{Addr: addr, DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
	if proto != 0 {
		opt.Protocol = proto
	}
	return redis.NewClient(opt)
}

func TestGoRedisDefaultOptions(t *testing.T) {
	const cl = "go-redis v9 (default options: HELLO 3 first)"
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	run(t, "HELLO 3 handshake, then PING, SET, GET, HGETALL over RESP3", func(t *testing.T) {
		ctx := ctxT(t)
		if v, err := c.Ping(ctx).Result(); err != nil || v != "PONG" {
			fail(t, cl, "PING", orErr(v, err), "PONG")
		}
		k := key("def", "s")
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			fail(t, cl, "SET", err, "OK")
		}
		if v, err := c.Get(ctx, k).Result(); err != nil || v != "v" {
			fail(t, cl, "GET", orErr(v, err), "v")
		}
		c.HSet(ctx, key("def", "h"), "a", "1", "b", "2")
		if v, err := c.HGetAll(ctx, key("def", "h")).Result(); err != nil || len(v) != 2 || v["a"] != "1" {
			fail(t, cl, "HGETALL", orErr(v, err), "map[a:1 b:2]")
		}
	})
	run(t, "Do(LOCK.ACQUIRE/LOCK.RELEASE) with default options", func(t *testing.T) {
		ctx := ctxT(t)
		res := key("def", "lock")
		tok, err := c.Do(ctx, "LOCK.ACQUIRE", res, "o1", 5000).Int64()
		if err != nil || tok <= 0 {
			fail(t, cl, "Do(LOCK.ACQUIRE)", orErr(tok, err), "a token")
		}
		if v, err := c.Do(ctx, "LOCK.RELEASE", res, "o1").Int64(); err != nil || v != 1 {
			fail(t, cl, "Do(LOCK.RELEASE)", orErr(v, err), 1)
		}
	})
}

func orErr(v any, err error) any {
	if err != nil {
		return err
	}
	return v
}

func TestGoRedisProtocol2(t *testing.T) {
	const cl = "go-redis v9 (Protocol: 2)"
	c := goRedis(2)
	c2 := goRedis(2)
	defer c.Close()
	defer c2.Close()
	k := func(n string) string { return key("p2", n) }

	run(t, "data commands: strings, hashes, lists, sets, zsets, binary, errors", func(t *testing.T) {
		ctx := ctxT(t)
		if err := c.Set(ctx, k("s"), "hello", 0).Err(); err != nil {
			fail(t, cl, "SET", err, "OK")
		}
		if v, err := c.Incr(ctx, k("n")).Result(); err != nil || v != 1 {
			fail(t, cl, "INCR", orErr(v, err), 1)
		}
		if v, err := c.MGet(ctx, k("s"), k("missing")).Result(); err != nil || len(v) != 2 || v[0] != "hello" || v[1] != nil {
			fail(t, cl, "MGET", orErr(v, err), `["hello", nil]`)
		}
		if v, err := c.Get(ctx, k("missing")).Result(); !errors.Is(err, redis.Nil) {
			fail(t, cl, "GET missing", orErr(v, err), "redis.Nil")
		}
		if v, err := c.HSet(ctx, k("h"), map[string]any{"a": "1", "b": "2"}).Result(); err != nil || v != 2 {
			fail(t, cl, "HSET", orErr(v, err), 2)
		}
		if v, err := c.RPush(ctx, k("l"), "a", "b", "c").Result(); err != nil || v != 3 {
			fail(t, cl, "RPUSH", orErr(v, err), 3)
		}
		if v, err := c.LRange(ctx, k("l"), 0, -1).Result(); err != nil || strings.Join(v, ",") != "a,b,c" {
			fail(t, cl, "LRANGE", orErr(v, err), "[a b c]")
		}
		if v, err := c.SAdd(ctx, k("set"), "a", "b", "a").Result(); err != nil || v != 2 {
			fail(t, cl, "SADD", orErr(v, err), 2)
		}
		if v, err := c.ZAdd(ctx, k("z"), redis.Z{Score: 1, Member: "a"}, redis.Z{Score: 2.5, Member: "b"}).Result(); err != nil || v != 2 {
			fail(t, cl, "ZADD", orErr(v, err), 2)
		}
		if v, err := c.ZRangeWithScores(ctx, k("z"), 0, -1).Result(); err != nil || len(v) != 2 || v[1].Score != 2.5 {
			fail(t, cl, "ZRANGE WITHSCORES", orErr(v, err), "[{1 a} {2.5 b}]")
		}
		bin := make([]byte, 4096)
		for i := range bin {
			bin[i] = byte(i)
		}
		c.Set(ctx, k("bin\x00\xff"), bin, 0)
		if v, err := c.Get(ctx, k("bin\x00\xff")).Bytes(); err != nil || !bytes.Equal(v, bin) {
			fail(t, cl, "GET binary", orErr(len(v), err), "the 4096 bytes set")
		}
		if err := c.Incr(ctx, k("s")).Err(); err == nil || !strings.Contains(err.Error(), "not an integer") {
			fail(t, cl, "INCR on a string", err, "ERR value is not an integer")
		}
		if err := c.Get(ctx, k("h")).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			fail(t, cl, "GET on a hash", err, "WRONGTYPE")
		}
	})

	run(t, "Pipelined: 200 commands in order, with lock commands mixed in", func(t *testing.T) {
		ctx := ctxT(t)
		var gets []*redis.StringCmd
		var acq *redis.Cmd
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := 0; i < 100; i++ {
				p.Set(ctx, k(fmt.Sprint("p", i)), i, 0)
				gets = append(gets, p.Get(ctx, k(fmt.Sprint("p", i))))
			}
			acq = p.Do(ctx, "LOCK.ACQUIRE", k("plock"), "o", 5000)
			p.Do(ctx, "LOCK.RELEASE", k("plock"), "o")
			return nil
		})
		if err != nil || len(cmds) != 202 {
			fail(t, cl, "Pipelined", orErr(len(cmds), err), 202)
		}
		for i, g := range gets {
			if g.Val() != fmt.Sprint(i) {
				fail(t, cl, fmt.Sprintf("Pipelined GET p%d", i), g.Val(), i)
			}
		}
		if v, err := acq.Int64(); err != nil || v <= 0 {
			fail(t, cl, "Pipelined LOCK.ACQUIRE", orErr(v, err), "a token")
		}
	})

	run(t, "Do: lock family (token, same-owner retry, other owner nil, FENCE.CHECK, LOCK.INFO, errors)", func(t *testing.T) {
		ctx := ctxT(t)
		res := k("fam")
		t1, err := c.Do(ctx, "LOCK.ACQUIRE", res, "owner-1", 5000).Int64()
		if err != nil || t1 <= 0 {
			fail(t, cl, "Do(LOCK.ACQUIRE owner-1)", orErr(t1, err), "a token")
		}
		if v, err := c.Do(ctx, "LOCK.ACQUIRE", res, "owner-1", 5000).Int64(); err != nil || v != t1 {
			fail(t, cl, "Do(LOCK.ACQUIRE owner-1) retry", orErr(v, err), t1)
		}
		if v, err := c2.Do(ctx, "LOCK.ACQUIRE", res, "owner-2", 5000).Result(); !errors.Is(err, redis.Nil) {
			fail(t, cl, "Do(LOCK.ACQUIRE owner-2) while held", orErr(v, err), "redis.Nil")
		}
		if v, err := c.Do(ctx, "FENCE.CHECK", res, t1).Int64(); err != nil || v != 1 {
			fail(t, cl, "Do(FENCE.CHECK t1)", orErr(v, err), 1)
		}
		info, err := c.Do(ctx, "LOCK.INFO", res).Slice()
		if err != nil || len(info) < 8 || info[0] != "owner" || info[1] != "owner-1" || info[2] != "token" || info[3] != t1 {
			fail(t, cl, "Do(LOCK.INFO)", orErr(info, err), "[owner owner-1 token t1 ttl-ms N waiters 0]")
		}
		if v, err := c.Do(ctx, "LOCK.RENEW", res, "owner-1", 5000).Int64(); err != nil || v != t1 {
			fail(t, cl, "Do(LOCK.RENEW)", orErr(v, err), t1)
		}
		if v, err := c.Do(ctx, "LOCK.RELEASE", res, "owner-1").Int64(); err != nil || v != 1 {
			fail(t, cl, "Do(LOCK.RELEASE)", orErr(v, err), 1)
		}
		t2, err := c2.Do(ctx, "LOCK.ACQUIRE", res, "owner-2", 5000).Int64()
		if err != nil || t2 <= t1 {
			fail(t, cl, "Do(LOCK.ACQUIRE owner-2) after release", orErr(t2, err), fmt.Sprintf("> %d", t1))
		}
		if v, err := c.Do(ctx, "FENCE.CHECK", res, t1).Int64(); err != nil || v != 0 {
			fail(t, cl, "Do(FENCE.CHECK stale)", orErr(v, err), 0)
		}
		c2.Do(ctx, "LOCK.RELEASE", res, "owner-2")
		if err := c.Do(ctx, "LOCK.ACQUIRE", res, "o").Err(); err == nil || !strings.Contains(err.Error(), "wrong number of arguments") {
			fail(t, cl, "Do(LOCK.ACQUIRE res o)", err, "ERR wrong number of arguments")
		}
		if err := c.Do(ctx, "LOCK.ACQUIRE", res, "o", 0).Err(); err == nil || !strings.Contains(err.Error(), "ttl-ms") {
			fail(t, cl, "Do(LOCK.ACQUIRE ttl 0)", err, "ERR ttl-ms ...")
		}
		if v, err := c.Ping(ctx).Result(); err != nil || v != "PONG" {
			fail(t, cl, "PING after errors", orErr(v, err), "PONG")
		}
	})

	run(t, "tx: TxPipelined (MULTI/EXEC)", func(t *testing.T) {
		ctx := ctxT(t)
		var incr *redis.IntCmd
		var get *redis.StringCmd
		_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, k("tx1"), 1, 0)
			incr = p.IncrBy(ctx, k("tx1"), 10)
			get = p.Get(ctx, k("tx1"))
			return nil
		})
		if err != nil || incr.Val() != 11 || get.Val() != "11" {
			fail(t, cl, "TxPipelined SET INCRBY GET", orErr([]any{incr.Val(), get.Val()}, err), "[11 11]")
		}
	})

	run(t, "tx: Watch with a conflicting write returns redis.TxFailedErr", func(t *testing.T) {
		ctx := ctxT(t)
		kk := k("tx2")
		c.Set(ctx, kk, 1, 0)
		err := c.Watch(ctx, func(tx *redis.Tx) error {
			v, err := tx.Get(ctx, kk).Int()
			if err != nil {
				return err
			}
			if err := c2.Set(ctx, kk, 100, 0).Err(); err != nil { // the conflict
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, kk, v+1, 0)
				return nil
			})
			return err
		}, kk)
		if !errors.Is(err, redis.TxFailedErr) {
			fail(t, cl, "Watch(k){GET; other SET k; MULTI SET EXEC}", err, "redis.TxFailedErr")
		}
		if v, _ := c.Get(ctx, kk).Result(); v != "100" {
			fail(t, cl, "GET after the aborted EXEC", v, "100")
		}
	})

	run(t, "tx: Watch without a conflict commits", func(t *testing.T) {
		ctx := ctxT(t)
		kk := k("tx3")
		c.Set(ctx, kk, 1, 0)
		err := c.Watch(ctx, func(tx *redis.Tx) error {
			v, err := tx.Get(ctx, kk).Int()
			if err != nil {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, kk, v+1, 0)
				return nil
			})
			return err
		}, kk)
		if err != nil {
			fail(t, cl, "Watch(k){GET; MULTI SET EXEC}", err, "nil")
		}
		if v, _ := c.Get(ctx, kk).Result(); v != "2" {
			fail(t, cl, "GET after EXEC", v, "2")
		}
	})
}

// ---- rueidis ---------------------------------------------------------------------

func TestRueidis(t *testing.T) {
	const cl = "rueidis (AlwaysRESP2, DisableCache)"
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{addr},
		AlwaysRESP2:       true,
		DisableCache:      true,
		ForceSingleClient: true,
		ConnWriteTimeout:  5 * time.Second,
	})
	if err != nil {
		failedN.Add(1)
		t.Fatalf("FAIL go %s: NewClient: %v", cl, err)
	}
	defer c.Close()
	k := func(n string) string { return key("rue", n) }

	run(t, "data commands: SET/GET/INCR/HSET/HGETALL/RPUSH/LRANGE/ZADD/binary/nil/errors", func(t *testing.T) {
		ctx := ctxT(t)
		if err := c.Do(ctx, c.B().Set().Key(k("s")).Value("hello").Build()).Error(); err != nil {
			fail(t, cl, "SET", err, "OK")
		}
		if v, err := c.Do(ctx, c.B().Get().Key(k("s")).Build()).ToString(); err != nil || v != "hello" {
			fail(t, cl, "GET", orErr(v, err), "hello")
		}
		if err := c.Do(ctx, c.B().Get().Key(k("missing")).Build()).Error(); !rueidis.IsRedisNil(err) {
			fail(t, cl, "GET missing", err, "redis nil")
		}
		if v, err := c.Do(ctx, c.B().Incr().Key(k("n")).Build()).AsInt64(); err != nil || v != 1 {
			fail(t, cl, "INCR", orErr(v, err), 1)
		}
		c.Do(ctx, c.B().Hset().Key(k("h")).FieldValue().FieldValue("a", "1").FieldValue("b", "2").Build())
		if v, err := c.Do(ctx, c.B().Hgetall().Key(k("h")).Build()).AsStrMap(); err != nil || v["a"] != "1" || v["b"] != "2" {
			fail(t, cl, "HGETALL", orErr(v, err), "map[a:1 b:2]")
		}
		c.Do(ctx, c.B().Rpush().Key(k("l")).Element("a", "b").Build())
		if v, err := c.Do(ctx, c.B().Lrange().Key(k("l")).Start(0).Stop(-1).Build()).AsStrSlice(); err != nil || strings.Join(v, ",") != "a,b" {
			fail(t, cl, "LRANGE", orErr(v, err), "[a b]")
		}
		if v, err := c.Do(ctx, c.B().Zadd().Key(k("z")).ScoreMember().ScoreMember(1.5, "m").Build()).AsInt64(); err != nil || v != 1 {
			fail(t, cl, "ZADD", orErr(v, err), 1)
		}
		bin := string([]byte{0, 1, 2, 0xff, '\r', '\n'})
		c.Do(ctx, c.B().Set().Key(k("bin")).Value(bin).Build())
		if v, err := c.Do(ctx, c.B().Get().Key(k("bin")).Build()).ToString(); err != nil || v != bin {
			fail(t, cl, "GET binary", orErr(v, err), []byte(bin))
		}
		if err := c.Do(ctx, c.B().Incr().Key(k("s")).Build()).Error(); err == nil || !strings.Contains(err.Error(), "not an integer") {
			fail(t, cl, "INCR on a string", err, "ERR value is not an integer")
		}
	})

	run(t, "DoMulti pipeline: 100 commands in order, lock commands mixed in", func(t *testing.T) {
		ctx := ctxT(t)
		cmds := make(rueidis.Commands, 0, 102)
		for i := 0; i < 50; i++ {
			cmds = append(cmds, c.B().Set().Key(k(fmt.Sprint("p", i))).Value(fmt.Sprint(i)).Build())
			cmds = append(cmds, c.B().Get().Key(k(fmt.Sprint("p", i))).Build())
		}
		cmds = append(cmds, c.B().Arbitrary("LOCK.ACQUIRE").Args(k("plock"), "o", "5000").Build())
		cmds = append(cmds, c.B().Arbitrary("LOCK.RELEASE").Args(k("plock"), "o").Build())
		res := c.DoMulti(ctx, cmds...)
		for i := 0; i < 50; i++ {
			if v, err := res[2*i+1].ToString(); err != nil || v != fmt.Sprint(i) {
				fail(t, cl, fmt.Sprintf("DoMulti GET p%d", i), orErr(v, err), i)
			}
		}
		if v, err := res[100].AsInt64(); err != nil || v <= 0 {
			fail(t, cl, "DoMulti LOCK.ACQUIRE", orErr(v, err), "a token")
		}
		if v, err := res[101].AsInt64(); err != nil || v != 1 {
			fail(t, cl, "DoMulti LOCK.RELEASE", orErr(v, err), 1)
		}
	})

	run(t, "lock family via B().Arbitrary(...)", func(t *testing.T) {
		ctx := ctxT(t)
		res := k("fam")
		do := func(args ...string) rueidis.RedisResult {
			return c.Do(ctx, c.B().Arbitrary(args[0]).Args(args[1:]...).Build())
		}
		t1, err := do("LOCK.ACQUIRE", res, "owner-1", "5000").AsInt64()
		if err != nil || t1 <= 0 {
			fail(t, cl, "LOCK.ACQUIRE owner-1", orErr(t1, err), "a token")
		}
		if v, err := do("LOCK.ACQUIRE", res, "owner-1", "5000").AsInt64(); err != nil || v != t1 {
			fail(t, cl, "LOCK.ACQUIRE retry", orErr(v, err), t1)
		}
		if err := do("LOCK.ACQUIRE", res, "owner-2", "5000").Error(); !rueidis.IsRedisNil(err) {
			fail(t, cl, "LOCK.ACQUIRE other owner", err, "redis nil")
		}
		if v, err := do("FENCE.CHECK", res, fmt.Sprint(t1)).AsInt64(); err != nil || v != 1 {
			fail(t, cl, "FENCE.CHECK", orErr(v, err), 1)
		}
		info, err := do("LOCK.INFO", res).ToArray()
		if err != nil || len(info) < 8 {
			fail(t, cl, "LOCK.INFO", orErr(info, err), "8+ elements")
		}
		if o, _ := info[1].ToString(); o != "owner-1" {
			fail(t, cl, "LOCK.INFO owner", o, "owner-1")
		}
		if tok, _ := info[3].AsInt64(); tok != t1 {
			fail(t, cl, "LOCK.INFO token", tok, t1)
		}
		if v, err := do("LOCK.RENEW", res, "owner-1", "5000").AsInt64(); err != nil || v != t1 {
			fail(t, cl, "LOCK.RENEW", orErr(v, err), t1)
		}
		if v, err := do("LOCK.RELEASE", res, "owner-2").AsInt64(); err != nil || v != 0 {
			fail(t, cl, "LOCK.RELEASE other", orErr(v, err), 0)
		}
		if v, err := do("LOCK.RELEASE", res, "owner-1").AsInt64(); err != nil || v != 1 {
			fail(t, cl, "LOCK.RELEASE", orErr(v, err), 1)
		}
		if err := do("LOCK.ACQUIRE", res, "o", "0").Error(); err == nil || !strings.Contains(err.Error(), "ttl-ms") {
			fail(t, cl, "LOCK.ACQUIRE ttl 0", err, "ERR ttl-ms ...")
		}
		if err := do("FENCE.CHECK", k("never"), "99999999999").Error(); err == nil {
			fail(t, cl, "FENCE.CHECK never issued", err, "an ERR")
		}
		if v, err := c.Do(ctx, c.B().Ping().Build()).ToString(); err != nil || v != "PONG" {
			fail(t, cl, "PING after errors", orErr(v, err), "PONG")
		}
	})

	run(t, "tx: Dedicated WATCH/MULTI/EXEC, conflict gives a nil EXEC", func(t *testing.T) {
		ctx := ctxT(t)
		kk := k("tx1")
		c.Do(ctx, c.B().Set().Key(kk).Value("1").Build())
		err := c.Dedicated(func(d rueidis.DedicatedClient) error {
			if err := d.Do(ctx, d.B().Watch().Key(kk).Build()).Error(); err != nil {
				fail(t, cl, "WATCH", err, "OK")
			}
			c.Do(ctx, c.B().Set().Key(kk).Value("100").Build()) // the conflict, on another connection
			res := d.DoMulti(ctx,
				d.B().Multi().Build(),
				d.B().Set().Key(kk).Value("2").Build(),
				d.B().Exec().Build())
			if err := res[2].Error(); !rueidis.IsRedisNil(err) {
				fail(t, cl, "WATCH k; (other SET k); MULTI; SET; EXEC", orErr(res[2].String(), err), "nil EXEC")
			}
			return nil
		})
		if err != nil {
			fail(t, cl, "Dedicated", err, nil)
		}
	})

	run(t, "tx: DoMulti MULTI ... EXEC", func(t *testing.T) {
		ctx := ctxT(t)
		kk := k("tx2")
		err := c.Dedicated(func(d rueidis.DedicatedClient) error {
			res := d.DoMulti(ctx,
				d.B().Multi().Build(),
				d.B().Set().Key(kk).Value("1").Build(),
				d.B().Incr().Key(kk).Build(),
				d.B().Exec().Build())
			arr, err := res[3].ToArray()
			if err != nil || len(arr) != 2 {
				fail(t, cl, "MULTI SET INCR EXEC", orErr(res[3].String(), err), "[OK 2]")
			}
			if v, _ := arr[1].AsInt64(); v != 2 {
				fail(t, cl, "EXEC's INCR reply", v, 2)
			}
			return nil
		})
		if err != nil {
			fail(t, cl, "Dedicated", err, nil)
		}
	})
}

// ---- pub/sub ---------------------------------------------------------------------

const luaPublish = "return redis.call('PUBLISH', KEYS[1], ARGV[1])"

// receiveMsg waits (bounded) for the next message on ps.
func receiveMsg(t *testing.T, cl, call string, ps *redis.PubSub) *redis.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := ps.ReceiveMessage(ctx)
	if err != nil {
		fail(t, cl, call, err, "a message")
	}
	return m
}

func goRedisPubSub(t *testing.T, cl string, c, pub *redis.Client, tag string) {
	k := func(n string) string { return key(tag, n) }
	run(t, "pubsub: Subscribe, PSubscribe, ReceiveMessage from PUBLISH and Lua, Unsubscribe", func(t *testing.T) {
		ctx := ctxT(t)
		ch, pat, pch := k("ch"), k("pat:*"), k("pat:x")
		ps := c.Subscribe(ctx, ch)
		defer ps.Close()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := ps.Receive(rctx)
		cancel()
		if s, ok := v.(*redis.Subscription); err != nil || !ok || s.Kind != "subscribe" || s.Channel != ch || s.Count != 1 {
			fail(t, cl, "Subscribe(ch) then Receive", orErr(v, err), "*Subscription{subscribe ch 1}")
		}
		if err := ps.PSubscribe(ctx, pat); err != nil {
			fail(t, cl, "PSubscribe(pat)", err, nil)
		}
		if n, err := pub.Publish(ctx, ch, "hello").Result(); err != nil || n != 1 {
			fail(t, cl, "PUBLISH ch hello (receivers)", orErr(n, err), 1)
		}
		if m := receiveMsg(t, cl, "ReceiveMessage after PUBLISH", ps); m.Channel != ch || m.Payload != "hello" || m.Pattern != "" {
			fail(t, cl, "ReceiveMessage after PUBLISH", m, "{ch hello}")
		}
		// PSUBSCRIBE's confirmation may still be in flight: publish until the pattern counts.
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := pub.Publish(ctx, pch, "pm").Result()
			if err != nil {
				fail(t, cl, "PUBLISH pch pm", err, 1)
			}
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				fail(t, cl, "PUBLISH pch pm (receivers, 5 s after PSubscribe)", n, 1)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if m := receiveMsg(t, cl, "ReceiveMessage after PUBLISH to the pattern", ps); m.Channel != pch || m.Pattern != pat || m.Payload != "pm" {
			fail(t, cl, "ReceiveMessage after PUBLISH to the pattern", m, "{pat pch pm}")
		}
		if n, err := pub.Eval(ctx, luaPublish, []string{ch}, "from-lua").Int64(); err != nil || published(n) != 1 {
			fail(t, cl, "EVAL redis.call('PUBLISH', ch, 'from-lua')", orErr(n, err), 1)
		}
		if m := receiveMsg(t, cl, "ReceiveMessage after a PUBLISH from Lua", ps); m.Channel != ch || m.Payload != "from-lua" {
			fail(t, cl, "ReceiveMessage after a PUBLISH from Lua", m, "{ch from-lua}")
		}
		if tok, err := c.Do(ctx, "LOCK.ACQUIRE", k("lock"), "o", 5000).Int64(); err != nil || tok <= 0 {
			fail(t, cl, "Do(LOCK.ACQUIRE) on the client while subscribed", orErr(tok, err), "a token")
		}
		c.Do(ctx, "LOCK.RELEASE", k("lock"), "o")
		if err := ps.Unsubscribe(ctx, ch); err != nil {
			fail(t, cl, "Unsubscribe(ch)", err, nil)
		}
		if err := ps.PUnsubscribe(ctx, pat); err != nil {
			fail(t, cl, "PUnsubscribe(pat)", err, nil)
		}
		deadline = time.Now().Add(5 * time.Second)
		for {
			n, err := pub.Publish(ctx, ch, "late").Result()
			if err == nil && n == 0 {
				break
			}
			if err != nil || time.Now().After(deadline) {
				fail(t, cl, "PUBLISH ch late after Unsubscribe (receivers)", orErr(n, err), 0)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	run(t, "pubsub: SSubscribe + SPublish", func(t *testing.T) {
		ctx := ctxT(t)
		ch := k("sch")
		ps := c.SSubscribe(ctx, ch)
		defer ps.Close()
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := ps.Receive(rctx)
		cancel()
		if s, ok := v.(*redis.Subscription); err != nil || !ok || s.Kind != "ssubscribe" || s.Channel != ch {
			fail(t, cl, "SSubscribe(ch) then Receive", orErr(v, err), "*Subscription{ssubscribe ch 1}")
		}
		if n, err := pub.SPublish(ctx, ch, "sharded").Result(); err != nil || n != 1 {
			fail(t, cl, "SPUBLISH ch sharded (receivers)", orErr(n, err), 1)
		}
		if m := receiveMsg(t, cl, "ReceiveMessage after SPUBLISH", ps); m.Channel != ch || m.Payload != "sharded" {
			fail(t, cl, "ReceiveMessage after SPUBLISH", m, "{ch sharded}")
		}
		if err := ps.SUnsubscribe(ctx, ch); err != nil {
			fail(t, cl, "SUnsubscribe(ch)", err, nil)
		}
	})
}

func TestGoRedisPubSubDefaultOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	pub := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	defer pub.Close()
	goRedisPubSub(t, "go-redis v9 (default options: RESP3)", c, pub, "ps3")
}

func TestGoRedisPubSubProtocol2(t *testing.T) {
	c, pub := goRedis(2), goRedis(2)
	defer c.Close()
	defer pub.Close()
	goRedisPubSub(t, "go-redis v9 (Protocol: 2)", c, pub, "ps2")
}

func TestRueidisPubSub(t *testing.T) {
	const cl = "rueidis (AlwaysRESP2, DisableCache)"
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{addr},
		AlwaysRESP2:       true,
		DisableCache:      true,
		ForceSingleClient: true,
		ConnWriteTimeout:  5 * time.Second,
	})
	if err != nil {
		failedN.Add(1)
		t.Fatalf("FAIL go %s: NewClient: %v", cl, err)
	}
	defer c.Close()
	run(t, "pubsub: Receive(SUBSCRIBE) in a goroutine, PUBLISH and Lua messages arrive, then cancel", func(t *testing.T) {
		ctx := ctxT(t)
		ch := key("rue", "ps:ch")
		msgs := make(chan rueidis.PubSubMessage, 16)
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- c.Receive(rctx, c.B().Subscribe().Channel(ch).Build(), func(m rueidis.PubSubMessage) { msgs <- m })
		}()
		// Receive returns only when it ends: wait until Redis counts the subscriber.
		deadline := time.Now().Add(5 * time.Second)
		for {
			arr, err := c.Do(ctx, c.B().PubsubNumsub().Channel(ch).Build()).ToArray()
			if err != nil {
				fail(t, cl, "PUBSUB NUMSUB ch", err, "[ch 1]")
			}
			if len(arr) == 2 {
				if n, _ := arr[1].AsInt64(); n == 1 {
					break
				}
			}
			select {
			case err := <-done:
				fail(t, cl, "Receive(SUBSCRIBE ch) ended before a message", err, "still subscribed")
			default:
			}
			if time.Now().After(deadline) {
				fail(t, cl, "PUBSUB NUMSUB ch (5 s after Receive(SUBSCRIBE ch))", arr, "[ch 1]")
			}
			time.Sleep(20 * time.Millisecond)
		}
		wait := func(call, want string) {
			select {
			case m := <-msgs:
				if m.Channel != ch || m.Message != want {
					fail(t, cl, call, m, fmt.Sprintf("{%s %s}", ch, want))
				}
			case <-time.After(5 * time.Second):
				fail(t, cl, call, "no message within 5 s", want)
			}
		}
		if n, err := c.Do(ctx, c.B().Publish().Channel(ch).Message("hello").Build()).AsInt64(); err != nil || n != 1 {
			fail(t, cl, "PUBLISH ch hello (receivers)", orErr(n, err), 1)
		}
		wait("Receive callback after PUBLISH", "hello")
		if n, err := c.Do(ctx, c.B().Eval().Script(luaPublish).Numkeys(1).Key(ch).Arg("from-lua").Build()).AsInt64(); err != nil || published(n) != 1 {
			fail(t, cl, "EVAL redis.call('PUBLISH', ch, 'from-lua')", orErr(n, err), 1)
		}
		wait("Receive callback after a PUBLISH from Lua", "from-lua")
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				fail(t, cl, "Receive after cancel", err, "context.Canceled")
			}
		case <-time.After(5 * time.Second):
			fail(t, cl, "Receive after cancel", "still running after 5 s", "context.Canceled")
		}
		if v, err := c.Do(ctx, c.B().Ping().Build()).ToString(); err != nil || v != "PONG" {
			fail(t, cl, "PING after the subscription ended", orErr(v, err), "PONG")
		}
	})
}

// TestRueidisClientSideCache: rueidis with its client-side cache (RESP3,
// CLIENT TRACKING OPTIN): a cached read is served from the cache, and a
// write through another connection invalidates it, in front of a
// standalone Redis and of a Redis Cluster (the proxy's connections of the
// client's own to each master track what it read there).
func TestRueidisClientSideCache(t *testing.T) {
	const cl = "rueidis (client-side cache)"
	run(t, "DoCache: cache hit, then invalidated by another connection's SET", func(t *testing.T) {
		ctx := ctxT(t)
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, ConnWriteTimeout: 5 * time.Second})
		if err != nil {
			fail(t, cl, "NewClient", err, "a client with caching")
		}
		defer c.Close()
		writer := goRedis(2)
		defer writer.Close()
		k := key("rue", "cached")
		if err := writer.Set(ctx, k, "v1", 0).Err(); err != nil {
			fail(t, cl, "SET (go-redis)", err, "OK")
		}
		get := func() (string, bool) {
			r := c.DoCache(ctx, c.B().Get().Key(k).Cache(), time.Minute)
			v, err := r.ToString()
			if err != nil {
				fail(t, cl, "DoCache GET", err, "a value")
			}
			return v, r.IsCacheHit()
		}
		get()
		if v, hit := get(); v != "v1" || !hit {
			fail(t, cl, "DoCache GET (second)", fmt.Sprintf("%q hit=%v", v, hit), "v1 from the cache")
		}
		if err := writer.Set(ctx, k, "v2", 0).Err(); err != nil {
			fail(t, cl, "SET (go-redis)", err, "OK")
		}
		for {
			v, hit := get()
			if v == "v2" {
				return
			}
			if !hit || ctx.Err() != nil {
				fail(t, cl, "DoCache GET after another connection's SET", v, "v2 (the cached v1 invalidated)")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
