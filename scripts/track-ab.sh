#!/usr/bin/env bash
# track-ab.sh: two fenceproxy builds A/B on client-side caching in front of a
# Redis Cluster: scripts/trackbench's 50 RESP3 clients with CLIENT TRACKING
# on, each reading random keys (a writer changes one every 10 ms, so
# invalidation pushes flow), through each build in turn, runs alternating:
#
#   scripts/track-ab.sh OLD NEW [runs per build (3)] [seconds per run (5)]
#
# OLD and NEW are fenceproxy binaries (go build -o ...). One 3-master,
# 3-replica cluster (scripts/redis-cluster.sh) for the whole run; each run a
# fresh proxy (default flags, a fresh data dir) in front of it. Per run it
# prints GET/s, the proxy's CPU per GET (utime+stime from /proc) and INFO
# fenceproxy's goroutine_detours, then each build's medians and NEW/OLD.
# TRACKBENCH_ARGS adds flags (-track=false: the same clients without
# tracking, for scale). A benchmark, not a test.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
alone_init track-ab "OLD NEW [runs] [seconds]" "$@"
cd "$root"
runs=${3:-3} secs=${4:-5}
go build -o "$tmp/trackbench" ./scripts/trackbench
scripts/redis-cluster.sh start "$tmp/cluster" >/dev/null
# shellcheck disable=SC1091
. "$tmp/cluster/env"
trap 'alone_stop; scripts/redis-cluster.sh stop "$tmp/cluster" >/dev/null 2>&1; rm -rf "$tmp"' EXIT

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# run BIN NAME: one trackbench run through BIN; appends "NAME gets/s cpu/get" to $tmp/results.
run() {
	local bin=$1 name=$2 out t0 t1 gets rate cpu detours
	port=$(free_port)
	"$bin" --listen "127.0.0.1:$port" --backend "$SEEDS" --data-dir "$tmp/data" --metrics-listen '' >"$tmp/proxy.log" 2>&1 &
	proxy_pid=$!
	for _ in $(seq 100); do
		[[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]] && break
		sleep 0.1
	done
	# shellcheck disable=SC2086
	"$tmp/trackbench" -addr "127.0.0.1:$port" -d 1s ${TRACKBENCH_ARGS:-} >/dev/null # warm up
	t0=$(ticks "$proxy_pid")
	# shellcheck disable=SC2086
	out=$("$tmp/trackbench" -addr "127.0.0.1:$port" -d "${secs}s" ${TRACKBENCH_ARGS:-})
	t1=$(ticks "$proxy_pid")
	gets=$(sed -n 's/.* gets=\([0-9]*\).*/\1/p' <<<"$out")
	rate=$(sed -n 's/.* gets_per_s=\([0-9]*\).*/\1/p' <<<"$out")
	cpu=$(awk -v t=$((t1 - t0)) -v g="$gets" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t * 1e6 / hz / g }')
	detours=$(redis-cli -p "$port" INFO fenceproxy | tr -d '\r' | sed -n 's/^goroutine_detours://p')
	echo "$name: $rate GET/s, ${cpu} us of proxy CPU per GET, goroutine_detours $detours"
	echo "$name $rate $cpu" >>"$tmp/results"
	kill -TERM "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null || true
	proxy_pid=
	rm -rf "$tmp/data"
}

alone_alternate "$runs" "$old" "$new"
for col in 2 3; do
	o=$(alone_median old "$col") n=$(alone_median new "$col")
	what="GET/s"
	((col == 3)) && what="us of proxy CPU per GET"
	echo "median $what: old $o, new $n, new/old $(awk -v o="$o" -v n="$n" 'BEGIN { printf "%.2f", n / o }')"
done
