package fenceproxy;

import static fenceproxy.Suite.check;
import static fenceproxy.Suite.expect;
import static fenceproxy.Suite.key;
import static fenceproxy.Suite.pool;
import static fenceproxy.Suite.show;
import static fenceproxy.Suite.test;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.redisson.api.RBucket;
import org.redisson.api.RBuckets;
import org.redisson.api.RLock;
import org.redisson.api.RTopic;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;

import redis.clients.jedis.Jedis;
import redis.clients.jedis.Pipeline;
import redis.clients.jedis.Response;
import redis.clients.jedis.Transaction;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.util.JedisClusterCRC16;

/**
 * The Java suite for a fenceproxy that fronts a Redis Cluster.
 *
 * Run by `test/clients/run.sh --cluster` as `java ... fenceproxy.ClusterSuite` with
 * FENCEPROXY_ADDR=host:port and FENCEPROXY_CLUSTER=1 (without it, it does nothing and
 * says so). It runs every case of {@link Suite} (a cluster-backed proxy must look like one
 * Redis to Redisson in single-server mode and to Jedis), then the cases below, which
 * spread their keys over many hash slots on purpose. FENCEPROXY_CLUSTER_SEEDS (the
 * cluster's masters, host:port,...), when set, lets the cases check from the cluster
 * itself which masters the keys landed on and that the locks are there.
 *
 * The centre is Redisson's watchdog: since 3.44 one Redisson instance renews every lock it
 * holds with one EVALSHA (EVAL) of up to lockWatchdogBatchSize (100) keys, from any slot
 * in single-server mode. In front of a cluster the proxy must split that script per slot
 * and merge the per-key results in key order; if it does not, the renewal fails (Redisson
 * logs "Can't update locks ... expiration") or renews the wrong locks (Redisson silently
 * stops renewing those it was told are gone), and the locks expire after
 * lockWatchdogTimeout (3000 ms here).
 *
 * Output and exit status as in Suite: PASS/FAIL lines, `java totals: N passed, M failed`.
 */
public final class ClusterSuite {
    static final int SLOTS = 16384;
    static final int WATCHDOG_LOCKS = 30;
    static final long HOLD_MS = 10_000;

    /** The renewal script of Redisson 3.44+ (org.redisson.renewal.LockTask), byte for byte. */
    static final String RENEW_SCRIPT = "local result = {} for i = 1, #KEYS, 1 do "
            + "if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then "
            + "redis.call('pexpire', KEYS[i], ARGV[1]); table.insert(result, 1); "
            + "else table.insert(result, 0); end; end; return result;";

    /** Redisson's error line when a watchdog renewal round fails. */
    static final String RENEWAL_ERROR = "Can't update locks";

    /** Everything written to System.err since start, for Redisson's renewal errors. */
    static final StringBuffer stderrSeen = new StringBuffer();

    static int slot(String k) {
        return JedisClusterCRC16.getSlot(k);
    }

    /**
     * n key names under key(name), each in its own slot, the i-th in the i-th of n equal
     * slices of the slot range, so they cover every master of any even split. Returned
     * shuffled (seeded), so key order is not slot order.
     */
    static List<String> spread(String name, int n) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            int lo = i * SLOTS / n, hi = (i + 1) * SLOTS / n;
            for (int j = 0;; j++) {
                String k = key(name) + ":" + i + ":" + j;
                int s = slot(k);
                if (s >= lo && s < hi) {
                    out.add(k);
                    break;
                }
            }
        }
        Collections.shuffle(out, new Random(n));
        return out;
    }

    static String sha1(String s) throws Exception {
        byte[] d = MessageDigest.getInstance("SHA-1").digest(s.getBytes(StandardCharsets.UTF_8));
        StringBuilder sb = new StringBuilder();
        for (byte b : d) sb.append(String.format("%02x", b));
        return sb.toString();
    }

    // ------------------------------------------------------------ the cluster itself

    /** The masters named by FENCEPROXY_CLUSTER_SEEDS, or empty. */
    static List<String> seeds() {
        String s = System.getenv().getOrDefault("FENCEPROXY_CLUSTER_SEEDS", "");
        List<String> out = new ArrayList<>();
        for (String a : s.split(",")) if (!a.isBlank()) out.add(a.trim());
        return out;
    }

    /** slot range start -> "host:port" of its master, from CLUSTER SLOTS on the first seed; empty without seeds. */
    static TreeMap<Integer, String> slotMap() {
        TreeMap<Integer, String> m = new TreeMap<>();
        List<String> s = seeds();
        if (s.isEmpty()) return m;
        String a = s.get(0);
        try (Jedis j = new Jedis(a.substring(0, a.lastIndexOf(':')), Integer.parseInt(a.substring(a.lastIndexOf(':') + 1)), 5000)) {
            for (Object r : j.clusterSlots()) {
                List<?> range = (List<?>) r;
                List<?> master = (List<?>) range.get(2);
                String host = new String((byte[]) master.get(0), StandardCharsets.UTF_8);
                m.put(((Long) range.get(0)).intValue(), host + ":" + master.get(1));
            }
        }
        return m;
    }

    static String masterOf(TreeMap<Integer, String> m, String k) {
        var e = m.floorEntry(slot(k));
        return e == null ? "?" : e.getValue();
    }

    /** Jedis straight to the master owning k (bypassing the proxy). */
    static Jedis direct(TreeMap<Integer, String> m, String k) {
        String a = masterOf(m, k);
        return new Jedis(a.substring(0, a.lastIndexOf(':')), Integer.parseInt(a.substring(a.lastIndexOf(':') + 1)), 5000);
    }

    // ------------------------------------------------------------ Jedis

    static void jedisCases() {
        test(Suite.JEDIS, "Redisson's renewal script by EVAL and EVALSHA over 30 slots: results in key order", () -> {
            List<String> keys = spread("renew-script", WATCHDOG_LOCKS);
            try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                // A held lock is a hash with field <uuid>:<thread>; every third key is held by
                // someone else, every third is missing, so a merge out of key order shows.
                List<String> args = new ArrayList<>();
                args.add("5000");
                List<Long> want = new ArrayList<>();
                for (int i = 0; i < keys.size(); i++) {
                    String k = keys.get(i), field = "uuid-" + i + ":1";
                    switch (i % 3) {
                        case 0 -> { j.hset(k, field, "1"); want.add(1L); }
                        case 1 -> { j.hset(k, "other:1", "1"); j.pexpire(k, 60000); want.add(0L); }
                        default -> want.add(0L);
                    }
                    args.add(field);
                }
                Object got = j.eval(RENEW_SCRIPT, keys, args);
                expect("EVAL <renewal script> 30 keys in 30 slots", got, want);
                for (int i = 0; i < keys.size(); i++) {
                    long ttl = j.pttl(keys.get(i));
                    boolean ok = switch (i % 3) {
                        case 0 -> ttl > 0 && ttl <= 5000;
                        case 1 -> ttl > 5000;
                        default -> ttl == -2;
                    };
                    check("PTTL " + keys.get(i) + " (slot " + slot(keys.get(i)) + ", key " + i + ") after the EVAL", ok, ttl,
                            i % 3 == 0 ? "0 < ttl <= 5000" : i % 3 == 1 ? "> 5000 (not renewed)" : "-2");
                }
                String sha = sha1(RENEW_SCRIPT);
                expect("SCRIPT LOAD <renewal script>", j.scriptLoad(RENEW_SCRIPT), sha);
                args.set(0, "7000");
                expect("EVALSHA <renewal script sha> 30 keys in 30 slots", j.evalsha(sha, keys, args), want);
                long ttl0 = j.pttl(keys.get(0));
                check("PTTL " + keys.get(0) + " after EVALSHA with 7000", ttl0 > 5000 && ttl0 <= 7000, ttl0, "5000 < ttl <= 7000");
                expect("DEL 30 keys in 30 slots", j.del(keys.toArray(new String[0])), (long) (2 * WATCHDOG_LOCKS / 3));
            }
        });

        test(Suite.JEDIS, "MSET/MGET/EXISTS/TOUCH/DEL/UNLINK over 40 slots", () -> {
            List<String> keys = spread("multi", 40);
            try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                List<String> kv = new ArrayList<>();
                List<String> vals = new ArrayList<>();
                for (int i = 0; i < keys.size(); i++) {
                    kv.add(keys.get(i));
                    kv.add("v" + i);
                    vals.add("v" + i);
                }
                expect("MSET 40 keys", j.mset(kv.toArray(new String[0])), "OK");
                List<String> ask = new ArrayList<>(keys);
                ask.add(1, key("multi:missing"));
                List<String> wantGet = new ArrayList<>(vals);
                wantGet.add(1, null);
                expect("MGET 41 keys (one missing, second)", j.mget(ask.toArray(new String[0])), wantGet);
                expect("EXISTS 41 keys", j.exists(ask.toArray(new String[0])), 40L);
                expect("TOUCH 41 keys", j.touch(ask.toArray(new String[0])), 40L);
                String[] half = keys.subList(0, 20).toArray(new String[0]);
                String[] rest = keys.subList(20, 40).toArray(new String[0]);
                expect("DEL 20 keys", j.del(half), 20L);
                expect("UNLINK 20 keys + 20 deleted", j.unlink(keys.toArray(new String[0])), 20L);
                expect("EXISTS after DEL/UNLINK", j.exists(rest), 0L);
            }
        });

        test(Suite.JEDIS, "multi-key commands across slots get -CROSSSLOT; one hash tag works", () -> {
            List<String> two = spread("cross", 2);
            try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                j.sadd(two.get(0), "a", "b");
                j.sadd(two.get(1), "b", "c");
                crossslot("SUNION " + two, () -> j.sunion(two.get(0), two.get(1)));
                crossslot("RENAME " + two, () -> j.rename(two.get(0), two.get(1)));
                String t0 = "{" + key("tag") + "}:a", t1 = "{" + key("tag") + "}:b";
                j.sadd(t0, "a", "b");
                j.sadd(t1, "b", "c");
                expect("SUNION " + t0 + " " + t1, new HashSet<>(j.sunion(t0, t1)), Set.of("a", "b", "c"));
                expect("SINTERSTORE (same tag)", j.sinterstore(t0 + ":dst", t0, t1), 1L);
                expect("PING after CROSSSLOT", j.ping(), "PONG");
                j.del(two.get(0));
                j.del(two.get(1));
                j.del(t0, t1, t0 + ":dst");
            }
        });

        test(Suite.JEDIS, "pipeline of 200 commands over 100 slots, replies in order; MULTI/EXEC on one tag", () -> {
            List<String> keys = spread("pipe", 100);
            try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                Pipeline p = j.pipelined();
                List<Response<Long>> incr = new ArrayList<>();
                for (int i = 0; i < keys.size(); i++) {
                    p.set(keys.get(i), String.valueOf(i));
                    incr.add(p.incrBy(keys.get(i), 1000));
                }
                p.sync();
                for (int i = 0; i < keys.size(); i++) expect("pipelined INCRBY " + keys.get(i) + " 1000 (reply " + i + ")", incr.get(i).get(), 1000L + i);
                String a = "{" + key("tx") + "}:a", b = "{" + key("tx") + "}:b";
                Transaction t = j.multi();
                t.set(a, "1");
                t.incr(a);
                t.set(b, "x");
                List<Object> res = t.exec();
                expect("MULTI SET INCR SET EXEC (one tag)", res == null ? null : show(res), show(List.of("OK", 2L, "OK")));
                j.del(keys.toArray(new String[0]));
                j.del(a, b);
            }
        });
    }

    static void crossslot(String call, Suite.Body b) {
        try {
            b.run();
        } catch (JedisDataException e) {
            if (e.getMessage() != null && e.getMessage().startsWith("CROSSSLOT")) return;
            throw new Suite.Fail(call, "error " + e.getMessage(), "an error starting CROSSSLOT");
        } catch (Exception e) {
            throw new Suite.Fail(call, e, "an error starting CROSSSLOT");
        }
        throw new Suite.Fail(call, "no error", "an error starting CROSSSLOT");
    }

    // ------------------------------------------------------------ Redisson

    static void redissonCases(RedissonClient a, RedissonClient b) {
        test(Suite.REDISSON, "watchdog renews 30 RLocks in 30 slots for 10 s (one renewal EVAL across slots)", () -> {
            List<String> names = spread("wd", WATCHDOG_LOCKS);
            TreeMap<Integer, String> slots = slotMap();
            Set<String> masters = new HashSet<>();
            for (String n : names) masters.add(masterOf(slots, n));
            int errBefore = renewalErrors();
            List<RLock> locks = new ArrayList<>();
            try {
                for (String n : names) {
                    RLock l = a.getLock(n);
                    l.lock(); // no lease: the watchdog holds it (3000 ms, renewed every 1000 ms)
                    locks.add(l);
                }
                long end = System.currentTimeMillis() + HOLD_MS;
                Map<String, Long> minTtl = new HashMap<>();
                int rounds = 0;
                while (System.currentTimeMillis() < end) {
                    Thread.sleep(500);
                    rounds++;
                    // One round of PTTLs from the other client, all in flight at once.
                    List<org.redisson.api.RFuture<Long>> ttls = new ArrayList<>();
                    for (String n : names) ttls.add(b.getLock(n).remainTimeToLiveAsync());
                    for (int i = 0; i < names.size(); i++) {
                        long ttl = ttls.get(i).toCompletableFuture().get(5, TimeUnit.SECONDS);
                        minTtl.merge(names.get(i), ttl, Math::min);
                        check("other client RLock(" + names.get(i) + ", slot " + slot(names.get(i)) + ").remainTimeToLive() after "
                                + (HOLD_MS - (end - System.currentTimeMillis())) + " ms", ttl > 0, ttl, "> 0 (renewed by the watchdog)");
                    }
                }
                int errs = renewalErrors() - errBefore;
                check("Redisson log lines \"" + RENEWAL_ERROR + " ... expiration\" while holding", errs == 0, errs, "0");
                for (RLock l : locks) {
                    check("RLock(" + l.getName() + ").isHeldByCurrentThread() after " + HOLD_MS + " ms", l.isHeldByCurrentThread(), false, "true");
                    check("other client RLock(" + l.getName() + ").isLocked() after " + HOLD_MS + " ms", b.getLock(l.getName()).isLocked(), false, "true");
                }
                long lowest = Collections.min(minTtl.values());
                // Through Jedis, and (with seeds) straight from each lock's master.
                try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                    for (String n : names) {
                        long ttl = j.pttl(n);
                        check("Jedis PTTL " + n + " through the proxy", ttl > 0 && ttl <= Suite.WATCHDOG_MS, ttl, "0 < ttl <= " + Suite.WATCHDOG_MS);
                    }
                }
                if (!slots.isEmpty()) {
                    for (String n : names) {
                        try (Jedis d = direct(slots, n)) {
                            long ttl = d.pttl(n);
                            check("PTTL " + n + " on its master " + masterOf(slots, n) + " (not through the proxy)", ttl > 0, ttl, "> 0");
                        }
                    }
                }
                System.out.printf("java: watchdog: %d locks in %d slots on %s masters held %d ms, %d checks, lowest TTL seen %d ms%n",
                        names.size(), new HashSet<>(names.stream().map(ClusterSuite::slot).toList()).size(),
                        slots.isEmpty() ? "?" : String.valueOf(masters.size()), HOLD_MS, rounds, lowest);
                if (!slots.isEmpty()) check("masters holding the 30 locks", masters.size() == seeds().size(), masters, "all " + seeds().size());
            } finally {
                for (RLock l : locks) {
                    try {
                        l.unlock();
                    } catch (Exception ignored) {
                    }
                }
            }
            for (String n : names) check("other client RLock(" + n + ").isLocked() after unlock", !b.getLock(n).isLocked(), true, "false");
        });

        test(Suite.REDISSON, "RBucket set/get over 200 keys, RBuckets MSET/MGET over 50 slots, DEL across slots", () -> {
            List<String> keys = spread("bucket", 200);
            List<org.redisson.api.RFuture<Void>> sets = new ArrayList<>();
            for (int i = 0; i < keys.size(); i++) sets.add(a.<String>getBucket(keys.get(i), StringCodec.INSTANCE).setAsync("v" + i));
            for (var f : sets) f.toCompletableFuture().get(5, TimeUnit.SECONDS);
            for (int i = 0; i < keys.size(); i++)
                expect("other client RBucket(" + keys.get(i) + ").get()", b.<String>getBucket(keys.get(i), StringCodec.INSTANCE).get(), "v" + i);
            RBuckets bs = a.getBuckets(StringCodec.INSTANCE);
            Map<String, String> m = new LinkedHashMap<>();
            for (int i = 0; i < 50; i++) m.put(keys.get(i), "w" + i);
            bs.set(m);
            Map<String, String> got = b.getBuckets(StringCodec.INSTANCE).get(keys.subList(0, 50).toArray(new String[0]));
            expect("other client RBuckets.get(50 keys) after RBuckets.set(50 keys)", new HashMap<>(got), new HashMap<>(m));
            expect("RKeys.delete(200 keys)", a.getKeys().delete(keys.toArray(new String[0])), 200L);
            expect("RKeys.countExists(200 keys) after delete", a.getKeys().countExists(keys.toArray(new String[0])), 0L);
        });

        test(Suite.REDISSON, "RLock with 4 threads on 2 clients contending: mutual exclusion, waiters woken", () -> {
            String name = key("contend4");
            AtomicInteger inside = new AtomicInteger(), overlaps = new AtomicInteger(), done = new AtomicInteger();
            List<Future<?>> fs = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                RedissonClient c = t % 2 == 0 ? a : b;
                fs.add(pool.submit(() -> {
                    RLock l = c.getLock(name);
                    for (int i = 0; i < 5; i++) {
                        if (!l.tryLock(10, TimeUnit.SECONDS)) throw new Suite.Fail("RLock.tryLock(10s) with 4 contenders", false, true);
                        try {
                            if (inside.incrementAndGet() != 1) overlaps.incrementAndGet();
                            Thread.sleep(20);
                            inside.decrementAndGet();
                            done.incrementAndGet();
                        } finally {
                            l.unlock();
                        }
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) f.get(15, TimeUnit.SECONDS);
            expect("lock/unlock cycles", done.get(), 20);
            expect("times two threads held the lock at once", overlaps.get(), 0);
            check("RLock.isLocked() at the end", !a.getLock(name).isLocked(), true, "false");
        });

        test(Suite.REDISSON, "10 RLocks in 10 slots, each waiter woken by its unlock message", () -> {
            List<String> names = spread("wake", 10);
            List<RLock> held = new ArrayList<>();
            // The waiters are the client with Redisson's defaults (a PING every 30 s): with
            // b's PING every 500 ms, a late PONG under load makes Redisson close its pub/sub
            // connection and lose messages until it has subscribed again, straight against
            // Redis too (PubSubSoak: 2 of 700 at 1 s, waiters false at 200 ms and 50 ms).
            for (String n : names) {
                RLock l = b.getLock(n);
                l.lock(30, TimeUnit.SECONDS); // long lease: only the unlock message wakes the waiter early
                held.add(l);
            }
            CountDownLatch waiting = new CountDownLatch(names.size());
            List<Future<Long>> ws = new ArrayList<>();
            for (String n : names) {
                ws.add(pool.submit(() -> {
                    RLock w = a.getLock(n);
                    waiting.countDown();
                    long t0 = System.nanoTime();
                    boolean ok = w.tryLock(10, 5, TimeUnit.SECONDS);
                    long ms = (System.nanoTime() - t0) / 1_000_000;
                    if (!ok) return -1L;
                    w.unlock();
                    return ms;
                }));
            }
            waiting.await(5, TimeUnit.SECONDS);
            Thread.sleep(700);
            for (RLock l : held) l.unlock();
            for (int i = 0; i < names.size(); i++) {
                long ms = ws.get(i).get(15, TimeUnit.SECONDS);
                check("waiter RLock(" + names.get(i) + ", slot " + slot(names.get(i)) + ").tryLock(10s, 5s), holder unlocks after 700 ms",
                        ms >= 0 && ms < 3000, ms < 0 ? "false" : "true after " + ms + " ms", "true within 3000 ms");
            }
        });

        test(Suite.REDISSON, "RTopic on 8 channels in 8 slots, publish from the other client", () -> {
            List<String> chans = spread("topics", 8);
            LinkedBlockingQueue<String> got = new LinkedBlockingQueue<>();
            List<RTopic> subs = new ArrayList<>();
            List<Integer> ids = new ArrayList<>();
            for (String ch : chans) {
                RTopic t = b.getTopic(ch, StringCodec.INSTANCE);
                ids.add(t.addListener(String.class, (c, msg) -> got.add(c + "=" + msg)));
                subs.add(t);
            }
            Thread.sleep(500);
            Set<String> want = new HashSet<>();
            for (String ch : chans) {
                expect("RTopic(" + ch + ").publish(hi) receivers", a.getTopic(ch, StringCodec.INSTANCE).publish("hi"), 1L);
                want.add(ch + "=hi");
            }
            Set<String> seen = new HashSet<>();
            long end = System.currentTimeMillis() + 3000;
            while (seen.size() < want.size() && System.currentTimeMillis() < end) {
                String s = got.poll(100, TimeUnit.MILLISECONDS);
                if (s != null) seen.add(s);
            }
            expect("messages received on 8 channels within 3 s", seen, want);
            for (int i = 0; i < subs.size(); i++) subs.get(i).removeListener(ids.get(i));
        });
    }

    static int renewalErrors() {
        String s = stderrSeen.toString();
        int n = 0;
        for (int i = s.indexOf(RENEWAL_ERROR); i >= 0; i = s.indexOf(RENEWAL_ERROR, i + 1)) n++;
        return n;
    }

    /** Tees System.err (where slf4j-simple writes, looked up per line) into stderrSeen. */
    static void watchStderr() {
        PrintStream orig = System.err;
        OutputStream tee = new OutputStream() {
            final ByteArrayOutputStream line = new ByteArrayOutputStream();

            @Override
            public synchronized void write(int b) {
                orig.write(b);
                line.write(b);
                if (b == '\n') flushLine();
            }

            @Override
            public synchronized void write(byte[] b, int off, int len) {
                orig.write(b, off, len);
                line.write(b, off, len);
                if (len > 0 && b[off + len - 1] == '\n') flushLine();
            }

            @Override
            public void flush() {
                orig.flush();
            }

            void flushLine() {
                stderrSeen.append(line.toString(StandardCharsets.UTF_8));
                line.reset();
            }
        };
        System.setErr(new PrintStream(tee, true, StandardCharsets.UTF_8));
    }

    public static void main(String[] argv) {
        if (!"1".equals(System.getenv("FENCEPROXY_CLUSTER"))) {
            System.out.println("java: FENCEPROXY_CLUSTER is not 1: the proxy does not front a cluster; nothing run (use fenceproxy.Suite)");
            System.out.println("java totals: 0 passed, 0 failed");
            System.exit(0);
        }
        watchStderr();
        long t0 = System.nanoTime();
        System.out.printf("java: %s and %s against %s, which fronts a Redis Cluster (seeds %s; run %s)%n",
                Suite.REDISSON, Suite.JEDIS, Suite.ADDR, seeds().isEmpty() ? "not given" : String.join(",", seeds()), Suite.RUN);
        Suite.jedisCases();
        jedisCases();
        RedissonClient a = null, b = null;
        try {
            a = Suite.redisson("a", true);
            b = Suite.redisson("b", false);
        } catch (Exception e) {
            Suite.failed++;
            System.out.printf("FAIL java: %s: connect: Redisson.create(single server %s) -> %s%n", Suite.REDISSON, Suite.ADDR, show(e));
        }
        if (a != null && b != null) {
            final RedissonClient ra = a;
            test(Suite.REDISSON, "connect (defaults: 24 idle + 1 pub/sub conns) and pingAll", () -> {
                check("getRedisNodes(SINGLE).pingAll()",
                        ra.getRedisNodes(org.redisson.api.redisnode.RedisNodes.SINGLE).pingAll(), false, "true");
            });
            redissonCases(a, b);
            Suite.redissonCases(a, b);
            // Mid-suite: every case after it runs on the clients that lived through it.
            Reconnect.cases(a, b);
            RedissonObjects.cases(a, b);
        }
        JedisObjects.cases();
        for (RedissonClient c : new RedissonClient[] {a, b}) {
            if (c != null) {
                try {
                    c.shutdown(0, 2, TimeUnit.SECONDS);
                } catch (Exception ignored) {
                }
            }
        }
        Suite.finish(t0);
    }
}
