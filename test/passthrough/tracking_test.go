package passthrough

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TestTrackingLikeRedis: CLIENT TRACKING through the proxy invalidates what
// the client read when another client writes it, with Redis's own push
// bytes (RESP3), honours NOLOOP and OPTIN with CLIENT CACHING, and
// redirects to a subscribed RESP2 client's __redis__:invalidate channel.
func TestTrackingLikeRedis(t *testing.T) {
	pr := startPair(t)
	for _, addr := range []string{pr.Proxy.Addr, pr.B.Addr} {
		t.Run(map[bool]string{true: "proxy", false: "redis"}[addr == pr.Proxy.Addr], func(t *testing.T) {
			reader, writer := testenv.Dial(t, addr), testenv.Dial(t, addr)
			reader.Do("HELLO", "3")
			if got := reader.Do("CLIENT", "TRACKING", "ON", "NOLOOP"); string(got) != "+OK\r\n" {
				t.Fatalf("CLIENT TRACKING ON = %q", got)
			}
			reader.Do("GET", "k")
			reader.Do("SET", "own", "1") // NOLOOP: its own write invalidates nothing
			reader.Do("GET", "own")
			reader.Do("SET", "own", "2")
			writer.Do("SET", "k", "v")
			push, err := reader.ReadReply()
			if want := ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"; err != nil || string(push) != want {
				t.Fatalf("after another client's SET: %q, %v; want the invalidation %q", push, err, want)
			}
			if got := reader.Do("PING"); string(got) != "+PONG\r\n" {
				t.Fatalf("PING after the push = %q (a push for its own write?)", got)
			}
			if got := reader.Do("CLIENT", "GETREDIR"); string(got) != ":0\r\n" {
				t.Fatalf("CLIENT GETREDIR = %q", got)
			}

			// OPTIN: only the read after CLIENT CACHING yes is tracked.
			opt := testenv.Dial(t, addr)
			opt.Do("HELLO", "3")
			opt.Do("CLIENT", "TRACKING", "ON", "OPTIN")
			opt.Do("GET", "untracked")
			opt.Do("CLIENT", "CACHING", "yes")
			opt.Do("GET", "tracked")
			writer.Do("SET", "untracked", "x")
			writer.Do("SET", "tracked", "x")
			push, err = opt.ReadReply()
			if want := ">2\r\n$10\r\ninvalidate\r\n*1\r\n$7\r\ntracked\r\n"; err != nil || string(push) != want {
				t.Fatalf("OPTIN: %q, %v; want only %q", push, err, want)
			}

			// RESP2: REDIRECT to a client subscribed to __redis__:invalidate.
			sub := testenv.Dial(t, addr)
			id := sub.Do("CLIENT", "ID")
			sub.Do("SUBSCRIBE", "__redis__:invalidate")
			r2 := testenv.Dial(t, addr)
			if got := r2.Do("CLIENT", "TRACKING", "ON", "REDIRECT", string(id[1:len(id)-2])); string(got) != "+OK\r\n" {
				t.Fatalf("CLIENT TRACKING ON REDIRECT = %q", got)
			}
			if got := r2.Do("CLIENT", "GETREDIR"); string(got) != string(id) {
				t.Fatalf("CLIENT GETREDIR = %q, want %q", got, id)
			}
			if got := r2.Do("CLIENT", "TRACKINGINFO"); !bytes.Contains(got, []byte("$8\r\nredirect\r\n"+string(id))) {
				t.Fatalf("CLIENT TRACKINGINFO = %q, want redirect %q", got, id)
			}
			r2.Do("GET", "r")
			writer.Do("SET", "r", "1")
			sub.SetTimeout(5 * time.Second)
			msg, err := sub.ReadReply()
			if want := "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$1\r\nr\r\n"; err != nil || string(msg) != want {
				t.Fatalf("redirected invalidation: %q, %v; want %q", msg, err, want)
			}
			if got := r2.Do("CLIENT", "TRACKING", "OFF"); string(got) != "+OK\r\n" {
				t.Fatalf("CLIENT TRACKING OFF = %q", got)
			}
			if got := r2.Do("CLIENT", "GETREDIR"); string(got) != ":-1\r\n" {
				t.Fatalf("CLIENT GETREDIR after OFF = %q", got)
			}
		})
	}
	pr.alive(t)
}

// TestTrackingRueidisCache: rueidis's client-side cache (CLIENT TRACKING
// OPTIN over RESP3) through the proxy serves a read from its cache, and a
// write through another connection invalidates it, so the next read sees
// the new value.
func TestTrackingRueidisCache(t *testing.T) {
	pr := startPair(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{pr.Proxy.Addr}, DisableRetry: true})
	if err != nil {
		t.Fatalf("rueidis with client-side caching through the proxy: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	writer := testenv.Dial(t, pr.Proxy.Addr)
	writer.Do("SET", "cached", "v1")
	get := func() (string, bool) {
		t.Helper()
		r := c.DoCache(ctx, c.B().Get().Key("cached").Cache(), time.Minute)
		v, err := r.ToString()
		if err != nil {
			t.Fatalf("DoCache GET: %v", err)
		}
		return v, r.IsCacheHit()
	}
	if v, _ := get(); v != "v1" {
		t.Fatalf("first read = %q", v)
	}
	if v, hit := get(); v != "v1" || !hit {
		t.Fatalf("second read = %q, cache hit %v; want v1 from the cache", v, hit)
	}
	writer.Do("SET", "cached", "v2")
	for {
		v, hit := get()
		if v == "v2" {
			break
		}
		if !hit {
			t.Fatalf("a read from Redis after the write = %q", v)
		}
		if ctx.Err() != nil {
			t.Fatal("the cached value was never invalidated after another connection's SET")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if v, hit := get(); v != "v2" || !hit {
		t.Fatalf("read after the refill = %q, hit %v; want v2 cached again", v, hit)
	}
	pr.alive(t)
}

// TestTrackingConnectionGoesWithClient: a tracking client's own Redis
// connection is closed when the client goes, and one that turns tracking
// off gives it up: Redis's client count comes back.
func TestTrackingConnectionGoesWithClient(t *testing.T) {
	pr := startPair(t)
	before := backendClients(t, pr.A.Addr)
	back := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for backendClients(t, pr.A.Addr) != before {
			if time.Now().After(deadline) {
				t.Fatalf("%s: Redis has %d clients, had %d", what, backendClients(t, pr.A.Addr), before)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	c := testenv.Dial(t, pr.Proxy.Addr)
	c.Do("HELLO", "3")
	c.Do("CLIENT", "TRACKING", "ON")
	c.Do("GET", "x")
	if n := backendClients(t, pr.A.Addr); n != before+1 {
		t.Fatalf("a tracking client: Redis has %d clients, want %d (one of its own)", n, before+1)
	}
	c.Do("CLIENT", "TRACKING", "OFF")
	c.Do("PING")
	back("after CLIENT TRACKING OFF")
	c.Do("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "p:")
	c.Close()
	back("after the tracking client disconnected")
}

// TestTrackingRedirectToIDAskedWhileSubscribed: a RESP3 client's CLIENT ID
// is the same before and after it subscribes, so the id it reads on its
// subscribed connection can be given to CLIENT TRACKING REDIRECT, and the
// invalidations reach it. Redisson's TrackingListener (RBucket.addListener,
// RESP3) does exactly this: SUBSCRIBE __redis__:invalidate, then CLIENT ID
// on that connection, then CLIENT TRACKING ON REDIRECT <id> on another.
// Through the proxy the subscribed connection is a tunnel to Redis, and
// CLIENT ID there used to answer Redis's id for the tunnel's connection,
// which REDIRECT (a proxy client's id) refused.
func TestTrackingRedirectToIDAskedWhileSubscribed(t *testing.T) {
	pr := startPair(t)
	for _, addr := range []string{pr.Proxy.Addr, pr.B.Addr} {
		t.Run(map[bool]string{true: "proxy", false: "redis"}[addr == pr.Proxy.Addr], func(t *testing.T) {
			sub := testenv.Dial(t, addr)
			sub.Do("HELLO", "3")
			before := sub.Do("CLIENT", "ID")
			if got := sub.Do("SUBSCRIBE", "__redis__:invalidate"); !bytes.HasPrefix(got, []byte(">3\r\n$9\r\nsubscribe\r\n")) {
				t.Fatalf("SUBSCRIBE = %q", got)
			}
			if got := sub.Do("CLIENT", "ID"); string(got) != string(before) {
				t.Fatalf("CLIENT ID while subscribed = %q, before subscribing %q: a client's id does not change", got, before)
			}
			tracker, writer := testenv.Dial(t, addr), testenv.Dial(t, addr)
			tracker.Do("HELLO", "3")
			id := string(before[1 : len(before)-2])
			if got := tracker.Do("CLIENT", "TRACKING", "ON", "REDIRECT", id); string(got) != "+OK\r\n" {
				t.Fatalf("CLIENT TRACKING ON REDIRECT %s (the id read while subscribed) = %q", id, got)
			}
			tracker.Do("GET", "redirected")
			writer.Do("SET", "redirected", "1")
			sub.SetTimeout(5 * time.Second)
			msg, err := sub.ReadReply()
			// A RESP3 target gets Redis's invalidate push, not a message on the channel.
			if want := ">2\r\n$10\r\ninvalidate\r\n*1\r\n$10\r\nredirected\r\n"; err != nil || string(msg) != want {
				t.Fatalf("redirected invalidation: %q, %v; want %q", msg, err, want)
			}
			if got := sub.Do("PING"); string(got) != "+PONG\r\n" {
				t.Fatalf("PING on the subscribed RESP3 connection after CLIENT ID = %q", got)
			}
		})
	}
	pr.alive(t)
}

// TestTrackingHelloAndEvictionOrder: a tracking client may switch
// protocols with HELLO as in Redis (unit/tracking "HELLO without
// protover", "Invalidations of previous keys can be redirected after
// switching to RESP3"; refused before), and a key Redis evicts while a
// command runs is invalidated before that command's reply, as Redis sends
// them (unit/tracking "Tracking invalidation message of eviction keys
// should be before response"; relayed after it before, the test failed
// and left maxmemory set, and the unit ended on OOM).
func TestTrackingHelloAndEvictionOrder(t *testing.T) {
	pr := startPair(t)
	for _, tc := range []struct{ name, addr, redis string }{{"proxy", pr.Proxy.Addr, pr.A.Addr}, {"redis", pr.B.Addr, pr.B.Addr}} {
		t.Run(tc.name, func(t *testing.T) {
			r, writer := testenv.Dial(t, tc.addr), testenv.Dial(t, tc.addr)
			r.Do("HELLO", "3")
			if got := r.Do("CLIENT", "TRACKING", "ON"); string(got) != "+OK\r\n" {
				t.Fatalf("CLIENT TRACKING ON = %q", got)
			}
			for _, v := range []string{"2", "3", "2", "3"} {
				if got := r.Do("HELLO", v); bytes.HasPrefix(got, []byte("-")) {
					t.Fatalf("HELLO %s while tracking = %q", v, got)
				}
			}
			r.Do("GET", "k")
			writer.Do("SET", "k", "v")
			if push, err := r.ReadReply(); err != nil || string(push) != ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n" {
				t.Fatalf("after HELLO 2 and back to 3, the invalidation = %q, %v", push, err)
			}

			direct := testenv.Dial(t, tc.redis)
			used, _ := testenv.ParseBulk(direct.Do("INFO", "memory"))
			var mem int64
			for _, line := range strings.Split(string(used), "\r\n") {
				if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
					mem, _ = strconv.ParseInt(v, 10, 64)
				}
			}
			direct.Do("CONFIG", "SET", "maxmemory", strconv.FormatInt(mem+100*1024, 10))
			direct.Do("CONFIG", "SET", "maxmemory-policy", "volatile-random")
			defer direct.Do("CONFIG", "SET", "maxmemory", "0")
			defer direct.Do("CONFIG", "SET", "maxmemory-policy", "noeviction")
			r.Do("SETEX", "volatile-key", "10000", "x")
			r.Do("GET", "volatile-key")
			r.Do("SETBIT", "big-key", "1600000", "0")
			r.Send("GETBIT", "big-key", "0")
			r.Flush()
			first, err1 := r.ReadReply()
			second, err2 := r.ReadReply()
			if err1 != nil || err2 != nil || string(first) != ">2\r\n$10\r\ninvalidate\r\n*1\r\n$12\r\nvolatile-key\r\n" || string(second) != ":0\r\n" {
				t.Fatalf("GETBIT that evicts a tracked key: %q then %q (%v %v); want the invalidation, then :0", first, second, err1, err2)
			}
		})
	}
	pr.alive(t)
}
