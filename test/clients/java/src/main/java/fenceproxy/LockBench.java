package fenceproxy;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Redisson RLock lock/unlock cycles per second, side by side in one run (issue #23's speed
 * item; a benchmark, not a test): Redisson in single-server mode through fenceproxy
 * (FENCEPROXY_ADDR, which makes each grant wait for --min-replicas, sharing WAITs across
 * clients) against Redisson in master-slave mode straight at the same master and replica
 * (FENCEPROXY_MASTER_ADDR, FENCEPROXY_REPLICA_ADDR), where it sends its own WAIT after every
 * lock script: the same safety. Each thread locks and unlocks a resource of its own, so
 * nothing contends. The two alternate (A B A B) so the machine's noise hits both alike.
 *
 * Args: [threads (32)] [seconds per round (5)] [rounds (2)]. Prints one line per round and
 * "ratio proxy/direct: X". With FENCEPROXY_RELAY_ADDR (a byte relay in front of the master,
 * test/recipes starts one) it also runs single-server mode through that relay: a hop that does
 * nothing, no safety and no WAIT, whose CPU is the floor of any proxy's on this machine.
 */
public final class LockBench {
    private LockBench() {
    }

    public static void main(String[] argv) throws Exception {
        int threads = argv.length > 0 ? Integer.parseInt(argv[0]) : 32;
        int seconds = argv.length > 1 ? Integer.parseInt(argv[1]) : 5;
        int rounds = argv.length > 2 ? Integer.parseInt(argv[2]) : 2;
        String proxy = System.getenv("FENCEPROXY_ADDR");
        String master = System.getenv("FENCEPROXY_MASTER_ADDR");
        String replica = System.getenv("FENCEPROXY_REPLICA_ADDR");
        if (proxy == null || master == null || replica == null) {
            System.err.println("LockBench: set FENCEPROXY_ADDR, FENCEPROXY_MASTER_ADDR and FENCEPROXY_REPLICA_ADDR");
            System.exit(2);
        }
        // Three connections a thread, in every mode: an unlock leaves
        // Redisson's DEL of its latch in flight while the thread's next
        // lock() wants a connection too, and with a pool of one a thread,
        // a DEL waiting for a connection that an acquire holds for a
        // replica round held the next lock() back (through fenceproxy, 4
        // threads, replica 3 ms away: 342 cycles/s against 457 with the
        // larger pool; direct was the same either way).
        int pool = 3 * threads;
        RedissonClient viaProxy = client(c -> c.useSingleServer().setAddress("redis://" + proxy)
                .setConnectionPoolSize(pool).setConnectionMinimumIdleSize(pool));
        RedissonClient direct = client(c -> c.useMasterSlaveServers().setMasterAddress("redis://" + master)
                .addSlaveAddress("redis://" + replica)
                .setMasterConnectionPoolSize(pool).setMasterConnectionMinimumIdleSize(pool));
        // For reference: single-server mode straight at the master, which
        // waits for no replica (the unsafe setup the proxy replaces).
        RedissonClient unsafe = client(c -> c.useSingleServer().setAddress("redis://" + master)
                .setConnectionPoolSize(pool).setConnectionMinimumIdleSize(pool));
        String relayAddr = System.getenv("FENCEPROXY_RELAY_ADDR");
        RedissonClient relay = relayAddr == null || relayAddr.isEmpty() ? null
                : client(c -> c.useSingleServer().setAddress("redis://" + relayAddr)
                        .setConnectionPoolSize(pool).setConnectionMinimumIdleSize(pool));
        double proxySum = 0, directSum = 0, relaySum = 0;
        try {
            // Scripts loaded, connections open, and the JIT warm for all
            // three: with one second each, the first proxy round ran at
            // about half its later rate.
            run(viaProxy, threads, 3, "warmup");
            run(direct, threads, 3, "warmup");
            run(unsafe, threads, 1, "warmup");
            if (relay != null) {
                run(relay, threads, 1, "warmup");
            }
            for (int r = 1; r <= rounds; r++) {
                // Alternating which goes first, so that neither always runs
                // on the other's heels.
                double p, d;
                if (r % 2 == 1) {
                    p = run(viaProxy, threads, seconds, "proxy");
                    d = run(direct, threads, seconds, "direct");
                } else {
                    d = run(direct, threads, seconds, "direct");
                    p = run(viaProxy, threads, seconds, "proxy");
                }
                double u = run(unsafe, threads, seconds, "unsafe");
                System.out.printf("round %d: fenceproxy (single-server) %.0f cycles/s, direct (master-slave, WAIT) %.0f cycles/s; "
                        + "for reference, single-server straight at the master (no replica wait) %.0f cycles/s%n", r, p, d, u);
                if (relay != null) {
                    double h = run(relay, threads, seconds, "relay");
                    System.out.printf("round %d: single-server through a byte relay to the master (no replica wait) %.0f cycles/s%n", r, h);
                    relaySum += h;
                }
                proxySum += p;
                directSum += d;
            }
        } finally {
            viaProxy.shutdown(0, 2, TimeUnit.SECONDS);
            direct.shutdown(0, 2, TimeUnit.SECONDS);
            unsafe.shutdown(0, 2, TimeUnit.SECONDS);
            if (relay != null) {
                relay.shutdown(0, 2, TimeUnit.SECONDS);
            }
        }
        System.out.printf("threads %d, %d x %d s: ratio proxy/direct: %.2f%n", threads, rounds, seconds, proxySum / directSum);
        if (relay != null) {
            System.out.printf("threads %d, %d x %d s: ratio relay/direct: %.2f%n", threads, rounds, seconds, relaySum / directSum);
        }
    }

    static RedissonClient client(java.util.function.Consumer<Config> tune) {
        Config c = new Config();
        tune.accept(c);
        return Redisson.create(c);
    }

    /**
     * CPU time of this JVM and of the processes named in FENCEPROXY_BENCH_PIDS
     * ("name:pid,..."), in microseconds, from /proc: what a run costs each of
     * them, to tell whether the machine's cores, not the round trips, bound it.
     */
    static java.util.LinkedHashMap<String, Long> cpuNow() {
        java.util.LinkedHashMap<String, Long> m = new java.util.LinkedHashMap<>();
        java.lang.management.OperatingSystemMXBean os = java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean sun) {
            m.put("java", sun.getProcessCpuTime() / 1000);
        }
        String pids = System.getenv("FENCEPROXY_BENCH_PIDS");
        if (pids == null || pids.isEmpty()) {
            return m;
        }
        for (String np : pids.split(",")) {
            String[] kv = np.split(":");
            try {
                String stat = new String(java.nio.file.Files.readAllBytes(java.nio.file.Paths.get("/proc/" + kv[1] + "/stat")));
                String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
                // utime and stime (fields 14 and 15 of stat), in ticks of 10 ms
                m.put(kv[0], (Long.parseLong(f[11]) + Long.parseLong(f[12])) * 10_000);
            } catch (java.io.IOException | RuntimeException e) {
                m.put(kv[0], -1L);
            }
        }
        return m;
    }

    /** Prints each process's CPU µs per cycle between two cpuNow readings. */
    static void printCpu(String label, java.util.Map<String, Long> before, java.util.Map<String, Long> after, long cycles) {
        StringBuilder b = new StringBuilder("  cpu µs/cycle " + label + ":");
        long total = 0;
        for (String k : after.keySet()) {
            long d = after.get(k) - before.getOrDefault(k, 0L);
            if (after.get(k) < 0 || before.getOrDefault(k, -1L) < 0) {
                continue;
            }
            total += d;
            b.append(String.format(" %s %.0f", k, d / (double) cycles));
        }
        b.append(String.format(" total %.0f", total / (double) cycles));
        System.out.println(b);
    }

    /** threads loop lock()/unlock() on a resource each for seconds; returns cycles/s. */
    static double run(RedissonClient c, int threads, int seconds, String label) throws InterruptedException {
        java.util.Map<String, Long> before = cpuNow();
        double rate = loop(c, threads, seconds, label);
        if (!label.equals("warmup")) {
            printCpu(label, before, cpuNow(), Math.max(1, (long) (rate * seconds)));
        }
        return rate;
    }

    static double loop(RedissonClient c, int threads, int seconds, String label) throws InterruptedException {
        AtomicLong cycles = new AtomicLong();
        CountDownLatch done = new CountDownLatch(threads);
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        String run = label + ":" + System.nanoTime();
        for (int t = 0; t < threads; t++) {
            RLock l = c.getLock("bench:" + run + ":" + t);
            Thread th = new Thread(() -> {
                try {
                    while (System.nanoTime() < end) {
                        l.lock(30, TimeUnit.SECONDS);
                        l.unlock();
                        cycles.incrementAndGet();
                    }
                } finally {
                    done.countDown();
                }
            });
            th.setDaemon(true);
            th.start();
        }
        done.await();
        return cycles.get() / (double) seconds;
    }
}
