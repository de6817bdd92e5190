package fenceproxy;

import static fenceproxy.Suite.REDISSON;
import static fenceproxy.Suite.check;
import static fenceproxy.Suite.expect;
import static fenceproxy.Suite.key;
import static fenceproxy.Suite.pool;
import static fenceproxy.Suite.submitGet;
import static fenceproxy.Suite.tag;
import static fenceproxy.Suite.test;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;

import org.redisson.api.BatchOptions;
import org.redisson.api.BatchOptions.ExecutionMode;
import org.redisson.api.BatchResult;
import org.redisson.api.DeletedObjectListener;
import org.redisson.api.ExpiredObjectListener;
import org.redisson.api.FunctionMode;
import org.redisson.api.FunctionResult;
import org.redisson.api.RAtomicLong;
import org.redisson.api.RBatch;
import org.redisson.api.RBlockingQueue;
import org.redisson.api.RBucket;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.RDelayedQueue;
import org.redisson.api.RFencedLock;
import org.redisson.api.RFuture;
import org.redisson.api.RFunction;
import org.redisson.api.RLocalCachedMap;
import org.redisson.api.RLock;
import org.redisson.api.RMap;
import org.redisson.api.RMapCache;
import org.redisson.api.RPatternTopic;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RReliableTopic;
import org.redisson.api.RScript;
import org.redisson.api.RSemaphore;
import org.redisson.api.RSet;
import org.redisson.api.RShardedTopic;
import org.redisson.api.RStream;
import org.redisson.api.RTopic;
import org.redisson.api.RTransaction;
import org.redisson.api.RedissonClient;
import org.redisson.api.TransactionOptions;
import org.redisson.api.listener.SetObjectListener;
import org.redisson.api.listener.TrackingListener;
import org.redisson.api.map.event.EntryCreatedListener;
import org.redisson.api.map.event.EntryExpiredListener;
import org.redisson.api.map.event.EntryRemovedListener;
import org.redisson.api.map.event.EntryUpdatedListener;
import org.redisson.api.options.LocalCachedMapOptions;
import org.redisson.api.stream.StreamAddArgs;
import org.redisson.api.stream.StreamCreateGroupArgs;
import org.redisson.api.stream.StreamReadGroupArgs;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Protocol;

import redis.clients.jedis.Jedis;

/**
 * Redisson's objects as an application uses them, through fenceproxy: two clients (a with
 * Redisson's defaults, b with small pools and a 500 ms PING), each object exercised across
 * both where it matters (who waits, who is woken, who sees what when). Run by Suite (a
 * master with a replica) and ClusterSuite (a Redis Cluster) alike: names without a hash tag
 * land in whatever slot they hash to; the objects that need their keys in one slot (a
 * transaction, an atomic batch, a move between two queues) take a tag(), as they must on a
 * Redis Cluster too.
 *
 * What each object sends was read from Redisson 3.52's source: a fair lock is a list and a
 * sorted set of waiters plus a pub/sub channel per waiting thread; a semaphore and a latch
 * publish on a channel of their own; RMapCache is a hash plus sorted sets of deadlines,
 * cleaned by a task of the client's (config minCleanUpDelay 1 s here) that publishes
 * redisson_map_cache_expired; a delayed queue is a sorted set moved into the destination by
 * a timer of the client that made it; RBatch's skipResult() wraps the batch in CLIENT REPLY
 * OFF ... ON; RTransaction takes Redisson locks and commits as MULTI/EXEC; DeletedObjectListener
 * PSUBSCRIBEs __keyevent@*:del.
 */
final class RedissonObjects {
    private RedissonObjects() {
    }

    static final StringCodec S = StringCodec.INSTANCE;

    /** Polls cond every 20 ms until it holds or ms pass; returns whether it held. */
    static boolean waitFor(long ms, BooleanSupplier cond) throws InterruptedException {
        long end = System.currentTimeMillis() + ms;
        while (System.currentTimeMillis() < end) {
            if (cond.getAsBoolean()) return true;
            Thread.sleep(20);
        }
        return cond.getAsBoolean();
    }

    /** Takes from q until it has n elements or ms pass. */
    static <T> List<T> drain(LinkedBlockingQueue<T> q, int n, long ms) throws InterruptedException {
        List<T> out = new ArrayList<>();
        long end = System.currentTimeMillis() + ms;
        while (out.size() < n) {
            long left = end - System.currentTimeMillis();
            if (left <= 0) break;
            T x = q.poll(left, TimeUnit.MILLISECONDS);
            if (x != null) out.add(x);
        }
        return out;
    }

    static void cases(RedissonClient a, RedissonClient b) {
        locks(a, b);
        synchronizers(a, b);
        topics(a, b);
        queues(a, b);
        maps(a, b);
        streams(a, b);
        batches(a, b);
        transactions(a, b);
        scripts(a, b);
        listeners(a, b);
        resp3(b);
    }

    // ---------------------------------------------------------------- locks

    static void locks(RedissonClient a, RedissonClient b) {
        test(REDISSON, "RFairLock: 4 waiters on two clients get the lock in the order they asked", () -> {
            String name = key("fairorder");
            RLock holder = a.getFairLock(name);
            holder.lock(20, TimeUnit.SECONDS);
            List<Integer> order = Collections.synchronizedList(new ArrayList<>());
            List<Future<Boolean>> waiters = new ArrayList<>();
            for (int i = 0; i < 4; i++) {
                final int n = i;
                RedissonClient c = i % 2 == 0 ? b : a;
                CountDownLatch asking = new CountDownLatch(1);
                waiters.add(pool.submit(() -> {
                    RLock w = c.getFairLock(name);
                    asking.countDown();
                    boolean ok = w.tryLock(15, 10, TimeUnit.SECONDS);
                    if (ok) {
                        order.add(n);
                        Thread.sleep(30);
                        w.unlock();
                    }
                    return ok;
                }));
                asking.await(5, TimeUnit.SECONDS);
                Thread.sleep(300); // its place in the queue is taken before the next one asks
            }
            holder.unlock();
            for (int i = 0; i < waiters.size(); i++)
                check("waiter " + i + " RFairLock.tryLock(15s, 10s)", waiters.get(i).get(18, TimeUnit.SECONDS), false, "true");
            expect("order the 4 waiters got the fair lock in", order, List.of(0, 1, 2, 3));
            check("RFairLock.isLocked() at the end", !holder.isLocked(), true, "false");
        });

        test(REDISSON, "RReadWriteLock: 2 writers and 2 readers on two clients, a writer always alone", () -> {
            String name = key("rwmix");
            AtomicInteger readers = new AtomicInteger(), writers = new AtomicInteger(), overlaps = new AtomicInteger();
            AtomicInteger rounds = new AtomicInteger(), maxReaders = new AtomicInteger();
            List<Future<?>> fs = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                RedissonClient c = t % 2 == 0 ? a : b;
                boolean writer = t < 2;
                fs.add(pool.submit(() -> {
                    for (int i = 0; i < 6; i++) {
                        RLock l = writer ? c.getReadWriteLock(name).writeLock() : c.getReadWriteLock(name).readLock();
                        if (!l.tryLock(10, 5, TimeUnit.SECONDS))
                            throw new Suite.Fail((writer ? "writeLock" : "readLock") + "().tryLock(10s, 5s)", false, true);
                        try {
                            if (writer) {
                                if (writers.incrementAndGet() != 1 || readers.get() != 0) overlaps.incrementAndGet();
                                Thread.sleep(15);
                                writers.decrementAndGet();
                            } else {
                                maxReaders.accumulateAndGet(readers.incrementAndGet(), Math::max);
                                if (writers.get() != 0) overlaps.incrementAndGet();
                                Thread.sleep(25);
                                readers.decrementAndGet();
                            }
                            rounds.incrementAndGet();
                        } finally {
                            l.unlock();
                        }
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) f.get(18, TimeUnit.SECONDS);
            expect("lock/unlock rounds", rounds.get(), 24);
            expect("times a writer was not alone", overlaps.get(), 0);
            check("RReadWriteLock.writeLock().isLocked() at the end", !a.getReadWriteLock(name).writeLock().isLocked(), true, "false");
        });

        test(REDISSON, "RFencedLock: 4 threads on two clients, each grant's token above the one before", () -> {
            String name = key("fencedrace");
            List<Long> tokens = Collections.synchronizedList(new ArrayList<>());
            List<Future<?>> fs = new ArrayList<>();
            for (int t = 0; t < 4; t++) {
                RedissonClient c = t % 2 == 0 ? a : b;
                fs.add(pool.submit(() -> {
                    RFencedLock l = c.getFencedLock(name);
                    for (int i = 0; i < 5; i++) {
                        Long tk = l.tryLockAndGetToken(10, 5, TimeUnit.SECONDS);
                        if (tk == null) throw new Suite.Fail("RFencedLock.tryLockAndGetToken(10s, 5s) with 4 contenders", null, "a token");
                        try {
                            tokens.add(tk); // under the lock: list order is grant order
                            Thread.sleep(5);
                        } finally {
                            l.unlock();
                        }
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) f.get(18, TimeUnit.SECONDS);
            expect("grants", tokens.size(), 20);
            for (int i = 1; i < tokens.size(); i++)
                check("token of grant " + i + " after " + tokens.get(i - 1), tokens.get(i) > tokens.get(i - 1), tokens, "strictly increasing");
            try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                String counter = "redisson_lock_token:{" + name + "}";
                expect("Jedis GET " + counter + " (Redisson's token counter) through the proxy", j.get(counter), String.valueOf(tokens.get(19)));
            }
        });

        test(REDISSON, "RedissonMultiLock over 3 locks (3 slots on a cluster): all or none, across clients", () -> {
            List<String> names = List.of(key("ml:one"), key("ml:two"), key("ml:three"));
            RLock m = a.getMultiLock(a.getLock(names.get(0)), a.getLock(names.get(1)), a.getLock(names.get(2)));
            m.lock(10, TimeUnit.SECONDS);
            for (String n : names) {
                RLock o = b.getLock(n);
                check("other client RLock(" + n + ").tryLock(0) while the multi lock holds it", !submitGet(() -> o.tryLock(0, 5, TimeUnit.SECONDS)), true, "false");
            }
            m.unlock();
            for (String n : names) check("RLock(" + n + ").isLocked() after the multi lock's unlock", !b.getLock(n).isLocked(), true, "false");
            // The other client holds the middle one: the multi lock is not had, and leaves the other two free.
            RLock mid = b.getLock(names.get(1));
            check("other client RLock(" + names.get(1) + ").tryLock", submitGet(() -> mid.tryLock(0, 10, TimeUnit.SECONDS)), false, "true");
            check("RedissonMultiLock.tryLock(300 ms) with one lock held elsewhere", !m.tryLock(300, 5000, TimeUnit.MILLISECONDS), true, "false");
            check("RLock(" + names.get(0) + ").isLocked() after the failed multi lock", !a.getLock(names.get(0)).isLocked(), true, "false");
            check("RLock(" + names.get(2) + ").isLocked() after the failed multi lock", !a.getLock(names.get(2)).isLocked(), true, "false");
            mid.forceUnlock();
            // The faster multi lock: one hash for the group, a field per value.
            String group = key("mlgroup");
            RLock g1 = a.getMultiLock(group, List.<Object>of("x", "y"));
            g1.lock(10, TimeUnit.SECONDS);
            RLock g2 = b.getMultiLock(group, List.<Object>of("y", "z"));
            check("other client getMultiLock(group, [y, z]).tryLock(0) while [x, y] is held", !submitGet(() -> g2.tryLock(0, 5, TimeUnit.SECONDS)), true, "false");
            RLock g3 = b.getMultiLock(group, List.<Object>of("z", "w"));
            check("other client getMultiLock(group, [z, w]).tryLock(0) while [x, y] is held", submitGet(() -> {
                boolean ok = g3.tryLock(0, 5, TimeUnit.SECONDS);
                if (ok) g3.unlock();
                return ok;
            }), false, "true");
            g1.unlock();
            check("other client getMultiLock(group, [y, z]).tryLock(0) after [x, y] is unlocked", submitGet(() -> {
                boolean ok = g2.tryLock(0, 5, TimeUnit.SECONDS);
                if (ok) g2.unlock();
                return ok;
            }), false, "true");
        });
    }

    // ---------------------------------------------------------------- semaphores and latches

    static void synchronizers(RedissonClient a, RedissonClient b) {
        test(REDISSON, "RSemaphore: 3 permits, 6 threads on two clients, never more than 3 inside", () -> {
            String name = key("sem3");
            check("RSemaphore.trySetPermits(3)", a.getSemaphore(name).trySetPermits(3), false, "true");
            AtomicInteger inside = new AtomicInteger(), most = new AtomicInteger(), done = new AtomicInteger();
            List<Future<?>> fs = new ArrayList<>();
            for (int t = 0; t < 6; t++) {
                RSemaphore s = (t % 2 == 0 ? a : b).getSemaphore(name);
                fs.add(pool.submit(() -> {
                    for (int i = 0; i < 4; i++) {
                        if (!s.tryAcquire(Duration.ofSeconds(10))) throw new Suite.Fail("RSemaphore.tryAcquire(10s) with 6 contenders", false, true);
                        try {
                            most.accumulateAndGet(inside.incrementAndGet(), Math::max);
                            Thread.sleep(30);
                            inside.decrementAndGet();
                            done.incrementAndGet();
                        } finally {
                            s.release();
                        }
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) f.get(18, TimeUnit.SECONDS);
            expect("acquire/release rounds", done.get(), 24);
            check("most threads holding a permit at once", most.get() <= 3, most.get(), "<= 3");
            expect("RSemaphore.availablePermits() at the end", b.getSemaphore(name).availablePermits(), 3);
        });

        test(REDISSON, "RPermitExpirableSemaphore: a permit's lease runs out and the other client gets it", () -> {
            String name = key("psem");
            RPermitExpirableSemaphore s = a.getPermitExpirableSemaphore(name);
            check("RPermitExpirableSemaphore.trySetPermits(1)", s.trySetPermits(1), false, "true");
            long t0 = System.nanoTime(); // the lease begins after this
            String id = s.tryAcquire(0, 700, TimeUnit.MILLISECONDS);
            check("RPermitExpirableSemaphore.tryAcquire(0, lease 700 ms)", id != null, id, "a permit id");
            RPermitExpirableSemaphore sb = b.getPermitExpirableSemaphore(name);
            String early = sb.tryAcquire();
            long ms = (System.nanoTime() - t0) / 1_000_000;
            // A permit for the other client is wrong only while the lease surely runs: answered
            // within 700 ms of t0. On a loaded machine the two calls can be further apart than
            // the lease (a loaded run with 8668aec's binary took longer), and the permit is then rightly free.
            check("other client tryAcquire() while the permit is leased (answered " + ms + " ms after the lease began)",
                    early == null || ms >= 700, early, "null");
            String id2 = early != null ? early : sb.tryAcquire(5000, 5000, TimeUnit.MILLISECONDS);
            check("other client tryAcquire(wait 5 s, lease 5 s) while the 700 ms lease runs out", id2 != null, id2, "a permit id");
            check("tryRelease(the expired permit)", !s.tryRelease(id), true, "false");
            sb.release(id2);
            expect("availablePermits() at the end", s.availablePermits(), 1);
        });

        test(REDISSON, "RCountDownLatch: waiters on both clients released by the last countDown", () -> {
            String name = key("latch");
            RCountDownLatch l = a.getCountDownLatch(name);
            check("RCountDownLatch.trySetCount(3)", l.trySetCount(3), false, "true");
            check("other client trySetCount(5) on a set latch", !b.getCountDownLatch(name).trySetCount(5), true, "false");
            CountDownLatch waiting = new CountDownLatch(3);
            List<Future<Boolean>> ws = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                RCountDownLatch w = (i == 2 ? a : b).getCountDownLatch(name);
                ws.add(pool.submit(() -> {
                    waiting.countDown();
                    return w.await(12, TimeUnit.SECONDS);
                }));
            }
            waiting.await(5, TimeUnit.SECONDS);
            Thread.sleep(300);
            l.countDown();
            l.countDown();
            expect("RCountDownLatch.getCount() after 2 of 3", b.getCountDownLatch(name).getCount(), 1L);
            Thread.sleep(200);
            for (int i = 0; i < ws.size(); i++) check("waiter " + i + " still waiting at count 1", !ws.get(i).isDone(), true, "not done");
            b.getCountDownLatch(name).countDown();
            for (int i = 0; i < ws.size(); i++) check("waiter " + i + " await(12s) after the last countDown", ws.get(i).get(10, TimeUnit.SECONDS), false, "true");
            check("await(0) on a latch at 0", b.getCountDownLatch(name).await(0, TimeUnit.MILLISECONDS), false, "true");
        });
    }

    // ---------------------------------------------------------------- topics

    static void topics(RedissonClient a, RedissonClient b) {
        test(REDISSON, "RTopic: 200 messages, in order, to subscribers on both clients; countSubscribers", () -> {
            String ch = key("topic200");
            LinkedBlockingQueue<String> gotA = new LinkedBlockingQueue<>(), gotB = new LinkedBlockingQueue<>();
            RTopic ta = a.getTopic(ch, S), tb = b.getTopic(ch, S);
            int ida = ta.addListener(String.class, (c, m) -> gotA.add(m));
            int idb = tb.addListener(String.class, (c, m) -> gotB.add(m));
            expect("RTopic.countSubscribers() (PUBSUB NUMSUB)", ta.countSubscribers(), 2L);
            // One after another: publishAsync spreads over the pool's connections, whose order Redis does not keep.
            List<String> want = new ArrayList<>();
            for (int i = 0; i < 200; i++) {
                expect("RTopic.publish(m" + i + ") receivers", ta.publish("m" + i), 2L);
                want.add("m" + i);
            }
            expect("messages heard by client a", drain(gotA, 200, 5000), want);
            expect("messages heard by client b", drain(gotB, 200, 5000), want);
            ta.removeListener(ida);
            tb.removeListener(idb);
        });

        test(REDISSON, "RPatternTopic (PSUBSCRIBE) and RShardedTopic (SSUBSCRIBE) across clients", () -> {
            LinkedBlockingQueue<String> got = new LinkedBlockingQueue<>();
            RPatternTopic pt = b.getPatternTopic(key("pt") + ".*", S);
            int pid = pt.addListener(String.class, (pattern, channel, msg) -> got.add(channel + "=" + msg));
            expect("RTopic(pt.x).publish(1) receivers", a.getTopic(key("pt") + ".x", S).publish("1"), 1L);
            expect("RTopic(pt.y).publish(2) receivers", a.getTopic(key("pt") + ".y", S).publish("2"), 1L);
            expect("messages heard by the pattern listener", new HashSet<>(drain(got, 2, 3000)),
                    Set.of(key("pt") + ".x=1", key("pt") + ".y=2"));
            pt.removeListener(pid);
            RShardedTopic st = b.getShardedTopic(key("st"), S);
            int sid = st.addListener(String.class, (c, m) -> got.add("sharded=" + m));
            expect("RShardedTopic.publish(s) receivers (SPUBLISH)", a.getShardedTopic(key("st"), S).publish("s"), 1L);
            expect("message heard by the sharded listener", drain(got, 1, 3000), List.of("sharded=s"));
            st.removeListener(sid);
        });

        test(REDISSON, "RReliableTopic: messages kept in a stream reach a listener on the other client in order", () -> {
            String name = key("rtopic");
            LinkedBlockingQueue<String> got = new LinkedBlockingQueue<>();
            RReliableTopic sub = b.getReliableTopic(name, S);
            sub.addListener(String.class, (c, m) -> got.add(m));
            RReliableTopic pub = a.getReliableTopic(name, S);
            List<String> want = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                expect("RReliableTopic.publish(r" + i + ") subscribers", pub.publish("r" + i), 1L);
                want.add("r" + i);
            }
            expect("messages heard on the other client", drain(got, 5, 8000), want);
            // Not deleted: the subscriber's status task may still be running its script on the stream.
            sub.removeAllListeners();
        });
    }

    // ---------------------------------------------------------------- queues

    static void queues(RedissonClient a, RedissonClient b) {
        test(REDISSON, "RBlockingQueue: take() woken by the other client's offer, poll(timeout) on empty, each element to one of 4 takers, BRPOPLPUSH", () -> {
            String q = tag("bq") + ":q", q2 = tag("bq") + ":q2";
            RBlockingQueue<String> qa = a.getBlockingQueue(q, S), qb = b.getBlockingQueue(q, S);
            Future<String> taker = pool.submit(() -> qb.take());
            Thread.sleep(300);
            check("RBlockingQueue.take() on an empty queue", !taker.isDone(), "done", "still waiting");
            check("other client RBlockingQueue.offer(one)", qa.offer("one"), false, "true");
            expect("RBlockingQueue.take() after the offer", taker.get(8, TimeUnit.SECONDS), "one");
            expect("RBlockingQueue.poll(300 ms) on an empty queue", qb.poll(300, TimeUnit.MILLISECONDS), null);
            List<Future<String>> takers = new ArrayList<>();
            for (int i = 0; i < 4; i++) {
                RBlockingQueue<String> t = (i % 2 == 0 ? a : b).getBlockingQueue(q, S);
                takers.add(pool.submit(() -> t.poll(10, TimeUnit.SECONDS)));
            }
            Thread.sleep(300);
            for (int i = 0; i < 4; i++) qa.offer("e" + i);
            List<String> taken = new ArrayList<>();
            for (Future<String> f : takers) taken.add(f.get(12, TimeUnit.SECONDS));
            expect("elements taken by 4 blocked takers on two clients", new TreeSet<>(taken), new TreeSet<>(List.of("e0", "e1", "e2", "e3")));
            qa.offer("two");
            qa.offer("three");
            expect("RBlockingQueue.pollLastAndOfferFirstTo(q2, 2 s)", qb.pollLastAndOfferFirstTo(q2, 2, TimeUnit.SECONDS), "three");
            expect("q2 peek() on the other client", a.<String>getBlockingQueue(q2, S).peek(), "three");
            expect("q poll()", qa.poll(), "two");
            a.getKeys().delete(q, q2);
        });

        test(REDISSON, "RDelayedQueue: elements reach the destination queue after their delays, in due order", () -> {
            String name = key("dq");
            RBlockingQueue<String> dest = b.getBlockingQueue(name, S);
            RDelayedQueue<String> dq = a.getDelayedQueue(a.getBlockingQueue(name, S));
            long t0 = System.nanoTime();
            dq.offer("late", 1200, TimeUnit.MILLISECONDS);
            dq.offer("early", 400, TimeUnit.MILLISECONDS);
            expect("RDelayedQueue.size() right after two offers", dq.size(), 2);
            String e1 = dest.poll(8, TimeUnit.SECONDS);
            long ms1 = (System.nanoTime() - t0) / 1_000_000;
            String e2 = dest.poll(8, TimeUnit.SECONDS);
            long ms2 = (System.nanoTime() - t0) / 1_000_000;
            expect("first element out of the destination (other client, poll 8 s)", e1, "early");
            check("time the 400 ms element came out", ms1 >= 380, ms1 + " ms", ">= 380 ms (its delay)");
            expect("second element out of the destination", e2, "late");
            check("time the 1200 ms element came out", ms2 >= 1180, ms2 + " ms", ">= 1180 ms (its delay)");
            expect("RDelayedQueue.size() at the end", dq.size(), 0);
            dq.destroy();
            dq.delete();
            dest.delete();
        });
    }

    // ---------------------------------------------------------------- maps

    static void maps(RedissonClient a, RedissonClient b) {
        test(REDISSON, "RMapCache: entries expire by TTL and max idle for the other client; its listeners hear create, update, remove and expire", () -> {
            String name = key("mapcache");
            LinkedBlockingQueue<String> events = new LinkedBlockingQueue<>();
            RMapCache<String, String> mb = b.getMapCache(name, S);
            List<Integer> lids = List.of(
                    mb.addListener((EntryCreatedListener<String, String>) e -> events.add("created " + e.getKey())),
                    mb.addListener((EntryUpdatedListener<String, String>) e -> events.add("updated " + e.getKey() + " " + e.getOldValue() + "->" + e.getValue())),
                    mb.addListener((EntryRemovedListener<String, String>) e -> events.add("removed " + e.getKey())),
                    mb.addListener((EntryExpiredListener<String, String>) e -> events.add("expired " + e.getKey())));
            RMapCache<String, String> ma = a.getMapCache(name, S);
            ma.put("ttl", "1", 800, TimeUnit.MILLISECONDS);
            ma.put("idle", "2", 0, TimeUnit.MILLISECONDS, 800, TimeUnit.MILLISECONDS);
            ma.put("keep", "3");
            ma.put("keep", "3b");
            ma.put("gone", "4");
            expect("RMapCache.fastRemove(gone)", ma.fastRemove("gone"), 1L);
            long ttl = mb.remainTimeToLive("ttl");
            check("other client RMapCache.remainTimeToLive(ttl)", ttl > 0 && ttl <= 800, ttl, "0 < ttl <= 800");
            Thread.sleep(1200); // past both the TTL and the max idle time, "idle" untouched
            expect("other client get(ttl) after its 800 ms TTL", mb.get("ttl"), null);
            expect("other client get(idle) after 800 ms idle", mb.get("idle"), null);
            expect("other client get(keep)", mb.get("keep"), "3b");
            expect("other client readAllMap()", new HashMap<>(mb.readAllMap()), Map.of("keep", "3b"));
            Set<String> want = Set.of("created ttl", "created idle", "created keep", "updated keep 3->3b", "created gone", "removed gone",
                    "expired ttl", "expired idle");
            Set<String> seen = new HashSet<>();
            long end = System.currentTimeMillis() + 10_000; // the eviction task runs every 1-2 s here
            while (!seen.containsAll(want) && System.currentTimeMillis() < end) {
                String e = events.poll(100, TimeUnit.MILLISECONDS);
                if (e != null) seen.add(e);
            }
            expect("events heard by the other client's listeners (expired: from the eviction task)", new TreeSet<>(seen), new TreeSet<>(want));
            expect("RMapCache.size() after eviction", ma.size(), 1);
            for (int id : lids) mb.removeListener(id);
            ma.delete();
        });

        test(REDISSON, "RLocalCachedMap: a write on one client invalidates the other's local cache", () -> {
            String name = key("lcm");
            RLocalCachedMap<String, String> la = a.getLocalCachedMap(LocalCachedMapOptions.<String, String>name(name).codec(S));
            RLocalCachedMap<String, String> lb = b.getLocalCachedMap(LocalCachedMapOptions.<String, String>name(name).codec(S));
            la.put("k", "v1");
            // The put's own invalidation message may reach b after b's first get: get until b keeps it.
            check("other client get(k) until its local cache holds k=v1",
                    waitFor(5000, () -> "v1".equals(lb.get("k")) && "v1".equals(lb.getCachedMap().get("k"))), lb.getCachedMap(), "k=v1 within 5 s");
            la.put("k", "v2");
            check("other client's local cache drops or updates k after the write (invalidation message)",
                    waitFor(5000, () -> !"v1".equals(lb.getCachedMap().get("k"))), lb.getCachedMap(), "no k=v1 within 5 s");
            expect("other client get(k) after the write", lb.get("k"), "v2");
            la.destroy();
            lb.destroy();
            la.delete();
        });
    }

    // ---------------------------------------------------------------- streams

    static void streams(RedissonClient a, RedissonClient b) {
        test(REDISSON, "RStream: a consumer group on two clients: XREADGROUP BLOCK woken by XADD, ack, pending, claim, autoclaim", () -> {
            String name = key("stream");
            RStream<String, String> sa = a.getStream(name, S), sb = b.getStream(name, S);
            sa.createGroup(StreamCreateGroupArgs.name("g").makeStream());
            // The stream types are named by inference (var) and MIN reached
            // through an id: Redisson 4 moved them to org.redisson.api.stream,
            // and the suite compiles against 3.52.0 and the newest 4.x alike.
            var blocked = pool.submit(
                    () -> sb.readGroup("g", "c2", StreamReadGroupArgs.neverDelivered().count(10).timeout(Duration.ofSeconds(8))));
            Thread.sleep(300);
            check("readGroup(c2, BLOCK 8 s) on an empty stream", !blocked.isDone(), "done", "still waiting");
            var id1 = sa.add(StreamAddArgs.entry("n", "1"));
            expect("readGroup(c2, BLOCK 8 s) after the other client's add", blocked.get(10, TimeUnit.SECONDS), Map.of(id1, Map.of("n", "1")));
            var id2 = sa.add(StreamAddArgs.entry("n", "2"));
            var id3 = sa.add(StreamAddArgs.entry("n", "3"));
            expect("readGroup(c1, count 1)", sa.readGroup("g", "c1", StreamReadGroupArgs.neverDelivered().count(1)), Map.of(id2, Map.of("n", "2")));
            var p = sb.getPendingInfo("g");
            expect("getPendingInfo(g) total", p.getTotal(), 2L);
            expect("getPendingInfo(g) consumers", p.getConsumerNames(), Map.of("c1", 1L, "c2", 1L));
            expect("ack(g, id1) by c2's client", sb.ack("g", id1), 1L);
            expect("claim(g, c2, id2) from c1", sb.claim("g", "c2", 0, TimeUnit.MILLISECONDS, id2).keySet(), Set.of(id2));
            expect("readGroup(c1, count 1) again", sa.readGroup("g", "c1", StreamReadGroupArgs.neverDelivered().count(1)).keySet(), Set.of(id3));
            @SuppressWarnings("static-access")
            var ac = sb.autoClaim("g", "c2", 0, TimeUnit.MILLISECONDS, id1.MIN, 10);
            check("autoClaim(g, c2) takes c1's pending id3", ac.getMessages().containsKey(id3), ac.getMessages().keySet(), "contains " + id3);
            expect("ack(g, id2, id3)", sb.ack("g", id2, id3), 2L);
            expect("getPendingInfo(g) total at the end", sa.getPendingInfo("g").getTotal(), 0L);
            expect("RStream.size()", sa.size(), 3L);
            expect("listConsumers(g) count", sa.listConsumers("g").size(), 2);
            sa.delete();
        });
    }

    // ---------------------------------------------------------------- batches

    static void batches(RedissonClient a, RedissonClient b) {
        test(REDISSON, "RBatch (pipelined): 150 commands on buckets, a map, a counter and a list, replies in order", () -> {
            RBatch batch = a.createBatch(BatchOptions.defaults());
            List<RFuture<Long>> incrs = new ArrayList<>();
            List<RFuture<String>> gets = new ArrayList<>();
            for (int i = 0; i < 30; i++) {
                batch.<String>getBucket(key("batch:b" + i), S).setAsync("v" + i);
                incrs.add(batch.getAtomicLong(key("batch:n")).incrementAndGetAsync());
                batch.<String, String>getMap(key("batch:m"), S).fastPutAsync("f" + i, "v" + i);
                batch.<String>getList(key("batch:l"), S).addAsync("e" + i);
                gets.add(batch.<String>getBucket(key("batch:b" + i), S).getAsync());
            }
            BatchResult<?> res = batch.execute();
            expect("RBatch.execute() responses", res.getResponses().size(), 150);
            for (int i = 0; i < 30; i++) {
                expect("batched incrementAndGet #" + i, incrs.get(i).toCompletableFuture().get(), (long) (i + 1));
                expect("batched get of bucket " + i, gets.get(i).toCompletableFuture().get(), "v" + i);
            }
            expect("other client RMap.size()", b.getMap(key("batch:m"), S).size(), 30);
            List<String> want = new ArrayList<>();
            for (int i = 0; i < 30; i++) want.add("e" + i);
            expect("other client RList.readAll()", b.<String>getList(key("batch:l"), S).readAll(), want);
            List<String> all = new ArrayList<>(List.of(key("batch:n"), key("batch:m"), key("batch:l")));
            for (int i = 0; i < 30; i++) all.add(key("batch:b" + i));
            expect("RKeys.delete(the batch's keys)", a.getKeys().delete(all.toArray(new String[0])), 33L);
        });

        test(REDISSON, "RBatch atomic (IN_MEMORY_ATOMIC and REDIS_WRITE_ATOMIC: MULTI/EXEC) on one hash tag", () -> {
            for (ExecutionMode mode : List.of(ExecutionMode.IN_MEMORY_ATOMIC, ExecutionMode.REDIS_WRITE_ATOMIC)) {
                String t = tag("abatch-" + mode);
                RBatch batch = a.createBatch(BatchOptions.defaults().executionMode(mode));
                batch.<String>getBucket(t + ":b", S).setAsync("1");
                RFuture<Long> n = null;
                for (int i = 0; i < 3; i++) n = batch.getAtomicLong(t + ":n").incrementAndGetAsync();
                batch.<String, String>getMap(t + ":m", S).fastPutAsync("f", "v");
                BatchResult<?> res = batch.execute();
                expect(mode + " batch responses", res.getResponses().size(), 5);
                expect(mode + " batch's last incrementAndGet", n.toCompletableFuture().get(), 3L);
                expect(mode + ": other client RBucket.get()", b.<String>getBucket(t + ":b", S).get(), "1");
                expect(mode + ": other client RMap.get(f)", b.<String, String>getMap(t + ":m", S).get("f"), "v");
                a.getKeys().delete(t + ":b", t + ":n", t + ":m");
            }
            if (Suite.CLUSTER) {
                // Keys in two slots: Redis Cluster cannot run that MULTI/EXEC; nothing may be applied.
                List<String> two = ClusterSuite.spread("abatch-cross", 2);
                RBatch batch = a.createBatch(BatchOptions.defaults().executionMode(ExecutionMode.IN_MEMORY_ATOMIC));
                batch.<String>getBucket(two.get(0), S).setAsync("x");
                batch.<String>getBucket(two.get(1), S).setAsync("y");
                Object err;
                try {
                    batch.execute();
                    err = null;
                } catch (Exception e) {
                    err = e;
                }
                // Redisson reports EXEC's answer. With the keys on two masters the queued SET for the
                // other master gets -CROSSSLOT (it goes to Redisson's log) and EXEC -EXECABORT; on two
                // slots of one master, Redis Cluster itself answers EXEC with -CROSSSLOT.
                String msg = err == null ? "" : String.valueOf(((Exception) err).getMessage());
                check("IN_MEMORY_ATOMIC batch over two slots", msg.startsWith("EXECABORT") || msg.startsWith("CROSSSLOT"),
                        err, "an error starting EXECABORT or CROSSSLOT");
                expect("RKeys.countExists(both keys) after the refused batch", a.getKeys().countExists(two.get(0), two.get(1)), 0L);
            }
        });

        test(REDISSON, "RBatch skipResult() (CLIENT REPLY OFF ... ON): writes applied once, execute() succeeds, later replies line up", () -> {
            // One connection, so the batch and the commands after it share it: a reply the proxy
            // sent where Redis would not would be taken as the answer to a later command.
            RedissonClient c = Suite.redisson("one-conn", s -> s.setConnectionMinimumIdleSize(1).setConnectionPoolSize(1));
            try {
                String n = key("skip:n"), l = key("skip:l");
                int round = 0;
                for (BatchOptions opts : List.of(BatchOptions.defaults().skipResult(),
                        BatchOptions.defaults().skipResult().executionMode(ExecutionMode.IN_MEMORY_ATOMIC),
                        BatchOptions.defaults().skipResult().sync(1, Duration.ofSeconds(3)))) {
                    round++;
                    String what = "skipResult batch " + round + " (" + opts.getExecutionMode() + (opts.getSyncSlaves() > 0 ? ", sync 1" : "") + ")";
                    String tn = Suite.CLUSTER && opts.getExecutionMode() != ExecutionMode.IN_MEMORY ? tag("skip") + ":n" : n;
                    String tl = Suite.CLUSTER && opts.getExecutionMode() != ExecutionMode.IN_MEMORY ? tag("skip") + ":l" : l;
                    long before = b.getAtomicLong(tn).get();
                    int listBefore = b.getList(tl, S).size();
                    RBatch batch = c.createBatch(opts);
                    for (int i = 0; i < 20; i++) {
                        batch.getAtomicLong(tn).incrementAndGetAsync();
                        batch.<String>getList(tl, S).addAsync("e" + i);
                    }
                    batch.execute();
                    expect(what + ": other client RAtomicLong.get()", b.getAtomicLong(tn).get(), before + 20);
                    expect(what + ": other client RList.size()", b.getList(tl, S).size(), listBefore + 20);
                    for (int i = 0; i < 20; i++) {
                        RBucket<String> bk = c.getBucket(key("skip:b" + i), S);
                        bk.set(what + " " + i);
                        expect(what + ": then get() of bucket " + i + " on the same connection", bk.get(), what + " " + i);
                    }
                    RAtomicLong counter = c.getAtomicLong(tn);
                    expect(what + ": then incrementAndGet() on the same connection", counter.incrementAndGet(), before + 21);
                }
                List<String> all = new ArrayList<>(List.of(n, l, tag("skip") + ":n", tag("skip") + ":l"));
                for (int i = 0; i < 20; i++) all.add(key("skip:b" + i));
                a.getKeys().delete(all.toArray(new String[0]));
            } finally {
                c.shutdown(0, 2, TimeUnit.SECONDS);
            }
        });

        test(REDISSON, "RBatch sync(1 replica): the WAIT after the batch counts the replica", () -> {
            RBatch batch = a.createBatch(BatchOptions.defaults().sync(1, Duration.ofSeconds(3)));
            batch.<String>getBucket(key("syncbatch"), S).setAsync("x");
            batch.getAtomicLong(key("syncbatch:n")).incrementAndGetAsync();
            BatchResult<?> res = batch.execute();
            expect("BatchResult.getSyncedSlaves()", res.getSyncedSlaves(), 1);
            expect("other client RBucket.get()", b.<String>getBucket(key("syncbatch"), S).get(), "x");
            a.getKeys().delete(key("syncbatch"), key("syncbatch:n"));
        });
    }

    // ---------------------------------------------------------------- transactions

    static void transactions(RedissonClient a, RedissonClient b) {
        test(REDISSON, "RTransaction: map, bucket and set committed together (one hash tag); nothing seen before commit or after rollback", () -> {
            String t = tag("tx");
            RMap<String, String> seeMap = b.getMap(t + ":map", S);
            RBucket<String> seeBucket = b.getBucket(t + ":bucket", S);
            RSet<String> seeSet = b.getSet(t + ":set", S);
            RTransaction tx = a.createTransaction(TransactionOptions.defaults());
            RMap<String, String> m = tx.getMap(t + ":map", S);
            m.put("f", "1");
            m.put("g", "2");
            tx.<String>getBucket(t + ":bucket", S).set("v");
            tx.<String>getSet(t + ":set", S).add("x");
            expect("RTransaction map get(f) inside the transaction", m.get("f"), "1");
            expect("other client RMap.get(f) before commit", seeMap.get("f"), null);
            expect("other client RBucket.get() before commit", seeBucket.get(), null);
            tx.commit();
            expect("other client RMap.readAllMap() after commit", new HashMap<>(seeMap.readAllMap()), Map.of("f", "1", "g", "2"));
            expect("other client RBucket.get() after commit", seeBucket.get(), "v");
            expect("other client RSet.readAll() after commit", seeSet.readAll(), Set.of("x"));

            RTransaction tx2 = a.createTransaction(TransactionOptions.defaults());
            tx2.<String, String>getMap(t + ":map", S).put("f", "changed");
            tx2.<String>getBucket(t + ":bucket", S).set("changed");
            tx2.rollback();
            expect("other client RMap.get(f) after rollback", seeMap.get("f"), "1");
            expect("other client RBucket.get() after rollback", seeBucket.get(), "v");

            // The other client's open transaction holds the key's lock: this one's write waits for its commit.
            RTransaction tb = b.createTransaction(TransactionOptions.defaults());
            tb.<String, String>getMap(t + ":map", S).put("f", "from b");
            Future<?> ta = pool.submit(() -> {
                RTransaction tx3 = a.createTransaction(TransactionOptions.defaults());
                tx3.<String, String>getMap(t + ":map", S).put("f", "from a");
                tx3.commit();
                return null;
            });
            Thread.sleep(400);
            check("a transaction's put(f) while the other client's transaction holds f", !ta.isDone(), "done", "still waiting");
            tb.commit();
            ta.get(8, TimeUnit.SECONDS);
            expect("RMap.get(f) after both commits", seeMap.get("f"), "from a");
            a.getKeys().delete(t + ":map", t + ":bucket", t + ":set");
        });
    }

    // ---------------------------------------------------------------- scripts

    /** Runs after the batches and transactions: see the SCRIPT FLUSH below. */
    static void scripts(RedissonClient a, RedissonClient b) {
        test(REDISSON, "RScript: EVAL, SCRIPT LOAD/EXISTS, EVALSHA_RO from the other client; after SCRIPT FLUSH Redisson reloads its own scripts", () -> {
            String k = key("script");
            RScript s = a.getScript(S);
            expect("RScript.eval(READ_WRITE, set+get)", s.eval(RScript.Mode.READ_WRITE,
                    "redis.call('set', KEYS[1], ARGV[1]); return redis.call('get', KEYS[1])", RScript.ReturnType.VALUE, List.of(k), "v1"), "v1");
            String get = "return redis.call('get', KEYS[1])";
            String sha = s.scriptLoad(get);
            expect("RScript.scriptExists(sha)", s.scriptExists(sha), List.of(true));
            expect("other client RScript.evalSha(READ_ONLY, sha)", b.getScript(S).evalSha(RScript.Mode.READ_ONLY, sha, RScript.ReturnType.VALUE, List.of(k)), "v1");
            expect("RScript.eval(READ_ONLY, get)", s.eval(RScript.Mode.READ_ONLY, get, RScript.ReturnType.VALUE, List.of(k)), "v1");
            String err;
            try {
                s.eval(RScript.Mode.READ_ONLY, "return redis.call('set', KEYS[1], 'x')", RScript.ReturnType.VALUE, List.of(k));
                err = "no error";
            } catch (Exception e) {
                err = String.valueOf(e.getMessage());
            }
            check("RScript.eval(READ_ONLY, a write)", err.contains("Write commands are not allowed from read-only scripts"), err,
                    "Redis's error for a write from a read-only script");
            // Redisson remembers which scripts it loaded: after a flush, a lone EVALSHA gets NOSCRIPT and is
            // retried after SCRIPT LOAD, but one queued in an atomic batch or RTransaction fails with
            // NOSCRIPT (as against Redis itself), so this comes after those cases.
            s.scriptFlush();
            expect("RScript.scriptExists(sha) after scriptFlush()", s.scriptExists(sha), List.of(false));
            RLock l = b.getLock(key("scriptlock"));
            l.lock(5, TimeUnit.SECONDS); // EVALSHA -> NOSCRIPT -> SCRIPT LOAD -> EVALSHA
            check("RLock.isLocked() after SCRIPT FLUSH", l.isLocked(), false, "true");
            l.unlock();
            a.getBucket(k).delete();
        });

        test(REDISSON, "RFunction: FUNCTION LOAD, FCALL and FCALL_RO from the other client, FUNCTION LIST and DELETE", () -> {
            String lib = "javasuite_" + Suite.RUN;
            String k = key("fn");
            RFunction fa = a.getFunction(S);
            fa.load(lib, "redis.register_function('" + lib + "_set', function(keys, args) return redis.call('set', keys[1], args[1]) end)\n"
                    + "redis.register_function{function_name='" + lib + "_get', callback=function(keys, args) return redis.call('get', keys[1]) end, flags={'no-writes'}}");
            RFunction fb = b.getFunction(S);
            expect("other client RFunction.call(WRITE, set)", fb.call(FunctionMode.WRITE, lib + "_set", FunctionResult.STRING, List.of(k), "fv"), "OK");
            expect("other client RFunction.call(READ, get) (FCALL_RO)", fb.call(FunctionMode.READ, lib + "_get", FunctionResult.STRING, List.of(k)), "fv");
            expect("RFunction.list(lib) libraries", fa.list(lib).size(), 1);
            fa.delete(lib);
            expect("RFunction.list(lib) after delete", fa.list(lib).size(), 0);
            a.getBucket(k).delete();
        });
    }

    // ---------------------------------------------------------------- listeners

    static void listeners(RedissonClient a, RedissonClient b) {
        String name = "DeletedObjectListener, ExpiredObjectListener and SetObjectListener on the other client over 6 keys (keyspace notifications)";
        test(REDISSON, name, () -> {
            String old;
            try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                old = j.configGet("notify-keyspace-events").get("notify-keyspace-events");
                // E: keyevent channels; g: generic (del, expire); $: string (set); x: expired.
                expect("CONFIG SET notify-keyspace-events Eg$x", j.configSet("notify-keyspace-events", "Eg$x"), "OK");
            }
            try {
                List<String> keys = new ArrayList<>();
                for (int i = 0; i < 6; i++) keys.add(key("listen:" + i));
                LinkedBlockingQueue<String> events = new LinkedBlockingQueue<>();
                List<RBucket<String>> watched = new ArrayList<>();
                List<Integer> ids = new ArrayList<>();
                for (String k : keys) {
                    RBucket<String> w = b.getBucket(k, S);
                    ids.add(w.addListener((DeletedObjectListener) n -> events.add("del " + n)));
                    ids.add(w.addListener((ExpiredObjectListener) n -> events.add("expired " + n)));
                    ids.add(w.addListener((SetObjectListener) n -> events.add("set " + n)));
                    watched.add(w);
                }
                Set<String> want = new TreeSet<>();
                for (int i = 0; i < 6; i++) {
                    RBucket<String> bk = a.getBucket(keys.get(i), S);
                    if (i < 3) {
                        bk.set("v");
                        bk.delete();
                        want.add("del " + keys.get(i));
                    } else {
                        bk.set("v", Duration.ofMillis(300));
                        want.add("expired " + keys.get(i));
                    }
                    want.add("set " + keys.get(i));
                }
                Set<String> seen = new TreeSet<>();
                long end = System.currentTimeMillis() + 10_000; // Redis expires keys in the background
                while (!seen.containsAll(want) && System.currentTimeMillis() < end) {
                    String e = events.poll(100, TimeUnit.MILLISECONDS);
                    if (e != null) seen.add(e);
                }
                expect("events heard by the other client's listeners", seen, want);
                for (int i = 0; i < watched.size(); i++) for (int j = 0; j < 3; j++) watched.get(i).removeListener(ids.get(3 * i + j));
            } finally {
                try (Jedis j = new Jedis(Suite.HOST, Suite.PORT, 5000)) {
                    j.configSet("notify-keyspace-events", old == null ? "" : old);
                }
            }
        });
    }

    // ---------------------------------------------------------------- RESP3

    static void resp3(RedissonClient b) {
        test(REDISSON, "Redisson with protocol RESP3 (HELLO 3): lock waiter woken, RTopic, skipResult batch, blocking poll"
                + (Suite.CLUSTER ? "" : ", TrackingListener (CLIENT TRACKING REDIRECT to its subscribed connection)"), () -> {
            // One pooled connection: the skipResult batch and the replies after it share it.
            RedissonClient r3 = Suite.redisson("resp3", s -> s.setConnectionMinimumIdleSize(1).setConnectionPoolSize(1)
                    .setSubscriptionConnectionMinimumIdleSize(1).setSubscriptionConnectionPoolSize(2), Protocol.RESP3);
            try {
                RLock held = b.getLock(key("r3:lock"));
                held.lock(30, TimeUnit.SECONDS);
                Future<Boolean> waiter = pool.submit(() -> {
                    RLock w = r3.getLock(key("r3:lock"));
                    boolean ok = w.tryLock(10, 5, TimeUnit.SECONDS);
                    if (ok) w.unlock();
                    return ok;
                });
                Thread.sleep(500);
                held.unlock();
                check("RESP3 client RLock.tryLock(10 s) woken by the other client's unlock", waiter.get(12, TimeUnit.SECONDS), false, "true");

                LinkedBlockingQueue<String> got = new LinkedBlockingQueue<>();
                RTopic t = r3.getTopic(key("r3:topic"), S);
                int id = t.addListener(String.class, (c, m) -> got.add(m));
                expect("other client RTopic.publish(hi) receivers", b.getTopic(key("r3:topic"), S).publish("hi"), 1L);
                expect("RESP3 listener message", got.poll(3, TimeUnit.SECONDS), "hi");
                t.removeListener(id);

                RBatch batch = r3.createBatch(BatchOptions.defaults().skipResult());
                for (int i = 0; i < 10; i++) batch.getAtomicLong(key("r3:n")).incrementAndGetAsync();
                batch.execute();
                expect("other client RAtomicLong.get() after the RESP3 skipResult batch", b.getAtomicLong(key("r3:n")).get(), 10L);
                for (int i = 0; i < 10; i++) {
                    RBucket<String> bk = r3.getBucket(key("r3:b" + i), S);
                    bk.set("v" + i);
                    expect("RESP3 get() of bucket " + i + " after the skipResult batch", bk.get(), "v" + i);
                }

                RBlockingQueue<String> q = r3.getBlockingQueue(key("r3:q"), S);
                Future<String> polled = pool.submit(() -> q.poll(8, TimeUnit.SECONDS));
                Thread.sleep(300);
                b.getBlockingQueue(key("r3:q"), S).offer("x");
                expect("RESP3 RBlockingQueue.poll(8 s) after the other client's offer", polled.get(10, TimeUnit.SECONDS), "x");

                if (!Suite.CLUSTER) {
                    // Redisson: SUBSCRIBE __redis__:invalidate, CLIENT ID on that connection, then
                    // CLIENT TRACKING ON REDIRECT <id> on a pooled one (the only one here, which
                    // then carries the reads that are tracked).
                    RBucket<String> tracked = r3.getBucket(key("r3:tracked"), S);
                    tracked.set("v1");
                    LinkedBlockingQueue<String> changed = new LinkedBlockingQueue<>();
                    int tid = tracked.addListener((TrackingListener) name -> changed.add(name));
                    expect("RESP3 tracked get()", tracked.get(), "v1");
                    b.getBucket(key("r3:tracked"), S).set("v2");
                    expect("TrackingListener after the other client's set", changed.poll(5, TimeUnit.SECONDS), key("r3:tracked"));
                    tracked.removeListener(tid);
                }
            } finally {
                r3.shutdown(0, 2, TimeUnit.SECONDS);
            }
        });
    }
}
