package fenceproxy;

import static fenceproxy.Suite.check;
import static fenceproxy.Suite.expect;
import static fenceproxy.Suite.key;
import static fenceproxy.Suite.send;
import static fenceproxy.Suite.submitGet;
import static fenceproxy.Suite.test;

import java.util.concurrent.TimeUnit;

import org.redisson.Redisson;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

import redis.clients.jedis.Jedis;

/**
 * Redisson's own RLock made safe by fenceproxy (issue #23): the unchanged client, in
 * single-server mode, whose lock scripts the proxy recognises. Its ordinary behaviour is
 * Suite's RLock cases; these are what the proxy adds: every grant has a fence-store token
 * (LOCK.TOKEN, FENCE.CHECK on the lock key), and with the only replica away nothing is
 * granted; RFencedLock's tokens are the fence store's, so they never go back when the
 * master loses its data; RFairLock's grants likewise (fairCases). The replica and flush cases
 * need FENCEPROXY_REPLICA_ADDR and FENCEPROXY_MASTER_ADDR (run.sh exports them) and are
 * skipped without them.
 */
final class RedissonRecipes {
    private RedissonRecipes() {
    }

    static final String REDISSON = Suite.REDISSON;

    /** Redisson's lockName for the calling thread: what its scripts name the holder. */
    static String holder(RedissonClient c) {
        return c.getId() + ":" + Thread.currentThread().getId();
    }

    static Jedis jedis(String addr) {
        return new Jedis(addr.substring(0, addr.lastIndexOf(':')), Integer.parseInt(addr.substring(addr.lastIndexOf(':') + 1)), 5000);
    }

    static void cases(RedissonClient a, RedissonClient b) {
        test(REDISSON, "RLock grant has a fence-store token: LOCK.TOKEN, FENCE.CHECK, LOCK.INFO on the lock key", () -> {
            String name = key("recipe-token");
            RLock l = a.getLock(name);
            l.lock();
            try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                Object tok = send(j, Suite.Cmd.TOKEN, name, holder(a));
                check("LOCK.TOKEN " + name + " <holder>", tok instanceof Long t && t > 0, tok, "a positive token");
                expect("FENCE.CHECK " + name + " " + tok, send(j, Suite.Cmd.CHECK, name, tok), 1L);
                expect("LOCK.TOKEN " + name + " <another holder>", send(j, Suite.Cmd.TOKEN, name, "not-the-holder:1"), null);
                l.lock(); // re-entry: the same grant, the same token
                expect("LOCK.TOKEN after re-entry", send(j, Suite.Cmd.TOKEN, name, holder(a)), tok);
                l.unlock();
                l.unlock();
                check("RLock.isLocked() after two unlocks", !l.isLocked(), true, "false");
                expect("LOCK.TOKEN after the release", send(j, Suite.Cmd.TOKEN, name, holder(a)), null);
                RLock o = b.getLock(name);
                Object tok2 = submitGet(() -> {
                    if (!o.tryLock(2, 5, TimeUnit.SECONDS)) return "tryLock false";
                    try (Jedis j2 = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                        return send(j2, Suite.Cmd.TOKEN, name, holder(b));
                    } finally {
                        o.unlock();
                    }
                });
                check("other client's LOCK.TOKEN after its grant", tok2 instanceof Long t2 && t2 > (Long) tok, tok2, "> " + tok);
                expect("FENCE.CHECK of the first holder's token after the second grant", send(j, Suite.Cmd.CHECK, name, tok), 0L);
            }
        });

        test(REDISSON, "RLock by EVAL (useScriptCache off): lock, re-entry, waiter, unlock", () -> {
            Config config = new Config();
            config.setUseScriptCache(false);
            config.setLockWatchdogTimeout(Suite.WATCHDOG_MS);
            config.useSingleServer().setAddress("redis://" + Suite.ADDR).setClientName("java-suite-eval")
                    .setConnectionMinimumIdleSize(1).setTimeout(5000);
            RedissonClient e = Redisson.create(config);
            try {
                String name = key("recipe-eval");
                RLock l = e.getLock(name);
                l.lock();
                l.lock();
                expect("RLock.getHoldCount() (EVAL)", l.getHoldCount(), 2);
                try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                    Object tok = send(j, Suite.Cmd.TOKEN, name, holder(e));
                    check("LOCK.TOKEN of an EVAL grant", tok instanceof Long t && t > 0, tok, "a positive token");
                }
                RLock o = b.getLock(name);
                check("other client RLock.tryLock(0, 1s)", !submitGet(() -> o.tryLock(0, 1, TimeUnit.SECONDS)), true, "false");
                l.unlock();
                l.unlock();
                check("RLock.isLocked() after two unlocks (EVAL)", !l.isLocked(), true, "false");
            } finally {
                e.shutdown(0, 2, TimeUnit.SECONDS);
            }
        });

        String replica = System.getenv("FENCEPROXY_REPLICA_ADDR");
        String master = System.getenv("FENCEPROXY_MASTER_ADDR");
        fencedCases(a, master);
        rwCases(a, b, replica, master);
        fairCases(a, b, replica, master);
        String name = "RLock with the only replica detached: no grant (tryLock false, nothing left), granted once it is back";
        if (replica == null || master == null || Suite.CLUSTER) {
            Suite.skip(REDISSON, name, "needs FENCEPROXY_REPLICA_ADDR and FENCEPROXY_MASTER_ADDR (run.sh, master + replica)");
            return;
        }
        String renewName = "RLock watchdog with the only replica detached: renewals refused (NOREPLICAS), the lease runs out; "
                + "the client goes on and locks again once the replica is back";
        test(REDISSON, renewName, 40, () -> {
            String lock = key("recipe-renew");
            RLock l = a.getLock(lock);
            l.lock(); // watchdog: lease 3000 ms, renewed every 1000 ms
            withoutReplica(replica, master, m -> {
                long end = System.currentTimeMillis() + 15_000;
                while (m.exists(lock) && System.currentTimeMillis() < end) Thread.sleep(50);
                check("EXISTS " + lock + " on the master within 15 s of detaching the replica (renewals must not extend it)",
                        !m.exists(lock), true, "the lease ran out (false)");
            });
            RLock o = b.getLock(lock);
            check("other client RLock.tryLock(5s, 10s) after the unrenewed lease ran out",
                    submitGet(() -> {
                        boolean ok = o.tryLock(5, 10, TimeUnit.SECONDS);
                        if (ok) o.unlock();
                        return ok;
                    }), false, "true");
        });

        test(REDISSON, name, 40, () -> {
            String lock = key("recipe-noreplica");
            RLock l = a.getLock(lock);
            try (Jedis r = jedis(replica); Jedis m = jedis(master)) {
                r.replicaofNoOne();
                try {
                    waitReplicas(m, 0);
                    check("RLock.tryLock() with the replica detached", !l.tryLock(), true, "false");
                    long t0 = System.nanoTime();
                    boolean got = l.tryLock(3, 10, TimeUnit.SECONDS);
                    long ms = (System.nanoTime() - t0) / 1_000_000;
                    check("RLock.tryLock(3s, 10s) with the replica detached", !got, got + " after " + ms + " ms", "false");
                    check("RLock.isLocked() after the refused grants", !l.isLocked(), true, "false");
                    expect("EXISTS " + lock + " on the master", m.exists(lock), false);
                } finally {
                    String host = master.substring(0, master.lastIndexOf(':'));
                    r.replicaof(host, Integer.parseInt(master.substring(master.lastIndexOf(':') + 1)));
                    waitReplicas(m, 1);
                }
                check("RLock.tryLock(5s, 10s) once the replica is back", l.tryLock(5, 10, TimeUnit.SECONDS), false, "true");
                l.unlock();
            }
        });
    }

    /**
     * RFencedLock through the proxy: its token is the fence store's, so it goes on increasing
     * when the master loses its data (a FLUSHALL straight on the master: Redisson's own INCR
     * would start again at 1); the token key Redisson reads (getToken) is raised to it; a
     * re-entry reads its grant's token.
     */
    static void fencedCases(RedissonClient a, String master) {
        String name = "RFencedLock.lockAndGetToken: tokens increase across a FLUSHALL on the master; getToken() reads the token";
        if (master == null || Suite.CLUSTER) {
            Suite.skip(REDISSON, name, "needs FENCEPROXY_MASTER_ADDR (run.sh, master + replica)");
            return;
        }
        test(REDISSON, name, 40, () -> {
            String lock = key("recipe-fenced");
            RFencedLock l = a.getFencedLock(lock);
            Long t1 = l.lockAndGetToken();
            check("RFencedLock.lockAndGetToken()", t1 != null && t1 > 0, t1, "a positive token");
            expect("RFencedLock.getToken() (the token key)", l.getToken(), t1);
            l.unlock();
            try (Jedis m = jedis(master)) {
                expect("FLUSHALL on the master", m.flushAll(), "OK");
            }
            Long t2 = l.lockAndGetToken();
            check("RFencedLock.lockAndGetToken() after a FLUSHALL of the master", t2 != null && t2 > t1, t2, "> " + t1);
            expect("RFencedLock.getToken() after the FLUSHALL (the token key raised)", l.getToken(), t2);
            expect("RFencedLock.lockAndGetToken() on re-entry (the grant's token)", l.lockAndGetToken(), t2);
            try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                expect("LOCK.TOKEN " + lock + " <holder>", send(j, Suite.Cmd.TOKEN, lock, holder(a)), t2);
            }
            l.unlock();
            l.unlock();
            Long t3 = l.lockAndGetToken();
            check("RFencedLock.lockAndGetToken() after the unlock", t3 != null && t3 > t2, t3, "> " + t2);
            l.unlock();
        });
    }

    /**
     * RFairLock through the proxy: its ordinary lock, re-entry, waiter and unlock, a grant with
     * a fence-store token; with the only replica detached no grant (tryLock() and tryLock(wait)
     * false, nothing left on the master), and granted once it is back.
     */
    static void fairCases(RedissonClient a, RedissonClient b, String replica, String master) {
        test(REDISSON, "RFairLock: lock, re-entry, fence-store token, a waiter refused then granted after unlock", () -> {
            String name = key("recipe-fair");
            RLock l = a.getFairLock(name);
            l.lock();
            l.lock();
            expect("RFairLock.getHoldCount()", l.getHoldCount(), 2);
            try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                Object tok = send(j, Suite.Cmd.TOKEN, name, holder(a));
                check("LOCK.TOKEN " + name + " <holder> of an RFairLock", tok instanceof Long t && t > 0, tok, "a positive token");
                expect("FENCE.CHECK " + name + " " + tok, send(j, Suite.Cmd.CHECK, name, tok), 1L);
            }
            RLock o = b.getFairLock(name);
            check("other client RFairLock.tryLock() while held", !submitGet(() -> o.tryLock()), true, "false");
            check("other client RFairLock.tryLock(0, 1s) while held", !submitGet(() -> o.tryLock(0, 1, TimeUnit.SECONDS)), true, "false");
            l.unlock();
            l.unlock();
            check("RFairLock.isLocked() after two unlocks", !l.isLocked(), true, "false");
            check("other client RFairLock.tryLock(2s, 5s) after the unlock", submitGet(() -> {
                boolean ok = o.tryLock(2, 5, TimeUnit.SECONDS);
                if (ok) o.unlock();
                return ok;
            }), false, "true");
        });
        String name = "RFairLock with the only replica detached: no grant (tryLock false, nothing left), granted once it is back";
        if (replica == null || master == null || Suite.CLUSTER) {
            Suite.skip(REDISSON, name, "needs FENCEPROXY_REPLICA_ADDR and FENCEPROXY_MASTER_ADDR (run.sh, master + replica)");
            return;
        }
        test(REDISSON, name, 40, () -> {
            String lock = key("recipe-fair-noreplica");
            RLock l = a.getFairLock(lock);
            withoutReplica(replica, master, m -> {
                check("RFairLock.tryLock() with the replica detached", !l.tryLock(), true, "false");
                boolean got = l.tryLock(3, 10, TimeUnit.SECONDS);
                check("RFairLock.tryLock(3s, 10s) with the replica detached", !got, got, "false");
                check("RFairLock.isLocked() after the refused grants", !l.isLocked(), true, "false");
                expect("EXISTS " + lock + " on the master", m.exists(lock), false);
            });
            check("RFairLock.tryLock(5s, 10s) once the replica is back", l.tryLock(5, 10, TimeUnit.SECONDS), false, "true");
            l.unlock();
        });
    }

    /** Detaches the replica for the body, and waits for it to be back after. */
    interface WithoutReplica {
        void run(Jedis master) throws Exception;
    }

    static void withoutReplica(String replica, String master, WithoutReplica body) throws Exception {
        try (Jedis r = jedis(replica); Jedis m = jedis(master)) {
            r.replicaofNoOne();
            try {
                waitReplicas(m, 0);
                body.run(m);
            } finally {
                String host = master.substring(0, master.lastIndexOf(':'));
                r.replicaof(host, Integer.parseInt(master.substring(master.lastIndexOf(':') + 1)));
                waitReplicas(m, 1);
            }
        }
    }

    /**
     * Waits (bounded) until the master counts n online replicas and, for n > 0, until they
     * acknowledge a write (WAIT): a replica re-attached by a full sync is "online" in INFO
     * before the master streams it writes (Redis 7 starts on its first REPLCONF ACK, up to a
     * second later), and until then every grant waits out the proxy's replica timeout.
     */
    static void waitReplicas(Jedis m, int n) throws InterruptedException {
        long end = System.currentTimeMillis() + 20_000;
        String info = "";
        while (System.currentTimeMillis() < end) {
            info = m.info("replication");
            long online = info.lines().filter(s -> s.startsWith("slave") && s.contains("state=online")).count();
            if (info.contains("connected_slaves:" + n + "\r") || info.contains("connected_slaves:" + n + "\n")) {
                if (online == n && (n == 0 || acknowledged(m, n))) return;
            }
            Thread.sleep(50);
        }
        throw new Suite.Fail("INFO replication and WAIT on the master", info, "connected_slaves:" + n + ", acknowledging writes");
    }

    /** Whether n replicas acknowledge a write on the master within 200 ms. */
    static boolean acknowledged(Jedis m, int n) {
        m.psetex(key("replica-probe"), 5000, "1");
        return m.waitReplicas(n, 200) >= n;
    }

    /**
     * RReadWriteLock (and RMultiLock over an RLock and a write lock) through the proxy:
     * readers share the lock and one token (LOCK.TOKEN), a writer is kept out while they read
     * and gets a newer token, the writer may read; with the only replica detached, neither
     * lock is granted.
     */
    static void rwCases(RedissonClient a, RedissonClient b, String replica, String master) {
        test(REDISSON, "RReadWriteLock: readers share one token, the writer waits and gets a newer one, the writer reads", () -> {
            String name = key("recipe-rw");
            RReadWriteLock rw = a.getReadWriteLock(name);
            rw.readLock().lock();
            try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                Object tok = send(j, Suite.Cmd.TOKEN, name, holder(a));
                check("LOCK.TOKEN " + name + " <reader>", tok instanceof Long t && t > 0, tok, "a positive token");
                Object other = submitGet(() -> {
                    RReadWriteLock o = b.getReadWriteLock(name);
                    if (!o.readLock().tryLock(2, 10, TimeUnit.SECONDS)) return "readLock().tryLock false";
                    try (Jedis j2 = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                        return send(j2, Suite.Cmd.TOKEN, name, holder(b));
                    } finally {
                        o.readLock().unlock();
                    }
                });
                expect("other client's read lock beside it: LOCK.TOKEN (the readers' one token)", other, tok);
                check("other client writeLock().tryLock(0, 5s) while a reader holds",
                        !submitGet(() -> b.getReadWriteLock(name).writeLock().tryLock(0, 5, TimeUnit.SECONDS)), true, "false");
                rw.readLock().unlock();
                rw.writeLock().lock();
                Object wtok = send(j, Suite.Cmd.TOKEN, name, holder(a) + ":write");
                check("LOCK.TOKEN " + name + " <writer>", wtok instanceof Long w && w > (Long) tok, wtok, "> " + tok);
                expect("FENCE.CHECK of the readers' token after the write grant", send(j, Suite.Cmd.CHECK, name, tok), 0L);
                check("other client readLock().tryLock(0, 5s) while a writer holds",
                        !submitGet(() -> b.getReadWriteLock(name).readLock().tryLock(0, 5, TimeUnit.SECONDS)), true, "false");
                rw.readLock().lock(); // the writer reads
                expect("LOCK.TOKEN of the writer's read hold", send(j, Suite.Cmd.TOKEN, name, holder(a)), wtok);
                rw.readLock().unlock();
                rw.writeLock().unlock();
                check("RReadWriteLock.isLocked() after the unlocks", !rw.writeLock().isLocked() && !rw.readLock().isLocked(), true, "false");
            }
        });

        test(REDISSON, "RMultiLock over an RLock and a write lock: both granted with tokens, both kept from others", () -> {
            String n1 = key("recipe-multi-lock"), n2 = key("recipe-multi-rw");
            RLock multi = a.getMultiLock(a.getLock(n1), a.getReadWriteLock(n2).writeLock());
            check("RMultiLock.tryLock(5s, 30s)", multi.tryLock(5, 30, TimeUnit.SECONDS), false, "true");
            try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                Object t1 = send(j, Suite.Cmd.TOKEN, n1, holder(a));
                Object t2 = send(j, Suite.Cmd.TOKEN, n2, holder(a) + ":write");
                check("LOCK.TOKEN of both parts", t1 instanceof Long && t2 instanceof Long, t1 + ", " + t2, "two tokens");
                check("other client tryLock(0, 5s) of the RLock part", !submitGet(() -> b.getLock(n1).tryLock(0, 5, TimeUnit.SECONDS)), true, "false");
                check("other client readLock().tryLock(0, 5s) of the write part",
                        !submitGet(() -> b.getReadWriteLock(n2).readLock().tryLock(0, 5, TimeUnit.SECONDS)), true, "false");
            }
            multi.unlock();
        });

        String name = "RReadWriteLock and RMultiLock with the only replica detached: no grant (tryLock false, nothing left)";
        if (replica == null || master == null || Suite.CLUSTER) {
            Suite.skip(REDISSON, name, "needs FENCEPROXY_REPLICA_ADDR and FENCEPROXY_MASTER_ADDR (run.sh, master + replica)");
            return;
        }
        test(REDISSON, name, 40, () -> {
            String n = key("recipe-rw-noreplica"), n1 = key("recipe-multi-noreplica");
            RReadWriteLock rw = a.getReadWriteLock(n);
            RLock multi = a.getMultiLock(a.getLock(n1), a.getReadWriteLock(n + "-w").writeLock());
            withoutReplica(replica, master, m -> {
                check("readLock().tryLock() with the replica detached", !rw.readLock().tryLock(), true, "false");
                check("writeLock().tryLock() with the replica detached", !rw.writeLock().tryLock(), true, "false");
                check("RMultiLock.tryLock(1s, 10s) with the replica detached", !multi.tryLock(1, 10, TimeUnit.SECONDS), true, "false");
                expect("EXISTS of the locks on the master", m.exists(n, n1, n + "-w"), 0L);
            });
            check("readLock().tryLock(5s, 10s) once the replica is back", rw.readLock().tryLock(5, 10, TimeUnit.SECONDS), false, "true");
            rw.readLock().unlock();
            check("writeLock().tryLock(5s, 10s) once the replica is back", rw.writeLock().tryLock(5, 10, TimeUnit.SECONDS), false, "true");
            rw.writeLock().unlock();
        });
    }
}
