"""lock_probe.py host:port: redis-py Locks by name at one address, for the
failover suite (test/clients/failover). It connects, prints
`ready redis-py <version>`, then for each line read on stdin (a lock key)
calls Lock(key, timeout=60).acquire(blocking=False) once and prints
`granted`, `refused` or `error <message>`; it exits at the end of its input.
One process is one client (each Lock has its own token)."""
import sys

import redis


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: lock_probe.py host:port (lock keys on stdin)")
    host, _, port = sys.argv[1].rpartition(":")
    r = redis.Redis(host=host, port=int(port), socket_timeout=30)
    try:
        r.ping()
    except redis.RedisError as e:
        print("error connecting: %s" % e, flush=True)
        sys.exit(1)
    print("ready redis-py %s" % redis.__version__, flush=True)
    for line in sys.stdin:
        key = line.strip()
        if not key:
            continue
        try:
            got = r.lock(key, timeout=60).acquire(blocking=False)
            print("granted" if got else "refused", flush=True)
        except redis.RedisError as e:
            print("error %s: %s" % (type(e).__name__, str(e).replace("\n", " ")), flush=True)


if __name__ == "__main__":
    main()
