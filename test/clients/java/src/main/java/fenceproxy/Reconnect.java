package fenceproxy;

import static fenceproxy.Suite.HOST;
import static fenceproxy.Suite.PORT;
import static fenceproxy.Suite.REDISSON;
import static fenceproxy.Suite.check;
import static fenceproxy.Suite.expect;
import static fenceproxy.Suite.key;
import static fenceproxy.Suite.pool;
import static fenceproxy.Suite.test;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.redisson.api.RBlockingQueue;
import org.redisson.api.RBucket;
import org.redisson.api.RLock;
import org.redisson.api.RTopic;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;

import redis.clients.jedis.JedisPooled;
import redis.clients.jedis.exceptions.JedisConnectionException;

/**
 * The proxy killed (SIGKILL) and started again mid-suite, on the same address: the
 * clients the suite has used so far carry on, and every case after this one runs on them.
 *
 * run.sh names a script that does the restart in FENCEPROXY_RESTART (test/clients/
 * restart-proxy.sh); without it (a proxy run.sh did not start) the case is skipped.
 *
 * What an application relies on, and Redisson does by itself: it reconnects its pool,
 * subscribes its pub/sub listeners again, re-sends a blocking command it was waiting on
 * (a poll() in progress), and its watchdog goes on renewing a lock it holds (the lock is a
 * key in Redis, which did not restart). JedisPooled hands out a pooled connection that
 * broke with the proxy once, fails that call (JedisConnectionException, as against a
 * restarted Redis) and drops it; the case counts those failures and needs the pool to
 * recover by itself.
 *
 * The watchdog lock is held by a client of its own with a 10 s lockWatchdogTimeout, not
 * by a (3 s, for the suite's speed): when every connection drops at once, Redisson
 * reconnects its 24 pooled connections one after another, and a renewal that lands on
 * one not yet reconnected is retried after 1-2 s, once or twice, so the renewal can come
 * more than 3 s after the last: a 3 s lease runs out in between. That is Redisson's own
 * timing, not the proxy's: the same happened in front of a plain Redis killed and started
 * again (appendfsync always, so the lock survived in Redis): the first restart after a
 * client's start lost a 3 s-lease lock in 1 of 2 runs there, and in 2 of 2 through a
 * fenceproxy in front of a cluster, whose restart takes longer (300-500 ms against
 * 30-300 ms). With the default 30 s (10 s here) the lease spans that retry.
 */
final class Reconnect {
    private Reconnect() {
    }

    static final String NAME = "proxy killed (SIGKILL) and restarted mid-suite: Redisson reconnects, resubscribes, "
            + "re-sends a blocked take(), keeps a watchdog lock; JedisPooled recovers";

    static void cases(RedissonClient a, RedissonClient b) {
        String script = System.getenv("FENCEPROXY_RESTART");
        if (script == null || script.isBlank() || !new File(script).canExecute()) {
            Suite.skip(REDISSON, NAME, "FENCEPROXY_RESTART is not set: the proxy was not started by test/clients/run.sh, which can restart it");
            return;
        }
        test(REDISSON, NAME, 60, () -> {
            StringCodec s = StringCodec.INSTANCE;
            RedissonClient w = Suite.redisson("watchdog", WATCHDOG_10S, c -> {
            });
            try {
                restart(script, a, b, w, s);
            } finally {
                w.shutdown(0, 2, TimeUnit.SECONDS);
            }
        });
    }

    static final long WATCHDOG_10S = 10_000;

    /** Holds a lock (on w), a subscription and a blocked poll (on b) across a restart, and checks each after it. */
    static void restart(String script, RedissonClient a, RedissonClient b, RedissonClient w, StringCodec s) throws Exception {
        RLock held = w.getLock(key("rc:lock"));
        held.lock(); // the watchdog keeps it: 10 s lease, renewed every 3.3 s
        LinkedBlockingQueue<String> heard = new LinkedBlockingQueue<>();
        RTopic sub = b.getTopic(key("rc:topic"), s);
        int lid = sub.addListener(String.class, (c, m) -> heard.add(m));
        RBlockingQueue<String> qb = b.getBlockingQueue(key("rc:q"), s);
        Future<String> taker = pool.submit(() -> qb.poll(45, TimeUnit.SECONDS));
        RBucket<String> bucket = a.getBucket(key("rc:bucket"), s);
        bucket.set("before");
        try (JedisPooled jp = new JedisPooled(HOST, PORT)) {
            for (int i = 0; i < 4; i++) jp.set(key("rc:j" + i), "before"); // a pooled connection or more
            Thread.sleep(300);
            check("RBlockingQueue.poll(45 s) on an empty queue before the restart", !taker.isDone(), "done", "still waiting");

            // The lock's TTL as the other client sees it, every 200 ms from the restart on:
            // shown if the lock is lost, to tell when the watchdog stopped renewing.
            List<String> ttls = Collections.synchronizedList(new ArrayList<>());
            long r0 = System.nanoTime();
            java.util.concurrent.atomic.AtomicBoolean sampling = new java.util.concurrent.atomic.AtomicBoolean(true);
            pool.submit(() -> {
                while (sampling.get() && ttls.size() < 100) { // 20 s at most, also if the case fails first
                    String v;
                    try {
                        v = String.valueOf(b.getLock(key("rc:lock")).remainTimeToLiveAsync().toCompletableFuture().get(1, TimeUnit.SECONDS));
                    } catch (Exception e) {
                        v = e.getClass().getSimpleName();
                    }
                    ttls.add((System.nanoTime() - r0) / 1_000_000 + "ms:" + v);
                    Thread.sleep(200);
                }
                return null;
            });
            Process p = new ProcessBuilder(script).redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
            check("restart-proxy.sh finished", p.waitFor(30, TimeUnit.SECONDS), out, "exit within 30 s");
            check("restart-proxy.sh exit status", p.exitValue() == 0, p.exitValue() + ": " + out, "0");
            System.out.println("java: " + out);

            // Redisson: plain commands on both clients (retried by Redisson while it reconnects).
            expect("other client RBucket.get() after the restart", b.<String>getBucket(key("rc:bucket"), s).get(), "before");
            bucket.set("after");
            expect("other client RBucket.get() after a set", b.<String>getBucket(key("rc:bucket"), s).get(), "after");

            // The listener is subscribed again: publish until it hears (bounded).
            String msg = null;
            long end = System.currentTimeMillis() + 15_000;
            for (int i = 0; msg == null && System.currentTimeMillis() < end; i++) {
                a.getTopic(key("rc:topic"), s).publish("after-" + i);
                msg = heard.poll(300, TimeUnit.MILLISECONDS);
            }
            check("topic listener on the other client hears a message published after the restart", msg != null, msg, "a message within 15 s");
            sub.removeListener(lid);

            // The blocked take was sent again on a new connection.
            a.<String>getBlockingQueue(key("rc:q"), s).offer("item");
            expect("RBlockingQueue.poll(45 s) blocked across the restart, after an offer", taker.get(15, TimeUnit.SECONDS), "item");

            // The watchdog lock: renewed after the restart (its TTL goes up again), still ours.
            long seen = b.getLock(key("rc:lock")).remainTimeToLive();
            long[] last = {seen};
            boolean renewed = RedissonObjects.waitFor(8000, () -> {
                long t = b.getLock(key("rc:lock")).remainTimeToLive();
                boolean up = t > last[0];
                last[0] = t;
                return up;
            });
            sampling.set(false);
            check("watchdog renewal after the restart (the lock's TTL rising within 8 s)", renewed, "no; its TTL from the restart on " + ttls,
                    "yes");
            check("RLock.isHeldByCurrentThread() after the restart", held.isHeldByCurrentThread(), "false; its TTL from the restart on " + ttls, "true");
            held.unlock();

            // JedisPooled: each pooled connection that broke fails once, then the pool is whole again.
            int failures = 0;
            String got = null;
            for (int i = 0; i < 20 && got == null; i++) {
                try {
                    got = jp.get(key("rc:j0"));
                } catch (JedisConnectionException e) {
                    failures++;
                }
            }
            expect("JedisPooled GET after the restart (after " + failures + " broken pooled connections)", got, "before");
            for (int i = 0; i < 8; i++) expect("JedisPooled SET/GET round " + i, jp.set(key("rc:j" + (i % 4)), "after") + jp.get(key("rc:j" + (i % 4))), "OKafter");
            System.out.printf("java: reconnect: JedisPooled failed %d call(s) on pooled connections broken by the restart%n", failures);
            a.getKeys().delete(key("rc:bucket"), key("rc:q"), key("rc:j0"), key("rc:j1"), key("rc:j2"), key("rc:j3"));
        }
    }
}
