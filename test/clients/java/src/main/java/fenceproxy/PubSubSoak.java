package fenceproxy;

import java.util.ArrayList;
import java.util.Date;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RTopic;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

/**
 * PubSubSoak repeats the Java suite's two pub/sub cases that flaked in CI, on two
 * Redisson clients at one address, to tell Redisson's own losses from the proxy's:
 * run it against Redis itself and against a proxy in front of that Redis, at the
 * same time on the same machine, and compare the counts.
 *
 * <pre>
 * java -cp target/classes:$(cat target/classpath.txt) fenceproxy.PubSubSoak host:port ITERATIONS [pingMs]
 * </pre>
 *
 * Each iteration: 200 RTopic messages published one by one (each must reach 2
 * receivers) and every one heard by both clients within 5 s ("topic loss" if not);
 * then 10 RLocks held by client a with a 30 s lease, a waiter per lock on client b
 * ({@code tryLock(10 s, 5 s)}), unlocked 700 ms later: each waiter must be granted
 * within 3 s, which only the unlock message can do ("wake failure" if not). pingMs
 * is Redisson's pingConnectionInterval (default its own 30000): a shorter one makes
 * its pub/sub connections PING, and so close and resubscribe after a late PONG,
 * more often. Prints each loss as it happens and a last line {@code done N
 * iterations: topic losses T, wake failures W}.
 */
public final class PubSubSoak {
    private PubSubSoak() {
    }

    static RedissonClient client(String addr, String name, int pingMs) {
        Config c = new Config();
        c.setLockWatchdogTimeout(Suite.WATCHDOG_MS);
        c.useSingleServer().setAddress("redis://" + addr).setClientName(name)
                .setPingConnectionInterval(pingMs).setTimeout(5000).setConnectTimeout(5000);
        return Redisson.create(c);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2 || args.length > 3) {
            System.err.println("usage: PubSubSoak host:port iterations [pingMs]");
            System.exit(2);
        }
        String addr = args[0];
        int iterations = Integer.parseInt(args[1]);
        int pingMs = args.length > 2 ? Integer.parseInt(args[2]) : 30000;
        RedissonClient a = client(addr, "soak-a", pingMs), b = client(addr, "soak-b", pingMs);
        ExecutorService pool = Executors.newCachedThreadPool();
        String run = Long.toHexString(System.nanoTime());
        int topicLosses = 0, wakeFailures = 0;
        for (int it = 0; it < iterations; it++) {
            topicLosses += topic(a, b, "soak:" + run + ":t" + it, it);
            wakeFailures += wake(a, b, pool, "soak:" + run + ":w" + it, it);
        }
        System.out.printf("done %d iterations: topic losses %d, wake failures %d%n", iterations, topicLosses, wakeFailures);
        a.shutdown();
        b.shutdown();
        pool.shutdownNow();
        System.exit(0);
    }

    /** The RTopic case: the number of clients (0 to 2) that missed a message. */
    static int topic(RedissonClient a, RedissonClient b, String ch, int it) throws InterruptedException {
        LinkedBlockingQueue<String> gotA = new LinkedBlockingQueue<>(), gotB = new LinkedBlockingQueue<>();
        RTopic ta = a.getTopic(ch, StringCodec.INSTANCE), tb = b.getTopic(ch, StringCodec.INSTANCE);
        int ida = ta.addListener(String.class, (c, m) -> gotA.add(m));
        int idb = tb.addListener(String.class, (c, m) -> gotB.add(m));
        for (int i = 0; i < 200; i++) {
            long n = ta.publish("m" + i);
            if (n != 2) System.out.printf("iteration %d: PUBLISH m%d reached %d receivers, not 2 at %s%n", it, i, n, new Date());
        }
        int losses = lost(it, "a", gotA) + lost(it, "b", gotB);
        ta.removeListener(ida);
        tb.removeListener(idb);
        return losses;
    }

    static int lost(int it, String client, LinkedBlockingQueue<String> got) throws InterruptedException {
        Set<String> seen = new HashSet<>();
        long end = System.currentTimeMillis() + 5000;
        while (seen.size() < 200 && System.currentTimeMillis() < end) {
            String s = got.poll(100, TimeUnit.MILLISECONDS);
            if (s != null) seen.add(s);
        }
        if (seen.size() == 200) return 0;
        List<String> missing = new ArrayList<>();
        for (int i = 0; i < 200; i++) if (!seen.contains("m" + i)) missing.add("m" + i);
        System.out.printf("iteration %d: topic loss: client %s missed %s at %s%n", it, client, missing, new Date());
        return 1;
    }

    /** The 10-waiter RLock case: the number of waiters not woken in time. */
    static int wake(RedissonClient a, RedissonClient b, ExecutorService pool, String prefix, int it) throws Exception {
        List<String> names = new ArrayList<>();
        List<RLock> held = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            String n = prefix + ":" + i;
            names.add(n);
            RLock l = a.getLock(n);
            l.lock(30, TimeUnit.SECONDS);
            held.add(l);
        }
        CountDownLatch waiting = new CountDownLatch(names.size());
        List<Future<Long>> waiters = new ArrayList<>();
        for (String n : names) {
            waiters.add(pool.submit(() -> {
                RLock w = b.getLock(n);
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
        int failures = 0;
        for (int i = 0; i < names.size(); i++) {
            long ms = waiters.get(i).get(15, TimeUnit.SECONDS);
            if (ms < 0 || ms >= 3000) {
                failures++;
                System.out.printf("iteration %d: wake failure: %s tryLock(10 s) -> %s at %s%n", it, names.get(i),
                        ms < 0 ? "false" : "true after " + ms + " ms", new Date());
            }
        }
        return failures;
    }
}
