#!/usr/bin/env bash
# dashshot.sh: render deploy/grafana/fenceproxy.json from a real run as docs/dashboard.svg.
#
#   scripts/dashshot.sh [OUT]    (default OUT: docs/dashboard.svg; about 3 minutes)
#
# Grafana cannot be installed on the development machine, so this is the stand-in
# for a screenshot: the dashboard's own PromQL, evaluated by a real Prometheus over
# a real run, drawn by scripts/dashshot (and captioned as such). It installs
# prometheus (and redis-server/redis-tools) from Debian when missing and root, then
# starts, in a temp dir and all on loopback: a Redis master + replica
# (scripts/redis-local.sh), fenceproxy in front of it (--min-replicas 1, metrics on
# a loopback port, --slowlock-held-longer-than 1000), and Prometheus scraping the
# proxy every 2 s. Then it drives bounded load (every phase has a count and a
# `timeout`):
#   - idle 10 s;
#   - phase 1 (~40 s): scripts/lockbench, 16 clients on distinct resources;
#     redis-benchmark -c 20 SET/GET through the proxy (passthrough); one redis-cli
#     looping acquire, renew, fence check (one current token, one stale) and release;
#   - phase 2 (~35 s): scripts/lockbench -hot, 20 clients queueing with WAIT on one
#     resource (waiters); redis-benchmark -P 16; 12 rounds of a 1.2 s lease that
#     expires while another owner waits for it (slow-lock "wait" and "expired"
#     entries, expirations) and a lease held 1.3 s then released ("held");
#   - idle 15 s.
# Then scripts/dashshot queries Prometheus over the whole window and writes OUT.
# Everything it started is stopped by pid on exit, also on failure.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-docs/dashboard.svg}
[[ $# -le 1 ]] || {
	echo "usage: $0 [OUT.svg]" >&2
	exit 2
}

readonly WAIT_SECS=15 SCRAPE=2s RATE_INTERVAL=8s
PROG=dashshot
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

log() { echo "dashshot: $(date -u +%T) $*" >&2; }
die() {
	log "$*"
	exit 1
}

tmp=""
redis_started=0
# Processes this run started: "name pid" each, stopped by pid on exit (last first).
started=()
ports=()

cleanup() {
	local rc=$? i
	trap - EXIT INT TERM
	for ((i = ${#started[@]} - 1; i >= 0; i--)); do
		# shellcheck disable=SC2086
		stop_pid ${started[i]}
	done
	if ((redis_started)); then
		scripts/redis-local.sh stop "$tmp/redis" >/dev/null 2>&1 || true
	fi
	if [[ -n $tmp && -d $tmp ]]; then
		if ((rc != 0)); then
			for f in "$tmp"/*.log; do
				[[ -s $f ]] || continue
				echo "--- $f" >&2
				tail -n 15 "$f" >&2
			done
		fi
		rm -rf "$tmp"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

need() {
	local pkgs=() w
	for w in "$@"; do
		command -v "${w#*:}" >/dev/null || pkgs+=("${w%%:*}")
	done
	((${#pkgs[@]} == 0)) && return
	[[ ${EUID} -eq 0 ]] || die "missing commands; install them: sudo apt-get install -y ${pkgs[*]}"
	log "installing ${pkgs[*]}"
	# Debian's prometheus package would start a system Prometheus where there is
	# an init system; this run starts its own on another port either way.
	apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >&2
}
need prometheus:prometheus redis-server:redis-server redis-tools:redis-cli redis-tools:redis-benchmark curl:curl
command -v go >/dev/null || die "go not found"

t_begin=$(date +%s)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dashshot.XXXXXX")
log "building into $tmp"
go build -o "$tmp/fenceproxy" ./cmd/fenceproxy
go build -o "$tmp/lockbench" ./scripts/lockbench
go build -o "$tmp/dashshot" ./scripts/dashshot

redis_started=1
scripts/redis-local.sh start "$tmp/redis" >/dev/null
# shellcheck disable=SC1091
source "$tmp/redis/env"
ports+=("$MASTER_PORT" "$REPLICA_PORT")

port=$(free_port)
ports+=("$port")
PROXY=127.0.0.1:$port
mport=$(free_port)
ports+=("$mport")
METRICS=127.0.0.1:$mport
"$tmp/fenceproxy" --listen "$PROXY" --backend "$MASTER_ADDR" --data-dir "$tmp/data" \
	--min-replicas 1 --metrics-listen "$METRICS" --slowlock-held-longer-than 1000 \
	>"$tmp/fenceproxy.log" 2>&1 &
started+=("fenceproxy $!")
proxy_pid=$!
for ((i = 0; i < WAIT_SECS * 10; i++)); do
	kill -0 "$proxy_pid" 2>/dev/null || die "fenceproxy exited at start"
	[[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]] && break
	sleep 0.1
done
((i < WAIT_SECS * 10)) || die "fenceproxy did not answer PING on $PROXY"

pport=$(free_port)
ports+=("$pport")
PROM=http://127.0.0.1:$pport
cat >"$tmp/prometheus.yml" <<YML
global:
  scrape_interval: $SCRAPE
  evaluation_interval: $SCRAPE
scrape_configs:
  - job_name: fenceproxy
    static_configs:
      - targets: ['$METRICS']
YML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/prom" \
	--web.listen-address="127.0.0.1:$pport" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
started+=("prometheus $!")
prom_pid=$!
for ((i = 0; i < WAIT_SECS * 10; i++)); do
	kill -0 "$prom_pid" 2>/dev/null || die "prometheus exited at start"
	curl -fsS "$PROM/-/ready" >/dev/null 2>&1 && break
	sleep 0.1
done
((i < WAIT_SECS * 10)) || die "prometheus not ready on $PROM"
start=$(date +%s)
log "proxy $PROXY (metrics $METRICS), prometheus $PROM; idle 10 s"
sleep 10

# bg NAME SECS CMD...: run CMD in the background under timeout, remembered for cleanup.
load=()
bg() {
	local name=$1 secs=$2
	shift 2
	timeout "$secs" "$@" >>"$tmp/$name.log" 2>&1 &
	started+=("$name $!")
	load+=("$!")
}
wait_load() {
	local pid
	for pid in "${load[@]}"; do
		wait "$pid" || log "a load process (pid $pid) exited with $?: see its log"
	done
	load=()
}

cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }

# mixed: acquire, renew, a current fence check, a stale one (the token of the
# resource's previous cycle) and release, N times or for SECS seconds. The first
# replies go to its log, to see it works.
mixed() {
	local n=$1 secs=$2 i r tok out
	local -A prev=()
	local stop=$((SECONDS + secs))
	for ((i = 0; i < n && SECONDS < stop; i++)); do
		r=mixed:$((i % 50))
		tok=$(cli LOCK.ACQUIRE "$r" w 5000)
		out="$tok $(cli LOCK.RENEW "$r" w 5000) $(cli FENCE.CHECK "$r" "$tok")"
		if [[ -n ${prev[$r]:-} ]]; then
			out+=" $(cli FENCE.CHECK "$r" "${prev[$r]}")"
		fi
		out+=" $(cli LOCK.RELEASE "$r" w)"
		prev[$r]=$tok
		((i < 3 || i % 500 == 0)) && echo "mixed $i $r: $out"
	done
	echo "mixed: $i cycles"
}

# slow: leases that expire under a waiter, and one held past the threshold.
slow() {
	local i
	for ((i = 0; i < 12; i++)); do
		cli LOCK.ACQUIRE "slow:$i" a 1200 >/dev/null
		cli LOCK.ACQUIRE "slow:$i" b 1000 WAIT 3000 >/dev/null
		cli LOCK.ACQUIRE "held:$i" a 10000 >/dev/null
		sleep 1.3
		cli LOCK.RELEASE "held:$i" a >/dev/null
		cli LOCK.RELEASE "slow:$i" b >/dev/null
	done
}

log "phase 1: distinct locks, passthrough, renew/fence checks (~40 s)"
bg lockbench 60 "$tmp/lockbench" -system fenceproxy -addr "$PROXY" -clients 16 -duration 40s
bg rb1 60 redis-benchmark -h 127.0.0.1 -p "$port" -c 20 -n 150000 -r 100000 -t set,get -q
bg mixed 60 bash -c "$(declare -f cli mixed); port=$port; mixed 5000 40"
wait_load
log "phase 2: hot lock with WAIT, passthrough -P 16, expiring and long-held leases (~35 s)"
bg lockbench-hot 60 "$tmp/lockbench" -system fenceproxy -addr "$PROXY" -clients 20 -duration 35s -hot -ttl 2s
bg rb2 60 redis-benchmark -h 127.0.0.1 -p "$port" -c 20 -n 1000000 -r 100000 -t set,get -P 16 -q
bg slow 60 bash -c "$(declare -f cli slow); port=$port; slow"
wait_load
kill -0 "$proxy_pid" 2>/dev/null || die "fenceproxy died during the load"
log "idle 15 s"
sleep 15
end=$(date +%s)

"$tmp/dashshot" -prom "$PROM" -start "$start" -end "$end" -step 2s -rate-interval "$RATE_INTERVAL" -out "$out"
grep -h RESULT "$tmp"/lockbench*.log >&2 || true
head -n 3 "$tmp/mixed.log" >&2 || true
tail -n 1 "$tmp/mixed.log" >&2 || true
cat "$tmp"/rb*.log | tr '\r' '\n' | grep -E 'requests per second|rror' >&2 || true
log "wrote $out in $(($(date +%s) - t_begin)) s"
