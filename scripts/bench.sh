#!/usr/bin/env bash
# bench.sh: fenceproxy against direct Redis, on this machine, in one run.
#
#   scripts/bench.sh           the full run (under 4 minutes)
#   scripts/bench.sh --quick   small counts, 2 s lock runs (under a minute)
#   scripts/bench.sh --cluster [--quick]   fenceproxy in front of a Redis Cluster
#
# Builds ./bin/fenceproxy, starts a Redis master + replica (scripts/redis-local.sh)
# and fenceproxy (--min-replicas 1) in a temp dir, then, alternating the systems:
#   - redis-benchmark -c 50 -t set,get at -P 1 and -P 16, direct vs through the
#     proxy, each twice; the better run of each counts;
#   - scripts/lockbench distinct mode (acquire+release cycles on random resources)
#     for the Redis recipe, the fenced Redis recipe (Lua SET NX + INCR, WAIT 1)
#     and fenceproxy; hot mode (one resource, 50 clients) for the fenced recipe
#     and fenceproxy.
# Prints every raw result line, then a table. Everything it started is stopped
# on exit. Loopback only.
#
# --cluster: a 3-master/3-replica Redis Cluster (scripts/redis-cluster.sh) and
# fenceproxy --backend naming its masters (--min-replicas 1), then, alternating:
#   - redis-benchmark --cluster straight at the cluster (its 50 clients spread over
#     the masters, each on keys of its node's slots, one thread per master) vs plain
#     redis-benchmark (one thread) at the proxy, -t set,get at -P 1 and -P 16, each
#     twice, the better run counts;
#   - MSET of 10 random keys (so across slots; the proxy splits it) at -P 1 and
#     -P 16 through the proxy only: the cluster answers such an MSET with CROSSSLOT;
#   - scripts/lockbench against the proxy: fenceproxy distinct and hot, and the
#     plain Redis recipe (SET NX PX + Lua release) through the same proxy for scale
#     (lockbench speaks to one node, so no lock figure is taken straight from the cluster).
# A redis-benchmark run that gets error replies is reported as FAIL and the script
# exits non-zero after the table.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
	echo "usage: $0 [--quick] [--cluster]" >&2
	exit 2
}

quick=0 cluster=0
for arg in "$@"; do
	case $arg in
	--quick) quick=1 ;;
	--cluster) cluster=1 ;;
	*) usage ;;
	esac
done
[[ $# -le 2 ]] || usage

readonly CLIENTS=50
if ((quick)); then
	readonly N_P1=20000 N_P16=100000 LOCK_DUR=2s LOCK_REPS=1 RB_REPS=2
else
	readonly N_P1=100000 N_P16=500000 LOCK_DUR=5s LOCK_REPS=2 RB_REPS=2
fi
readonly WAIT_SECS=15

PROG=bench
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

log() { echo "bench: $*" >&2; }
die() {
	log "$*"
	exit 1
}

tmp=""
proxy_pid=""
redis_started=0
cluster_started=0

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n $proxy_pid ]] && kill -0 "$proxy_pid" 2>/dev/null; then
		kill -TERM "$proxy_pid" 2>/dev/null || true
		local i
		for ((i = 0; i < 100; i++)); do
			kill -0 "$proxy_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$proxy_pid" 2>/dev/null || true
		wait "$proxy_pid" 2>/dev/null || true
	fi
	if ((redis_started)); then
		scripts/redis-local.sh stop "$tmp/redis" >/dev/null 2>&1 || true
	fi
	if ((cluster_started)); then
		scripts/redis-cluster.sh stop "$tmp/cluster" >/dev/null 2>&1 || true
	fi
	if [[ -n $tmp && -d $tmp ]]; then
		rm -rf "$tmp"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

need_tools() {
	if ! command -v redis-benchmark >/dev/null || ! command -v redis-cli >/dev/null; then
		if [[ ${EUID} -eq 0 ]]; then
			log "installing redis-tools"
			apt-get update && apt-get install -y redis-tools
		else
			die "redis-benchmark not found; install it: sudo apt-get install -y redis-tools"
		fi
	fi
	command -v go >/dev/null || die "go not found"
}

proxy_alive() {
	[[ -n $proxy_pid ]] && kill -0 "$proxy_pid" 2>/dev/null
}

check_proxy() {
	proxy_alive && return
	log "fenceproxy (pid $proxy_pid) died; last log lines:"
	tail -n 30 "$tmp/fenceproxy.log" >&2 || true
	exit 1
}

start_proxy() {
	local port i
	port=$(free_port)
	PROXY_ADDR=127.0.0.1:$port
	./bin/fenceproxy --listen "$PROXY_ADDR" --backend "${SEEDS:-$MASTER_ADDR}" \
		--data-dir "$tmp/data" --min-replicas 1 --metrics-listen '' \
		>"$tmp/fenceproxy.log" 2>&1 &
	proxy_pid=$!
	for ((i = 0; i < WAIT_SECS * 10; i++)); do
		check_proxy
		if [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]]; then
			return
		fi
		sleep 0.1
	done
	die "fenceproxy did not answer PING on $PROXY_ADDR within ${WAIT_SECS}s"
}

# Results: best[key]=rps and lat[key]="p50 p99", key = TEST/P/TARGET or lock key.
declare -A best=() lat=() errs=()
# redis-benchmark runs that got error replies, one line each.
rb_failed=()

# record KEY RATE P50 P99: keep the run with the higher rate.
record() {
	local key=$1 rate=$2
	if [[ -z ${best[$key]:-} ]] || awk -v a="$rate" -v b="${best[$key]}" 'BEGIN { exit !(a > b) }'; then
		best[$key]=$rate
		lat[$key]="$3 $4"
	fi
}

# rb TARGET ADDR PIPELINE N [TESTS [ARGS...]]: one redis-benchmark run (-t TESTS,
# default set,get; ARGS such as --cluster go to redis-benchmark), recorded per test
# under its first word (SET, GET, MSET). A run with error replies is not recorded
# but listed in rb_failed.
rb() {
	local target=$1 addr=$2 p=$3 n=$4 tests=${5:-set,get} out line test rps p50 p99 err
	shift $(($# < 5 ? $# : 5))
	local rc=0
	out=$(redis-benchmark -h "${addr%:*}" -p "${addr##*:}" -c "$CLIENTS" -n "$n" \
		-r 100000 -t "$tests" -P "$p" --csv "$@" 2>"$tmp/rb.err") || rc=$?
	# redis-benchmark 7.0 exits 1 at the first error reply ("Error from server: ...").
	err=$(grep -m 1 -h 'Error from server' - "$tmp/rb.err" <<<"$out" || true)
	((rc == 0)) || [[ -n $err ]] ||
		die "redis-benchmark against $target ($addr) failed: $(tail -n 3 "$tmp/rb.err")"
	if [[ -n $err ]]; then
		echo "RB target=$target tests=$tests P=$p n=$n FAIL: $err"
		rb_failed+=("redis-benchmark -t $tests -P $p against $target ($addr): $err")
		return
	fi
	while IFS= read -r line; do
		line=${line//\"/}
		IFS=, read -r test rps _ _ p50 _ p99 _ <<<"$line"
		test=${test%% *}
		[[ ,${tests^^}, == *",$test,"* ]] || continue
		echo "RB target=$target test=$test P=$p n=$n rps=$rps p50_ms=$p50 p99_ms=$p99"
		record "$test/$p/$target" "$rps" "$p50" "$p99"
	done <<<"$out"
}

# field LINE KEY: the value of KEY=... in a RESULT line.
field() {
	local kv
	for kv in $1; do
		if [[ $kv == "$2="* ]]; then
			echo "${kv#*=}"
			return
		fi
	done
	echo "?"
}

# lb KEY SYSTEM ADDR [-hot]: one lockbench run, recorded under KEY.
lb() {
	local key=$1 system=$2 addr=$3 out line
	shift 3
	out=$("$tmp/lockbench" -system "$system" -addr "$addr" -clients "$CLIENTS" \
		-duration "$LOCK_DUR" -resources 100000 "$@" 2>&1) ||
		die "lockbench $system $* failed: $out"
	echo "$out"
	line=$(grep '^RESULT ' <<<"$out" | tail -n 1)
	[[ -n $line ]] || die "lockbench $system printed no RESULT line"
	record "$key" "$(field "$line" ops_per_sec)" "$(field "$line" p50_ms)" "$(field "$line" p99_ms)"
	errs[$key]=$((${errs[$key]:-0} + $(field "$line" errors)))
}
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0 && a != "" && b != "") printf "%.2f", a / b; else printf "-" }'
}

# num RATE: RATE rounded, or - when there is none.
num() {
	if [[ -n $1 ]]; then printf '%.0f' "$1"; else printf -- -; fi
}

row_fmt='%-34s %12s %16s %12s %16s %7s\n'

# row LABEL BASEKEY PROXYKEY
row() {
	local b=${best[$2]:-} p=${best[$3]:-} bl=${lat[$2]:-"- -"} pl=${lat[$3]:-"- -"}
	# shellcheck disable=SC2059,SC2086
	printf "$row_fmt" "$1" "$(num "$b")" "$(printf '%s/%s' $bl)" \
		"$(num "$p")" "$(printf '%s/%s' $pl)" "$(ratio "$p" "$b")"
}

main() {
	need_tools
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/fenceproxy-bench.XXXXXX")
	local t0=$SECONDS

	log "building ./bin/fenceproxy and lockbench"
	mkdir -p bin
	go build -o ./bin/fenceproxy ./cmd/fenceproxy
	go build -o "$tmp/lockbench" ./scripts/lockbench

	redis_started=1
	scripts/redis-local.sh start "$tmp/redis" >&2
	# shellcheck disable=SC1091
	source "$tmp/redis/env"
	start_proxy
	log "redis master $MASTER_ADDR, replica $REPLICA_ADDR, fenceproxy $PROXY_ADDR (pid $proxy_pid)"

	local rep p n
	for p in 1 16; do
		n=$N_P1
		((p == 1)) || n=$N_P16
		for ((rep = 1; rep <= RB_REPS; rep++)); do
			rb direct "$MASTER_ADDR" "$p" "$n"
			check_proxy
			rb proxy "$PROXY_ADDR" "$p" "$n"
			check_proxy
		done
	done

	for ((rep = 1; rep <= LOCK_REPS; rep++)); do
		lb distinct/redis redis "$MASTER_ADDR"
		lb distinct/redis-fenced redis-fenced "$MASTER_ADDR"
		lb distinct/fenceproxy fenceproxy "$PROXY_ADDR"
		check_proxy
		lb hot/redis-fenced redis-fenced "$MASTER_ADDR" -hot
		lb hot/fenceproxy fenceproxy "$PROXY_ADDR" -hot
		check_proxy
	done

	local mode=full
	((quick)) && mode=quick
	echo
	echo "== fenceproxy bench ($mode; $CLIENTS clients; redis-benchmark n=$N_P1 at -P 1, n=$N_P16 at -P 16, best of $RB_REPS; locks ${LOCK_DUR} x $LOCK_REPS, best run; $(nproc) cores)"
	# shellcheck disable=SC2059
	printf "$row_fmt" test "direct/recipe" "p50/p99 ms" fenceproxy "p50/p99 ms" ratio
	local t
	for p in 1 16; do
		for t in SET GET; do
			row "$t -P $p (req/s)" "$t/$p/direct" "$t/$p/proxy"
		done
	done
	row "lock distinct vs redis (cycles/s)" distinct/redis distinct/fenceproxy
	row "lock distinct vs fenced (cycles/s)" distinct/redis-fenced distinct/fenceproxy
	row "lock hot vs fenced (handoffs/s)" hot/redis-fenced hot/fenceproxy
	echo "(hot: latency is the acquire wait; errors: redis ${errs[distinct/redis]:-0}, redis-fenced ${errs[distinct/redis-fenced]:-0}+${errs[hot/redis-fenced]:-0}, fenceproxy ${errs[distinct/fenceproxy]:-0}+${errs[hot/fenceproxy]:-0} (distinct+hot))"
	echo
	echo "lock ratio fenceproxy/redis-fenced: distinct $(ratio "${best[distinct/fenceproxy]:-}" "${best[distinct/redis-fenced]:-}")," \
		"hot $(ratio "${best[hot/fenceproxy]:-}" "${best[hot/redis-fenced]:-}")" \
		"(fenceproxy/redis plain: distinct $(ratio "${best[distinct/fenceproxy]:-}" "${best[distinct/redis]:-}"))"

	local cpu
	cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$proxy_pid/stat" 2>/dev/null || echo "?")
	echo "fenceproxy CPU: ${cpu}s user+sys over a $((SECONDS - t0))s run"
	local warn
	warn=$(grep -cE 'level=(WARN|ERROR)' "$tmp/fenceproxy.log" || true)
	echo "fenceproxy log: ${warn} WARN/ERROR lines"
	if ((warn > 0)); then
		grep -E 'level=(WARN|ERROR)' "$tmp/fenceproxy.log" | head -n 10
	fi
}

# main_cluster: the --cluster run (see the top of this file).
main_cluster() {
	need_tools
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/fenceproxy-bench.XXXXXX")
	local t0=$SECONDS

	log "building ./bin/fenceproxy and lockbench"
	mkdir -p bin
	go build -o ./bin/fenceproxy ./cmd/fenceproxy
	go build -o "$tmp/lockbench" ./scripts/lockbench

	cluster_started=1
	# A second try: a port redis-cluster.sh found free can still be taken before
	# the node binds it.
	scripts/redis-cluster.sh start "$tmp/cluster" >&2 || scripts/redis-cluster.sh start "$tmp/cluster" >&2
	# shellcheck disable=SC1091
	source "$tmp/cluster/env"
	local seed=${SEEDS%%,*}
	start_proxy
	log "redis cluster masters $SEEDS, fenceproxy $PROXY_ADDR (pid $proxy_pid)"

	local rep p n
	for p in 1 16; do
		n=$N_P1
		((p == 1)) || n=$N_P16
		for ((rep = 1; rep <= RB_REPS; rep++)); do
			rb cluster "$seed" "$p" "$n" set,get --cluster
			check_proxy
			rb proxy "$PROXY_ADDR" "$p" "$n"
			check_proxy
		done
		rb proxy "$PROXY_ADDR" "$p" $((n / 5)) mset
		check_proxy
	done

	for ((rep = 1; rep <= LOCK_REPS; rep++)); do
		lb distinct/redis-via-proxy redis "$PROXY_ADDR"
		check_proxy
		lb distinct/fenceproxy fenceproxy "$PROXY_ADDR"
		check_proxy
		lb hot/fenceproxy fenceproxy "$PROXY_ADDR" -hot
		check_proxy
	done

	local mode=full
	((quick)) && mode=quick
	echo
	echo "== fenceproxy bench, Redis Cluster 3 masters + 3 replicas ($mode; $CLIENTS clients; redis-benchmark n=$N_P1 at -P 1, n=$N_P16 at -P 16 (MSET n/5), best of $RB_REPS; locks ${LOCK_DUR} x $LOCK_REPS, best run; $(nproc) cores)"
	# shellcheck disable=SC2059
	printf "$row_fmt" test "cluster/recipe" "p50/p99 ms" fenceproxy "p50/p99 ms" ratio
	local t
	for p in 1 16; do
		for t in SET GET; do
			row "$t -P $p (req/s)" "$t/$p/cluster" "$t/$p/proxy"
		done
	done
	for p in 1 16; do
		row "MSET 10 keys x-slot -P $p (req/s)" "-" "MSET/$p/proxy"
	done
	row "lock distinct vs recipe via proxy" distinct/redis-via-proxy distinct/fenceproxy
	row "lock hot (handoffs/s)" "-" hot/fenceproxy
	echo "(cluster: redis-benchmark --cluster at the masters (it runs a thread per master; against the proxy, one thread; its"
	echo " rates move in steps of about n per 0.25 s); MSET across slots only through the proxy (the cluster says CROSSSLOT);"
	echo " recipe via proxy: lockbench -system redis (SET NX PX + Lua release) through the same proxy; hot: latency is the acquire wait;"
	echo " errors: recipe ${errs[distinct/redis-via-proxy]:-0}, fenceproxy ${errs[distinct/fenceproxy]:-0}+${errs[hot/fenceproxy]:-0} (distinct+hot))"

	local cpu
	cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$proxy_pid/stat" 2>/dev/null || echo "?")
	echo "fenceproxy CPU: ${cpu}s user+sys over a $((SECONDS - t0))s run"
	local warn
	warn=$(grep -cE 'level=(WARN|ERROR)' "$tmp/fenceproxy.log" || true)
	echo "fenceproxy log: ${warn} WARN/ERROR lines"
	if ((warn > 0)); then
		grep -E 'level=(WARN|ERROR)' "$tmp/fenceproxy.log" | head -n 10
	fi
}

if ((cluster)); then
	main_cluster
else
	main
fi
if ((${#rb_failed[@]} > 0)); then
	printf 'FAIL %s\n' "${rb_failed[@]}"
	exit 1
fi
