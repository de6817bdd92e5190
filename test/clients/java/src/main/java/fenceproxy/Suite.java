package fenceproxy;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.redisson.Redisson;
import org.redisson.api.RBucket;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RMap;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.RedisProtocol;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisDataException;

/**
 * Redisson and Jedis compatibility suite for fenceproxy.
 *
 * Run by test/clients/run.sh with FENCEPROXY_ADDR=host:port. Each case prints
 * `PASS java: CLIENT: NAME` or `FAIL java: CLIENT: NAME: CALL -> REPLY`; the last line
 * is `java totals: N passed, M failed`. Exit status 1 on any failure.
 *
 * Redisson runs in single-server mode with lockWatchdogTimeout 3000 ms so the
 * watchdog case is quick. Every wait is bounded: each case has its own deadline.
 */
public final class Suite {
    static final long CASE_SECONDS = 20;
    static final long WATCHDOG_MS = 3000;

    static final String ADDR = System.getenv().getOrDefault("FENCEPROXY_ADDR", "127.0.0.1:7379");
    static final String HOST = ADDR.substring(0, ADDR.lastIndexOf(':'));
    static final int PORT = Integer.parseInt(ADDR.substring(ADDR.lastIndexOf(':') + 1));
    static final String RUN = UUID.randomUUID().toString().substring(0, 8);
    static final String REDISSON = "redisson " + pkgVersion(Redisson.class, "3.x");
    static final String JEDIS = "jedis " + pkgVersion(Jedis.class, "5.x");

    /** FENCEPROXY_CLUSTER=1: the proxy fronts a Redis Cluster (run.sh --cluster). */
    static final boolean CLUSTER = "1".equals(System.getenv("FENCEPROXY_CLUSTER"));

    static int passed, failed;
    static final List<String> skipped = new ArrayList<>();
    static final ExecutorService pool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r);
        t.setDaemon(true);
        return t;
    });

    /** A failed expectation: names the call and the reply. */
    static final class Fail extends RuntimeException {
        Fail(String call, Object reply, Object want) {
            super(call + " -> " + show(reply) + (want == null ? "" : " (want " + show(want) + ")"));
        }
    }

    interface Body {
        void run() throws Exception;
    }

    static String pkgVersion(Class<?> c, String dflt) {
        String v = c.getPackage() == null ? null : c.getPackage().getImplementationVersion();
        if (v != null) return v;
        String g = c == Jedis.class ? "redis.clients/jedis" : "org.redisson/redisson";
        try (var in = c.getResourceAsStream("/META-INF/maven/" + g + "/pom.properties")) {
            if (in != null) {
                var p = new java.util.Properties();
                p.load(in);
                v = p.getProperty("version");
            }
        } catch (java.io.IOException ignored) {
        }
        return v == null ? dflt : v;
    }

    static String show(Object o) {
        if (o == null) return "null";
        if (o instanceof byte[] b) return "\"" + new String(b, StandardCharsets.UTF_8) + "\"";
        if (o instanceof List<?> l) {
            List<String> parts = new ArrayList<>();
            for (Object x : l) parts.add(show(x));
            return "[" + String.join(", ", parts) + "]";
        }
        if (o instanceof Throwable t) return t.getClass().getSimpleName() + "(" + t.getMessage() + ")";
        if (o instanceof String s) return "\"" + s + "\"";
        return String.valueOf(o);
    }

    static void expect(String call, Object got, Object want) {
        Object g = got instanceof byte[] b ? new String(b, StandardCharsets.UTF_8) : got;
        if (g == null ? want != null : !g.equals(want)) throw new Fail(call, got, want);
    }

    static void check(String call, boolean ok, Object reply, String want) {
        if (!ok) throw new Fail(call, reply, want);
    }

    /** Runs one case in its own thread (Redisson locks are per thread) with a deadline. */
    static void test(String client, String name, Body body) {
        test(client, name, CASE_SECONDS, body);
    }

    /** As test(client, name, body), with a deadline of its own for a longer case. */
    static void test(String client, String name, long seconds, Body body) {
        long t0 = System.nanoTime();
        Future<?> f = pool.submit(() -> {
            body.run();
            return null;
        });
        String err = null;
        try {
            f.get(seconds, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            f.cancel(true);
            err = "no result within " + seconds + "s (a reply that never came?)";
        } catch (java.util.concurrent.ExecutionException e) {
            Throwable c = e.getCause();
            boolean named = c instanceof Fail || c instanceof ReplyError;
            err = named ? c.getMessage() : "unexpected " + show(c);
            if (!named && c.getCause() != null) err += " caused by " + show(c.getCause());
        } catch (InterruptedException e) {
            err = "interrupted";
        }
        long ms = (System.nanoTime() - t0) / 1_000_000;
        if (err == null) {
            passed++;
            System.out.printf("PASS java: %s: %s (%d ms)%n", client, name, ms);
        } else {
            failed++;
            System.out.printf("FAIL java: %s: %s: %s%n", client, name, err);
        }
        System.out.flush();
    }

    /**
     * A case that does not run here, with the reason printed (`SKIP java: CLIENT: NAME: REASON`)
     * and listed again before the totals, so a skipped case is never mistaken for a passed one.
     */
    static void skip(String client, String name, String reason) {
        skipped.add(client + ": " + name);
        System.out.printf("SKIP java: %s: %s: %s%n", client, name, reason);
        System.out.flush();
    }

    static String key(String name) {
        return "java:" + RUN + ":" + name;
    }

    /** A hash tag for names that must share one slot in front of a cluster (transactions, atomic batches). */
    static String tag(String name) {
        return "{" + key(name) + "}";
    }

    static RedissonClient redisson(String name, boolean defaults) {
        return redisson(name, s -> {
            if (!defaults) {
                // PING every 500 ms on every connection, pub/sub ones included (subscribed: `*2 pong ""`).
                s.setConnectionMinimumIdleSize(2).setConnectionPoolSize(8).setPingConnectionInterval(500)
                        .setSubscriptionConnectionMinimumIdleSize(1).setSubscriptionConnectionPoolSize(4);
            }
        });
    }

    /** A Redisson client in single-server mode at ADDR; tune adjusts its server config. */
    static RedissonClient redisson(String name, java.util.function.Consumer<org.redisson.config.SingleServerConfig> tune) {
        return redisson(name, WATCHDOG_MS, tune);
    }

    /** As redisson(name, tune), speaking protocol (Redisson's default is RESP2). */
    static RedissonClient redisson(String name, java.util.function.Consumer<org.redisson.config.SingleServerConfig> tune,
            org.redisson.config.Protocol protocol) {
        return redisson(name, WATCHDOG_MS, tune, protocol);
    }

    /** As redisson(name, tune), with a lockWatchdogTimeout of its own. */
    static RedissonClient redisson(String name, long watchdogMs, java.util.function.Consumer<org.redisson.config.SingleServerConfig> tune) {
        return redisson(name, watchdogMs, tune, org.redisson.config.Protocol.RESP2);
    }

    static RedissonClient redisson(String name, long watchdogMs, java.util.function.Consumer<org.redisson.config.SingleServerConfig> tune,
            org.redisson.config.Protocol protocol) {
        Config config = new Config();
        config.setProtocol(protocol);
        config.setLockWatchdogTimeout(watchdogMs);
        // RMapCache's eviction task first runs 1 s after the map is made (default 5 s).
        config.setMinCleanUpDelay(1);
        var s = config.useSingleServer()
                .setAddress("redis://" + ADDR)
                .setClientName("java-suite-" + name)
                .setTimeout(5000)
                .setConnectTimeout(5000);
        tune.accept(s);
        return Redisson.create(config);
    }

    // ---------------------------------------------------------------- Redisson

    static void redissonCases(RedissonClient a, RedissonClient b) {
        test(REDISSON, "RLock lock/isLocked/unlock", () -> {
            RLock l = a.getLock(key("rlock"));
            l.lock();
            check("RLock.isLocked()", l.isLocked(), false, "true");
            check("RLock.isHeldByCurrentThread()", l.isHeldByCurrentThread(), false, "true");
            long ttl = l.remainTimeToLive();
            check("RLock.remainTimeToLive()", ttl > 0 && ttl <= WATCHDOG_MS, ttl, "0 < ttl <= " + WATCHDOG_MS);
            RLock other = b.getLock(key("rlock"));
            check("other client RLock.tryLock(0, 5s)", !submitGet(() -> other.tryLock(0, 5, TimeUnit.SECONDS)), true, "false");
            l.unlock();
            check("RLock.isLocked() after unlock", !l.isLocked(), true, "false");
        });

        test(REDISSON, "RLock reentrant lock counts", () -> {
            RLock l = a.getLock(key("reentrant"));
            l.lock();
            l.lock();
            expect("RLock.getHoldCount()", l.getHoldCount(), 2);
            l.unlock();
            check("RLock.isLocked() after one unlock", l.isLocked(), false, "true");
            l.unlock();
            check("RLock.isLocked() after two unlocks", !l.isLocked(), true, "false");
        });

        test(REDISSON, "RLock tryLock(wait, lease) and lease expiry", () -> {
            RLock l = a.getLock(key("trylock"));
            check("RLock.tryLock(1s, 800ms)", l.tryLock(1000, 800, TimeUnit.MILLISECONDS), false, "true");
            long ttl = l.remainTimeToLive();
            check("RLock.remainTimeToLive()", ttl > 0 && ttl <= 800, ttl, "0 < ttl <= 800");
            RLock other = b.getLock(key("trylock"));
            long t0 = System.nanoTime();
            // The lease (800 ms) runs out while the other client waits up to 5 s.
            boolean got = submitGet(() -> {
                boolean ok = other.tryLock(5, 2, TimeUnit.SECONDS);
                if (ok) other.unlock();
                return ok;
            });
            long ms = (System.nanoTime() - t0) / 1_000_000;
            check("other client RLock.tryLock(5s, 2s) while a 800 ms lease runs out", got && ms < 4000, got + " after " + ms + " ms", "true within 4000 ms");
        });

        test(REDISSON, "RLock waiter woken by pub/sub on unlock (two clients)", () -> {
            RLock l = a.getLock(key("contend"));
            l.lock(30, TimeUnit.SECONDS); // long lease: only the unlock message can wake the waiter early
            CountDownLatch waiting = new CountDownLatch(1);
            Future<Long> waiter = pool.submit(() -> {
                RLock w = b.getLock(key("contend"));
                waiting.countDown();
                long t0 = System.nanoTime();
                boolean ok = w.tryLock(10, 5, TimeUnit.SECONDS);
                long ms = (System.nanoTime() - t0) / 1_000_000;
                if (!ok) return -1L;
                w.unlock();
                return ms;
            });
            waiting.await(5, TimeUnit.SECONDS);
            Thread.sleep(700);
            long u0 = System.nanoTime();
            l.unlock();
            long ms = waiter.get(15, TimeUnit.SECONDS);
            long afterUnlock = (System.nanoTime() - u0) / 1_000_000;
            check("waiter RLock.tryLock(10s, 5s) while holder unlocks after 700 ms",
                    ms >= 0 && ms < 3000, ms < 0 ? "false" : "true after " + ms + " ms (" + afterUnlock + " ms after unlock)",
                    "true within 3000 ms (woken by redisson_lock__channel)");
        });

        test(REDISSON, "RLock watchdog renews past 2x lockWatchdogTimeout", () -> {
            RLock l = a.getLock(key("watchdog"));
            l.lock(); // no lease: the watchdog keeps it (lease = 3000 ms, renewed every 1000 ms)
            long end = System.currentTimeMillis() + 2 * WATCHDOG_MS + 1500;
            long minTtl = Long.MAX_VALUE;
            while (System.currentTimeMillis() < end) {
                Thread.sleep(500);
                long ttl = l.remainTimeToLive();
                minTtl = Math.min(minTtl, ttl);
                check("RLock.remainTimeToLive() while held by the watchdog", ttl > 0, ttl, "> 0");
                check("RLock.isLocked() while held by the watchdog", l.isLocked(), false, "true");
            }
            RLock other = b.getLock(key("watchdog"));
            check("other client RLock.tryLock(0, 1s) after 2x watchdog timeout",
                    !submitGet(() -> other.tryLock(0, 1, TimeUnit.SECONDS)), true, "false");
            l.unlock();
            check("RLock.isLocked() after unlock", !l.isLocked(), true, "false");
        });

        test(REDISSON, "RFencedLock tokens increase", () -> {
            RFencedLock l = a.getFencedLock(key("fenced"));
            Long t1 = l.lockAndGetToken();
            check("RFencedLock.lockAndGetToken()", t1 != null && t1 > 0, t1, "> 0");
            expect("RFencedLock.getToken()", l.getToken(), t1);
            l.unlock();
            RFencedLock o = b.getFencedLock(key("fenced"));
            Long t2 = submitGet(() -> {
                Long t = o.tryLockAndGetToken(2, 2, TimeUnit.SECONDS);
                if (t != null) o.unlock();
                return t;
            });
            check("other client RFencedLock.tryLockAndGetToken(2s, 2s)", t2 != null && t2 > t1, t2, "> " + t1);
            Long t3 = l.lockAndGetToken();
            check("RFencedLock.lockAndGetToken() again", t3 != null && t3 > t2, t3, "> " + t2);
            l.unlock();
        });

        test(REDISSON, "RFairLock lock/unlock and FIFO handoff", () -> {
            RLock l = a.getFairLock(key("fair"));
            l.lock(20, TimeUnit.SECONDS);
            check("RFairLock.isLocked()", l.isLocked(), false, "true");
            CountDownLatch started = new CountDownLatch(1);
            Future<Long> waiter = pool.submit(() -> {
                RLock w = b.getFairLock(key("fair"));
                started.countDown();
                long t0 = System.nanoTime();
                boolean ok = w.tryLock(8, 5, TimeUnit.SECONDS);
                long ms = (System.nanoTime() - t0) / 1_000_000;
                if (!ok) return -1L;
                w.unlock();
                return ms;
            });
            started.await(5, TimeUnit.SECONDS);
            Thread.sleep(500);
            l.unlock();
            long ms = waiter.get(12, TimeUnit.SECONDS);
            check("waiter RFairLock.tryLock(8s, 5s) while holder unlocks after 500 ms", ms >= 0 && ms < 3000,
                    ms < 0 ? "false" : "true after " + ms + " ms", "true within 3000 ms");
            check("RFairLock.isLocked() after both unlocked", !l.isLocked(), true, "false");
        });

        test(REDISSON, "RReadWriteLock shared readers, exclusive writer", () -> {
            RReadWriteLock rwA = a.getReadWriteLock(key("rw"));
            RReadWriteLock rwB = b.getReadWriteLock(key("rw"));
            rwA.readLock().lock(10, TimeUnit.SECONDS);
            boolean otherRead = submitGet(() -> {
                boolean ok = rwB.readLock().tryLock(2, 5, TimeUnit.SECONDS);
                if (ok) rwB.readLock().unlock();
                return ok;
            });
            check("other client readLock().tryLock(2s, 5s) while a reader holds", otherRead, false, "true");
            boolean otherWrite = submitGet(() -> rwB.writeLock().tryLock(300, 5000, TimeUnit.MILLISECONDS));
            check("other client writeLock().tryLock(300ms, 5s) while a reader holds", !otherWrite, true, "false");
            rwA.readLock().unlock();
            boolean write = submitGet(() -> {
                boolean ok = rwB.writeLock().tryLock(3, 5, TimeUnit.SECONDS);
                if (ok) rwB.writeLock().unlock();
                return ok;
            });
            check("other client writeLock().tryLock(3s, 5s) after the reader unlocked", write, false, "true");
            rwA.writeLock().lock(10, TimeUnit.SECONDS);
            check("writeLock().isLocked()", rwA.writeLock().isLocked(), false, "true");
            boolean readWhileWrite = submitGet(() -> rwB.readLock().tryLock(300, 5000, TimeUnit.MILLISECONDS));
            check("other client readLock().tryLock(300ms, 5s) while a writer holds", !readWhileWrite, true, "false");
            rwA.writeLock().unlock();
        });

        test(REDISSON, "RSemaphore permits, waiter woken by release", () -> {
            RSemaphore s = a.getSemaphore(key("sem"));
            check("RSemaphore.trySetPermits(2)", s.trySetPermits(2), false, "true");
            expect("RSemaphore.availablePermits()", s.availablePermits(), 2);
            s.acquire();
            check("RSemaphore.tryAcquire()", s.tryAcquire(), false, "true");
            expect("RSemaphore.availablePermits() after 2 acquires", s.availablePermits(), 0);
            check("RSemaphore.tryAcquire(Duration 200ms) with none left", !s.tryAcquire(Duration.ofMillis(200)), true, "false");
            RSemaphore sb = b.getSemaphore(key("sem"));
            Future<Long> waiter = pool.submit(() -> {
                long t0 = System.nanoTime();
                boolean ok = sb.tryAcquire(Duration.ofSeconds(8));
                return ok ? (System.nanoTime() - t0) / 1_000_000 : -1L;
            });
            Thread.sleep(500);
            s.release();
            long ms = waiter.get(12, TimeUnit.SECONDS);
            check("other client RSemaphore.tryAcquire(8s) while a permit is released after 500 ms", ms >= 0 && ms < 3000,
                    ms < 0 ? "false" : "true after " + ms + " ms", "true within 3000 ms");
            s.release(2);
            expect("RSemaphore.availablePermits() after releases", s.availablePermits(), 2);
        });

        test(REDISSON, "RTopic publish/subscribe across clients, PINGs while subscribed", () -> {
            org.redisson.api.RTopic sub = b.getTopic(key("topic"), StringCodec.INSTANCE);
            java.util.concurrent.LinkedBlockingQueue<String> got = new java.util.concurrent.LinkedBlockingQueue<>();
            int id = sub.addListener(String.class, (ch, msg) -> got.add(msg));
            Thread.sleep(1500); // client b PINGs its subscribed connection every 500 ms
            long n = a.getTopic(key("topic"), StringCodec.INSTANCE).publish("hello");
            expect("RTopic.publish(hello) receivers", n, 1L);
            expect("RTopic listener message", got.poll(3, TimeUnit.SECONDS), "hello");
            sub.removeListener(id);
        });

        test(REDISSON, "RBucket basics", () -> {
            RBucket<String> bk = a.getBucket(key("bucket"), StringCodec.INSTANCE);
            bk.set("v1");
            expect("RBucket.get()", bk.get(), "v1");
            expect("RBucket.getAndSet(v2)", bk.getAndSet("v2"), "v1");
            check("RBucket.setIfAbsent(v3) on a set key", !bk.setIfAbsent("v3"), true, "false");
            expect("other client RBucket.get()", b.<String>getBucket(key("bucket"), StringCodec.INSTANCE).get(), "v2");
            bk.set("v4", Duration.ofSeconds(10));
            long ttl = bk.remainTimeToLive();
            check("RBucket.remainTimeToLive() after set(v, 10s)", ttl > 0 && ttl <= 10000, ttl, "0 < ttl <= 10000");
            check("RBucket.delete()", bk.delete(), false, "true");
            expect("RBucket.get() after delete", bk.get(), null);
            check("RBucket.setIfAbsent(v5) on a missing key", bk.setIfAbsent("v5"), false, "true");
            bk.delete();
        });

        test(REDISSON, "RMap basics", () -> {
            RMap<String, String> m = a.getMap(key("map"), StringCodec.INSTANCE);
            expect("RMap.put(f1, a)", m.put("f1", "a"), null);
            expect("RMap.put(f1, b)", m.put("f1", "b"), "a");
            check("RMap.fastPut(f2, c)", m.fastPut("f2", "c"), false, "true");
            expect("RMap.putIfAbsent(f2, x)", m.putIfAbsent("f2", "x"), "c");
            expect("RMap.get(f1)", m.get("f1"), "b");
            expect("RMap.size()", m.size(), 2);
            expect("RMap.readAllMap()", new HashMap<>(m.readAllMap()), Map.of("f1", "b", "f2", "c"));
            expect("other client RMap.containsKey(f2)", b.<String, String>getMap(key("map"), StringCodec.INSTANCE).containsKey("f2"), true);
            expect("RMap.remove(f1)", m.remove("f1"), "b");
            expect("RMap.keySet()", new java.util.HashSet<>(m.readAllKeySet()), java.util.Set.of("f2"));
            m.delete();
            expect("RMap.size() after delete", m.size(), 0);
        });
    }

    static <T> T submitGet(java.util.concurrent.Callable<T> c) throws Exception {
        return pool.submit(c).get(CASE_SECONDS - 5, TimeUnit.SECONDS);
    }

    // ---------------------------------------------------------------- Jedis

    enum Cmd implements ProtocolCommand {
        ACQUIRE("LOCK.ACQUIRE"), RENEW("LOCK.RENEW"), RELEASE("LOCK.RELEASE"),
        CHECK("FENCE.CHECK"), INFO("LOCK.INFO"), TOKEN("LOCK.TOKEN");

        final byte[] raw;

        Cmd(String name) {
            raw = name.getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public byte[] getRaw() {
            return raw;
        }
    }

    /** An error reply to a lock-family call, naming the call. */
    static final class ReplyError extends RuntimeException {
        final String call, error;

        ReplyError(String call, String error) {
            super(call + " -> error " + show(error));
            this.call = call;
            this.error = error;
        }
    }

    static Object send(Jedis j, Cmd c, Object... args) {
        String[] s = Arrays.stream(args).map(String::valueOf).toArray(String[]::new);
        try {
            return j.sendCommand(c, s);
        } catch (JedisDataException e) {
            throw new ReplyError(call(c, args), e.getMessage());
        }
    }

    static String call(Cmd c, Object... args) {
        StringBuilder sb = new StringBuilder(new String(c.raw, StandardCharsets.UTF_8));
        for (Object a : args) sb.append(' ').append(a);
        return sb.toString();
    }

    static long token(Jedis j, Object... args) {
        Object r = send(j, Cmd.ACQUIRE, args);
        if (!(r instanceof Long t) || t <= 0) throw new Fail(call(Cmd.ACQUIRE, args), r, "a positive integer token");
        return t;
    }

    static Map<String, Object> info(Jedis j, String res) {
        Object r = send(j, Cmd.INFO, res);
        Map<String, Object> m = new HashMap<>();
        if (r instanceof List<?> l && l.size() % 2 == 0) {
            for (int i = 0; i < l.size(); i += 2) {
                Object k = l.get(i), v = l.get(i + 1);
                m.put(k instanceof byte[] b ? new String(b, StandardCharsets.UTF_8) : String.valueOf(k),
                        v instanceof byte[] b ? new String(b, StandardCharsets.UTF_8) : v);
            }
        } else if (r instanceof Map<?, ?> mm) {
            for (var e : mm.entrySet()) {
                Object k = e.getKey(), v = e.getValue();
                m.put(k instanceof byte[] b ? new String(b, StandardCharsets.UTF_8) : String.valueOf(k),
                        v instanceof byte[] b ? new String(b, StandardCharsets.UTF_8) : v);
            }
        } else {
            throw new Fail("LOCK.INFO " + res, r, "a flat array of field/value pairs");
        }
        m.put("_raw", show(r));
        return m;
    }

    static void expectError(String call, Body b, String prefix) {
        try {
            b.run();
        } catch (ReplyError e) {
            if (e.error == null || !e.error.startsWith(prefix))
                throw new Fail(call, "error " + e.error, "an error starting " + prefix);
            return;
        } catch (Exception e) {
            throw new Fail(call, e, "an error starting " + prefix);
        }
        throw new Fail(call, "no error", "an error starting " + prefix);
    }

    static void jedisCases() {
        test(JEDIS, "LOCK.ACQUIRE token, same-owner retry, other owner null", () -> {
            try (Jedis j = new Jedis(HOST, PORT, 5000)) {
                String r = key("jlock");
                long t1 = token(j, r, "o1", 10000);
                expect(call(Cmd.ACQUIRE, r, "o1", 10000) + " (retry)", send(j, Cmd.ACQUIRE, r, "o1", 10000), t1);
                expect(call(Cmd.ACQUIRE, r, "o2", 10000), send(j, Cmd.ACQUIRE, r, "o2", 10000), null);
                expect(call(Cmd.CHECK, r, t1), send(j, Cmd.CHECK, r, t1), 1L);
                Map<String, Object> in = info(j, r);
                expect("LOCK.INFO " + r + " owner (" + in.get("_raw") + ")", in.get("owner"), "o1");
                expect("LOCK.INFO " + r + " token (" + in.get("_raw") + ")", in.get("token"), t1);
                check("LOCK.INFO " + r + " ttl-ms", in.get("ttl-ms") instanceof Long ttl && ttl > 0 && ttl <= 10000,
                        in.get("_raw"), "0 < ttl-ms <= 10000");
                expect("LOCK.INFO " + r + " waiters (" + in.get("_raw") + ")", in.get("waiters"), 0L);
                expect(call(Cmd.RENEW, r, "o1", 20000), send(j, Cmd.RENEW, r, "o1", 20000), t1);
                expect(call(Cmd.RENEW, r, "o2", 20000), send(j, Cmd.RENEW, r, "o2", 20000), null);
                expect(call(Cmd.RELEASE, r, "o2"), send(j, Cmd.RELEASE, r, "o2"), 0L);
                expect(call(Cmd.RELEASE, r, "o1"), send(j, Cmd.RELEASE, r, "o1"), 1L);
                expect(call(Cmd.RELEASE, r, "o1") + " (again)", send(j, Cmd.RELEASE, r, "o1"), 0L);
                Map<String, Object> free = info(j, r);
                expect("LOCK.INFO " + r + " owner when free (" + free.get("_raw") + ")", free.get("owner"), null);
                expect("LOCK.INFO " + r + " ttl-ms when free (" + free.get("_raw") + ")", free.get("ttl-ms"), -2L);
                expect("LOCK.INFO " + r + " token when free (" + free.get("_raw") + ")", free.get("token"), t1);
                long t2 = token(j, r, "o2", 10000);
                check(call(Cmd.ACQUIRE, r, "o2", 10000) + " after release", t2 > t1, t2, "> " + t1);
                expect(call(Cmd.CHECK, r, t1) + " (stale)", send(j, Cmd.CHECK, r, t1), 0L);
                expect(call(Cmd.CHECK, r, t2), send(j, Cmd.CHECK, r, t2), 1L);
                expect(call(Cmd.RELEASE, r, "o2"), send(j, Cmd.RELEASE, r, "o2"), 1L);
            }
        });

        test(JEDIS, "LOCK.ACQUIRE WAIT granted on release from another connection", () -> {
            try (Jedis j = new Jedis(HOST, PORT, 10000); Jedis k = new Jedis(HOST, PORT, 5000)) {
                String r = key("jwait");
                long t1 = token(k, r, "holder", 30000);
                Future<?> rel = pool.submit(() -> {
                    Thread.sleep(400);
                    return send(k, Cmd.RELEASE, r, "holder");
                });
                long t0 = System.nanoTime();
                Object got = send(j, Cmd.ACQUIRE, r, "waiter", 5000, "WAIT", 5000);
                long ms = (System.nanoTime() - t0) / 1_000_000;
                expect(call(Cmd.RELEASE, r, "holder"), rel.get(5, TimeUnit.SECONDS), 1L);
                check(call(Cmd.ACQUIRE, r, "waiter", 5000, "WAIT", 5000) + " (holder releases after 400 ms)",
                        got instanceof Long t && t > t1 && ms < 3000, show(got) + " after " + ms + " ms", "a token > " + t1 + " within 3000 ms");
                Object none = send(k, Cmd.ACQUIRE, r, "late", 5000, "WAIT", 300);
                expect(call(Cmd.ACQUIRE, r, "late", 5000, "WAIT", 300) + " (held)", none, null);
                expect(call(Cmd.RELEASE, r, "waiter"), send(j, Cmd.RELEASE, r, "waiter"), 1L);
            }
        });

        test(JEDIS, "lock family bad input gets -ERR, connection stays usable", () -> {
            try (Jedis j = new Jedis(HOST, PORT, 5000)) {
                String r = key("jbad");
                expectError(call(Cmd.ACQUIRE, r, "o1", "abc"), () -> send(j, Cmd.ACQUIRE, r, "o1", "abc"), "ERR");
                expectError(call(Cmd.ACQUIRE, r, "o1", 0), () -> send(j, Cmd.ACQUIRE, r, "o1", 0), "ERR");
                expectError(call(Cmd.ACQUIRE, r, "o1"), () -> send(j, Cmd.ACQUIRE, r, "o1"), "ERR");
                expectError(call(Cmd.ACQUIRE, "", "o1", 1000), () -> send(j, Cmd.ACQUIRE, "", "o1", 1000), "ERR");
                expectError(call(Cmd.CHECK, r, "x"), () -> send(j, Cmd.CHECK, r, "x"), "ERR");
                expectError(call(Cmd.CHECK, r, 999999999) + " (never issued)", () -> send(j, Cmd.CHECK, r, 999999999), "ERR");
                expect("PING after errors", j.ping(), "PONG");
                long t = token(j, r, "o1", 1000);
                expect(call(Cmd.RELEASE, r, "o1"), send(j, Cmd.RELEASE, r, "o1"), 1L);
                check("token after errors", t > 0, t, "> 0");
            }
        });

        test(JEDIS, "RESP3 (HELLO 3): data commands and the lock family", () -> {
            var cfg = DefaultJedisClientConfig.builder().protocol(RedisProtocol.RESP3).timeoutMillis(5000).build();
            try (Jedis j = new Jedis(new HostAndPort(HOST, PORT), cfg)) {
                String r = key("jresp3");
                expect("SET " + r + ":k v", j.set(r + ":k", "v"), "OK");
                expect("GET " + r + ":k", j.get(r + ":k"), "v");
                expect("HSET/HGETALL " + r + ":h", j.hset(r + ":h", Map.of("f", "1")) == 1 ? j.hgetAll(r + ":h") : null, Map.of("f", "1"));
                long t = token(j, r, "o1", 5000);
                Map<String, Object> in = info(j, r);
                expect("LOCK.INFO " + r + " token over RESP3 (" + in.get("_raw") + ")", in.get("token"), t);
                expect("LOCK.INFO " + r + " owner over RESP3 (" + in.get("_raw") + ")", in.get("owner"), "o1");
                expect(call(Cmd.RELEASE, r, "o1"), send(j, Cmd.RELEASE, r, "o1"), 1L);
                j.del(r + ":k", r + ":h");
            }
        });
    }

    public static void main(String[] argv) {
        long t0 = System.nanoTime();
        System.out.printf("java: %s and %s against %s (run %s)%n", REDISSON, JEDIS, ADDR, RUN);
        jedisCases();
        RedissonClient a = null, b = null;
        try {
            a = redisson("a", true);
            b = redisson("b", false);
        } catch (Exception e) {
            failed++;
            System.out.printf("FAIL java: %s: connect: Redisson.create(single server %s) -> %s%n", REDISSON, ADDR, show(e));
        }
        if (a != null && b != null) {
            final RedissonClient ra = a;
            test(REDISSON, "connect (defaults: 24 idle + 1 pub/sub conns) and pingAll", () -> {
                check("getRedisNodes(SINGLE).pingAll()",
                        ra.getRedisNodes(org.redisson.api.redisnode.RedisNodes.SINGLE).pingAll(), false, "true");
            });
            redissonCases(a, b);
            RedissonRecipes.cases(a, b);
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
        finish(t0);
    }

    /** The last lines: time taken, the skipped cases again, the totals; exits 1 on a failure. */
    static void finish(long t0) {
        System.out.printf("java: took %d ms%n", (System.nanoTime() - t0) / 1_000_000);
        if (!skipped.isEmpty()) System.out.printf("java: %d skipped: %s%n", skipped.size(), String.join("; ", skipped));
        System.out.printf("java totals: %d passed, %d failed%n", passed, failed);
        System.out.flush();
        System.exit(failed == 0 ? 0 : 1);
    }
}
