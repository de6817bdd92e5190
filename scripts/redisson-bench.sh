#!/usr/bin/env bash
# redisson-bench.sh: Redisson RLock lock/unlock cycles/s through fenceproxy against
# Redisson straight at the same master + replica in master-slave mode (where it sends
# its own WAIT after every lock script), side by side in one run (issue #23's speed
# item; a benchmark, not a test).
#
#   scripts/redisson-bench.sh [threads (32)] [seconds per round (5)] [rounds (2)]
#
# Builds fenceproxy and the Java suite (test/clients/java, Maven), starts in a temp
# dir a Redis master + replica (scripts/redis-local.sh) and fenceproxy in front of it
# (--min-replicas 1), runs fenceproxy.LockBench, prints its rounds and
# "ratio proxy/direct: X", and stops exactly what it started.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/redisson-bench.XXXXXX")
proxy_pid=
cleanup() {
	[[ -n $proxy_pid ]] && kill -TERM "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null
	[[ -d $tmp/redis ]] && scripts/redis-local.sh stop "$tmp/redis" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/fenceproxy" ./cmd/fenceproxy
(cd test/clients/java && mvn -q -B package -DskipTests)
scripts/redis-local.sh start "$tmp/redis" >/dev/null
# shellcheck disable=SC1091
. "$tmp/redis/env"
port=$((30000 + RANDOM % 10000))
"$tmp/fenceproxy" --listen "127.0.0.1:$port" --backend "$MASTER_ADDR" --data-dir "$tmp/data" \
	--min-replicas 1 --replica-timeout 1s --metrics-listen '' >"$tmp/proxy.log" 2>&1 &
proxy_pid=$!
for _ in $(seq 100); do
	[[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]] && break
	sleep 0.1
done
cp=test/clients/java/target/classes:$(cat test/clients/java/target/classpath.txt)
FENCEPROXY_ADDR=127.0.0.1:$port FENCEPROXY_MASTER_ADDR=$MASTER_ADDR FENCEPROXY_REPLICA_ADDR=$REPLICA_ADDR \
	java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" fenceproxy.LockBench "$@"
