#!/usr/bin/env bash
# lock-ab.sh: two fenceproxy builds side by side on one lock workload, rounds
# alternating which goes first, each build's lock rate and CPU per lock:
#
#   scripts/lock-ab.sh OLD NEW [setnx|hot|distinct|fenced|grown] [ROUNDS (3)]
#
#   setnx  50 clients of scripts/lockbench -system redis (SET key owner NX PX
#          ttl, then a compare-and-delete script, which fenceproxy forwards):
#          the grants are the value locks of --lock-keys 'ab*'
#   hot    50 clients of scripts/lockbench -system fenceproxy -hot: one
#          resource, LOCK.ACQUIRE ... WAIT, each release handing the lock on
#   distinct 50 clients of scripts/lockbench -system fenceproxy: a resource
#          each, LOCK.ACQUIRE then LOCK.RELEASE (issue 26's lock cycle)
#   fenced distinct with 4 FENCE.CHECKs of the token between acquire and
#          release (lockbench -checks 4), as a resource that checks the token
#          before each of four writes: the fencing half of a lock's use
#   grown  distinct, after NEW's fence store was given LOCK_AB_GROW (1300000)
#          more resources (scripts/lockload: pipelined LOCK.ACQUIRE, 2 s
#          leases) before the first round; OLD's stays fresh. Give one build
#          twice (scripts/lock-ab.sh BIN BIN grown) for what a grown store
#          costs a lock cycle against a fresh one. The rounds' names and
#          the load's spread over the key space (-spread), among each
#          other: names that sort apart from the store's would let its
#          compactions skip what the load left.
#
# With LOCK_AB_TWEM=1 each round also gives twemproxy's CPU per plain GET
# (nutcracker in front of the same master, redis-benchmark -c 50 -P 1) and
# each build's CPU per lock over two of those: issue 26's target is 2.5x.
# OLD may be scripts/leanlock, a floor for the lock cycle (its doc).
#
# With LOCK_AB_CLUSTER=1 the backend is a Redis Cluster of 3 masters + 3
# replicas (scripts/redis-cluster.sh) instead. Each line also gives the
# fence store's synced commits per lock (from each build's /metrics): how
# many grants share an fsync.
#
# Starts, in a temp dir, a Redis master + replica (scripts/redis-local.sh) and
# both builds in front of it (--min-replicas 1, each with its own fence store
# and --key-prefix), all on loopback; CPU is each proxy's from /proc. Stops
# exactly what it started. (A benchmark, not a test: the machine's noise
# shows in the rounds.)
set -euo pipefail
old=${1:?usage: $0 OLD NEW [setnx|hot|distinct|fenced|grown] [ROUNDS]} new=${2:?usage: $0 OLD NEW [setnx|hot|distinct|fenced|grown] [ROUNDS]}
mode=${3:-setnx} rounds=${4:-3}
case $mode in
setnx) bench=(-system redis) ;;
hot) bench=(-system fenceproxy -hot) ;;
distinct) bench=(-system fenceproxy) ;;
fenced) bench=(-system fenceproxy -checks 4) ;;
grown) bench=(-system fenceproxy -spread) ;;
*)
	echo "lock-ab: mode must be setnx, hot, distinct, fenced or grown, not $mode" >&2
	exit 2
	;;
esac
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lock-ab.XXXXXX")
pids=()
cleanup() {
	# Each step whatever the one before returned: set -e holds here too, and
	# a process that exits non-zero on SIGTERM (nutcracker, leanlock) made
	# wait fail and left Redis running.
	if ((${#pids[@]})); then
		kill "${pids[@]}" 2>/dev/null || true
		wait "${pids[@]}" 2>/dev/null || true
	fi
	if [[ -d $tmp/redis ]]; then scripts/redis-local.sh stop "$tmp/redis" >/dev/null 2>&1 || true; fi
	if [[ -d $tmp/cluster ]]; then scripts/redis-cluster.sh stop "$tmp/cluster" >/dev/null 2>&1 || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/lockbench" ./scripts/lockbench
[[ $mode == grown ]] && go build -o "$tmp/lockload" ./scripts/lockload
if [[ ${LOCK_AB_CLUSTER:-} == 1 ]]; then
	scripts/redis-cluster.sh start "$tmp/cluster" >/dev/null
	# shellcheck disable=SC1091
	. "$tmp/cluster/env"
	backend=$SEEDS
else
	scripts/redis-local.sh start "$tmp/redis" >/dev/null
	# shellcheck disable=SC1091
	. "$tmp/redis/env"
	backend=$MASTER_ADDR
fi
declare -A pid port mport
base=$((30000 + RANDOM % 10000))
for which in old new; do
	bin=$old
	[[ $which == new ]] && bin=$new
	port[$which]=$base mport[$which]=$((base + 1))
	base=$((base + 2))
	"$bin" --listen "127.0.0.1:${port[$which]}" --backend "$backend" --data-dir "$tmp/data-$which" \
		--key-prefix "fp$which:" --min-replicas 1 --lock-keys 'ab*' --metrics-listen "127.0.0.1:${mport[$which]}" >"$tmp/$which.log" 2>&1 &
	pid[$which]=$!
	pids+=($!)
done
for which in old new; do
	for _ in $(seq 100); do
		[[ $(redis-cli -p "${port[$which]}" PING 2>/dev/null) == PONG ]] && break
		sleep 0.1
	done
done
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime + stime, in ticks
ucpu() { awk '{print $14}' "/proc/$1/stat"; }     # utime alone
ticks=$(getconf CLK_TCK)
if [[ $mode == grown ]]; then
	grow=${LOCK_AB_GROW:-1300000}
	echo "loading $grow resources into new's fence store" >&2
	"$tmp/lockload" -addr "127.0.0.1:${port[new]}" -n "$grow" -prefix grow: -spread -settle 1s >&2
	# Until new is idle (under 5% of a core over 2 s), or 3 minutes: the
	# load's flushes and the compactions they started are done. Pebble may
	# still hold some of the load in L0, below its threshold, which the
	# first round's writes then take down: that round can show it.
	for _ in $(seq 90); do
		c0=$(cpu "${pid[new]}")
		sleep 2
		(($(cpu "${pid[new]}") - c0 < ticks / 10)) && break
	done
fi
syncs() { # the fence store's synced commits so far
	{ curl -s "http://127.0.0.1:${mport[$1]}/metrics" || true; } | awk '$1 == "fenceproxy_fence_store_sync_seconds_count" { print $2 }'
}
twem_us= # twemproxy's CPU µs per GET, this round's
if [[ ${LOCK_AB_TWEM:-} == 1 ]]; then
	[[ -n ${MASTER_ADDR:-} ]] || { echo "lock-ab: LOCK_AB_TWEM needs a standalone backend" >&2; exit 2; }
	tport=$base
	cat >"$tmp/nutcracker.yml" <<YML
ab:
  listen: 127.0.0.1:$tport
  redis: true
  preconnect: true
  timeout: 5000
  servers:
   - $MASTER_ADDR:1
YML
	nutcracker -c "$tmp/nutcracker.yml" -s $((tport + 1)) -a 127.0.0.1 >"$tmp/nutcracker.log" 2>&1 &
	pid[twem]=$!
	pids+=($!)
	for _ in $(seq 100); do
		[[ $(redis-cli -p "$tport" PING 2>/dev/null) == PONG ]] && break
		sleep 0.1
	done
fi
twem() { # one redis-benchmark GET run through twemproxy: sets twem_us
	local c0 c1 u0 u1 n=200000
	c0=$(cpu "${pid[twem]}") u0=$(ucpu "${pid[twem]}")
	redis-benchmark -p "$tport" -c 50 -n $n -P 1 -t get -q >/dev/null 2>&1 # (it warns that twemproxy has no CONFIG)
	c1=$(cpu "${pid[twem]}") u1=$(ucpu "${pid[twem]}")
	twem_us=$(awk -v c=$((c1 - c0)) -v t="$ticks" -v n=$n 'BEGIN { printf "%.2f", c * 1e6 / t / n }')
	awk -v r="$r" -v us="$twem_us" -v u=$((u1 - u0)) -v t="$ticks" -v n=$n \
		'BEGIN { printf "round %d twemproxy: CPU µs per GET %.2f (user %.2f), two of them %.1f\n", r, us, u * 1e6 / t / n, 2 * us }'
}
for r in $(seq "$rounds"); do
	[[ -n ${pid[twem]:-} ]] && twem
	order=(old new)
	((r % 2 == 0)) && order=(new old)
	for which in "${order[@]}"; do
		c0=$(cpu "${pid[$which]}") u0=$(ucpu "${pid[$which]}") s0=$(syncs "$which")
		out=$("$tmp/lockbench" "${bench[@]}" -addr "127.0.0.1:${port[$which]}" -clients 50 -duration 3s -prefix "ab$r$which:" | grep RESULT)
		c1=$(cpu "${pid[$which]}") u1=$(ucpu "${pid[$which]}") s1=$(syncs "$which")
		ops=$(sed -E 's/.* ops=([0-9]+).*/\1/' <<<"$out")
		rate=$(sed -E 's/.* ops_per_sec=([0-9]+).*/\1/' <<<"$out")
		errs=$(sed -E 's/.* errors=([0-9]+).*/\1/' <<<"$out")
		awk -v r="$r" -v w="$which" -v m="$mode" -v rate="$rate" -v c=$((c1 - c0)) -v u=$((u1 - u0)) -v t="$ticks" -v ops="$ops" -v e="$errs" -v s="$((${s1:-0} - ${s0:-0}))" -v tw="$twem_us" \
			'BEGIN { us = c * 1e6 / t / ops
				printf "round %d %s: %s locks/s %d, fenceproxy CPU µs per lock %.1f (user %.1f), fence-store commits per lock %.3f, errors %d", r, w, m, rate, us, u * 1e6 / t / ops, s / ops, e
				if (tw != "") printf ", over two twemproxy GETs %.2fx", us / (2 * tw)
				printf "\n" }'
	done
done
