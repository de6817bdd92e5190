'use strict';
// ioredis compatibility suite for fenceproxy.
//
// Run by test/clients/run.sh with FENCEPROXY_ADDR=host:port. Each case prints
// `PASS node: NAME` or `FAIL node ioredis X: NAME: CALL -> REPLY`; the last line is
// `node totals: N passed, M failed`. Cases named `tx: ...` need MULTI/EXEC/WATCH.
// Cases named `pubsub: ...` subscribe (the proxy tunnels that connection to Redis).

const crypto = require('crypto');
const Redis = require('ioredis');
const { ReplyError } = require('ioredis');
const assert = require('assert');

const [HOST, PORT] = (process.env.FENCEPROXY_ADDR || '127.0.0.1:7379').split(/:(?=\d+$)/);
const RUN = crypto.randomBytes(4).toString('hex');
const CLIENT = `node ioredis ${require('ioredis/package.json').version}`;
// One hash tag per run: a case's keys share a slot, so multi-key commands and
// transactions are valid in front of a Redis Cluster too.
const key = (n) => `clients:node:{${RUN}}:${n}`;
// In front of a Redis Cluster (run.sh --cluster) PUBLISH counts only the
// subscribers of the node it runs on; delivery is checked separately.
const CLUSTER = process.env.FENCEPROXY_CLUSTER === '1';
const published = (n) => (CLUSTER && n === 0 ? 1 : n);

function client() {
  return new Redis({
    host: HOST,
    port: Number(PORT),
    maxRetriesPerRequest: 1,
    connectTimeout: 5000,
    commandTimeout: 5000,
    lazyConnect: false,
    retryStrategy: () => null, // a dropped connection fails the case, not hangs it
  });
}

class Fail extends Error {
  constructor(call, reply, want) {
    super(`${call} -> ${fmt(reply)}` + (want !== undefined ? ` (want ${fmt(want)})` : ''));
  }
}
function fmt(v) {
  if (v instanceof Error) return `${v.name}(${v.message})`;
  if (Buffer.isBuffer(v)) return `Buffer<${v.toString('hex').slice(0, 40)}>`;
  try { return JSON.stringify(v); } catch { return String(v); }
}
function expect(call, got, want) {
  try { assert.deepStrictEqual(got, want); } catch { throw new Fail(call, got, want); }
}
async function expectError(call, promise, contains) {
  let got;
  try { got = await promise; } catch (e) {
    if (!(e instanceof ReplyError) || !e.message.includes(contains)) {
      throw new Fail(call, e, `ReplyError containing '${contains}'`);
    }
    return e;
  }
  throw new Fail(call, got, `ReplyError containing '${contains}'`);
}

const cases = [];
const test = (name, fn) => cases.push({ name, fn });
let r, r2;

test('connect with default options (ioredis sends RESP2; PING, CLIENT SETNAME via connectionName)', async () => {
  const c = new Redis({ host: HOST, port: Number(PORT), connectionName: 'fp-node', retryStrategy: () => null });
  try {
    expect('PING', await c.ping(), 'PONG');
    expect('CLIENT GETNAME', await c.client('GETNAME'), 'fp-node');
  } finally { c.disconnect(); }
});

test('strings: SET/GET/INCR/MSET/MGET/APPEND/SET EX/TTL/DEL/EXISTS', async () => {
  expect('SET', await r.set(key('s'), 'hello'), 'OK');
  expect('GET', await r.get(key('s')), 'hello');
  expect('APPEND', await r.append(key('s'), ' world'), 11);
  expect('SET NX on existing', await r.set(key('s'), 'x', 'NX'), null);
  expect('INCR', await r.incr(key('n')), 1);
  expect('INCRBY', await r.incrby(key('n'), 41), 42);
  expect('MSET', await r.mset(key('a'), '1', key('b'), '2'), 'OK');
  expect('MGET', await r.mget(key('a'), key('b'), key('missing')), ['1', '2', null]);
  expect('SET EX', await r.set(key('e'), 'v', 'EX', 100), 'OK');
  const ttl = await r.ttl(key('e'));
  if (!(ttl > 0 && ttl <= 100)) throw new Fail('TTL', ttl, '1..100');
  expect('EXISTS', await r.exists(key('a'), key('b'), key('missing')), 2);
  expect('DEL', await r.del(key('a'), key('b')), 2);
  await expectError('INCR on a non-integer', r.incr(key('s')), 'not an integer');
});

test('hashes, lists, sets, zsets', async () => {
  expect('HSET', await r.hset(key('h'), { a: '1', b: '2' }), 2);
  expect('HGETALL', await r.hgetall(key('h')), { a: '1', b: '2' });
  expect('HINCRBY', await r.hincrby(key('h'), 'a', 9), 10);
  expect('RPUSH', await r.rpush(key('l'), 'a', 'b', 'c'), 3);
  expect('LRANGE', await r.lrange(key('l'), 0, -1), ['a', 'b', 'c']);
  expect('LPOP', await r.lpop(key('l')), 'a');
  expect('SADD', await r.sadd(key('set'), 'a', 'b', 'a'), 2);
  expect('SMEMBERS', (await r.smembers(key('set'))).sort(), ['a', 'b']);
  expect('ZADD', await r.zadd(key('z'), 1, 'a', 2.5, 'b'), 2);
  expect('ZRANGE WITHSCORES', await r.zrange(key('z'), 0, -1, 'WITHSCORES'), ['a', '1', 'b', '2.5']);
  expect('ZSCORE', await r.zscore(key('z'), 'b'), '2.5');
  await expectError('GET on a hash', r.get(key('h')), 'WRONGTYPE');
});

test('binary values: every byte value via Buffer, getBuffer, a 1 MiB value', async () => {
  const all = Buffer.alloc(1024);
  for (let i = 0; i < all.length; i++) all[i] = i % 256;
  const k = Buffer.concat([Buffer.from(key('bin')), Buffer.from([0, 255, 13, 10])]);
  expect('SET binary', await r.set(k, all), 'OK');
  expect('GET binary (getBuffer) equal', (await r.getBuffer(k)).equals(all), true);
  const big = crypto.randomBytes(1 << 20);
  await r.set(key('big'), big);
  expect('GET 1 MiB equal', (await r.getBuffer(key('big'))).equals(big), true);
});

test('scripts: EVAL, defineCommand (EVALSHA, NOSCRIPT -> EVAL fallback), SCRIPT LOAD', async () => {
  expect('EVAL', await r.eval('return {KEYS[1], ARGV[1], 7}', 1, key('ev'), 'a'), [key('ev'), 'a', 7]);
  r.defineCommand('fpIncr', { numberOfKeys: 1, lua: `return redis.call('INCRBY', KEYS[1], ARGV[1]) -- ${RUN}` });
  expect('defined command (EVALSHA then EVAL)', await r.fpIncr(key('scr'), 5), 5);
  expect('defined command again', await r.fpIncr(key('scr'), 5), 10);
  const sha = await r.script('LOAD', "return 'x'");
  expect('EVALSHA', await r.evalsha(sha, 0), 'x');
  await expectError('EVALSHA unknown', r.evalsha('0'.repeat(40), 0), 'NOSCRIPT');
});

test('pipeline: 200 commands, replies in order, an error kept in place', async () => {
  let p = r.pipeline();
  const want = [];
  for (let i = 0; i < 100; i++) {
    p.set(key(`p${i}`), String(i)); p.get(key(`p${i}`));
    want.push([null, 'OK'], [null, String(i)]);
  }
  expect('pipeline SET/GET x100', await p.exec(), want);
  p = r.pipeline().set(key('pe'), 'text').incr(key('pe')).get(key('pe'));
  const res = await p.exec();
  if (!(res[0][1] === 'OK' && res[1][0] instanceof ReplyError && res[2][1] === 'text')) {
    throw new Fail('pipeline SET, INCR (error), GET', res);
  }
});

test('pipeline with lock commands via call()', async () => {
  const res = key('plock');
  const out = await r.pipeline()
    .set(key('pl'), 'a')
    .call('LOCK.ACQUIRE', res, 'owner-a', 5000)
    .get(key('pl'))
    .call('LOCK.ACQUIRE', res, 'owner-b', 5000)
    .call('LOCK.RELEASE', res, 'owner-a')
    .exec();
  const v = out.map(([e, x]) => (e ? e : x));
  if (!(v[0] === 'OK' && Number.isInteger(v[1]) && v[1] > 0 && v[2] === 'a' && v[3] === null && v[4] === 1)) {
    throw new Fail('pipeline SET, LOCK.ACQUIRE a, GET, LOCK.ACQUIRE b, LOCK.RELEASE a', v);
  }
});

test("lock family via call('LOCK.ACQUIRE', ...): tokens, retry, other owner null, FENCE.CHECK, LOCK.INFO", async () => {
  const res = key('fam');
  const t1 = await r.call('LOCK.ACQUIRE', res, 'owner-1', 5000);
  if (!(Number.isInteger(t1) && t1 > 0)) throw new Fail(`LOCK.ACQUIRE ${res} owner-1 5000`, t1, 'a positive integer');
  expect('LOCK.ACQUIRE retry by the same owner', await r.call('LOCK.ACQUIRE', res, 'owner-1', 5000), t1);
  expect('LOCK.ACQUIRE by another owner', await r2.call('LOCK.ACQUIRE', res, 'owner-2', 5000), null);
  expect('FENCE.CHECK current', await r.call('FENCE.CHECK', res, t1), 1);
  const info = await r.call('LOCK.INFO', res);
  const d = {};
  for (let i = 0; i < info.length; i += 2) d[info[i]] = info[i + 1];
  expect('LOCK.INFO owner/token/waiters', [d.owner, d.token, d.waiters], ['owner-1', t1, 0]);
  if (!(d['ttl-ms'] > 0 && d['ttl-ms'] <= 5000)) throw new Fail('LOCK.INFO ttl-ms', d['ttl-ms'], '1..5000');
  expect('LOCK.RENEW holder', await r.call('LOCK.RENEW', res, 'owner-1', 5000), t1);
  expect('LOCK.RENEW other', await r.call('LOCK.RENEW', res, 'owner-2', 5000), null);
  expect('LOCK.RELEASE other', await r.call('LOCK.RELEASE', res, 'owner-2'), 0);
  expect('LOCK.RELEASE holder', await r.call('LOCK.RELEASE', res, 'owner-1'), 1);
  const t2 = await r2.call('LOCK.ACQUIRE', res, 'owner-2', 5000);
  if (!(Number.isInteger(t2) && t2 > t1)) throw new Fail('LOCK.ACQUIRE owner-2 after release', t2, `> ${t1}`);
  expect('FENCE.CHECK stale', await r.call('FENCE.CHECK', res, t1), 0);
  expect('FENCE.CHECK new', await r.call('FENCE.CHECK', res, t2), 1);
  expect('LOCK.RELEASE owner-2', await r2.call('LOCK.RELEASE', res, 'owner-2'), 1);
  const info2 = await r.call('LOCK.INFO', res);
  expect('LOCK.INFO when free', [info2[0], info2[1], info2[4], info2[5]], ['owner', null, 'ttl-ms', -2]);
});

test('lock family: LOCK.ACQUIRE WAIT is granted when the holder releases', async () => {
  const res = key('wait');
  const t1 = await r.call('LOCK.ACQUIRE', res, 'holder', 10000);
  const c = client();
  try {
    const pending = c.call('LOCK.ACQUIRE', res, 'waiter', 5000, 'WAIT', 5000);
    await new Promise((ok) => setTimeout(ok, 150));
    expect('LOCK.RELEASE holder', await r.call('LOCK.RELEASE', res, 'holder'), 1);
    const t2 = await pending;
    if (!(Number.isInteger(t2) && t2 > t1)) throw new Fail('LOCK.ACQUIRE ... WAIT 5000', t2, `> ${t1}`);
    expect('LOCK.ACQUIRE WAIT 100 while held', await r.call('LOCK.ACQUIRE', res, 'third', 5000, 'WAIT', 100), null);
    await c.call('LOCK.RELEASE', res, 'waiter');
  } finally { c.disconnect(); }
});

test('lock family: bad input is a ReplyError and the connection stays usable', async () => {
  const res = key('bad');
  await expectError('LOCK.ACQUIRE 2 args', r.call('LOCK.ACQUIRE', res, 'o'), 'wrong number of arguments');
  await expectError('LOCK.ACQUIRE ttl 0', r.call('LOCK.ACQUIRE', res, 'o', 0), 'ttl-ms');
  await expectError('LOCK.ACQUIRE empty owner', r.call('LOCK.ACQUIRE', res, '', 10), 'owner');
  await expectError('FENCE.CHECK never issued', r.call('FENCE.CHECK', key('nev'), 999999999999), 'ERR');
  expect('PING after errors', await r.ping(), 'PONG');
});

// Each tx case has its own connection, so a transaction left open cannot stall the others.
async function withClient(fn) {
  const c = client();
  try { return await fn(c); } finally { c.disconnect(); }
}

test('tx: multi().exec() returns every reply', () => withClient(async (c) => {
  const k = key('tx1');
  const res = await c.multi().set(k, '1').incr(k).incrby(k, 10).get(k).exec();
  expect('MULTI SET INCR INCRBY GET EXEC', res, [[null, 'OK'], [null, 2], [null, 12], [null, '12']]);
}));

test('tx: an error inside EXEC is per command', () => withClient(async (c) => {
  const k = key('tx2');
  await c.set(k, 'text');
  const res = await c.multi().incr(k).set(key('tx2b'), 'ok').exec();
  if (!(res && res[0][0] instanceof ReplyError && res[1][1] === 'OK')) throw new Fail('MULTI INCR(text) SET EXEC', res);
}));

test('tx: WATCH, conflicting write from another client, MULTI/EXEC returns null', async () => {
  const k = key('tx3');
  const c = client(); // a dedicated connection: WATCH state is per connection
  try {
    await c.set(k, '1');
    expect('WATCH', await c.watch(k), 'OK');
    await r2.set(k, '100');
    const res = await c.multi().set(k, '2').exec();
    expect('WATCH k; (other SET k); MULTI; SET k; EXEC', res, null);
    expect('GET after aborted EXEC', await c.get(k), '100');
    expect('WATCH again', await c.watch(k), 'OK');
    expect('MULTI/EXEC without conflict', await c.multi().set(k, '3').exec(), [[null, 'OK']]);
  } finally { c.disconnect(); }
});

test('tx: MULTI ... DISCARD', async () => {
  const k = key('tx4');
  const c = client();
  try {
    await c.set(k, 'a');
    expect('MULTI', await c.multi({ pipeline: false }), 'OK');
    expect('SET inside MULTI', await c.set(k, 'b'), 'QUEUED');
    expect('DISCARD', await c.discard(), 'OK');
    expect('GET after DISCARD', await c.get(k), 'a');
  } finally { c.disconnect(); }
});

// Pub/sub: a dedicated subscriber connection; events are awaited with a bound.
function nextEvent(emitter, event, call, ms = 5000) {
  return new Promise((ok, no) => {
    const timer = setTimeout(() => { emitter.removeListener(event, on); no(new Fail(call, `no '${event}' event within ${ms} ms`)); }, ms);
    function on(...args) { clearTimeout(timer); emitter.removeListener(event, on); ok(args); }
    emitter.on(event, on);
  });
}

test("pubsub: subscribe/psubscribe on a dedicated connection, 'message'/'pmessage' from PUBLISH and Lua, unsubscribe", async () => {
  const ch = key('ps:ch'), pat = key('ps:pat:*'), pch = key('ps:pat:x');
  const sub = client();
  try {
    expect(`SUBSCRIBE ${ch}`, await sub.subscribe(ch), 1);
    expect(`PSUBSCRIBE ${pat}`, await sub.psubscribe(pat), 2);
    let ev = nextEvent(sub, 'message', `'message' after PUBLISH ${ch} hello`);
    expect('PUBLISH from another connection (receivers)', await r2.publish(ch, 'hello'), 1);
    expect("'message' (channel, message)", await ev, [ch, 'hello']);
    ev = nextEvent(sub, 'pmessage', `'pmessage' after PUBLISH ${pch} pm`);
    expect('PUBLISH to a pattern channel (receivers)', await r2.publish(pch, 'pm'), 1);
    expect("'pmessage' (pattern, channel, message)", await ev, [pat, pch, 'pm']);
    ev = nextEvent(sub, 'message', "'message' after a PUBLISH from Lua");
    expect("EVAL redis.call('PUBLISH', ch, 'from-lua')",
      published(await r.eval("return redis.call('PUBLISH', KEYS[1], ARGV[1])", 1, ch, 'from-lua')), 1);
    expect("'message' from Lua (channel, message)", await ev, [ch, 'from-lua']);
    ev = nextEvent(sub, 'pmessage', "'pmessage' after a PUBLISH from Lua");
    expect("EVAL redis.call('PUBLISH', pch, 'lua-pm')",
      published(await r.eval("return redis.call('PUBLISH', KEYS[1], ARGV[1])", 1, pch, 'lua-pm')), 1);
    expect("'pmessage' from Lua (pattern, channel, message)", await ev, [pat, pch, 'lua-pm']);
    const t = await r.call('LOCK.ACQUIRE', key('ps:lock'), 'o', 5000);
    if (!(Number.isInteger(t) && t > 0)) throw new Fail('LOCK.ACQUIRE on r while another connection is subscribed', t, 'a token');
    expect('LOCK.RELEASE', await r.call('LOCK.RELEASE', key('ps:lock'), 'o'), 1);
    expect(`UNSUBSCRIBE ${ch}`, await sub.unsubscribe(ch), 1);
    expect(`PUNSUBSCRIBE ${pat}`, await sub.punsubscribe(pat), 0);
    expect('PUBLISH after unsubscribe (receivers)', await r2.publish(ch, 'late'), 0);
    expect('PING on the connection after leaving subscriber mode', await sub.ping(), 'PONG');
  } finally { sub.disconnect(); }
});

// Clients' own lock recipes: node-redlock 5.0.0-beta.2 (multi-key Lua scripts, one key per
// call here) and 4.2.0 (npm latest), unchanged. Their scripts are recognised by SHA-1: a
// grant is replied only once the replica has it and has a fence-store token (LOCK.TOKEN);
// with the only replica detached nothing is granted. They need the proxy run.sh starts
// (FENCEPROXY_RECIPE_LOCKS=1: a standalone master, where recipes run); skipped elsewhere.
const RECIPES = process.env.FENCEPROXY_RECIPE_LOCKS === '1';
const MASTER_ADDR = process.env.FENCEPROXY_MASTER_ADDR, REPLICA_ADDR = process.env.FENCEPROXY_REPLICA_ADDR;
const recipeKey = (n) => `recipelock:node:{${RUN}}:${n}`;
const skipped = [];
const recipeTest = (name, fn, needsReplica = false) => {
  if (!RECIPES) skipped.push(`${name}: needs the proxy run.sh starts with --lock-keys in front of a master and replica (FENCEPROXY_RECIPE_LOCKS=1: not with --cluster or a given FENCEPROXY_ADDR)`);
  else if (needsReplica && !(MASTER_ADDR && REPLICA_ADDR)) skipped.push(`${name}: needs FENCEPROXY_MASTER_ADDR and FENCEPROXY_REPLICA_ADDR`);
  else test(name, fn);
};
function direct(addr) {
  const [host, port] = addr.split(/:(?=\d+$)/);
  return new Redis({ host, port: Number(port), maxRetriesPerRequest: 1, retryStrategy: () => null });
}
async function waitOnlineReplicas(m, n) {
  const end = Date.now() + 10000;
  let info = '';
  while (Date.now() < end) {
    info = await m.info('replication');
    // For n > 0, also until they acknowledge a write: a replica re-attached by a full
    // sync is "online" before the master streams it writes (Redis 7 starts on its first
    // REPLCONF ACK, up to a second later), and until then every grant waits out the
    // proxy's replica timeout.
    if (info.includes(`connected_slaves:${n}\r`) && (info.match(/state=online/g) || []).length === n &&
      (n === 0 || await acknowledged(m, n))) return;
    await new Promise((ok) => setTimeout(ok, 50));
  }
  throw new Fail('INFO replication and WAIT on the master', info, `connected_slaves:${n}, acknowledging writes`);
}
async function acknowledged(m, n) {
  await m.set(recipeKey('replica-probe'), '1', 'PX', 5000);
  return (await m.call('WAIT', n, 200)) >= n;
}
// withDetachedReplica runs fn(master) with the only replica made a master of its own.
async function withDetachedReplica(fn) {
  const m = direct(MASTER_ADDR), rep = direct(REPLICA_ADDR);
  try {
    await rep.replicaof('NO', 'ONE');
    await waitOnlineReplicas(m, 0);
    try { return await fn(m); } finally {
      const [host, port] = MASTER_ADDR.split(/:(?=\d+$)/);
      await rep.replicaof(host, Number(port));
      await waitOnlineReplicas(m, 1);
    }
  } finally { m.disconnect(); rep.disconnect(); }
}
async function mustToken(c, k, holder, above = 0) {
  const t = await c.call('LOCK.TOKEN', k, holder);
  if (!(Number.isInteger(t) && t > above)) throw new Fail(`LOCK.TOKEN ${k} <value>`, t, `a token above ${above}`);
  return t;
}
const Redlock5 = require('redlock').default;
const Redlock4 = require('redlock4');
const REDLOCK5 = `redlock ${require('./package.json').dependencies.redlock}`; // its exports hide its package.json
const REDLOCK4 = `redlock ${require('redlock4/package.json').version}`;

recipeTest(`${REDLOCK5}: acquire with a token, another's acquire fails, extend, release`, async () => {
  const k = recipeKey('redlock5');
  const rl = new Redlock5([r], { retryCount: 0 });
  const lock = await rl.acquire([k], 10000);
  const t = await mustToken(r, k, lock.value);
  let err = null;
  try { await rl.acquire([k], 10000); } catch (e) { err = e; }
  if (!err) throw new Fail("another acquire while held", 'granted', 'ExecutionError');
  const ext = await lock.extend(30000);
  const pttl = await r.pttl(k);
  if (!(pttl > 10000 && pttl <= 30000)) throw new Fail('PTTL after extend(30000)', pttl, '10000..30000');
  await ext.release();
  expect('EXISTS after release', await r.exists(k), 0);
  const next = await rl.acquire([k], 10000);
  await mustToken(r, k, next.value, t);
  await next.release();
});

recipeTest(`${REDLOCK5}: with the only replica detached, acquire throws and nothing is left`, async () => {
  const k = recipeKey('redlock5-noreplica');
  const rl = new Redlock5([r], { retryCount: 0 });
  await withDetachedReplica(async (m) => {
    let err = null;
    try { await rl.acquire([k], 10000); } catch (e) { err = e; }
    if (!err) throw new Fail('acquire with the replica detached', 'granted', 'ExecutionError');
    expect('EXISTS on the master after the refused grant', await m.exists(k), 0);
  });
  const lock = await rl.acquire([k], 10000);
  await lock.release();
}, true);

recipeTest(`${REDLOCK5}: a lock over three resources: all granted with tokens, held against a lock over one of them, extended, released`, async () => {
  const ks = [recipeKey('multi:a'), recipeKey('multi:b'), recipeKey('multi:c')];
  const rl = new Redlock5([r], { retryCount: 0 });
  const lock = await rl.acquire(ks, 10000);
  for (const k of ks) await mustToken(r, k, lock.value);
  let err = null;
  try { await rl.acquire([ks[1]], 10000); } catch (e) { err = e; }
  if (!err) throw new Fail('acquire of one of the held resources', 'granted', 'ExecutionError');
  const ext = await lock.extend(30000);
  for (const k of ks) {
    const pttl = await r.pttl(k);
    if (!(pttl > 10000 && pttl <= 30000)) throw new Fail(`PTTL ${k} after extend(30000)`, pttl, '10000..30000');
  }
  await ext.release();
  expect('EXISTS after release', await r.exists(...ks), 0);
});

recipeTest(`${REDLOCK5}: a lock over three resources with the only replica detached: acquire throws, none is left`, async () => {
  const ks = [recipeKey('multi-nr:a'), recipeKey('multi-nr:b'), recipeKey('multi-nr:c')];
  const rl = new Redlock5([r], { retryCount: 0 });
  await withDetachedReplica(async (m) => {
    let err = null;
    try { await rl.acquire(ks, 10000); } catch (e) { err = e; }
    if (!err) throw new Fail('acquire with the replica detached', 'granted', 'ExecutionError');
    expect('EXISTS on the master after the refused grant', await m.exists(...ks), 0);
  });
}, true);

recipeTest(`${REDLOCK4}: lock with a token, another's lock fails, extend, unlock`, async () => {
  const k = recipeKey('redlock4');
  const rl = new Redlock4([r], { retryCount: 0 });
  const lock = await rl.lock(k, 10000);
  await mustToken(r, k, lock.value);
  let err = null;
  try { await rl.lock(k, 10000); } catch (e) { err = e; }
  if (!err) throw new Fail('another lock while held', 'granted', 'LockError');
  const ext = await lock.extend(30000);
  const pttl = await r.pttl(k);
  if (!(pttl > 10000 && pttl <= 30000)) throw new Fail('PTTL after extend(30000)', pttl, '10000..30000');
  await ext.unlock();
  expect('EXISTS after unlock', await r.exists(k), 0);
});

recipeTest(`${REDLOCK4}: with the only replica detached, lock fails and nothing is left`, async () => {
  const k = recipeKey('redlock4-noreplica');
  const rl = new Redlock4([r], { retryCount: 0 });
  await withDetachedReplica(async (m) => {
    let err = null;
    try { await rl.lock(k, 10000); } catch (e) { err = e; }
    if (!err) throw new Fail('lock with the replica detached', 'granted', 'LockError');
    expect('EXISTS on the master after the refused grant', await m.exists(k), 0);
  });
}, true);

process.on('unhandledRejection', (e) => console.log(`note: unhandled rejection: ${fmt(e)}`));

(async () => {
  let passed = 0, failed = 0;
  r = client(); r2 = client();
  for (const { name, fn } of cases) {
    const t0 = Date.now();
    try {
      await Promise.race([fn(), new Promise((_, no) => setTimeout(() => no(new Error('case timed out after 20s')), 20000).unref())]);
      passed++;
      console.log(`PASS node: ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${CLIENT}: ${name}: ${e instanceof Fail ? e.message : 'raised ' + fmt(e)}`);
    }
  }
  for (const why of skipped) console.log(`SKIP ${CLIENT}: ${why}`);
  try {
    const keys = await r.keys(`clients:node:{${RUN}}:*`);
    keys.push(...await r.keys(`recipelock:node:{${RUN}}:*`));
    for (let i = 0; i < keys.length; i += 500) await r.del(...keys.slice(i, i + 500));
  } catch (e) { console.log(`note: cleanup failed: ${e.message}`); }
  r.disconnect(); r2.disconnect();
  console.log('node covered: connect, strings, hashes, lists, sets, zsets, binary Buffers, scripts (defineCommand), ' +
    'pipelines, lock family via call(), LOCK.ACQUIRE WAIT, bad input, transactions (tx:*), ' +
    'pub/sub (subscribe, psubscribe, message/pmessage from PUBLISH and Lua, unsubscribe)');
  console.log(`node totals: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
})();
