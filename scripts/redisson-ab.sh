#!/usr/bin/env bash
# redisson-ab.sh: two fenceproxy builds A/B on Redisson's RLock lock/unlock
# cycle (issue 23's speed item), each run against direct Redisson in the same
# run, runs alternating between the builds:
#
#   scripts/redisson-ab.sh OLD NEW [threads (16)] [runs per build (3)] [seconds per round (6)]
#
# OLD and NEW are fenceproxy binaries (go build -o ...). Each run starts a
# fresh Redis master + replica (scripts/redis-local.sh, no replica delay) and
# the build in front of it (--min-replicas 1, a fresh data dir, and
# REDISSON_AB_PROXY_ARGS), runs fenceproxy.LockBench (two rounds, through
# the proxy in single-server mode against master-slave mode straight at the
# master and replica, where Redisson sends its own WAIT) and stops what it
# started. It prints each run's ratio (proxy/direct cycles/s) and the last
# round's CPU per cycle of the proxy, of Redis (master + replica) and of the
# JVM through the proxy, then each build's medians.
#
# Why runs and medians: on a shared 2-core machine one LockBench run swings
# by 0.2 in its ratio and 1.5x in its absolute rates (docs/performance.md,
# "What the records cost a Redisson cycle"). A benchmark, not a test.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
alone_init redisson-ab "OLD NEW [threads] [runs] [seconds]" "$@" # OLD and NEW as given, from where the script was run
cd "$root"
threads=${3:-16} runs=${4:-3} secs=${5:-6}
(cd test/clients/java && mvn -q -B package -DskipTests)
cp=test/clients/java/target/classes:$(cat test/clients/java/target/classpath.txt)

# run BIN NAME: one LockBench run through BIN; appends "NAME ratio fp redis java" to $tmp/results.
run() {
	local bin=$1 name=$2 out=$tmp/run.out
	# shellcheck disable=SC2086
	alone_start "$bin" --replica-timeout 1s ${REDISSON_AB_PROXY_ARGS:-}
	FENCEPROXY_ADDR=127.0.0.1:$port FENCEPROXY_MASTER_ADDR=$MASTER_ADDR FENCEPROXY_REPLICA_ADDR=$REPLICA_ADDR \
		FENCEPROXY_BENCH_PIDS="fenceproxy:$proxy_pid,master:$(cat "$tmp/redis/master.pid"),replica:$(cat "$tmp/redis/replica.pid")" \
		java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" fenceproxy.LockBench "$threads" "$secs" 2 >"$out" 2>&1 || {
		cat "$out" >&2
		exit 1
	}
	alone_stop
	# "cpu µs/cycle proxy: java J fenceproxy F master M replica R total T", last round's.
	awk -v name="$name" '
		/ratio proxy\/direct:/ { ratio = $NF }
		/cpu µs\/cycle proxy:/ { for (i = 1; i <= NF; i++) v[$i] = $(i + 1); fp = v["fenceproxy"]; redis = v["master"] + v["replica"]; java = v["java"] }
		END { printf "%s %s %s %s %s\n", name, ratio, fp, redis, java }' "$out" | tee -a "$tmp/results" |
		awk '{ printf "%-3s ratio %s  fenceproxy %s  Redis %s  Java %s (µs a cycle)\n", $1, $2, $3, $4, $5 }'
}

echo "redisson-ab: $threads threads, $runs runs per build, 2 x ${secs} s rounds each; OLD=$old NEW=$new"
alone_alternate "$runs" "$old" "$new"
for name in old new; do
	printf 'median %s: ratio %s  fenceproxy %s  Redis %s  Java %s (µs a cycle)\n' "$name" \
		"$(alone_median $name 2)" "$(alone_median $name 3)" "$(alone_median $name 4)" "$(alone_median $name 5)"
done
