#!/usr/bin/env python3
"""redis-py compatibility suite for fenceproxy.

Run by test/clients/run.sh with FENCEPROXY_ADDR=host:port. Each case prints
`PASS python: NAME` or `FAIL python: NAME: CALL -> REPLY`; the last line is
`python totals: N passed, M failed` (run.sh adds up every suite's totals).

Cases whose name starts with `tx:` need MULTI/EXEC/WATCH through the proxy.
Cases named `pubsub ...` tunnel a connection to Redis (SUBSCRIBE and friends).
"""
import os
import sys
import threading
import time
import traceback
import uuid

import signal

import redis
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError, WatchError
from redis.retry import Retry

CASE_SECONDS = 15  # a case that hangs (a reply that never comes) fails alone

HOST, PORT = os.environ.get("FENCEPROXY_ADDR", "127.0.0.1:7379").rsplit(":", 1)
PORT = int(PORT)
RUN = uuid.uuid4().hex[:8]
# In front of a Redis Cluster (run.sh --cluster) PUBLISH counts only the
# subscribers of the node it runs on, as in any Redis Cluster.
CLUSTER = os.environ.get("FENCEPROXY_CLUSTER") == "1"
CLIENT = "python redis-py %s" % redis.__version__

passed = 0
failed = 0


class Fail(Exception):
    """A failed expectation: names the call and the reply."""

    def __init__(self, call, reply, want=None):
        msg = "%s -> %r" % (call, reply)
        if want is not None:
            msg += " (want %r)" % (want,)
        super().__init__(msg)


def expect(call, got, want):
    if got != want:
        raise Fail(call, got, want)


def expect_error(call, fn, contains):
    try:
        reply = fn()
    except ResponseError as e:
        if contains not in str(e):
            raise Fail(call, "ResponseError(%s)" % e, "an error containing %r" % contains)
        return e
    raise Fail(call, reply, "ResponseError containing %r" % contains)


def key(name):
    # One hash tag per run: a case's keys share a slot, so multi-key commands
    # and transactions are valid in front of a Redis Cluster too.
    return "clients:py:{%s}:%s" % (RUN, name)


def client(**kw):
    kw.setdefault("protocol", 2)
    kw.setdefault("socket_timeout", 5)
    kw.setdefault("socket_connect_timeout", 5)
    kw.setdefault("retry", Retry(NoBackoff(), 0))  # report the first reply, do not retry it
    return redis.Redis(host=HOST, port=PORT, **kw)


class CaseTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise CaseTimeout("no reply within %ds (the case was stopped)" % CASE_SECONDS)


signal.signal(signal.SIGALRM, _on_alarm)


def case(name):
    def deco(fn):
        global passed, failed
        start = time.monotonic()
        ok = False
        signal.alarm(CASE_SECONDS)
        try:
            fn()
            ok = True
        except Fail as e:
            print("FAIL %s: %s: %s" % (CLIENT, name, e), flush=True)
        except BaseException as e:  # an unexpected exception is the reply
            if isinstance(e, KeyboardInterrupt):
                raise
            print("FAIL %s: %s: raised %s: %s" % (CLIENT, name, type(e).__name__, e), flush=True)
            if os.environ.get("VERBOSE"):
                traceback.print_exc()
        finally:
            signal.alarm(0)
        if ok:
            passed += 1
            print("PASS python: %s (%.0f ms)" % (name, (time.monotonic() - start) * 1000), flush=True)
        else:
            failed += 1
        return fn

    return deco


r = client()
r2 = client()


# --- connecting -------------------------------------------------------------


@case("connect with redis-py's default options (redis-py >= 8 sends HELLO 3 and does not fall back)")
def _():
    c = redis.Redis(host=HOST, port=PORT, socket_timeout=5, socket_connect_timeout=5)
    try:
        expect("PING (default protocol)", c.ping(), True)
        c.set(key("default-proto"), "v")
        expect("GET (default protocol)", c.get(key("default-proto")), b"v")
    finally:
        c.close()


@case("connect with protocol=2, client_name, and CLIENT SETINFO on connect")
def _():
    c = client(client_name="fp-suite")
    try:
        expect("PING", c.ping(), True)
        name = c.client_getname()
        if name not in ("fp-suite", b"fp-suite"):
            raise Fail("CLIENT GETNAME", name, "fp-suite")
    finally:
        c.close()


# --- data commands ------------------------------------------------------------


@case("strings: SET/GET/INCR/INCRBYFLOAT/MSET/MGET/APPEND/GETRANGE/SETEX/TTL/DEL/EXISTS")
def _():
    k = key("s")
    expect("SET", r.set(k, "hello"), True)
    expect("GET", r.get(k), b"hello")
    expect("APPEND", r.append(k, " world"), 11)
    expect("GETRANGE", r.getrange(k, 0, 4), b"hello")
    expect("SET NX on existing", r.set(k, "x", nx=True), None)
    expect("INCR", r.incr(key("n")), 1)
    expect("INCRBY", r.incrby(key("n"), 41), 42)
    expect("INCRBYFLOAT", r.incrbyfloat(key("f"), 1.5), 1.5)
    expect("MSET", r.mset({key("a"): "1", key("b"): "2"}), True)
    expect("MGET", r.mget([key("a"), key("b"), key("missing")]), [b"1", b"2", None])
    expect("SET EX", r.set(key("e"), "v", ex=100), True)
    ttl = r.ttl(key("e"))
    if not 0 < ttl <= 100:
        raise Fail("TTL", ttl, "1..100")
    expect("EXISTS", r.exists(key("a"), key("b"), key("missing")), 2)
    expect("DEL", r.delete(key("a"), key("b"), key("missing")), 2)
    expect("GET missing", r.get(key("a")), None)
    expect_error("INCR on a non-integer", lambda: r.incr(k), "not an integer")


@case("hashes: HSET mapping/HGET/HGETALL/HINCRBY/HDEL/HLEN/HKEYS")
def _():
    k = key("h")
    expect("HSET mapping", r.hset(k, mapping={"a": "1", "b": "2", "c": "3"}), 3)
    expect("HGET", r.hget(k, "b"), b"2")
    expect("HGETALL", r.hgetall(k), {b"a": b"1", b"b": b"2", b"c": b"3"})
    expect("HINCRBY", r.hincrby(k, "a", 9), 10)
    expect("HDEL", r.hdel(k, "c", "zz"), 1)
    expect("HLEN", r.hlen(k), 2)
    expect("HKEYS", sorted(r.hkeys(k)), [b"a", b"b"])
    expect_error("GET on a hash (WRONGTYPE)", lambda: r.get(k), "WRONGTYPE")


@case("lists: RPUSH/LPUSH/LRANGE/LPOP/RPOP/LLEN/LINDEX/LPOP count")
def _():
    k = key("l")
    expect("RPUSH", r.rpush(k, "b", "c"), 2)
    expect("LPUSH", r.lpush(k, "a"), 3)
    expect("LRANGE", r.lrange(k, 0, -1), [b"a", b"b", b"c"])
    expect("LINDEX", r.lindex(k, 1), b"b")
    expect("LPOP", r.lpop(k), b"a")
    expect("RPOP", r.rpop(k), b"c")
    expect("LLEN", r.llen(k), 1)
    r.rpush(k, "x", "y")
    expect("LPOP count", r.lpop(k, 2), [b"b", b"x"])


@case("sets: SADD/SMEMBERS/SISMEMBER/SREM/SCARD/SINTER")
def _():
    k, k2 = key("set1"), key("set2")
    expect("SADD", r.sadd(k, "a", "b", "c", "a"), 3)
    expect("SMEMBERS", r.smembers(k), {b"a", b"b", b"c"})
    expect("SISMEMBER", r.sismember(k, "b"), True)
    expect("SREM", r.srem(k, "b"), 1)
    expect("SCARD", r.scard(k), 2)
    r.sadd(k2, "c", "d")
    expect("SINTER", r.sinter(k, k2), {b"c"})


@case("zsets: ZADD/ZRANGE WITHSCORES/ZINCRBY/ZSCORE/ZRANGEBYSCORE/ZRANK/ZREM")
def _():
    k = key("z")
    expect("ZADD", r.zadd(k, {"a": 1, "b": 2, "c": 3.5}), 3)
    expect("ZRANGE WITHSCORES", r.zrange(k, 0, -1, withscores=True), [(b"a", 1.0), (b"b", 2.0), (b"c", 3.5)])
    expect("ZINCRBY", r.zincrby(k, 10, "a"), 11.0)
    expect("ZSCORE", r.zscore(k, "a"), 11.0)
    expect("ZRANGEBYSCORE", r.zrangebyscore(k, 2, 4), [b"b", b"c"])
    expect("ZRANK", r.zrank(k, "a"), 2)
    expect("ZREM", r.zrem(k, "b"), 1)
    expect("ZCARD", r.zcard(k), 2)


@case("binary values: every byte value, binary keys, a 1 MiB value, an empty value")
def _():
    allbytes = bytes(range(256)) * 4
    k = key("bin").encode() + b"\x00\xff\r\n"
    expect("SET binary key/value", r.set(k, allbytes), True)
    expect("GET binary", r.get(k), allbytes)
    big = os.urandom(1 << 20)
    r.set(key("big"), big)
    expect("GET 1 MiB (equal)", r.get(key("big")) == big, True)
    r.set(key("empty"), b"")
    expect("GET empty", r.get(key("empty")), b"")
    r.hset(key("binh"), b"\x00f\r\n", b"\xff\x00")
    expect("HGETALL binary", r.hgetall(key("binh")), {b"\x00f\r\n": b"\xff\x00"})


@case("scripts: EVAL, SCRIPT LOAD/EXISTS, EVALSHA, NOSCRIPT reaches the client, register_script")
def _():
    expect("EVAL", r.eval("return {KEYS[1], ARGV[1], 7}", 1, key("ev"), "a"), [key("ev").encode(), b"a", 7])
    sha = r.script_load("return 'x'")
    expect("SCRIPT EXISTS", r.script_exists(sha), [True])
    expect("EVALSHA", r.evalsha(sha, 0), b"x")
    try:
        got = r.evalsha("0" * 40, 0)
        raise Fail("EVALSHA unknown sha", got, "NoScriptError")
    except redis.exceptions.NoScriptError:
        pass  # redis-py maps -NOSCRIPT to NoScriptError
    s = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    expect("Script() call", s(keys=[key("scr")], args=[5]), 5)


@case("pipeline(transaction=False): 200 commands in order, an error in the middle kept in place")
def _():
    p = r.pipeline(transaction=False)
    for i in range(100):
        p.set(key("p%d" % i), i)
        p.get(key("p%d" % i))
    res = p.execute()
    want = []
    for i in range(100):
        want += [True, str(i).encode()]
    expect("pipeline SET/GET x100", res, want)

    p = r.pipeline(transaction=False)
    p.set(key("pe"), "notanumber")
    p.incr(key("pe"))
    p.get(key("pe"))
    res = p.execute(raise_on_error=False)
    if not (res[0] is True and isinstance(res[1], ResponseError) and res[2] == b"notanumber"):
        raise Fail("pipeline SET, INCR (error), GET", res)


@case("pipeline(transaction=False) with lock commands mixed in, replies in order")
def _():
    res_name = key("plock")
    p = r.pipeline(transaction=False)
    p.set(key("pl1"), "a")
    p.execute_command("LOCK.ACQUIRE", res_name, "owner-a", 5000)
    p.get(key("pl1"))
    p.execute_command("LOCK.ACQUIRE", res_name, "owner-b", 5000)
    p.execute_command("LOCK.RELEASE", res_name, "owner-a")
    res = p.execute()
    if not (res[0] is True and isinstance(res[1], int) and res[1] > 0 and res[2] == b"a"
            and res[3] is None and res[4] == 1):
        raise Fail("pipeline SET, LOCK.ACQUIRE a, GET, LOCK.ACQUIRE b, LOCK.RELEASE a", res)


# --- redis.lock.Lock ----------------------------------------------------------


@case("redis.lock.Lock: acquire, owned, extend, reacquire, release")
def _():
    lk = r.lock(key("rlock"), timeout=5)
    expect("Lock.acquire", lk.acquire(blocking=False), True)
    expect("Lock.owned", lk.owned(), True)
    expect("Lock.locked", lk.locked(), True)
    expect("Lock.extend(5)", lk.extend(5), True)
    pttl = r.pttl(key("rlock"))
    if not 5000 < pttl <= 10000:
        raise Fail("PTTL after extend", pttl, "5000..10000")
    expect("Lock.reacquire", lk.reacquire(), True)
    lk.release()
    expect("Lock.locked after release", lk.locked(), False)


@case("redis.lock.Lock: two clients contend; the loser gets False until release")
def _():
    a = r.lock(key("contend"), timeout=5)
    b = r2.lock(key("contend"), timeout=5)
    expect("A Lock.acquire", a.acquire(blocking=False), True)
    expect("B Lock.acquire while A holds", b.acquire(blocking=False), False)
    try:
        b.release()
        raise Fail("B Lock.release of a lock it does not hold", "no error", "LockError")
    except redis.exceptions.LockError:
        pass
    expect("A still owns", a.owned(), True)
    a.release()
    expect("B Lock.acquire after A released", b.acquire(blocking=False), True)
    b.release()


@case("redis.lock.Lock: blocking acquire times out, then succeeds when the holder releases")
def _():
    a = r.lock(key("block"), timeout=10, thread_local=False)
    b = r2.lock(key("block"), timeout=10, sleep=0.02, thread_local=False)
    expect("A acquire", a.acquire(blocking=False), True)
    t0 = time.monotonic()
    got = b.acquire(blocking=True, blocking_timeout=0.3)
    dt = time.monotonic() - t0
    expect("B acquire(blocking_timeout=0.3) while held", got, False)
    if not 0.25 <= dt < 3:
        raise Fail("B acquire(blocking_timeout=0.3) duration", "%.2fs" % dt, "about 0.3s")
    threading.Timer(0.2, a.release).start()
    t0 = time.monotonic()
    got = b.acquire(blocking=True, blocking_timeout=5)
    dt = time.monotonic() - t0
    expect("B acquire(blocking_timeout=5) with A releasing after 0.2s", got, True)
    if dt > 3:
        raise Fail("B blocking acquire duration", "%.2fs" % dt, "< 3s")
    b.release()


@case("redis.lock.Lock as a context manager with a timeout that expires")
def _():
    try:
        with r.lock(key("ctx"), timeout=0.2, blocking_timeout=1) as lk:
            expect("owned inside with", lk.owned(), True)
            time.sleep(0.35)
            expect("owned after the lease expired", lk.owned(), False)
    except redis.exceptions.LockNotOwnedError:
        pass  # leaving the block releases a lock that expired: redis-py says so
    else:
        raise Fail("Lock.__exit__ after expiry", "no error", "LockNotOwnedError")
    lk2 = r2.lock(key("ctx"), timeout=1)
    expect("another client acquires the expired lock", lk2.acquire(blocking=False), True)
    lk2.release()


# --- the lock family through execute_command ------------------------------------


def lockfamily():
    res = key("fam")
    t1 = r.execute_command("LOCK.ACQUIRE", res, "owner-1", 5000)
    if not (isinstance(t1, int) and t1 > 0):
        raise Fail("LOCK.ACQUIRE %s owner-1 5000" % res, t1, "a positive integer")
    expect("LOCK.ACQUIRE retry by the same owner", r.execute_command("LOCK.ACQUIRE", res, "owner-1", 5000), t1)
    expect("LOCK.ACQUIRE by another owner", r2.execute_command("LOCK.ACQUIRE", res, "owner-2", 5000), None)
    expect("lock.acquire (lower case)", r2.execute_command("lock.acquire", res, "owner-2", 5000), None)
    expect("FENCE.CHECK current token", r.execute_command("FENCE.CHECK", res, t1), 1)
    info = r.execute_command("LOCK.INFO", res)
    if not isinstance(info, list) or len(info) % 2:
        raise Fail("LOCK.INFO", info, "a flat field/value array")
    d = dict(zip(info[::2], info[1::2]))
    expect("LOCK.INFO owner", d.get(b"owner"), b"owner-1")
    expect("LOCK.INFO token", d.get(b"token"), t1)
    expect("LOCK.INFO waiters", d.get(b"waiters"), 0)
    if not (isinstance(d.get(b"ttl-ms"), int) and 0 < d[b"ttl-ms"] <= 5000):
        raise Fail("LOCK.INFO ttl-ms", d.get(b"ttl-ms"), "1..5000")
    expect("LOCK.RENEW by the holder", r.execute_command("LOCK.RENEW", res, "owner-1", 8000), t1)
    expect("LOCK.RENEW by another owner", r.execute_command("LOCK.RENEW", res, "owner-2", 8000), None)
    expect("LOCK.RELEASE by another owner", r.execute_command("LOCK.RELEASE", res, "owner-2"), 0)
    expect("LOCK.RELEASE by the holder", r.execute_command("LOCK.RELEASE", res, "owner-1"), 1)
    expect("LOCK.RELEASE again", r.execute_command("LOCK.RELEASE", res, "owner-1"), 0)
    t2 = r2.execute_command("LOCK.ACQUIRE", res, "owner-2", 5000)
    if not (isinstance(t2, int) and t2 > t1):
        raise Fail("LOCK.ACQUIRE by owner-2 after release", t2, "an integer > %d" % t1)
    expect("FENCE.CHECK stale token", r.execute_command("FENCE.CHECK", res, t1), 0)
    expect("FENCE.CHECK new token", r.execute_command("FENCE.CHECK", res, t2), 1)
    r2.execute_command("LOCK.RELEASE", res, "owner-2")
    info = r.execute_command("LOCK.INFO", res)
    d = dict(zip(info[::2], info[1::2]))
    expect("LOCK.INFO owner when free", d.get(b"owner"), None)
    expect("LOCK.INFO ttl-ms when free", d.get(b"ttl-ms"), -2)
    expect("LOCK.INFO token when free", d.get(b"token"), t2)
    info = r.execute_command("LOCK.INFO", key("never-locked"))
    d = dict(zip(info[::2], info[1::2]))
    expect("LOCK.INFO token of a never-locked resource", d.get(b"token"), 0)


case("lock family via execute_command: tokens, same-owner retry, other owner None, FENCE.CHECK, LOCK.INFO")(lockfamily)


@case("lock family: binary-safe resource and owner")
def _():
    res = key("binres").encode() + b"\x00\xff\r\n"
    owner = b"\x00own\r\ner\xff"
    t = r.execute_command("LOCK.ACQUIRE", res, owner, 5000)
    if not (isinstance(t, int) and t > 0):
        raise Fail("LOCK.ACQUIRE binary", t, "a positive integer")
    expect("LOCK.ACQUIRE binary retry", r.execute_command("LOCK.ACQUIRE", res, owner, 5000), t)
    info = r.execute_command("LOCK.INFO", res)
    d = dict(zip(info[::2], info[1::2]))
    expect("LOCK.INFO owner binary", d.get(b"owner"), owner)
    expect("LOCK.RELEASE binary", r.execute_command("LOCK.RELEASE", res, owner), 1)


@case("lock family: LOCK.ACQUIRE ... WAIT is granted when the holder releases (waiter first come first served)")
def _():
    res = key("wait")
    t1 = r.execute_command("LOCK.ACQUIRE", res, "holder", 10000)
    out = {}

    def waiter():
        c = client()
        try:
            out["t"] = c.execute_command("LOCK.ACQUIRE", res, "waiter", 5000, "WAIT", 5000)
        except Exception as e:  # noqa: BLE001
            out["t"] = e
        finally:
            c.close()

    th = threading.Thread(target=waiter)
    th.start()
    deadline = time.monotonic() + 3
    waiters = 0
    while time.monotonic() < deadline:
        info = r.execute_command("LOCK.INFO", res)
        waiters = dict(zip(info[::2], info[1::2])).get(b"waiters")
        if waiters == 1:
            break
        time.sleep(0.02)
    expect("LOCK.INFO waiters while one waits", waiters, 1)
    expect("LOCK.RELEASE by holder", r.execute_command("LOCK.RELEASE", res, "holder"), 1)
    th.join(10)
    t2 = out.get("t")
    if not (isinstance(t2, int) and t2 > t1):
        raise Fail("LOCK.ACQUIRE %s waiter 5000 WAIT 5000" % res, t2, "a token > %d" % t1)
    expect("LOCK.ACQUIRE WAIT 100 while held", r.execute_command("LOCK.ACQUIRE", res, "third", 5000, "WAIT", 100), None)
    r.execute_command("LOCK.RELEASE", res, "waiter")


@case("lock family: bad input raises ResponseError and the connection stays usable")
def _():
    res = key("bad")
    expect_error("LOCK.ACQUIRE with 2 args", lambda: r.execute_command("LOCK.ACQUIRE", res, "o"), "wrong number of arguments")
    expect_error("LOCK.ACQUIRE ttl 0", lambda: r.execute_command("LOCK.ACQUIRE", res, "o", 0), "ttl-ms")
    expect_error("LOCK.ACQUIRE ttl abc", lambda: r.execute_command("LOCK.ACQUIRE", res, "o", "abc"), "ttl-ms")
    expect_error("LOCK.ACQUIRE empty resource", lambda: r.execute_command("LOCK.ACQUIRE", "", "o", 100), "resource")
    expect_error("LOCK.ACQUIRE empty owner", lambda: r.execute_command("LOCK.ACQUIRE", res, "", 100), "owner")
    expect_error("FENCE.CHECK token never issued", lambda: r.execute_command("FENCE.CHECK", key("nev"), 999999999999), "never issued")
    expect_error("FENCE.CHECK token not an integer", lambda: r.execute_command("FENCE.CHECK", res, "x"), "token")
    expect_error("LOCK.RELEASE arity", lambda: r.execute_command("LOCK.RELEASE", res), "wrong number of arguments")
    expect("PING after errors", r.ping(), True)


# --- transactions (MULTI/EXEC/WATCH: being built) --------------------------------


@case("tx: pipeline(transaction=True) runs MULTI ... EXEC and returns every reply")
def _():
    k = key("tx1")
    p = r.pipeline(transaction=True)
    p.set(k, 1)
    p.incr(k)
    p.incrby(k, 10)
    p.get(k)
    expect("MULTI SET INCR INCRBY GET EXEC", p.execute(), [True, 2, 12, b"12"])


@case("tx: an error inside EXEC is reported per command, others still applied")
def _():
    k = key("tx2")
    r.set(k, "text")
    p = r.pipeline(transaction=True)
    p.incr(k)
    p.set(key("tx2b"), "ok")
    res = p.execute(raise_on_error=False)
    if not (isinstance(res[0], ResponseError) and res[1] is True):
        raise Fail("MULTI INCR(text) SET EXEC", res)
    expect("GET after EXEC", r.get(key("tx2b")), b"ok")


@case("tx: WATCH/MULTI/EXEC with a conflicting write from another client raises WatchError")
def _():
    k = key("tx3")
    r.set(k, 1)
    with r.pipeline() as p:
        p.watch(k)
        expect("GET while watching (immediate mode)", p.get(k), b"1")
        r2.set(k, 100)  # the conflicting write
        p.multi()
        p.set(k, 2)
        try:
            res = p.execute()
        except WatchError:
            pass
        else:
            raise Fail("WATCH k; (other client SET k); MULTI; SET k; EXEC", res, "WatchError")
    expect("GET after the aborted EXEC", r.get(k), b"100")


@case("tx: WATCH/MULTI/EXEC without a conflict commits")
def _():
    k = key("tx4")
    r.set(k, 1)
    with r.pipeline() as p:
        p.watch(k)
        v = int(p.get(k))
        p.multi()
        p.set(k, v + 1)
        expect("WATCH k; MULTI; SET; EXEC", p.execute(), [True])
    expect("GET after EXEC", r.get(k), b"2")


@case("tx: Redis.transaction() helper retries after a WatchError")
def _():
    k = key("tx5")
    r.set(k, 0)
    calls = []

    def fn(pipe):
        v = int(pipe.get(k))
        if not calls:
            r2.set(k, 10)  # conflict on the first try only
        calls.append(v)
        pipe.multi()
        pipe.set(k, v + 1)

    r.transaction(fn, k)
    expect("transaction() tries", calls, [0, 10])
    expect("GET after transaction()", r.get(k), b"11")


@case("tx: UNWATCH and DISCARD")
def _():
    k = key("tx6")
    with r.pipeline() as p:
        p.watch(k)
        p.unwatch()
        r2.set(k, "x")
        p.multi()
        p.set(k, "y")
        expect("WATCH; UNWATCH; (conflict); MULTI; SET; EXEC", p.execute(), [True])
    with r.pipeline() as p:
        p.multi()
        p.set(k, "z")
        p.reset()  # DISCARD
    expect("GET after DISCARD", r.get(k), b"y")
    expect("PING after DISCARD", r.ping(), True)


@case("tx: lock commands still work on a connection after a transaction")
def _():
    p = r.pipeline(transaction=True)
    p.set(key("tx7"), 1)
    p.execute()
    t = r.execute_command("LOCK.ACQUIRE", key("tx7lock"), "o", 1000)
    if not (isinstance(t, int) and t > 0):
        raise Fail("LOCK.ACQUIRE after EXEC", t, "a token")
    r.execute_command("LOCK.RELEASE", key("tx7lock"), "o")


# --- pub/sub ------------------------------------------------------------------------


def wait_msg(ps, want_type, call, seconds=5):
    """get_message until one of want_type arrives; the failure names what came instead."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        m = ps.get_message(timeout=0.2)
        if m is None:
            continue
        if m["type"] == want_type:
            return m
        seen.append(m)
    raise Fail(call, seen or "no message within %ds" % seconds, "a %r message" % want_type)


def pubsub_flow(c, label):
    ch = key(label + ":ch")
    pat = key(label + ":pat:*")
    pch = key(label + ":pat:x")
    ps = c.pubsub()
    try:
        ps.subscribe(ch)
        m = wait_msg(ps, "subscribe", "pubsub().subscribe(%s)" % ch)
        expect("subscribe confirmation (channel, count)", (m["channel"], m["data"]), (ch.encode(), 1))
        ps.psubscribe(pat)
        m = wait_msg(ps, "psubscribe", "pubsub().psubscribe(%s)" % pat)
        expect("psubscribe confirmation (pattern, count)", (m["channel"], m["data"]), (pat.encode(), 2))
        expect("PUBLISH from another client (receivers)", r2.publish(ch, "hello"), 1)
        m = wait_msg(ps, "message", "get_message after PUBLISH %s hello" % ch)
        expect("message (channel, data)", (m["channel"], m["data"]), (ch.encode(), b"hello"))
        expect("PUBLISH to a pattern's channel (receivers)", r2.publish(pch, "pm"), 1)
        m = wait_msg(ps, "pmessage", "get_message after PUBLISH %s pm" % pch)
        expect("pmessage (pattern, channel, data)", (m["pattern"], m["channel"], m["data"]), (pat.encode(), pch.encode(), b"pm"))
        got = r2.eval("return redis.call('PUBLISH', KEYS[1], ARGV[1])", 1, ch, "from-lua")
        if CLUSTER and got == 0:
            got = 1  # counted on the channel key's master only; delivery is checked next
        expect("EVAL redis.call('PUBLISH', ch, 'from-lua')", got, 1)
        m = wait_msg(ps, "message", "get_message after a PUBLISH from Lua")
        expect("message from Lua (channel, data)", (m["channel"], m["data"]), (ch.encode(), b"from-lua"))
        ps.ping()
        m = wait_msg(ps, "pong", "pubsub().ping() while subscribed")
        lk = c.lock(key(label + ":lock"), timeout=5)
        expect("Lock.acquire on the main client while subscribed", lk.acquire(blocking=False), True)
        expect("Lock.owned while subscribed", lk.owned(), True)
        lk.release()
        expect("Lock.locked after release", lk.locked(), False)
        ps.unsubscribe(ch)
        m = wait_msg(ps, "unsubscribe", "pubsub().unsubscribe(%s)" % ch)
        expect("unsubscribe confirmation (channel, count)", (m["channel"], m["data"]), (ch.encode(), 1))
        ps.punsubscribe(pat)
        m = wait_msg(ps, "punsubscribe", "pubsub().punsubscribe(%s)" % pat)
        expect("punsubscribe confirmation (pattern, count)", (m["channel"], m["data"]), (pat.encode(), 0))
        expect("PUBLISH after unsubscribe (receivers)", r2.publish(ch, "late"), 0)
        expect("PING on the main client afterwards", c.ping(), True)
    finally:
        ps.close()


@case("pubsub (default options, RESP3): subscribe, psubscribe, PUBLISH, Lua PUBLISH, ping, Lock meanwhile, unsubscribe")
def _():
    c = redis.Redis(host=HOST, port=PORT, socket_timeout=5, socket_connect_timeout=5)
    try:
        pubsub_flow(c, "ps3")
    finally:
        c.close()


@case("pubsub (protocol=2): subscribe, psubscribe, PUBLISH, Lua PUBLISH, ping, Lock meanwhile, unsubscribe")
def _():
    c = client()
    try:
        pubsub_flow(c, "ps2")
    finally:
        c.close()


@case("client-side caching (protocol=3, cache_config): a write through another connection invalidates the cached value")
def _():
    from redis.cache import CacheConfig

    # redis-py enables its cache only against Redis 7.4 or later (it reads
    # HELLO's version, which the proxy reports as the backend's).
    version = tuple(int(x) for x in r.info("server")["redis_version"].split(".")[:2])
    if version < (7, 4):
        print("note: client-side caching case skipped: redis-py caches only with Redis >= 7.4, the backend is %d.%d"
              % version, flush=True)
        return
    c = redis.Redis(host=HOST, port=PORT, protocol=3, cache_config=CacheConfig(),
                    socket_timeout=5, socket_connect_timeout=5, retry=Retry(NoBackoff(), 0))
    try:
        k = key("csc")
        r2.set(k, "v1")
        expect("GET (read from Redis, cached)", c.get(k), b"v1")
        cache = c.get_cache()
        expect("the cache holds the value after GET", cache.size >= 1, True)
        expect("GET (from the cache)", c.get(k), b"v1")
        r2.set(k, "v2")
        deadline = time.monotonic() + 5
        while True:
            got = c.get(k)
            if got == b"v2":
                break
            if time.monotonic() > deadline:
                raise Fail("GET after another connection's SET", got, b"v2")
            time.sleep(0.01)
    finally:
        c.close()


# --- redis.lock.Lock on --lock-keys keys: a recipe lock made safe ------------------
# run.sh starts the proxy with --lock-keys 'recipelock:*' and sets
# FENCEPROXY_RECIPE_LOCKS=1: SET NX on these keys is granted only once the replica
# has it, with a fence-store token (LOCK.TOKEN), and redis-py's release/extend/
# reacquire scripts run as the proxy's twins of them.

RECIPES = os.environ.get("FENCEPROXY_RECIPE_LOCKS") == "1"
MASTER_ADDR = os.environ.get("FENCEPROXY_MASTER_ADDR")
REPLICA_ADDR = os.environ.get("FENCEPROXY_REPLICA_ADDR")


def recipe_key(name):
    return "recipelock:py:{%s}:%s" % (RUN, name)


def recipe_case(name, needs_replica=False):
    """A case that needs the proxy run.sh starts with --lock-keys (and, if
    needs_replica, the master and replica addresses): printed as SKIP elsewhere."""
    why = None
    if not RECIPES:
        why = "needs the proxy run.sh starts with --lock-keys in front of a master and replica (FENCEPROXY_RECIPE_LOCKS=1: not with --cluster or a given FENCEPROXY_ADDR)"
    elif needs_replica and not (MASTER_ADDR and REPLICA_ADDR):
        why = "needs FENCEPROXY_MASTER_ADDR and FENCEPROXY_REPLICA_ADDR (run.sh, master + replica)"
    if why:
        def skip(fn):
            print("SKIP %s: %s: %s" % (CLIENT, name, why), flush=True)
            return fn
        return skip
    return case(name)


def direct(addr):
    host, port = addr.rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), protocol=2, socket_timeout=5)


def wait_online_replicas(m, n):
    deadline = time.monotonic() + 10
    info = None
    while time.monotonic() < deadline:
        info = m.info("replication")
        online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"]
        # For n > 0, also until they acknowledge a write: a replica re-attached by
        # a full sync is "online" before the master streams it writes (Redis 7
        # starts on its first REPLCONF ACK, up to a second later), and until
        # then every grant waits out the proxy's replica timeout.
        if info.get("connected_slaves") == n and len(online) == n and (n == 0 or acknowledged(m, n)):
            return
        time.sleep(0.05)
    raise Fail("INFO replication and WAIT on the master", info, "connected_slaves:%d, acknowledging writes" % n)


def acknowledged(m, n):
    m.set(recipe_key("replica-probe"), "1", px=5000)
    return m.execute_command("WAIT", n, 200) >= n


class detached_replica:
    """The only replica made a master of its own (REPLICAOF NO ONE) for the
    block, then attached again."""

    def __enter__(self):
        self.m, self.r = direct(MASTER_ADDR), direct(REPLICA_ADDR)
        self.r.replicaof("NO", "ONE")
        wait_online_replicas(self.m, 0)
        return self.m

    def __exit__(self, *exc):
        host, port = MASTER_ADDR.rsplit(":", 1)
        self.r.replicaof(host, int(port))
        wait_online_replicas(self.m, 1)
        self.m.close()
        self.r.close()
        return False


for proto, label in ((3, "default RESP3"), (2, "protocol=2")):
    c_lock = client(protocol=proto)
    c_other = client(protocol=proto)

    @recipe_case("redis.lock.Lock on a --lock-keys key (%s): acquire with a token, contention, extend, reacquire, release" % label)
    def _(c=c_lock, o=c_other, label=label):
        k = recipe_key("lock-" + label)
        lock = c.lock(k, timeout=10)
        expect("Lock.acquire(blocking=False)", lock.acquire(blocking=False), True)
        tok = c.execute_command("LOCK.TOKEN", k, lock.local.token)
        if not isinstance(tok, int) or tok <= 0:
            raise Fail("LOCK.TOKEN %s <token>" % k, tok, "a token")
        expect("FENCE.CHECK %s %d" % (k, tok), c.execute_command("FENCE.CHECK", k, tok), 1)
        expect("another Lock.acquire(blocking=False)", o.lock(k, timeout=10).acquire(blocking=False), False)
        expect("Lock.extend(10)", lock.extend(10), True)
        ttl = c.pttl(k)
        if not 10000 < ttl <= 20000:
            raise Fail("PTTL after extend(10)", ttl, "10000..20000")
        expect("Lock.extend(30, replace_ttl=True)", lock.extend(30, replace_ttl=True), True)
        expect("Lock.reacquire()", lock.reacquire(), True)
        expect("Lock.owned()", lock.owned(), True)
        lock.release()
        expect("Lock.locked() after release", lock.locked(), False)
        nxt = o.lock(k, timeout=10)
        expect("another Lock.acquire after the release", nxt.acquire(blocking=False), True)
        tok2 = o.execute_command("LOCK.TOKEN", k, nxt.local.token)
        if not isinstance(tok2, int) or tok2 <= tok:
            raise Fail("LOCK.TOKEN of the next holder", tok2, "above %d" % tok)
        nxt.release()

    @recipe_case("redis.lock.Lock(timeout=None) on a --lock-keys key (%s): a grant with no lease, with a token" % label)
    def _(c=c_lock, label=label):
        k = recipe_key("forever-" + label)
        lock = c.lock(k)
        expect("Lock(timeout=None).acquire(blocking=False)", lock.acquire(blocking=False), True)
        expect("PTTL", c.pttl(k), -1)
        tok = c.execute_command("LOCK.TOKEN", k, lock.local.token)
        if not isinstance(tok, int) or tok <= 0:
            raise Fail("LOCK.TOKEN %s <token>" % k, tok, "a token")
        lock.release()
        expect("EXISTS after release", c.exists(k), 0)

    @recipe_case("redis.lock.Lock with the only replica detached (%s): acquire returns False, extend raises LockNotOwnedError and the lease stands" % label,
                 needs_replica=True)
    def _(c=c_lock, label=label):
        from redis.exceptions import LockNotOwnedError
        k, held = recipe_key("noreplica-" + label), recipe_key("held-" + label)
        mine = c.lock(held, timeout=20)
        expect("Lock.acquire before the detach", mine.acquire(blocking=False), True)
        with detached_replica() as m:
            expect("Lock.acquire(blocking=False) with the replica detached", c.lock(k, timeout=10).acquire(blocking=False), False)
            expect("Lock(timeout=None).acquire(blocking=False) with the replica detached",
                   c.lock(recipe_key("noreplica-forever-" + label)).acquire(blocking=False), False)
            expect("EXISTS on the master after the refused grants", m.exists(k, recipe_key("noreplica-forever-" + label)), 0)
            try:
                got = mine.extend(60, replace_ttl=True)
                raise Fail("Lock.extend(60) with the replica detached", got, "LockNotOwnedError")
            except LockNotOwnedError:
                pass
            ttl = m.pttl(held)
            if not 0 < ttl <= 20000:
                raise Fail("PTTL of the held lock after the refused extend", ttl, "its old lease (<= 20000)")
        lock = c.lock(k, timeout=10)
        expect("Lock.acquire once the replica is back", lock.acquire(blocking=False), True)
        lock.release()
        mine.release()


# --- cleanup and totals -----------------------------------------------------------

try:
    keys = list(r.scan_iter(match="clients:py:{%s}:*" % RUN, count=1000))
    keys += list(r.scan_iter(match="recipelock:py:{%s}:*" % RUN, count=1000))
    for i in range(0, len(keys), 500):
        r.delete(*keys[i : i + 500])
except Exception as e:  # noqa: BLE001
    print("note: cleanup failed: %s" % e)

print("python covered: connect (default RESP3 and protocol=2), strings, hashes, lists, sets, zsets, "
      "binary values, scripts, pipelines, redis.lock.Lock (acquire/extend/release, contention, blocking "
      "timeout), LOCK.ACQUIRE/RENEW/RELEASE/FENCE.CHECK/LOCK.INFO, bad input, transactions (tx:*), "
      "pub/sub (RESP3 and protocol=2: subscribe, psubscribe, Lua PUBLISH, ping, unsubscribe), "
      "client-side caching (protocol=3, cache_config)")
print("python totals: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
