package fenceproxy;

import static fenceproxy.Suite.HOST;
import static fenceproxy.Suite.JEDIS;
import static fenceproxy.Suite.PORT;
import static fenceproxy.Suite.check;
import static fenceproxy.Suite.expect;
import static fenceproxy.Suite.key;
import static fenceproxy.Suite.pool;
import static fenceproxy.Suite.tag;
import static fenceproxy.Suite.test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisPooled;
import redis.clients.jedis.JedisPubSub;
import redis.clients.jedis.Pipeline;
import redis.clients.jedis.Response;
import redis.clients.jedis.StreamEntryID;
import redis.clients.jedis.Transaction;
import redis.clients.jedis.args.ListDirection;
import redis.clients.jedis.params.XReadGroupParams;
import redis.clients.jedis.resps.StreamEntry;

/**
 * Jedis as an application uses it, through fenceproxy: a JedisPooled pool, pipelines,
 * MULTI/EXEC with WATCH against another connection's write, pub/sub, blocking pops woken
 * from another connection, a stream consumer group, scripts and functions, and keyspace
 * notifications. Run by Suite and ClusterSuite; multi-key commands keep their keys under
 * one tag(), as on a Redis Cluster.
 */
final class JedisObjects {
    private JedisObjects() {
    }

    static Jedis jedis() {
        return new Jedis(HOST, PORT, 10000);
    }

    static void cases() {
        test(JEDIS, "JedisPooled: pipeline of 100; MULTI/EXEC; WATCH aborted by another connection's write", () -> {
            String t = tag("jtx");
            try (JedisPooled p = new JedisPooled(HOST, PORT); Jedis j1 = jedis(); Jedis j2 = jedis()) {
                try (Pipeline pl = p.pipelined()) {
                    List<Response<Long>> rs = new ArrayList<>();
                    for (int i = 0; i < 50; i++) {
                        pl.set(key("jp" + i), String.valueOf(i));
                        rs.add(pl.incrBy(key("jp" + i), 100));
                    }
                    pl.sync();
                    for (int i = 0; i < 50; i++) expect("pipelined INCRBY jp" + i + " 100", rs.get(i).get(), 100L + i);
                }
                expect("JedisPooled GET jp7", p.get(key("jp7")), "107");
                String k = t + ":watched";
                p.set(k, "0");
                expect("WATCH", j1.watch(k), "OK");
                j2.set(k, "other");
                Transaction tx = j1.multi();
                tx.set(k, "mine");
                tx.incr(t + ":n");
                expect("EXEC after another connection wrote the WATCHed key", tx.exec(), null);
                expect("GET after the aborted EXEC", p.get(k), "other");
                expect("WATCH again", j1.watch(k), "OK");
                Transaction tx2 = j1.multi();
                tx2.set(k, "mine");
                tx2.incr(t + ":n");
                expect("EXEC with no interference", tx2.exec(), List.of("OK", 1L));
                expect("GET after EXEC", p.get(k), "mine");
                String[] all = new String[52];
                for (int i = 0; i < 50; i++) all[i] = key("jp" + i);
                all[50] = k;
                all[51] = t + ":n";
                expect("DEL the case's keys", p.del(all), 52L);
            }
        });

        test(JEDIS, "pub/sub: SUBSCRIBE and PSUBSCRIBE on one connection, PUBLISH from another, PING while subscribed, then unsubscribed", () -> {
            String ch = key("jch"), pat = key("jpat") + ".*";
            LinkedBlockingQueue<String> got = new LinkedBlockingQueue<>();
            CountDownLatch subscribed = new CountDownLatch(2);
            JedisPubSub ps = new JedisPubSub() {
                @Override
                public void onMessage(String c, String m) {
                    got.add(c + "=" + m);
                }

                @Override
                public void onPMessage(String p, String c, String m) {
                    got.add("p:" + c + "=" + m);
                }

                @Override
                public void onSubscribe(String c, int n) {
                    subscribed.countDown();
                }

                @Override
                public void onPSubscribe(String p, int n) {
                    subscribed.countDown();
                }

                @Override
                public void onPong(String m) {
                    got.add("pong");
                }
            };
            try (Jedis sub = jedis(); Jedis pub = jedis()) {
                Future<?> loop = pool.submit(() -> {
                    sub.subscribe(ps, ch);
                    return null;
                });
                check("SUBSCRIBE confirmed", waitLatch(subscribed, 1), subscribed.getCount(), "1 left (the SUBSCRIBE's)");
                ps.psubscribe(pat);
                check("PSUBSCRIBE confirmed", subscribed.await(5, TimeUnit.SECONDS), subscribed.getCount(), "0");
                expect("PUBLISH " + ch + " a", pub.publish(ch, "a"), 1L);
                expect("PUBLISH " + key("jpat") + ".x b", pub.publish(key("jpat") + ".x", "b"), 1L);
                ps.ping();
                expect("messages and the PONG", RedissonObjects.drain(got, 3, 5000), List.of(ch + "=a", "p:" + key("jpat") + ".x=b", "pong"));
                ps.unsubscribe();
                ps.punsubscribe();
                loop.get(5, TimeUnit.SECONDS);
                expect("PING on the connection after unsubscribing from all", sub.ping(), "PONG");
                expect("PUBLISH after unsubscribe", pub.publish(ch, "c"), 0L);
            }
        });

        test(JEDIS, "BLPOP woken by another connection's RPUSH, BLPOP timeout, BLMOVE between two lists of one tag", () -> {
            String q = tag("jq") + ":a", q2 = tag("jq") + ":b";
            try (Jedis j1 = jedis(); Jedis j2 = jedis()) {
                Future<List<String>> popped = pool.submit(() -> j1.blpop(8, q));
                Thread.sleep(300);
                check("BLPOP 8 on an empty list", !popped.isDone(), "done", "still waiting");
                expect("RPUSH from another connection", j2.rpush(q, "x"), 1L);
                expect("BLPOP after the RPUSH", popped.get(10, TimeUnit.SECONDS), List.of(q, "x"));
                expect("BLPOP 0.3 on an empty list", j1.blpop(0.3, q), null);
                Future<String> moved = pool.submit(() -> j1.blmove(q, q2, ListDirection.LEFT, ListDirection.RIGHT, 8));
                Thread.sleep(300);
                j2.rpush(q, "y");
                expect("BLMOVE after the RPUSH", moved.get(10, TimeUnit.SECONDS), "y");
                expect("LRANGE of the destination", j2.lrange(q2, 0, -1), List.of("y"));
                expect("PING after blocking commands", j1.ping(), "PONG");
                j2.del(q, q2);
            }
        });

        test(JEDIS, "streams: XGROUP CREATE, XREADGROUP BLOCK woken by another connection's XADD, XACK, XPENDING", () -> {
            String s = key("jstream");
            try (Jedis j1 = jedis(); Jedis j2 = jedis()) {
                expect("XGROUP CREATE MKSTREAM", j1.xgroupCreate(s, "g", StreamEntryID.XGROUP_LAST_ENTRY, true), "OK");
                Future<List<Map.Entry<String, List<StreamEntry>>>> read = pool.submit(() -> j1.xreadGroup("g", "c1",
                        XReadGroupParams.xReadGroupParams().count(10).block(8000), Map.of(s, StreamEntryID.XREADGROUP_UNDELIVERED_ENTRY)));
                Thread.sleep(300);
                check("XREADGROUP BLOCK 8000 on an empty stream", !read.isDone(), "done", "still waiting");
                StreamEntryID id = j2.xadd(s, StreamEntryID.NEW_ENTRY, Map.of("f", "v"));
                var r = read.get(10, TimeUnit.SECONDS);
                check("XREADGROUP after the XADD", r != null && r.size() == 1 && r.get(0).getValue().size() == 1
                        && r.get(0).getValue().get(0).getID().equals(id), r, "the one entry " + id);
                expect("XPENDING count", j2.xpending(s, "g").getTotal(), 1L);
                expect("XACK", j2.xack(s, "g", id), 1L);
                expect("XPENDING count after XACK", j2.xpending(s, "g").getTotal(), 0L);
                j2.del(s);
            }
        });

        test(JEDIS, "scripts and functions: SCRIPT LOAD, EVALSHA, EVAL_RO, FUNCTION LOAD, FCALL, FCALL_RO, FUNCTION DELETE", () -> {
            String k = key("jscript");
            String lib = "jedissuite_" + Suite.RUN;
            try (Jedis j = jedis(); Jedis o = jedis()) {
                String sha = j.scriptLoad("return redis.call('set', KEYS[1], ARGV[1])");
                expect("EVALSHA from another connection", o.evalsha(sha, List.of(k), List.of("v")), "OK");
                expect("EVAL_RO", o.evalReadonly("return redis.call('get', KEYS[1])", List.of(k), List.of()), "v");
                expect("FUNCTION LOAD", j.functionLoad("#!lua name=" + lib + "\n"
                        + "redis.register_function('" + lib + "_incr', function(keys, args) return redis.call('incrby', keys[1], args[1]) end)\n"
                        + "redis.register_function{function_name='" + lib + "_len', callback=function(keys, args) return redis.call('strlen', keys[1]) end, flags={'no-writes'}}"),
                        lib);
                expect("FCALL from another connection", o.fcall(lib + "_incr", List.of(k + ":n"), List.of("5")), 5L);
                expect("FCALL_RO", o.fcallReadonly(lib + "_len", List.of(k), List.of()), 1L);
                expect("FUNCTION DELETE", j.functionDelete(lib), "OK");
                j.del(k, k + ":n");
            }
        });

        String name = "keyspace notifications: PSUBSCRIBE __keyevent@0__:* hears SET, DEL and an expiry";
        test(JEDIS, name, () -> {
            String k = key("jks");
            LinkedBlockingQueue<String> got = new LinkedBlockingQueue<>();
            CountDownLatch subscribed = new CountDownLatch(1);
            JedisPubSub ps = new JedisPubSub() {
                @Override
                public void onPMessage(String p, String c, String m) {
                    if (m.startsWith(k)) got.add(c.substring(c.lastIndexOf(':') + 1) + " " + m);
                }

                @Override
                public void onPSubscribe(String p, int n) {
                    subscribed.countDown();
                }
            };
            try (Jedis sub = jedis(); Jedis j = jedis()) {
                String old = j.configGet("notify-keyspace-events").get("notify-keyspace-events");
                try {
                    expect("CONFIG SET notify-keyspace-events Eg$x", j.configSet("notify-keyspace-events", "Eg$x"), "OK");
                    Future<?> loop = pool.submit(() -> {
                        sub.psubscribe(ps, "__keyevent@0__:*");
                        return null;
                    });
                    check("PSUBSCRIBE confirmed", subscribed.await(5, TimeUnit.SECONDS), false, "true");
                    j.set(k + ":a", "1");
                    j.del(k + ":a");
                    j.psetex(k + ":b", 200, "2");
                    Set<String> want = Set.of("set " + k + ":a", "del " + k + ":a", "expired " + k + ":b");
                    Set<String> seen = new TreeSet<>();
                    long end = System.currentTimeMillis() + 8000;
                    while (!seen.containsAll(want) && System.currentTimeMillis() < end) {
                        String e = got.poll(100, TimeUnit.MILLISECONDS);
                        if (e != null) seen.add(e);
                    }
                    check("events heard", seen.containsAll(want), seen, "including " + new TreeSet<>(want));
                    ps.punsubscribe();
                    loop.get(5, TimeUnit.SECONDS);
                } finally {
                    j.configSet("notify-keyspace-events", old == null ? "" : old);
                }
            }
        });
    }

    /** Waits until the latch is down to left, up to 5 s. */
    static boolean waitLatch(CountDownLatch l, long left) throws InterruptedException {
        long end = System.currentTimeMillis() + 5000;
        while (l.getCount() > left && System.currentTimeMillis() < end) Thread.sleep(10);
        return l.getCount() <= left;
    }
}
