#!/usr/bin/env bash
# bench.sh: fenceproxy against direct Redis, on this machine, in one run.
#
#   scripts/bench.sh           the full run (under 4 minutes)
#   scripts/bench.sh --quick   small counts, 2 s lock runs (under a minute)
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
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
	echo "usage: $0 [--quick]" >&2
	exit 2
}

quick=0
case ${1:-} in
"") ;;
--quick) quick=1 ;;
*) usage ;;
esac
[[ $# -le 1 ]] || usage

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
	./bin/fenceproxy --listen "$PROXY_ADDR" --backend "$MASTER_ADDR" \
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

# record KEY RATE P50 P99: keep the run with the higher rate.
record() {
	local key=$1 rate=$2
	if [[ -z ${best[$key]:-} ]] || awk -v a="$rate" -v b="${best[$key]}" 'BEGIN { exit !(a > b) }'; then
		best[$key]=$rate
		lat[$key]="$3 $4"
	fi
}

# rb TARGET ADDR PIPELINE N: one redis-benchmark run, recorded per test.
rb() {
	local target=$1 addr=$2 p=$3 n=$4 out line test rps p50 p99
	out=$(redis-benchmark -h "${addr%:*}" -p "${addr##*:}" -c "$CLIENTS" -n "$n" \
		-r 100000 -t set,get -P "$p" --csv 2>"$tmp/rb.err") ||
		die "redis-benchmark against $target ($addr) failed: $(tail -n 3 "$tmp/rb.err")"
	while IFS= read -r line; do
		line=${line//\"/}
		IFS=, read -r test rps _ _ p50 _ p99 _ <<<"$line"
		[[ $test == SET || $test == GET ]] || continue
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

row_fmt='%-34s %12s %16s %12s %16s %7s\n'

# row LABEL BASEKEY PROXYKEY
row() {
	local b=${best[$2]:-} p=${best[$3]:-} bl=${lat[$2]:-"- -"} pl=${lat[$3]:-"- -"}
	# shellcheck disable=SC2059,SC2086
	printf "$row_fmt" "$1" "$(printf '%.0f' "${b:-0}")" "$(printf '%s/%s' $bl)" \
		"$(printf '%.0f' "${p:-0}")" "$(printf '%s/%s' $pl)" "$(ratio "$p" "$b")"
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

main
