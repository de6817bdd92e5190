'use strict';
// lock_probe.js host:port: node-redlock 5 locks by name at one address, for the
// failover suite (test/clients/failover). It connects (ioredis), prints
// `ready redlock <version>`, then for each line read on stdin (a lock key) calls
// acquire([key], 60000) once with retryCount 0 and prints `granted`, `refused`
// (redlock's ExecutionError: the lock was not obtained) or `error <message>`; it
// exits at the end of its input. One process is one client.
const readline = require('readline');
const Redis = require('ioredis');
const Redlock = require('redlock').default;
const { ExecutionError } = require('redlock');

async function main() {
  if (process.argv.length !== 3) {
    console.error('usage: lock_probe.js host:port (lock keys on stdin)');
    process.exit(2);
  }
  const [host, port] = process.argv[2].split(/:(?=\d+$)/);
  const r = new Redis({ host, port: Number(port), maxRetriesPerRequest: 1, retryStrategy: () => null, lazyConnect: true });
  r.on('error', () => {}); // reported by the calls that fail
  try {
    await r.connect();
    await r.ping();
  } catch (e) {
    console.log(`error connecting: ${e.message}`);
    process.exit(1);
  }
  const rl = new Redlock([r], { retryCount: 0 });
  rl.on('error', () => {}); // a refusal is reported below; redlock also emits it
  console.log(`ready redlock ${require('./package.json').dependencies.redlock}`);
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const key = line.trim();
    if (!key) continue;
    try {
      await rl.acquire([key], 60000);
      console.log('granted');
    } catch (e) {
      console.log(e instanceof ExecutionError ? 'refused' : `error ${String(e.message).replace(/\n/g, ' ')}`);
    }
  }
  r.disconnect();
}
main();
