#!/usr/bin/env bash
# bench.sh: fenceproxy against direct Redis and its peers, on this machine, in one run.
#
#   scripts/bench.sh           the full run (about 5 minutes)
#   scripts/bench.sh --quick   small counts, 2 s lock runs, no memory section (about 2 minutes)
#   scripts/bench.sh --scale   the full run, with 10 million resources instead of 1 million
#                              in the memory section (adds 10-15 minutes here)
#   scripts/bench.sh --cluster [--quick]   fenceproxy in front of a Redis Cluster
#   scripts/bench.sh --compare OLD NEW [--quick]   two fenceproxy builds A/B (below)
#   scripts/bench.sh --clients [--quick] [--compare OLD NEW]   CPU per request of each
#                              kind of client against twemproxy's (below)
#
# Installs what is missing from Debian's packages when run as root (redis-server,
# redis-tools, nutcracker, etcd-server), builds ./bin/fenceproxy and the harnesses,
# and starts, in a temp dir, all on loopback: a Redis master + replica
# (scripts/redis-local.sh), fenceproxy in front of it (--min-replicas 1: every
# grant fsynced and acknowledged by the replica), twemproxy (nutcracker) in front
# of the same master, and a one-node etcd 3.4. Then, alternating the systems in
# each round (A B C, A B C) so that the machine's noise hits all alike:
#   - passthrough: redis-benchmark -c 50 -t set,get at -P 1 and -P 16 against
#     direct Redis, twemproxy and fenceproxy, two rounds;
#   - latency at one client: redis-benchmark -c 1 -P 1 -t set,get against the
#     same three, two rounds; p50/p99 as ratios, and the latency fenceproxy adds
#     to direct Redis's against the latency twemproxy adds;
#   - locks, distinct resources: 50 clients loop acquire+release of random
#     resources (of 100,000): scripts/lockbench for the Redis recipe (SET NX PX,
#     Lua compare-and-delete), the fenced Redis recipe (Lua SET NX + INCR, then
#     WAIT 1) and fenceproxy (LOCK.ACQUIRE/LOCK.RELEASE); scripts/etcdbench for
#     etcd's concurrency.Mutex; two rounds (one with --quick);
#   - hot lock: the same harnesses, 50 clients on one resource: the fenced recipe
#     polling every 1-3 ms, etcd Mutex.Lock, fenceproxy LOCK.ACQUIRE ... WAIT;
#   - memory (not with --quick): fenceproxy's RSS with 10,000 idle clients
#     (scripts/idleclients, against the proxy above: first clients that sent
#     EXISTS, which stay on the --serve-loop, then clients that sent two PINGs in
#     one write, which moves each to a goroutine of its own), and the RSS of a fresh
#     fenceproxy after 1M (--scale: 10M) distinct resources were locked once
#     (scripts/lockload: 64 connections, pipelined LOCK.ACQUIRE, 2 s leases).
#     That proxy runs with --min-replicas 0 (fsync, no replica wait) so the load
#     is bounded by the proxy, not by WAIT.
# Each figure is the better of the rounds (the higher rate; its latencies with
# it). Prints every raw result line, then one table per section, and writes
# docs/bench/latest.tsv and docs/bench/latest.svg (--quick: docs/bench/quick.*;
# --cluster writes no file). Everything it started is stopped by pid on exit,
# also on failure.
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
#
# --compare OLD NEW: two fenceproxy builds against each other. OLD and NEW are git
# revisions (each is built from `git archive` of it in the temp dir) or paths of
# built fenceproxy binaries. One Redis master + replica as above and both proxies
# in front of it at once (--min-replicas 1, each with its own data dir and its own
# --key-prefix, so that neither sees the other's authority as live), then rounds
# (4 with --quick, else 6) of: redis-benchmark -c 50 SET and GET at -P 1 and
# -P 16, the one-client latency run, and lockbench distinct and hot, each run
# against OLD and NEW back to back (old first in odd rounds, new first in even
# ones, so that neither always runs on the other's heels). With --quick the runs
# are longer than the plain --quick's (n=50000 at -P 1, 400000 at -P 16, 20000 at
# -c 1, 3 s lock runs): about 3 minutes on a quiet machine, 5 on a loaded one.
# Prints each figure's better round for OLD and NEW with NEW/OLD, the CPU per
# request and per lock cycle (fenceproxy's, and Redis master + replica's), the
# master's script calls and WAITs per lock cycle (INFO commandstats: how many
# lock writes share one script call and one WAIT), and
# the spread of the rounds' own NEW/OLD ratios, which says how much of a ratio
# is noise. twemproxy (and, for the one-client latency, direct Redis) run in the
# same rounds, in front of the same master, for issue 15's ratios: NEW against
# twemproxy (rate and CPU per request, at -P 1 and -P 16) and the latency NEW
# adds to direct Redis's at one client against what twemproxy adds, each with
# the spread of its rounds. --no-locks skips the lock runs (passthrough only).
# Writes no file.
#
# --tier [--quick]: one fenceproxy and a tier of three (--peers, Raft) in front of
# one Redis master + replica (--min-replicas 1), then rounds (6, or 3 with --quick,
# of 5 s runs, 2 s with --quick) of scripts/lockbench (50 clients, acquire+release
# of random resources) through the single node, the tier's leader and a follower
# (which relays to the leader), each round starting with the next of the three.
# Prints each one's better round, the tier/one-node ratio and the spread of the
# rounds' own ratios, the CPU time per lock cycle of every fenceproxy process (each
# tier node apart) and of Redis, and each node's Raft log writes and batching.
# Then (not with --quick) a fresh tier (--min-replicas 0) and scripts/lockload:
# 1M (--scale: 10M) distinct resources locked once through its leader, and each
# node's RSS.
# --tier --compare OLD NEW: two tiers of three, one of each build, and rounds of
# lockbench through each one's leader and a follower, OLD and NEW back to back.
#
# --clients [--quick]: what each kind of client costs (issue 24). One Redis
# master + replica, twemproxy in front of it, and per fenceproxy build: one
# fenceproxy with --listen and --tls-listen (a throwaway CA and certificate
# made with openssl in the temp dir), one with --aclfile, and a tier of three
# (--peers), each with its own --key-prefix. Then rounds (2 with --quick, else 3;
# n=150000 at -P 1, 800000 at -P 16, 20000 at -c 1 with --quick: about 2 minutes
# with --compare on a quiet machine, 4 on a loaded one; else 400000, 2000000,
# 50000: 5 minutes, 10 loaded) of `redis-benchmark -c 50
# -t get` at -P 1 and -P 16 for each kind: plaintext RESP2, RESP3 (-3), an ACL
# user (--user U -a PASS), a user of Redis's own ACL through the plaintext
# fenceproxy (--user U -a PASS), TLS (--tls --cacert), and through the tier's leader
# and a follower; twemproxy's plaintext in the same rounds (first in odd rounds,
# last in even ones); and at one client (-c 1 -P 1) plaintext, TLS and
# twemproxy. Prints each kind's better round: req/s, the user+sys CPU of its
# fenceproxy process(es) (a tier's three nodes together) per request, and that
# over twemproxy's CPU per plaintext request (xtwem); and p50/p99 at one client.
# A kind whose warm-up run fails is reported as not run. --clients --compare OLD
# NEW (as --compare takes them): both builds' processes at once, every kind
# through OLD and NEW back to back in each round (OLD first in odd rounds), and
# NEW/OLD of each figure with the spread of the rounds' CPU NEW/OLD. Writes no file.
#
# A redis-benchmark run that gets error replies is reported as FAIL and the script
# exits non-zero after the tables.
set -euo pipefail

# Where the caller stood: a binary path given to --compare is relative to it.
invoked_from=$PWD
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
	echo "usage: $0 [--quick | --scale] [--cluster | --tier]" >&2
	echo "       $0 [--quick] [--no-locks | --tier] --compare OLD NEW   (git revisions or fenceproxy binaries)" >&2
	echo "       $0 --clients [--quick] [--compare OLD NEW]" >&2
	exit 2
}

quick=0 cluster=0 scale=0 tier=0 compare=0 old_rev="" new_rev="" no_locks=0 clients=0
while (($# > 0)); do
	case $1 in
	--quick) quick=1 ;;
	--no-locks) no_locks=1 ;;
	--cluster) cluster=1 ;;
	--tier) tier=1 ;;
	--clients) clients=1 ;;
	--scale) scale=1 ;;
	--compare)
		(($# >= 3)) || usage
		compare=1 old_rev=$2 new_rev=$3
		shift 2
		;;
	*) usage ;;
	esac
	shift
done
((!(quick && scale))) || usage
((!(compare && (cluster || scale)))) || usage
# --no-locks drops the lock runs of the plain --compare; a tier's runs are all lock runs.
((!no_locks || (compare && !tier))) || usage
((!(clients && (cluster || tier || scale || no_locks)))) || usage

readonly CLIENTS=50
if ((clients && quick)); then
	# GET only, a run of each kind of client per build per round. A GET costs
	# the proxy a few us at -P 1 and about 1 us at -P 16, and CPU time is
	# counted in ticks of 10 ms: these runs' CPU is some 50-100 ticks (n=30000
	# was some 10: a tick's error alone moved a ratio by 10%).
	readonly N_P1=150000 N_P16=800000 N_C1=20000 CL_ROUNDS=2
elif ((clients)); then
	readonly N_P1=400000 N_P16=2000000 N_C1=50000 CL_ROUNDS=3
elif ((quick && compare)); then
	# Runs of a second or more: CPU time is counted in ticks of 10 ms, and a
	# shorter run's CPU per request is off by a tick in a dozen.
	readonly N_P1=50000 N_P16=400000 N_C1=20000 LOCK_DUR=3s AB_ROUNDS=4
elif ((quick)); then
	readonly N_P1=20000 N_P16=100000 N_C1=10000 LOCK_DUR=2s LOCK_REPS=1 RB_REPS=2 TIER_ROUNDS=3
else
	readonly N_P1=100000 N_P16=500000 N_C1=50000 LOCK_DUR=5s LOCK_REPS=2 RB_REPS=2 AB_ROUNDS=6 TIER_ROUNDS=6
fi
readonly IDLE_CLIENTS=10000
if ((scale)); then
	readonly LOAD_N=10000000 LOAD_TIMEOUT=30m TIER_LOAD_TIMEOUT=120m
else
	readonly LOAD_N=1000000 LOAD_TIMEOUT=5m TIER_LOAD_TIMEOUT=15m
fi
readonly WAIT_SECS=15
# Targets (issue 5), drawn in the plot: RSS with 10,000 idle clients, and after 10M resources.
readonly TARGET_IDLE_MIB=200 TARGET_LOAD_MIB=256

PROG=bench
# shellcheck source=scripts/lib.sh
source scripts/lib.sh # the cd above put us at the top of the repository

log() { echo "bench: $*" >&2; }
die() {
	log "$*"
	exit 1
}

tmp=""
proxy_pid=""
redis_started=0
cluster_started=0
# The processes this run started: "name pid" each, stopped by pid on exit.
others=()
ports=()
# The pid of the system in the middle (a proxy, etcd) at each address the
# load generators aim at, for the CPU figures; direct Redis has none.
declare -A middle_of=()

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	local entry
	for entry in "${others[@]}"; do
		# shellcheck disable=SC2086
		stop_pid $entry
	done
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

# need_tools [PKG:COMMAND...]: redis-benchmark, redis-cli, go, and each COMMAND
# (from Debian package PKG), installed with apt-get when root.
need_tools() {
	local want=("redis-tools:redis-benchmark" "redis-tools:redis-cli" "redis-server:redis-server" "$@")
	local pkgs=() w
	for w in "${want[@]}"; do
		command -v "${w#*:}" >/dev/null || pkgs+=("${w%%:*}")
	done
	if ((${#pkgs[@]} > 0)); then
		# shellcheck disable=SC2207
		pkgs=($(printf '%s\n' "${pkgs[@]}" | sort -u))
		if [[ ${EUID} -eq 0 ]]; then
			log "installing ${pkgs[*]}"
			# Debian's etcd-server would start a system etcd where there is an
			# init system; this run starts its own on other ports either way.
			apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >&2
		else
			die "missing commands; install them: sudo apt-get install -y ${pkgs[*]}"
		fi
	fi
	command -v go >/dev/null || die "go not found"
}

# raise_nofile N: raise the open-file limit to at least N (root may raise the hard limit).
raise_nofile() {
	local need=$1
	if (($(ulimit -n) < need)); then
		ulimit -n "$need" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
	fi
	(($(ulimit -n) >= need)) || log "open-file limit $(ulimit -n) < $need: the idle-client test may fail"
}

# check_proxy [NAME PID LOG]: exit with the last lines of LOG if the fenceproxy
# at PID (default: the run's one) has died.
check_proxy() {
	local name=${1:-fenceproxy} pid=${2:-$proxy_pid} logf=${3:-$tmp/fenceproxy.log}
	[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && return
	log "$name (pid $pid) died; last log lines:"
	tail -n 30 "$logf" >&2 || true
	exit 1
}

# wait_ping ADDR PID NAME LOG: wait until ADDR answers PING, or die.
wait_ping() {
	local addr=$1 pid=$2 name=$3 logf=$4 i
	for ((i = 0; i < WAIT_SECS * 10; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail -n 20 "$logf" >&2 || true
			die "$name (pid $pid) exited at start"
		fi
		if [[ "$(redis-cli -h "${addr%:*}" -p "${addr##*:}" ping 2>/dev/null)" == PONG ]]; then
			return
		fi
		sleep 0.1
	done
	die "$name did not answer PING on $addr within ${WAIT_SECS}s"
}

# launch_proxy NAME BIN LOG DATADIR [ARGS...]: the fenceproxy BIN on a free
# loopback port in front of the run's backend (--min-replicas 1), answering PING;
# sets launched_addr and launched_pid.
launch_proxy() {
	local name=$1 bin=$2 logf=$3 data=$4 port
	shift 4
	port=$(free_port)
	ports+=("$port")
	launched_addr=127.0.0.1:$port
	"$bin" --listen "$launched_addr" --backend "${SEEDS:-$MASTER_ADDR}" \
		--data-dir "$data" --min-replicas 1 --metrics-listen '' \
		--max-clients $((IDLE_CLIENTS + 1000)) "$@" >"$logf" 2>&1 &
	launched_pid=$!
	others+=("$name $launched_pid")
	middle_of[$launched_addr]=$launched_pid
	wait_ping "$launched_addr" "$launched_pid" "$name" "$logf"
}

start_proxy() {
	launch_proxy fenceproxy ./bin/fenceproxy "$tmp/fenceproxy.log" "$tmp/data"
	PROXY_ADDR=$launched_addr proxy_pid=$launched_pid
}

# start_local_redis: a Redis master + replica in the temp dir (scripts/redis-local.sh);
# sets MASTER_ADDR, REPLICA_ADDR and their ports, and their pids for the CPU figures.
start_local_redis() {
	redis_started=1
	scripts/redis-local.sh start "$tmp/redis" >&2
	# shellcheck disable=SC1091
	source "$tmp/redis/env"
	ports+=("$MASTER_PORT" "$REPLICA_PORT")
	cpu_pid[master]=$(cat "$tmp/redis/master.pid")
	cpu_pid[replica]=$(cat "$tmp/redis/replica.pid")
}

# start_twemproxy: nutcracker in the foreground (so $! is its pid), one pool in
# front of the master, stats on a loopback port.
start_twemproxy() {
	local port sport
	port=$(free_port)
	ports+=("$port")
	sport=$(free_port)
	TWEM_ADDR=127.0.0.1:$port
	cat >"$tmp/nutcracker.yml" <<YML
bench:
  listen: $TWEM_ADDR
  hash: fnv1a_64
  distribution: ketama
  redis: true
  preconnect: true
  auto_eject_hosts: false
  timeout: 5000
  servers:
   - $MASTER_ADDR:1
YML
	nutcracker -c "$tmp/nutcracker.yml" -s "$sport" -a 127.0.0.1 -v 4 >"$tmp/nutcracker.log" 2>&1 &
	TWEM_PID=$!
	others+=("twemproxy $TWEM_PID")
	middle_of[$TWEM_ADDR]=$TWEM_PID
	wait_ping "$TWEM_ADDR" "$TWEM_PID" twemproxy "$tmp/nutcracker.log"
}

# start_etcd: a one-node etcd on loopback, its data in the temp dir.
start_etcd() {
	local cport pport i
	cport=$(free_port)
	ports+=("$cport")
	pport=$(free_port)
	ETCD_ADDR=127.0.0.1:$cport
	etcd --name bench --data-dir "$tmp/etcd" \
		--listen-client-urls "http://$ETCD_ADDR" --advertise-client-urls "http://$ETCD_ADDR" \
		--listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
		--initial-cluster "bench=http://127.0.0.1:$pport" --initial-cluster-state new \
		--logger zap --log-level warn >"$tmp/etcd.log" 2>&1 &
	ETCD_PID=$!
	others+=("etcd $ETCD_PID")
	middle_of[$ETCD_ADDR]=$ETCD_PID
	for ((i = 0; i < WAIT_SECS * 10; i++)); do
		kill -0 "$ETCD_PID" 2>/dev/null || {
			tail -n 20 "$tmp/etcd.log" >&2
			die "etcd exited at start"
		}
		if etcd_healthy "$cport"; then
			return
		fi
		sleep 0.1
	done
	die "etcd not healthy on $ETCD_ADDR within ${WAIT_SECS}s"
}

etcd_healthy() {
	local out
	out=$(
		exec 2>/dev/null
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
		timeout 2 cat <&3
	) 2>/dev/null || return 1
	[[ $out == *'"health":"true"'* ]]
}

# Results: best[key]=rate and lat[key]="p50 p99", key = TEST/P/TARGET or lock key;
# rounds[key]: every round's "rate,p50,p99,CPU..." (CPU as in cpu below, "-" when
# not measured), space-separated in the order run; best_round[key]: the best one's.
declare -A best=() lat=() errs=() extra=() rounds=() best_round=()
# redis-benchmark runs that got error replies, and a memory load that granted nothing, one line each.
rb_failed=()

# record KEY RATE P50 P99: keep the run with the higher rate. An entry's
# fields: 1 rate, 2 p50, 3 p99, 4-8 CPU (as in cpu below), 9-10 the master's
# script calls and WAITs per op (lock runs only; as in run_calls below).
record() {
	local key=$1 rate=$2 c=${run_cpu:--} k=${run_calls:-- -}
	[[ $c != - ]] || c="- - - - -"
	local entry="$rate,$3,$4,${c// /,},${k// /,}"
	rounds[$key]+="$entry "
	if [[ -z ${best[$key]:-} ]] || awk -v a="$rate" -v b="${best[$key]}" 'BEGIN { exit !(a > b) }'; then
		best[$key]=$rate
		lat[$key]="$3 $4"
		cpu[$key]=$run_cpu
		best_round[$key]=$entry
	fi
}

# Where each run's CPU time goes, from /proc, in clock ticks: the whole
# machine's busy time (every core: user, nice, system, irq, softirq) and
# that of the Redis master, its replica and the system in the middle
# (fenceproxy, twemproxy or etcd). What is left is the load generator's,
# the kernel's share of the network stack, and the rest of the machine.
declare -A cpu_pid=() # master, replica: set by start_local_redis
declare -A cpu=()     # KEY -> "total master replica middle rest" in us per op, of the best run
run_cpu=""
hz=$(getconf CLK_TCK)

# pid_ticks PIDS: the user+sys ticks of PIDS (one pid, or several
# space-separated: the sum, as for the nodes of a tier), 0 for none.
pid_ticks() {
	local p t=0 n
	for p in $1; do
		n=$(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null) || n=0
		t=$((t + ${n:-0}))
	done
	echo "$t"
}

# cpu_snap MIDDLE_PID: "busy master replica middle" ticks now.
cpu_snap() {
	echo "$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat) $(pid_ticks "${cpu_pid[master]:-}")" \
		"$(pid_ticks "${cpu_pid[replica]:-}") $(pid_ticks "$1")"
}

# cpu_per_op BEFORE AFTER OPS: "total master replica middle rest", us per op,
# with cpu_digits decimals (--clients: 3, for figures of about 1 us at -P 16).
cpu_digits=1
cpu_per_op() {
	awk -v a="$1" -v b="$2" -v ops="$3" -v hz="$hz" -v d="$cpu_digits" 'BEGIN {
		split(a, x, " "); split(b, y, " ")
		if (ops + 0 <= 0) { print "-"; exit }
		us = 1e6 / hz / ops
		t = (y[1] - x[1]) * us; m = (y[2] - x[2]) * us; r = (y[3] - x[3]) * us; p = (y[4] - x[4]) * us
		f = "%." d "f"
		printf f " " f " " f " " f " " f, t, m, r, p, t - m - r - p
	}'
}

# cpu_row LABEL KEY: one line of the CPU table, if KEY's best run has figures;
# cores busy is total us per op times the rate.
cpu_row() {
	local c=${cpu[$2]:-}
	[[ -n $c && $c != - ]] || return 0
	# shellcheck disable=SC2086
	printf '%-44s %8s %8s %8s %8s %8s %11s\n' "$1" $c \
		"$(awk -v t="${c%% *}" -v r="${best[$2]}" 'BEGIN { printf "%.2f", t * r / 1e6 }')"
}

# rb TARGET ADDR PIPELINE N [TESTS [ARGS...]]: one redis-benchmark run (-t TESTS,
# default set,get; ARGS such as --cluster go to redis-benchmark) with $CLIENTS
# clients (rb_clients=C rb ...: C), recorded per test under its first word (SET,
# GET, MSET) as TEST/PIPELINE/TARGET. A run with error replies is not recorded
# but listed in rb_failed.
rb() {
	local target=$1 addr=$2 p=$3 n=$4 tests=${5:-set,get} out line test rps p50 p99 err
	shift $(($# < 5 ? $# : 5))
	local rc=0 middle=${middle_of[$addr]:-} before
	before=$(cpu_snap "$middle")
	out=$(redis-benchmark -h "${addr%:*}" -p "${addr##*:}" -c "${rb_clients:-$CLIENTS}" -n "$n" \
		-r 100000 -t "$tests" -P "$p" --csv "$@" 2>"$tmp/rb.err") || rc=$?
	# Per test only when the run had one test: CPU is measured per run.
	run_cpu=""
	[[ $tests == *,* ]] || run_cpu=$(cpu_per_op "$before" "$(cpu_snap "$middle")" "$n")
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

# lb KEY SYSTEM ADDR [-hot]: one lockbench run (etcdbench for SYSTEM etcd), recorded under KEY.
lb() {
	local key=$1 system=$2 addr=$3 out line middle=${middle_of[$3]:-} before after calls_before calls_after
	shift 3
	calls_before=$(calls_snap)
	before=$(cpu_snap "$middle")
	if [[ $system == etcd ]]; then
		out=$("$tmp/etcdbench" -endpoints "$addr" -clients "$CLIENTS" \
			-duration "$LOCK_DUR" -resources 100000 "$@" 2>&1) ||
			die "etcdbench $* failed: $out"
	else
		out=$("$tmp/lockbench" -system "$system" -addr "$addr" -clients "$CLIENTS" \
			-duration "$LOCK_DUR" -resources 100000 "$@" 2>&1) ||
			die "lockbench $system $* failed: $out"
	fi
	after=$(cpu_snap "$middle")
	calls_after=$(calls_snap)
	# The raw line names the run it belongs to, as rb's do.
	while IFS= read -r line; do
		[[ $line != "RESULT "* ]] || line="RESULT key=$key ${line#RESULT }"
		echo "$line"
	done <<<"$out"
	line=$(grep '^RESULT ' <<<"$out" | tail -n 1)
	[[ -n $line ]] || die "lockbench $system printed no RESULT line"
	last_ops=$(field "$line" ops)
	run_cpu=$(cpu_per_op "$before" "$after" "$last_ops")
	run_calls=$(calls_per_op "$calls_before" "$calls_after" "$last_ops")
	echo "CALLS key=$key scripts_per_op=${run_calls% *} waits_per_op=${run_calls#* }"
	record "$key" "$(field "$line" ops_per_sec)" "$(field "$line" p50_ms)" "$(field "$line" p99_ms)"
	run_calls=""
	errs[$key]=$((${errs[$key]:-0} + $(field "$line" errors)))
	if [[ $* == *-hot* ]]; then
		local ov
		ov=$(field "$line" overlaps)
		[[ $ov == 0 || $ov == "?" ]] || extra[$key]="${extra[$key]:-} overlaps=$ov"
	fi
}

# The Redis master's script calls (EVALSHA + EVAL) and WAITs, from INFO
# commandstats: per lock cycle they tell how many lock writes share one
# script call and one WAIT (the lock writer's batching). Counted over the
# whole run on the master, so a second proxy's heartbeat adds its few calls.
run_calls=""

# calls_snap: "scripts waits" the master has run so far ("" without one).
calls_snap() {
	[[ -n ${MASTER_ADDR:-} ]] || return 0
	redis-cli -h "${MASTER_ADDR%:*}" -p "${MASTER_ADDR##*:}" info commandstats 2>/dev/null |
		awk -F'[:=,]' '/^cmdstat_(evalsha|eval):/ { s += $3 } /^cmdstat_wait:/ { w = $3 }
			END { printf "%d %d", s, w }'
}

# calls_per_op BEFORE AFTER OPS: "scripts waits" per op, or "- -".
calls_per_op() {
	awk -v a="$1" -v b="$2" -v ops="$3" 'BEGIN {
		if (a == "" || b == "" || ops + 0 <= 0) { print "- -"; exit }
		split(a, x, " "); split(b, y, " ")
		printf "%.3f %.3f", (y[1] - x[1]) / ops, (y[2] - x[2]) / ops
	}'
}

# rss_mib PID: VmRSS of PID in MiB.
rss_mib() {
	awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"
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


# tsv SECTION TEST SYSTEM KEY UNIT: one results line from best/lat/errs[KEY].
tsv() {
	local v=${best[$4]:-} l=${lat[$4]:-"- -"}
	[[ -n $v ]] || v=-
	# shellcheck disable=SC2086
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$v" "$5" $l "${errs[$4]:-0}" >>"$tsv_tmp"
}

# latencies KEY: "p50/p99" of KEY's better round.
latencies() {
	local l=${lat[$1]:-"- -"}
	# shellcheck disable=SC2086
	printf '%s/%s' $l
}

# latency_ratios KEY OTHER [BASE]: "p50/p99" of KEY's latencies over OTHER's;
# with BASE, of what each adds to BASE's: (KEY - BASE) / (OTHER - BASE).
latency_ratios() {
	awk -v a="${lat[$1]:-}" -v b="${lat[$2]:-}" -v base="${3:+${lat[$3]:-}}" -v with_base="${3:+1}" 'BEGIN {
		split(a, x, " "); split(b, y, " "); split(base, z, " ")
		for (i = 1; i <= 2; i++) {
			if (with_base && z[i] == "") { r = "-" }
			else {
				num = x[i] - z[i]; den = y[i] - z[i]
				# Noise can put a proxy below direct Redis: no added latency to compare.
				r = (x[i] != "" && y[i] != "" && den > 0 && num >= 0) ? sprintf("%.2f", num / den) : "-"
			}
			printf "%s%s", (i > 1 ? "/" : ""), r
		}
	}'
}

# cell KEY: "rate p50/p99" of KEY for a table.
cell() {
	local l=${lat[$1]:-"- -"}
	# shellcheck disable=SC2086
	printf '%9s %13s' "$(num "${best[$1]:-}")" "$(printf '%s/%s' $l)"
}

main() {
	need_tools nutcracker:nutcracker etcd-server:etcd
	raise_nofile $((IDLE_CLIENTS + 2000))
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/fenceproxy-bench.XXXXXX")
	local t0=$SECONDS

	log "building ./bin/fenceproxy and the harnesses"
	mkdir -p bin
	go build -o ./bin/fenceproxy ./cmd/fenceproxy
	local tool
	for tool in lockbench idleclients lockload svgplot; do
		go build -o "$tmp/$tool" "./scripts/$tool"
	done
	# Its own module: the etcd client's dependencies stay out of fenceproxy's go.mod.
	(cd scripts/etcdbench && go build -o "$tmp/etcdbench" .)

	start_local_redis
	start_proxy
	start_twemproxy
	start_etcd
	log "redis master $MASTER_ADDR, replica $REPLICA_ADDR, fenceproxy $PROXY_ADDR (pid $proxy_pid)," \
		"twemproxy $TWEM_ADDR (pid $TWEM_PID), etcd $ETCD_ADDR (pid $ETCD_PID)"

	local rep p n t
	for p in 1 16; do
		n=$N_P1
		((p == 1)) || n=$N_P16
		for ((rep = 1; rep <= RB_REPS; rep++)); do
			# One test per run, so that each has its own CPU figures.
			for t in set get; do
				rb direct "$MASTER_ADDR" "$p" "$n" "$t"
				rb twemproxy "$TWEM_ADDR" "$p" "$n" "$t"
				rb proxy "$PROXY_ADDR" "$p" "$n" "$t"
				check_proxy
			done
		done
	done

	# One client, one request at a time: what each system adds to a round trip.
	for ((rep = 1; rep <= RB_REPS; rep++)); do
		for t in set get; do
			rb_clients=1 rb c1/direct "$MASTER_ADDR" 1 "$N_C1" "$t"
			rb_clients=1 rb c1/twemproxy "$TWEM_ADDR" 1 "$N_C1" "$t"
			rb_clients=1 rb c1/proxy "$PROXY_ADDR" 1 "$N_C1" "$t"
			check_proxy
		done
	done

	for ((rep = 1; rep <= LOCK_REPS; rep++)); do
		lb distinct/redis redis "$MASTER_ADDR"
		lb distinct/redis-fenced redis-fenced "$MASTER_ADDR"
		lb distinct/etcd etcd "$ETCD_ADDR"
		lb distinct/fenceproxy fenceproxy "$PROXY_ADDR"
		check_proxy
		lb hot/redis-fenced redis-fenced "$MASTER_ADDR" -hot
		lb hot/etcd etcd "$ETCD_ADDR" -hot
		lb hot/fenceproxy fenceproxy "$PROXY_ADDR" -hot
		check_proxy
	done

	local idle_line="" loop_idle_line="" load_line="" load_before=""
	if ((!quick)); then
		# Twice: clients that sent a forwarded request (EXISTS), which stay
		# on the --serve-loop, then clients that sent two PINGs at once, which moves each
		# to a goroutine of its own (the larger figure, so it runs second:
		# what the first run leaves to the Go heap only inflates the first).
		log "memory: $IDLE_CLIENTS idle clients on fenceproxy's serve loop (pid $proxy_pid)"
		loop_idle_line=$("$tmp/idleclients" -addr "$PROXY_ADDR" -pid "$proxy_pid" -n "$IDLE_CLIENTS" -forwarded 2>&1) ||
			die "idleclients -forwarded failed: $loop_idle_line"
		echo "$loop_idle_line"
		loop_idle_line=$(grep '^RESULT ' <<<"$loop_idle_line")
		check_proxy
		log "memory: $IDLE_CLIENTS idle clients on fenceproxy, each on a goroutine (pid $proxy_pid)"
		idle_line=$("$tmp/idleclients" -addr "$PROXY_ADDR" -pid "$proxy_pid" -n "$IDLE_CLIENTS" 2>&1) ||
			die "idleclients failed: $idle_line"
		echo "$idle_line"
		idle_line=$(grep '^RESULT ' <<<"$idle_line")
		check_proxy

		# A fresh proxy, so its memory is what the resources cost. Its own
		# --key-prefix: the proxy above is still live on this backend with
		# another fence store, and under one prefix each would see the
		# other's token authority and refuse every lock command.
		local lport lpid
		lport=$(free_port)
		./bin/fenceproxy --listen "127.0.0.1:$lport" --backend "$MASTER_ADDR" \
			--data-dir "$tmp/data-load" --min-replicas 0 --metrics-listen '' --key-prefix "load:" \
			>"$tmp/fenceproxy-load.log" 2>&1 &
		lpid=$!
		others+=("fenceproxy-load $lpid")
		wait_ping "127.0.0.1:$lport" "$lpid" "fenceproxy (load)" "$tmp/fenceproxy-load.log"
		load_before=$(rss_mib "$lpid")
		log "memory: locking $LOAD_N distinct resources once through a fresh fenceproxy --min-replicas 0 (pid $lpid, RSS ${load_before} MiB)"
		load_line=$("$tmp/lockload" -addr "127.0.0.1:$lport" -pid "$lpid" -n "$LOAD_N" \
			-timeout "$LOAD_TIMEOUT" 2>&1) || die "lockload failed: $load_line"
		echo "$load_line"
		load_line=$(grep '^RESULT ' <<<"$load_line")
		# Some -TRYAGAIN on a loaded machine is the load's own doing (16,384
		# acquires in flight outlive a 2 s lease's margin); none granted is not.
		[[ $(field "$load_line" granted) != 0 ]] ||
			rb_failed+=("lockload through the fresh proxy: nothing granted, $(field "$load_line" errors) errors (its log: $(grep -m 1 -E 'level=(WARN|ERROR)' "$tmp/fenceproxy-load.log" || true))")
		kill -0 "$lpid" 2>/dev/null || die "fenceproxy (load) died: $(tail -n 5 "$tmp/fenceproxy-load.log")"
		stop_pid fenceproxy-load "$lpid"
	fi

	local mode=full
	((quick)) && mode=quick
	((scale)) && mode="full, --scale"
	local when
	when=$(date -u '+%Y-%m-%d %H:%M UTC')
	echo
	echo "== fenceproxy bench ($mode; $when; $(nproc) cores shared by every process; loopback; $CLIENTS clients;"
	echo "   each figure is the better of $RB_REPS rounds (redis-benchmark) / $LOCK_REPS round(s) of ${LOCK_DUR} (locks), systems alternating in each round)"
	echo
	echo "-- passthrough: redis-benchmark -c $CLIENTS, n=$N_P1 at -P 1, n=$N_P16 at -P 16 (req/s, p50/p99 ms)"
	printf '%-11s %23s %23s %23s %8s %8s %8s\n' test "direct Redis" twemproxy fenceproxy fp/direct fp/twem twem/dir
	local t
	for p in 1 16; do
		for t in SET GET; do
			printf '%-11s %23s %23s %23s %8s %8s %8s\n' "$t -P $p" "$(cell "$t/$p/direct")" "$(cell "$t/$p/twemproxy")" \
				"$(cell "$t/$p/proxy")" "$(ratio "${best[$t/$p/proxy]:-}" "${best[$t/$p/direct]:-}")" \
				"$(ratio "${best[$t/$p/proxy]:-}" "${best[$t/$p/twemproxy]:-}")" \
				"$(ratio "${best[$t/$p/twemproxy]:-}" "${best[$t/$p/direct]:-}")"
		done
	done

	echo
	echo "-- latency at one client: redis-benchmark -c 1 -P 1, n=$N_C1 (p50/p99 ms of the better round;"
	echo "   added = the system's latency minus direct Redis's, so added fp/twem is what fenceproxy adds against what twemproxy adds)"
	printf '%-11s %13s %13s %13s %11s %11s %13s\n' test "direct Redis" twemproxy fenceproxy fp/direct fp/twem "added fp/twem"
	for t in SET GET; do
		printf '%-11s %13s %13s %13s %11s %11s %13s\n' "$t -c 1" "$(latencies "$t/1/c1/direct")" \
			"$(latencies "$t/1/c1/twemproxy")" "$(latencies "$t/1/c1/proxy")" \
			"$(latency_ratios "$t/1/c1/proxy" "$t/1/c1/direct")" \
			"$(latency_ratios "$t/1/c1/proxy" "$t/1/c1/twemproxy")" \
			"$(latency_ratios "$t/1/c1/proxy" "$t/1/c1/twemproxy" "$t/1/c1/direct")"
	done

	local -A label=(
		[redis]="Redis SET NX PX + Lua release"
		[redis-fenced]="Redis fenced: Lua SET NX+INCR, WAIT 1"
		[etcd]="etcd 3.4 concurrency.Mutex"
		[fenceproxy]="fenceproxy LOCK.* (fsync, 1 replica)"
	)
	local s
	echo
	echo "-- locks, distinct resources: $CLIENTS clients, acquire+release of random resources (of 100,000)"
	printf '%-40s %10s %8s %8s %7s %14s\n' system cycles/s p50_ms p99_ms errors fenceproxy/this
	for s in redis redis-fenced etcd fenceproxy; do
		# shellcheck disable=SC2086
		printf '%-40s %10s %8s %8s %7s %14s\n' "${label[$s]}" "$(num "${best[distinct/$s]:-}")" \
			${lat[distinct/$s]:-- -} "${errs[distinct/$s]:-0}" \
			"$(ratio "${best[distinct/fenceproxy]:-}" "${best[distinct/$s]:-}")"
	done
	echo
	echo "-- hot lock: $CLIENTS clients contending for one resource (latency: the wait to acquire)"
	local -A hlabel=(
		[redis-fenced]="Redis fenced recipe, polling 1-3 ms"
		[etcd]="etcd Mutex.Lock (FIFO)"
		[fenceproxy]="fenceproxy LOCK.ACQUIRE WAIT (FIFO)"
	)
	printf '%-40s %10s %8s %8s %7s %14s\n' system handoffs/s p50_ms p99_ms errors fenceproxy/this
	for s in redis-fenced etcd fenceproxy; do
		# shellcheck disable=SC2086
		printf '%-40s %10s %8s %8s %7s %14s%s\n' "${hlabel[$s]}" "$(num "${best[hot/$s]:-}")" \
			${lat[hot/$s]:-- -} "${errs[hot/$s]:-0}" \
			"$(ratio "${best[hot/fenceproxy]:-}" "${best[hot/$s]:-}")" "${extra[hot/$s]:-}"
	done

	echo
	echo "-- where the CPU goes: us of CPU time per request (passthrough) or per lock cycle / handoff, in the better"
	echo "   round; total = every core's busy time; rest = load generator, kernel network stack, anything else"
	printf '%-44s %8s %8s %8s %8s %8s %11s\n' run total master replica middle rest cores_busy
	local k
	for p in 1 16; do
		for t in SET GET; do
			for s in direct twemproxy proxy; do
				cpu_row "$t -P $p $s" "$t/$p/$s"
			done
		done
	done
	for k in distinct/redis distinct/redis-fenced distinct/etcd distinct/fenceproxy hot/redis-fenced hot/etcd hot/fenceproxy; do
		cpu_row "lock $k" "$k"
	done

	if ((!quick)); then
		echo
		echo "-- memory: fenceproxy VmRSS (targets: <= $TARGET_IDLE_MIB MiB with 10,000 idle clients, <= $TARGET_LOAD_MIB MiB after 10M resources)"
		printf '%-58s %10s\n' "" "RSS MiB"
		printf '%-58s %10s\n' "proxy above, before the idle clients (after the runs above)" "$(field "$loop_idle_line" rss_before_mib)"
		printf '%-58s %10s\n' "with $(field "$loop_idle_line" accepted)/$IDLE_CLIENTS idle clients answering EXISTS (serve loop)" "$(field "$loop_idle_line" rss_mib)"
		printf '%-58s %10s\n' "  then, those gone, before the next" "$(field "$idle_line" rss_before_mib)"
		printf '%-58s %10s\n' "with $(field "$idle_line" accepted)/$IDLE_CLIENTS idle clients answering PING (goroutines)" "$(field "$idle_line" rss_mib)"
		printf '%-58s %10s\n' "fresh proxy (--min-replicas 0), at start" "$load_before"
		printf '%-58s %10s\n' "  after $LOAD_N distinct resources locked once" "$(field "$load_line" rss_mib)"
		printf '%-58s %10s\n' "  the same, $(field "$load_line" granted) granted, peak (VmHWM)" "$(field "$load_line" hwm_mib)"
		echo "load: $(field "$load_line" per_sec) resources/s over $(field "$load_line" seconds) s (64 connections, pipelined 256 deep, 2 s leases, fsync, no replica wait); errors $(field "$load_line" errors)"
	fi

	local cpu
	cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$proxy_pid/stat" 2>/dev/null || echo "?")
	echo
	echo "fenceproxy CPU: ${cpu}s user+sys over a $((SECONDS - t0))s run"
	local warn
	warn=$(grep -cE 'level=(WARN|ERROR)' "$tmp/fenceproxy.log" || true)
	echo "fenceproxy log: ${warn} WARN/ERROR lines"
	if ((warn > 0)); then
		grep -E 'level=(WARN|ERROR)' "$tmp/fenceproxy.log" | head -n 10
	fi

	# The machine-readable results and the plot.
	local out=docs/bench/latest
	((quick)) && out=docs/bench/quick
	mkdir -p docs/bench
	tsv_tmp="$tmp/results.tsv"
	{
		echo "# title: fenceproxy bench ($mode), $when, $(nproc) cores shared, loopback, $CLIENTS clients, better of $RB_REPS/$LOCK_REPS rounds"
		echo "# written by scripts/bench.sh; value is the better round's rate (unit), p50/p99 in ms are that round's"
		printf 'section\ttest\tsystem\tvalue\tunit\tp50_ms\tp99_ms\terrors\n'
	} >"$tsv_tmp"
	local sys
	for p in 1 16; do
		for t in SET GET; do
			for sys in direct twemproxy proxy; do
				local name=$sys
				[[ $sys == direct ]] && name="direct Redis"
				[[ $sys == proxy ]] && name=fenceproxy
				tsv passthrough "$t -P $p" "$name" "$t/$p/$sys" req/s
			done
		done
	done
	for t in SET GET; do
		tsv latency "$t -c 1 -P 1" "direct Redis" "$t/1/c1/direct" req/s
		tsv latency "$t -c 1 -P 1" twemproxy "$t/1/c1/twemproxy" req/s
		tsv latency "$t -c 1 -P 1" fenceproxy "$t/1/c1/proxy" req/s
	done
	tsv distinct "acquire+release" "Redis SET NX PX" distinct/redis cycles/s
	tsv distinct "acquire+release" "Redis fenced (WAIT 1)" distinct/redis-fenced cycles/s
	tsv distinct "acquire+release" "etcd Mutex" distinct/etcd cycles/s
	tsv distinct "acquire+release" fenceproxy distinct/fenceproxy cycles/s
	tsv hot "handoffs" "Redis fenced (WAIT 1)" hot/redis-fenced handoffs/s
	tsv hot "handoffs" "etcd Mutex" hot/etcd handoffs/s
	tsv hot "handoffs" fenceproxy hot/fenceproxy handoffs/s
	if ((!quick)); then
		local idle_t="$IDLE_CLIENTS idle clients" load_t="after $((LOAD_N / 1000000))M resources"
		{
			printf 'scale\tbefore idle clients\tfenceproxy\t%s\tMiB\t-\t-\t0\n' "$(field "$loop_idle_line" rss_before_mib)"
			printf 'scale\t%s on the serve loop\tfenceproxy\t%s\tMiB\t-\t-\t%s\n' "$idle_t" "$(field "$loop_idle_line" rss_mib)" \
				$((IDLE_CLIENTS - $(field "$loop_idle_line" accepted)))
			printf 'scale\t%s on the serve loop\ttarget\t%s\tMiB\t-\t-\t0\n' "$idle_t" "$TARGET_IDLE_MIB"
			printf 'scale\t%s\tfenceproxy\t%s\tMiB\t-\t-\t%s\n' "$idle_t" "$(field "$idle_line" rss_mib)" \
				$((IDLE_CLIENTS - $(field "$idle_line" accepted)))
			printf 'scale\t%s\ttarget\t%s\tMiB\t-\t-\t0\n' "$idle_t" "$TARGET_IDLE_MIB"
			printf 'scale\tfresh proxy\tfenceproxy\t%s\tMiB\t-\t-\t0\n' "$load_before"
			printf 'scale\t%s\tfenceproxy\t%s\tMiB\t-\t-\t%s\n' "$load_t" "$(field "$load_line" rss_mib)" "$(field "$load_line" errors)"
			printf 'scale\t%s\ttarget\t%s\tMiB\t-\t-\t0\n' "$load_t" "$TARGET_LOAD_MIB"
			printf 'load\tdistinct resources locked\tfenceproxy\t%s\tresources/s\t-\t-\t%s\n' \
				"$(field "$load_line" per_sec)" "$(field "$load_line" errors)"
		} >>"$tsv_tmp"
	fi
	cp "$tsv_tmp" "$out.tsv"
	"$tmp/svgplot" -in "$out.tsv" -out "$out.svg"
	echo "results: $out.tsv, plot: $out.svg"
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

# start_tier NAME BIN MIN_REPLICAS [ARGS...]: a tier of three nodes of the
# fenceproxy BIN (--peers, Raft) in front of the run's master, each with its
# own data dir and log under $tmp/NAME-n{1,2,3}, and waits for a ready leader
# that grants a lock (its token authority has joined); sets tier_leader,
# tier_follower and tier_other (client addresses: the leader, the follower the
# follower runs use, the third node), tier_pids (n1 n2 n3) and
# tier_leader_pid, tier_follower_pid and tier_other_pid.
start_tier() {
	local name=$1 bin=$2 minrep=$3 i peers="" pid
	shift 3
	local -a listen=() raft=()
	tier_pids=()
	for i in 1 2 3; do
		listen[i]=127.0.0.1:$(free_port)
		ports+=("${listen[i]##*:}")
		raft[i]=127.0.0.1:$(free_port)
		ports+=("${raft[i]##*:}")
		peers+="${peers:+,}n$i=${raft[i]}"
	done
	for i in 1 2 3; do
		"$bin" --listen "${listen[i]}" --backend "$MASTER_ADDR" --data-dir "$tmp/$name-n$i" \
			--min-replicas "$minrep" --metrics-listen '' \
			--node-id "n$i" --raft-listen "${raft[i]}" --peers "$peers" "$@" >"$tmp/$name-n$i.log" 2>&1 &
		pid=$!
		others+=("$name-n$i $pid")
		tier_pids+=("$pid")
		middle_of[${listen[i]}]=$pid
		wait_ping "${listen[i]}" "$pid" "$name node n$i" "$tmp/$name-n$i.log"
	done
	local leader="" deadline=$((SECONDS + 60))
	while [[ -z $leader ]] && ((SECONDS < deadline)); do
		for i in 1 2 3; do
			if redis-cli -h 127.0.0.1 -p "${listen[i]##*:}" INFO tier | grep -q '^tier_ready:1'; then
				leader=$i
			fi
		done
		sleep 0.2
	done
	[[ -n $leader ]] || die "no $name node became the leader within 60s"
	local follower=$((leader % 3 + 1))
	local other=$((follower % 3 + 1))
	tier_leader=${listen[leader]} tier_follower=${listen[follower]} tier_other=${listen[other]}
	tier_leader_pid=${tier_pids[leader - 1]} tier_follower_pid=${tier_pids[follower - 1]} tier_other_pid=${tier_pids[other - 1]}
	# A lock command is served once the leader's token authority has joined
	# (its first heartbeat round): wait for one grant.
	for ((i = 0; i < 100; i++)); do
		[[ "$(redis-cli -h "${tier_leader%:*}" -p "${tier_leader##*:}" LOCK.ACQUIRE bench:probe "$name" 1000 2>/dev/null)" =~ ^[0-9]+$ ]] && return
		sleep 0.2
	done
	die "the $name tier's leader $tier_leader granted no lock within 20s"
}

# main_tier: the --tier run (see the top of this file).
main_tier() {
	need_tools
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/fenceproxy-bench.XXXXXX")
	local t0=$SECONDS
	log "building ./bin/fenceproxy, lockbench and lockload"
	mkdir -p bin
	go build -o ./bin/fenceproxy ./cmd/fenceproxy
	go build -o "$tmp/lockbench" ./scripts/lockbench
	go build -o "$tmp/lockload" ./scripts/lockload
	start_local_redis
	start_proxy
	start_tier tier ./bin/fenceproxy 1 --key-prefix "tier:"
	local leader=$tier_leader follower=$tier_follower other=$tier_other i
	log "redis master $MASTER_ADDR, fenceproxy $PROXY_ADDR, tier leader $leader, follower $follower"
	tier_cpu_pids="$tier_leader_pid $tier_follower_pid $tier_other_pid"
	local rep k targets=(single leader follower) order
	declare -A target_addr=([single]=$PROXY_ADDR [leader]=$leader [follower]=$follower)
	# A warm-up of each, not recorded: the first run after a start pays for
	# connections, scripts and the first windows.
	for k in "${targets[@]}"; do
		"$tmp/lockbench" -system fenceproxy -addr "${target_addr[$k]}" -clients "$CLIENTS" -duration 1s >/dev/null 2>&1 ||
			die "lockbench warm-up against $k failed"
	done
	for ((rep = 1; rep <= TIER_ROUNDS; rep++)); do
		# Each round starts with the next system, so none always runs first.
		order=()
		for ((k = 0; k < 3; k++)); do
			order+=("${targets[(rep - 1 + k) % 3]}")
		done
		log "round $rep of $TIER_ROUNDS (${order[*]})"
		for k in "${order[@]}"; do
			tier_lb "$k" "${target_addr[$k]}"
			check_proxy
		done
	done
	local mode=full
	((quick)) && mode=quick
	echo
	echo "== fenceproxy bench, one node vs a tier of three ($mode; $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores shared by every"
	echo "   process; loopback; one Redis master + replica, --min-replicas 1; $CLIENTS clients, acquire+release of random resources"
	echo "   of 100,000; $TIER_ROUNDS rounds of ${LOCK_DUR} each through the one node, the tier's leader and a follower, in turn)"
	echo "-- cycles/s: the better round of each; rounds: the least, median and greatest tier/one-node ratio of the rounds one by one"
	printf '%-30s %10s %14s %10s %14s %7s   %s\n' figure "one node" "p50/p99 ms" tier "p50/p99 ms" ratio "rounds: min med max"
	tier_row "lock cycles/s via the leader" leader
	tier_row "lock cycles/s via a follower" follower
	echo "-- CPU time per lock cycle (us) in the better round: fenceproxy processes, and Redis master + replica"
	printf '%-30s %10s %10s %10s %10s %10s\n' run "leader" "follower" "follower" "fenceproxy" "Redis m+r"
	tier_cpu_row "one node" single
	tier_cpu_row "tier, via the leader" leader
	tier_cpu_row "tier, via a follower" follower
	echo "(one node: its CPU in the leader column; via a follower: the first follower column is the one the clients use, which"
	echo " relays to the leader; errors: one node ${errs[tier/single]:-0}, leader ${errs[tier/leader]:-0}, follower ${errs[tier/follower]:-0};"
	echo " lock runs took $((SECONDS - t0)) s)"
	echo "-- Raft log, each node since its start: writes (fsyncs), entries, and on the leader Batch entries and the ops they carried"
	for k in "$leader" "$follower" "$other"; do
		redis-cli -h "${k%:*}" -p "${k##*:}" INFO tier | tr -d '\r' |
			awk -F: '/^tier_(node_id|role|log_writes|log_entries|batch_entries|batch_ops):/ { printf "%s=%s ", substr($1, 6), $2 } END { print "" }'
	done
	local warn
	for i in 1 2 3; do
		warn=$(grep -cE 'level=(WARN|ERROR)' "$tmp/tier-n$i.log" || true)
		if ((warn > 0)); then
			echo "tier node n$i log: ${warn} WARN/ERROR lines"
			grep -E 'level=(WARN|ERROR)' "$tmp/tier-n$i.log" | head -n 5
		fi
	done
	((!quick)) || return 0

	# The memory section: a fresh tier, so its memory is what the resources
	# cost; the first tier stops first, to leave the cores to this one.
	local entry kept=() load_line="" rss_line="" t1=$SECONDS
	for entry in "${others[@]}"; do
		# shellcheck disable=SC2086
		if [[ $entry == tier-n* ]]; then stop_pid $entry; else kept+=("$entry"); fi
	done
	others=("${kept[@]}")
	start_tier load ./bin/fenceproxy 0 --key-prefix "load:"
	log "memory: locking $LOAD_N distinct resources once through a fresh tier's leader $tier_leader --min-replicas 0 (pids ${tier_pids[*]})"
	# Fewer in flight and longer leases than the single node's run: the
	# tier grants about a quarter as fast, and 16,384 acquires queued
	# behind one another outlived their 2 s leases (-TRYAGAIN, nothing
	# granted).
	load_line=$("$tmp/lockload" -addr "$tier_leader" -pid "$tier_leader_pid" -n "$LOAD_N" \
		-pipeline 64 -ttl-ms 10000 -timeout "$TIER_LOAD_TIMEOUT" 2>&1) || die "lockload failed: $load_line"
	echo "$load_line"
	load_line=$(grep '^RESULT ' <<<"$load_line")
	local pid
	for pid in "${tier_pids[@]}"; do
		kill -0 "$pid" 2>/dev/null || die "a load tier node (pid $pid) died"
		rss_line+="${rss_line:+ }$(rss_mib "$pid")"
	done
	echo "TIER_RSS leader_pid=$tier_leader_pid pids=${tier_pids[*]// /,} rss_mib=${rss_line// /,}"
	echo
	echo "-- memory: a fresh tier's VmRSS after $LOAD_N distinct resources locked once through its leader (target: <= $TARGET_LOAD_MIB MiB per node after 10M)"
	printf '%-58s %10s\n' "  the leader (lockload's reading, after it settled)" "$(field "$load_line" rss_settled_mib)"
	printf '%-58s %10s\n' "  each node, n1 n2 n3 (leader pid $tier_leader_pid)" "$rss_line"
	echo "load: $(field "$load_line" per_sec) resources/s over $(field "$load_line" seconds) s through the leader (64 connections, pipelined 64 deep, 10 s leases, no replica wait); granted $(field "$load_line" granted), errors $(field "$load_line" errors)"
	echo "(the memory section took $((SECONDS - t1)) s)"
	echo "-- Raft log of the load tier's leader: $(redis-cli -h "${tier_leader%:*}" -p "${tier_leader##*:}" INFO tier | tr -d '\r' |
		awk -F: '/^tier_(log_writes|log_entries|batch_entries|batch_ops|snapshot_resources):/ { printf "%s=%s ", substr($1, 6), $2 }')"
}

# tier_lb TARGET ADDR: one lockbench run through TARGET (single, leader or
# follower) at ADDR, recorded under tier/TARGET, with the CPU per cycle of
# each tier node (tier_cpu_pids: leader, the follower the follower runs use,
# the other) in tier_cpu_rounds[tier/TARGET] ("leader,follower,other" per round).
tier_lb() {
	local key=tier/$1 before after
	before=$(tier_ticks)
	lb "$key" fenceproxy "$2"
	after=$(tier_ticks)
	tier_cpu_rounds[$key]+="$(awk -v a="$before" -v b="$after" -v ops="$last_ops" -v hz="$hz" 'BEGIN {
		n = split(a, x, " "); split(b, y, " ")
		for (i = 1; i <= n; i++) printf "%s%.1f", (i > 1 ? "," : ""), (y[i] - x[i]) * 1e6 / hz / ops
	}') "
}

# tier_ticks: the tier nodes' CPU ticks now, in tier_cpu_pids' order.
tier_ticks() {
	local p out=""
	for p in $tier_cpu_pids; do
		out+="$(pid_ticks "$p") "
	done
	echo "$out"
}

declare -A tier_cpu_rounds=()
tier_cpu_pids=""

# tier_row TITLE TARGET: one node against TARGET (leader or follower): better
# rounds, ratio, and the spread of the ratios of the rounds one by one.
tier_row() {
	local b=${best[tier/single]:-} p=${best[tier/$2]:-} bl=${lat[tier/single]:-"- -"} pl=${lat[tier/$2]:-"- -"}
	local spread
	spread=$(awk -v o="${rounds[tier/single]:-}" -v n="${rounds[tier/$2]:-}" 'BEGIN {
		no = split(o, ro, " "); nn = split(n, rn, " "); k = 0
		for (i = 1; i <= no && i <= nn; i++) {
			split(ro[i], a, ","); split(rn[i], b, ",")
			if (a[1] > 0) r[++k] = b[1] / a[1]
		}
		for (i = 2; i <= k; i++) { v = r[i]; for (j = i - 1; j >= 1 && r[j] > v; j--) r[j + 1] = r[j]; r[j + 1] = v }
		if (!k) { print "-"; exit }
		printf "%.2f %.2f %.2f", r[1], k % 2 ? r[(k + 1) / 2] : (r[k / 2] + r[k / 2 + 1]) / 2, r[k]
	}')
	# shellcheck disable=SC2086
	printf '%-30s %10s %14s %10s %14s %7s   %s\n' "$1" "$(num "$b")" "$(printf '%s/%s' $bl)" \
		"$(num "$p")" "$(printf '%s/%s' $pl)" "$(ratio "$p" "$b")" "$spread"
}

# tier_cpu_row TITLE TARGET: the CPU per cycle of TARGET's better round.
tier_cpu_row() {
	local key=tier/$2 idx
	idx=$(awk -v all="${rounds[$key]:-}" -v b="${best_round[$key]:-}" 'BEGIN { n = split(all, r, " "); for (i = 1; i <= n; i++) if (r[i] == b) { print i; exit } }')
	[[ -n $idx ]] || return 0
	awk -v t="$1" -v single="$([[ $2 == single ]] && echo 1)" -v c="$(cut -d' ' -f"$idx" <<<"${tier_cpu_rounds[$key]}")" -v e="${best_round[$key]}" 'BEGIN {
		split(c, x, ","); n = split(e, y, ",")
		redis = (n >= 6 && y[5] != "-") ? sprintf("%.1f", y[5] + y[6]) : "-"
		if (single) { printf "%-30s %10.1f %10s %10s %10.1f %10s\n", t, y[7], "-", "-", y[7], redis; exit }
		printf "%-30s %10.1f %10.1f %10.1f %10.1f %10s\n", t, x[1], x[2], x[3], x[1] + x[2] + x[3], redis
	}'
}

# build_pair builds --compare's OLD and NEW (their descriptions into the
# caller's desc) and lockbench, into $tmp.
build_pair() {
	build_fenceproxy old "$old_rev"
	desc[old]=$built_desc
	build_fenceproxy new "$new_rev"
	desc[new]=$built_desc
	go build -o "$tmp/lockbench" ./scripts/lockbench
}

# main_tier_compare: --tier --compare OLD NEW: two tiers of three, one of each
# build, in front of one Redis master + replica (--min-replicas 1, each tier its
# own --key-prefix), and rounds of lockbench through each tier's leader and a
# follower, OLD and NEW back to back (OLD first in odd rounds).
main_tier_compare() {
	need_tools
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/fenceproxy-bench.XXXXXX")
	local t0=$SECONDS
	local -A desc=() leader=() follower=()
	build_pair
	start_local_redis
	local s
	for s in old new; do
		start_tier "tier-$s" "$tmp/fenceproxy-$s" 1 --key-prefix "tb-$s:"
		leader[$s]=$tier_leader follower[$s]=$tier_follower
	done
	log "old tier: leader ${leader[old]}, follower ${follower[old]}; new tier: leader ${leader[new]}, follower ${follower[new]}"
	local round order=()
	for ((round = 1; round <= AB_ROUNDS; round++)); do
		order=(old new)
		((round % 2)) || order=(new old)
		log "round $round of $AB_ROUNDS (${order[*]})"
		for s in "${order[@]}"; do
			lb "leader/$s" fenceproxy "${leader[$s]}"
		done
		for s in "${order[@]}"; do
			lb "follower/$s" fenceproxy "${follower[$s]}"
		done
	done
	echo
	echo "== fenceproxy tier A/B, NEW against OLD ($(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores shared by every process; loopback;"
	echo "   one Redis master + replica, a tier of three of each build in front of it, --min-replicas 1; $AB_ROUNDS rounds of"
	echo "   lockbench through each tier's leader, then a follower, OLD and NEW back to back, OLD first in odd rounds)"
	echo "   OLD: ${desc[old]}"
	echo "   NEW: ${desc[new]}"
	printf '%-42s %10s %10s %8s   %s\n' figure OLD NEW NEW/OLD "rounds: min med max"
	ab_row "lock cycles/s via the leader" leader 1 '%.0f'
	ab_row "lock cycle p99 via the leader (ms)" leader 3 '%.2f'
	ab_row "lock cycles/s via a follower" follower 1 '%.0f'
	ab_row "lock cycle p99 via a follower (ms)" follower 3 '%.2f'
	ab_row "the leader's CPU per lock cycle (us)" leader 7 '%.1f'
	echo "(lockbench -clients $CLIENTS -duration $LOCK_DUR, distinct of 100,000 resources; errors: old ${errs[leader/old]:-0}+${errs[follower/old]:-0},"
	echo " new ${errs[leader/new]:-0}+${errs[follower/new]:-0} (leader+follower); run took $((SECONDS - t0)) s)"
}

# build_fenceproxy WHICH REV: $tmp/fenceproxy-WHICH from REV, the path of a built
# fenceproxy (relative to where the script was started) or else a git revision,
# whose tree is unpacked with git archive and built; built_desc says which it was.
build_fenceproxy() {
	local which=$1 rev=$2 path=$2 out=$tmp/fenceproxy-$1 src=$tmp/src-$1 sha
	[[ $path == /* ]] || path=$invoked_from/$path
	if [[ -f $path && -x $path ]]; then
		cp "$path" "$out"
		built_desc="the binary $path"
		return
	fi
	sha=$(git rev-parse --verify --quiet "$rev^{commit}") ||
		die "--compare: $rev is neither a git revision nor an executable file"
	log "building $which: $rev ($sha)"
	mkdir -p "$src"
	git archive "$sha" | tar -x -C "$src"
	(cd "$src" && go build -o "$out" ./cmd/fenceproxy) || die "--compare: building $rev failed"
	built_desc="$rev = $(git log -1 --format='%h (%cd) %s' --date=format:'%Y-%m-%d %H:%M' "$sha" | cut -c1-110)"
}

# ab_row TITLE KEY FIELD FORMAT [A B]: one line of the A/B table: KEY's FIELD (1
# rate, 2 p50, 3 p99, 4 the whole machine's CPU per op, 7 the middle system's,
# "redis" master + replica CPU per op, 9 and 10 the master's script calls and
# WAITs per op, as in rounds) in A's and B's better round (KEY/A, KEY/B; A is
# old and B new unless named), B/A, and the least, median and greatest B/A of
# the rounds taken one by one.
ab_row() {
	local key=$2 a=${5:-old} b=${6:-new}
	awk -v f="$3" -v fmt="$4" -v title="$1" -v ob="${best_round[$key/$a]:-}" -v nb="${best_round[$key/$b]:-}" \
		-v orounds="${rounds[$key/$a]:-}" -v nrounds="${rounds[$key/$b]:-}" '
	function val(e, x, n) {
		n = split(e, x, ",")
		if (f == "redis") return (n >= 6 && x[5] != "-" && x[6] != "") ? x[5] + x[6] : ""
		return (f <= n && x[f] != "-" && x[f] != "") ? x[f] + 0 : ""
	}
	function show(v) { return v == "" ? "-" : sprintf(fmt, v) }
	BEGIN {
		o = val(ob); nw = val(nb)
		no = split(orounds, ro, " "); nn = split(nrounds, rn, " ")
		k = 0
		for (i = 1; i <= no && i <= nn; i++) {
			a = val(ro[i]); b = val(rn[i])
			if (a != "" && b != "" && a > 0) r[++k] = b / a
		}
		for (i = 2; i <= k; i++) {
			v = r[i]
			for (j = i - 1; j >= 1 && r[j] > v; j--) r[j + 1] = r[j]
			r[j + 1] = v
		}
		spread = "-"
		if (k) spread = sprintf("%.2f %.2f %.2f", r[1], k % 2 ? r[(k + 1) / 2] : (r[k / 2] + r[k / 2 + 1]) / 2, r[k])
		printf "%-42s %10s %10s %8s   %s\n", title, show(o), show(nw), (o != "" && nw != "" && o > 0) ? sprintf("%.2f", nw / o) : "-", spread
	}'
}

# added_row TITLE KEY FIELD: the latency (FIELD 2 p50, 3 p99) NEW adds to direct
# Redis's over what twemproxy adds, (new - direct) / (twem - direct), at one
# client: of the better rounds (as latency_ratios), then the least, median and
# greatest of the rounds one by one (a round where a proxy came out at or below
# direct Redis has no ratio).
added_row() {
	local key=$2
	awk -v f="$3" -v title="$1" -v nrounds="${rounds[$key/new]:-}" -v trounds="${rounds[$key/twem]:-}" \
		-v drounds="${rounds[$key/direct]:-}" -v best="$(latency_ratios "$key/new" "$key/twem" "$key/direct")" '
	function val(e, x, n) {
		n = split(e, x, ",")
		return (f <= n && x[f] != "-" && x[f] != "") ? x[f] + 0 : ""
	}
	BEGIN {
		nn = split(nrounds, rn, " "); nt = split(trounds, rt, " "); nd = split(drounds, rd, " ")
		k = 0
		for (i = 1; i <= nn && i <= nt && i <= nd; i++) {
			a = val(rn[i]); t = val(rt[i]); d = val(rd[i])
			if (a != "" && t != "" && d != "" && t > d && a >= d) r[++k] = (a - d) / (t - d)
		}
		for (i = 2; i <= k; i++) {
			v = r[i]
			for (j = i - 1; j >= 1 && r[j] > v; j--) r[j + 1] = r[j]
			r[j + 1] = v
		}
		spread = "-"
		if (k) spread = sprintf("%.2f %.2f %.2f", r[1], k % 2 ? r[(k + 1) / 2] : (r[k / 2] + r[k / 2 + 1]) / 2, r[k])
		split(best, bb, "/")
		printf "%-42s %10s %10s %8s   %s\n", title, "", "", bb[f - 1], spread
	}'
}

# main_compare: the --compare run (see the top of this file).
main_compare() {
	need_tools nutcracker:nutcracker # twemproxy runs in the same rounds
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/fenceproxy-bench.XXXXXX")
	local t0=$SECONDS
	local -A desc=() addr=() pid=()
	build_pair

	start_local_redis
	local s
	# Key prefixes of one length, so that neither proxy writes longer keys; each
	# its own, so that neither sees the other's token authority as live.
	for s in old new; do
		launch_proxy "fenceproxy-$s" "$tmp/fenceproxy-$s" "$tmp/fenceproxy-$s.log" "$tmp/data-$s" \
			--key-prefix "fpbench-$s:"
		addr[$s]=$launched_addr pid[$s]=$launched_pid
	done
	start_twemproxy
	addr[twem]=$TWEM_ADDR addr[direct]=$MASTER_ADDR
	log "redis master $MASTER_ADDR, replica $REPLICA_ADDR; old fenceproxy ${addr[old]} (pid ${pid[old]}), new ${addr[new]} (pid ${pid[new]}), twemproxy $TWEM_ADDR (pid $TWEM_PID)"

	local round p n t order=() c1order=()
	for ((round = 1; round <= AB_ROUNDS; round++)); do
		order=(old new twem)
		((round % 2)) || order=(twem new old)
		c1order=(direct "${order[@]}")
		((round % 2)) || c1order=("${order[@]}" direct)
		log "round $round of $AB_ROUNDS (${order[*]})"
		for p in 1 16; do
			n=$N_P1
			((p == 1)) || n=$N_P16
			for t in set get; do
				for s in "${order[@]}"; do
					rb "$s" "${addr[$s]}" "$p" "$n" "$t"
				done
			done
		done
		for t in set get; do
			for s in "${c1order[@]}"; do
				rb_clients=1 rb "c1/$s" "${addr[$s]}" 1 "$N_C1" "$t"
			done
		done
		((no_locks)) || for s in old new; do
			lb "distinct/$s" fenceproxy "${addr[$s]}"
		done
		((no_locks)) || for s in new old; do
			lb "hot/$s" fenceproxy "${addr[$s]}" -hot
		done
		for s in old new; do
			check_proxy "fenceproxy-$s" "${pid[$s]}" "$tmp/fenceproxy-$s.log"
		done
	done

	local mode=full
	((quick)) && mode=quick
	echo
	echo "== fenceproxy A/B, NEW against OLD ($mode; $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores shared by every process; loopback;"
	echo "   one Redis master + replica, both proxies in front of it, --min-replicas 1; $AB_ROUNDS rounds, each running every test"
	echo "   against OLD and NEW back to back, OLD first in odd rounds, NEW first in even ones)"
	echo "   OLD: ${desc[old]}"
	echo "   NEW: ${desc[new]}"
	echo "-- each figure is that of the system's better round (the higher rate; its latency and CPU with it);"
	echo "   rounds: the least, median and greatest NEW/OLD of the rounds one by one (the noise)"
	printf '%-42s %10s %10s %8s   %s\n' figure OLD NEW NEW/OLD "rounds: min med max"
	for p in 1 16; do
		for t in SET GET; do
			ab_row "$t -P $p, $CLIENTS clients (req/s)" "$t/$p" 1 '%.0f'
		done
	done
	for t in SET GET; do
		ab_row "$t -c 1 -P 1 (req/s)" "$t/1/c1" 1 '%.0f'
		ab_row "$t -c 1 -P 1 p50 (ms)" "$t/1/c1" 2 '%.3f'
		ab_row "$t -c 1 -P 1 p99 (ms)" "$t/1/c1" 3 '%.3f'
	done
	ab_row "lock cycles/s, distinct, $CLIENTS clients" distinct 1 '%.0f'
	ab_row "lock cycle p99 (ms)" distinct 3 '%.2f'
	ab_row "hot lock handoffs/s, $CLIENTS clients" hot 1 '%.0f'
	ab_row "hot lock wait p99 (ms)" hot 3 '%.2f'
	echo "-- CPU: us of CPU time per request or per lock cycle / handoff, in the better round"
	for p in 1 16; do
		for t in SET GET; do
			ab_row "fenceproxy, $t -P $p" "$t/$p" 7 '%.1f'
		done
	done
	ab_row "fenceproxy, lock cycle" distinct 7 '%.1f'
	ab_row "fenceproxy, hot lock handoff" hot 7 '%.1f'
	for p in 1 16; do
		for t in SET GET; do
			ab_row "Redis master + replica, $t -P $p" "$t/$p" redis '%.1f'
		done
	done
	ab_row "Redis master + replica, lock cycle" distinct redis '%.1f'
	ab_row "Redis master + replica, hot lock handoff" hot redis '%.1f'
	echo "-- the master's script calls (EVALSHA + EVAL) and WAITs per lock cycle / handoff, in the better round"
	echo "   (a lock cycle is two lock writes: 2 / script calls per cycle is the writes per script call)"
	ab_row "script calls per lock cycle" distinct 9 '%.3f'
	ab_row "WAITs per lock cycle" distinct 10 '%.3f'
	ab_row "script calls per hot lock handoff" hot 9 '%.3f'
	ab_row "WAITs per hot lock handoff" hot 10 '%.3f'
	echo "-- NEW against twemproxy (issue 15): TWEM is twemproxy's figure, the ratio NEW/TWEM"
	printf '%-42s %10s %10s %8s   %s\n' figure TWEM NEW NEW/TWEM "rounds: min med max"
	for p in 1 16; do
		for t in SET GET; do
			ab_row "$t -P $p, $CLIENTS clients (req/s)" "$t/$p" 1 '%.0f' twem new
		done
	done
	for p in 1 16; do
		for t in SET GET; do
			ab_row "CPU us per request, $t -P $p" "$t/$p" 7 '%.1f' twem new
		done
	done
	for p in 1 16; do
		for t in SET GET; do
			ab_row "Redis master + replica CPU, $t -P $p" "$t/$p" redis '%.1f' twem new
			ab_row "whole machine CPU per request, $t -P $p" "$t/$p" 4 '%.1f' twem new
		done
	done
	for t in SET GET; do
		ab_row "$t -c 1 -P 1 p50 (ms)" "$t/1/c1" 2 '%.3f' twem new
		ab_row "$t -c 1 -P 1 p99 (ms)" "$t/1/c1" 3 '%.3f' twem new
	done
	for t in SET GET; do
		printf '%-42s %10s %10s %8s\n' "$t -c 1: direct Redis p50/p99 (ms)" "" "" "$(latencies "$t/1/c1/direct")"
		added_row "$t -c 1 p50 added, NEW over TWEM" "$t/1/c1" 2
		added_row "$t -c 1 p99 added, NEW over TWEM" "$t/1/c1" 3
	done
	echo "(lock runs: scripts/lockbench -clients $CLIENTS -duration $LOCK_DUR, distinct of 100,000 resources and -hot;"
	echo " redis-benchmark n=$N_P1 at -P 1, n=$N_P16 at -P 16, n=$N_C1 at -c 1; errors: old ${errs[distinct/old]:-0}+${errs[hot/old]:-0},"
	echo " new ${errs[distinct/new]:-0}+${errs[hot/new]:-0} (distinct+hot); run took $((SECONDS - t0)) s)"
	local warn
	for s in old new; do
		warn=$(grep -cE 'level=(WARN|ERROR)' "$tmp/fenceproxy-$s.log" || true)
		echo "fenceproxy $s log: ${warn} WARN/ERROR lines"
		if ((warn > 0)); then
			grep -E 'level=(WARN|ERROR)' "$tmp/fenceproxy-$s.log" | head -n 10
		fi
	done
}

# The --clients run's kinds of client, in the order of its tables, and
# their names there.
readonly CL_KINDS="plain resp3 acl redisuser tls leader follower"
declare -A cl_title=(
	[plain]="plaintext RESP2"
	[resp3]="RESP3 (-3)"
	[acl]="ACL user (--user -a)"
	[redisuser]="Redis's user (--user -a)"
	[tls]="TLS (--tls)"
	[leader]="tier of 3, the leader"
	[follower]="tier of 3, a follower"
)
# The ACL user the acl kind authenticates as; the file also lets the default
# user in without a password, so that wait_ping's PING is answered.
readonly CL_ACL_USER=bench CL_ACL_PASS=benchpass
# (Without -@scripting, fenceproxy warns that scripts reach beyond ~key:*.)
readonly CL_ACL_RULES="on >$CL_ACL_PASS ~key:* &* +@all -@scripting"
# The Redis user the redisuser kind authenticates as, through the plaintext
# fenceproxy (no --aclfile): Redis checks it, and the client's requests go
# on a connection of its own opened as that user.
readonly CL_REDIS_USER=rbench CL_REDIS_PASS=rbenchpass
# cl_addr[KIND/BUILD]: where that kind of client of that build connects;
# cl_skip[KIND/BUILD]: why it could not be run (its warm-up failed).
declare -A cl_addr=() cl_skip=()

# cl_args KIND: redis-benchmark's arguments for KIND, into the caller's
# array args (paths are the run's; the header prints their form).
cl_args() {
	args=()
	case $1 in
	resp3) args=(-3) ;;
	acl) args=(--user "$CL_ACL_USER" -a "$CL_ACL_PASS") ;;
	redisuser) args=(--user "$CL_REDIS_USER" -a "$CL_REDIS_PASS") ;;
	tls) args=(--tls --cacert "$tmp/tls/ca.crt") ;;
	esac
}

# make_tls_certs: a throwaway CA and a certificate for 127.0.0.1 it signs
# (ECDSA P-256), in $tmp/tls.
make_tls_certs() {
	local d=$tmp/tls
	mkdir -p "$d"
	{
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
			-subj /CN=fenceproxy-bench-ca -keyout "$d/ca.key" -out "$d/ca.crt" &&
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
				-subj /CN=127.0.0.1 -keyout "$d/server.key" -out "$d/server.csr" &&
			printf 'subjectAltName=IP:127.0.0.1\n' >"$d/san.ext" &&
			openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
				-days 2 -extfile "$d/san.ext" -out "$d/server.crt"
	} >"$d/openssl.log" 2>&1 || die "openssl could not make the TLS certificates: $(tail -n 3 "$d/openssl.log")"
}

# cl_start BUILD BIN: BUILD's fenceproxy processes in front of the run's
# master: one with --listen and --tls-listen (the plaintext, RESP3 and TLS
# kinds), one with --aclfile, and a tier of three; each with its own
# --key-prefix of one length for every build. Sets cl_addr[KIND/BUILD] and
# middle_of for each (a tier's: the pid of the node the client connects to).
cl_start() {
	local s=$1 bin=$2 tport
	tport=$(free_port)
	ports+=("$tport")
	launch_proxy "fenceproxy-$s" "$bin" "$tmp/fenceproxy-$s.log" "$tmp/data-$s" --key-prefix "cb-$s-plain:" \
		--tls-listen "127.0.0.1:$tport" --tls-cert-file "$tmp/tls/server.crt" --tls-key-file "$tmp/tls/server.key"
	cl_addr[plain/$s]=$launched_addr cl_addr[resp3/$s]=$launched_addr cl_addr[tls/$s]=127.0.0.1:$tport
	cl_addr[redisuser/$s]=$launched_addr
	redis-cli -h "${MASTER_ADDR%:*}" -p "${MASTER_ADDR##*:}" ACL SETUSER "$CL_REDIS_USER" on ">$CL_REDIS_PASS" '~*' '&*' +@all >/dev/null
	middle_of[127.0.0.1:$tport]=$launched_pid
	printf 'user default on nopass ~* &* +@all\nuser %s %s\n' "$CL_ACL_USER" "$CL_ACL_RULES" >"$tmp/users-$s.acl"
	launch_proxy "fenceproxy-$s-acl" "$bin" "$tmp/fenceproxy-$s-acl.log" "$tmp/data-$s-acl" --key-prefix "cb-$s-acls:" \
		--aclfile "$tmp/users-$s.acl"
	cl_addr[acl/$s]=$launched_addr
	start_tier "tier-$s" "$bin" 1 --key-prefix "cb-$s-tier:"
	cl_addr[leader/$s]=$tier_leader cl_addr[follower/$s]=$tier_follower
	# A GET through a tier node is that node's work alone (the others only
	# keep Raft's heartbeats), as the issue counts "a tier node's client".
	middle_of[$tier_leader]=$tier_leader_pid middle_of[$tier_follower]=$tier_follower_pid
	log "$s: plaintext/RESP3 ${cl_addr[plain/$s]}, TLS ${cl_addr[tls/$s]}, ACL ${cl_addr[acl/$s]}," \
		"tier leader $tier_leader, follower $tier_follower (pids ${tier_pids[*]})"
}

# cl_warm KIND BUILD: a short GET run of KIND against BUILD, not recorded:
# the first run after a start pays for connections; a kind whose run fails
# is skipped (cl_skip says why) instead of failing the whole run.
cl_warm() {
	local k=$1 s=$2 at=${cl_addr[$1/$2]} out
	local -a args
	cl_args "$k"
	if out=$(timeout 60 redis-benchmark -h "${at%:*}" -p "${at##*:}" -c "$CLIENTS" -n 5000 -r 100000 \
		-t get -P 1 --csv "${args[@]}" 2>&1) && [[ $out == *'"GET"'* && $out != *Error* ]]; then
		return
	fi
	cl_skip[$k/$s]=$(grep -v '^"' <<<"$out" | tr -d '\r' | tr '\n' ' ' | cut -c1-120)
	log "skipping $k through $s: ${cl_skip[$k/$s]}"
}

# cl_rb KIND BUILD P N [PREFIX]: one recorded GET run of KIND against BUILD,
# under GET/P/PREFIXKIND/BUILD (rb_clients as rb's).
cl_rb() {
	local k=$1 s=$2
	local -a args
	[[ -z ${cl_skip[$k/$s]:-} ]] || return 0
	cl_args "$k"
	rb "${5:-}$k/$s" "${cl_addr[$k/$s]}" "$3" "$4" get "${args[@]}"
}

# cl_get KEY FIELD: FIELD (as in record: 1 rate, 2 p50, 3 p99, 7 the middle
# system's CPU us per op) of KEY's better round, or nothing.
cl_get() {
	awk -v e="${best_round[$1]:-}" -v f="$2" 'BEGIN {
		n = split(e, x, ",")
		if (f <= n && x[f] != "-" && x[f] != "") print x[f] + 0
	}'
}

# cl_fmt FORMAT VALUE: VALUE in FORMAT, or - when there is none.
cl_fmt() {
	# shellcheck disable=SC2059 # the format is the caller's
	if [[ -n $2 ]]; then printf "$1" "$2"; else printf -- -; fi
}

# cl_spread KEY FIELD: the least, median and greatest NEW/OLD of FIELD over the
# rounds one by one (KEY/old against KEY/new), or -.
cl_spread() {
	awk -v f="$2" -v o="${rounds[$1/old]:-}" -v n="${rounds[$1/new]:-}" '
	function val(e, x, k) { k = split(e, x, ","); return (f <= k && x[f] != "-" && x[f] != "") ? x[f] + 0 : "" }
	BEGIN {
		no = split(o, ro, " "); nn = split(n, rn, " "); k = 0
		for (i = 1; i <= no && i <= nn; i++) {
			a = val(ro[i]); b = val(rn[i])
			if (a != "" && b != "" && a > 0) r[++k] = b / a
		}
		for (i = 2; i <= k; i++) { v = r[i]; for (j = i - 1; j >= 1 && r[j] > v; j--) r[j + 1] = r[j]; r[j + 1] = v }
		if (!k) { print "-"; exit }
		printf "%.2f %.2f %.2f", r[1], k % 2 ? r[(k + 1) / 2] : (r[k / 2] + r[k / 2 + 1]) / 2, r[k]
	}'
}

# cl_row TITLE KEY P: one line of a -P table: for each build, the better
# round's rate and fenceproxy CPU per request, and that CPU over
# twemproxy's per plaintext request (its better round at the same -P); with
# --compare, NEW/OLD of each and the spread of the rounds' CPU NEW/OLD.
cl_row() {
	local title=$1 key=GET/$3/$2 twem s
	local -A rate=() us=() x=()
	twem=$(cl_get "GET/$3/twem" 7)
	for s in "${cl_builds[@]}"; do
		rate[$s]=$(cl_get "$key/$s" 1)
		us[$s]=$(cl_get "$key/$s" 7)
		x[$s]=""
		[[ -z ${us[$s]} || -z $twem ]] || x[$s]=$(ratio "${us[$s]}" "$twem")
	done
	if ((!compare)); then
		printf '%-26s %10s %10s %8s\n' "$title" "$(cl_fmt %.0f "${rate[new]}")" "$(cl_fmt %.2f "${us[new]}")" "$(cl_fmt %s "${x[new]}")"
		return
	fi
	printf '%-26s %9s %9s %6s  %7s %7s %6s  %7s %6s   %s\n' "$title" \
		"$(cl_fmt %.0f "${rate[old]}")" "$(cl_fmt %.0f "${rate[new]}")" "$(ratio "${rate[new]}" "${rate[old]}")" \
		"$(cl_fmt %.2f "${us[old]}")" "$(cl_fmt %.2f "${us[new]}")" "$(ratio "${us[new]}" "${us[old]}")" \
		"$(cl_fmt %s "${x[old]}")" "$(cl_fmt %s "${x[new]}")" "$(cl_spread "$key" 7)"
}

# cl_twem_row P: twemproxy's line of a -P table (the denominator).
cl_twem_row() {
	local rate us
	rate=$(cl_fmt %.0f "$(cl_get "GET/$1/twem" 1)")
	us=$(cl_fmt %.2f "$(cl_get "GET/$1/twem" 7)")
	if ((!compare)); then
		printf '%-26s %10s %10s %8s\n' "twemproxy, plaintext" "$rate" "$us" 1.00
	else
		printf '%-26s %9s %9s %6s  %7s %7s %6s  %7s\n' "twemproxy, plaintext" "$rate" "" "" "$us" "" "" 1.00
	fi
}

# cl_c1_row TITLE KEY: one line of the one-client table: p50/p99 of each
# build's better round, and with --compare NEW/OLD of the p50 and its spread.
cl_c1_row() {
	local title=$1 key=GET/1/c1/$2 s
	local -A l=()
	for s in "${cl_builds[@]}"; do
		l[$s]="$(cl_fmt %.3f "$(cl_get "$key/$s" 2)")/$(cl_fmt %.3f "$(cl_get "$key/$s" 3)")"
	done
	if ((!compare)); then
		printf '%-26s %15s\n' "$title" "${l[new]}"
		return
	fi
	printf '%-26s %15s %15s %8s   %s\n' "$title" "${l[old]}" "${l[new]}" \
		"$(ratio "$(cl_get "$key/new" 2)" "$(cl_get "$key/old" 2)")" "$(cl_spread "$key" 2)"
}

# main_clients: the --clients run (see the top of this file).
main_clients() {
	need_tools nutcracker:nutcracker openssl:openssl
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/fenceproxy-bench.XXXXXX")
	local t0=$SECONDS s k p n round pid
	local -A desc=()
	cpu_digits=3
	cl_builds=(new)
	if ((compare)); then
		cl_builds=(old new)
		build_fenceproxy old "$old_rev"
		desc[old]=$built_desc
		build_fenceproxy new "$new_rev"
		desc[new]=$built_desc
	else
		log "building ./bin/fenceproxy"
		mkdir -p bin
		go build -o ./bin/fenceproxy ./cmd/fenceproxy
		cp ./bin/fenceproxy "$tmp/fenceproxy-new"
		desc[new]="./bin/fenceproxy, built from the work tree at $(git log -1 --format='%h (%cd) %s' --date=format:'%Y-%m-%d %H:%M' | cut -c1-90)"
	fi
	make_tls_certs
	start_local_redis
	for s in "${cl_builds[@]}"; do
		cl_start "$s" "$tmp/fenceproxy-$s"
	done
	start_twemproxy
	log "redis master $MASTER_ADDR, replica $REPLICA_ADDR, twemproxy $TWEM_ADDR (pid $TWEM_PID)"
	for s in "${cl_builds[@]}"; do
		for k in $CL_KINDS; do
			cl_warm "$k" "$s"
		done
	done

	local order=()
	for ((round = 1; round <= CL_ROUNDS; round++)); do
		order=("${cl_builds[@]}")
		if ((compare && !(round % 2))); then
			order=(new old)
		fi
		log "round $round of $CL_ROUNDS (${order[*]}; twemproxy $( ((round % 2)) && echo first || echo last))"
		for p in 1 16; do
			n=$N_P1
			((p == 1)) || n=$N_P16
			((!(round % 2))) || rb twem "$TWEM_ADDR" "$p" "$n" get
			for k in $CL_KINDS; do
				for s in "${order[@]}"; do
					cl_rb "$k" "$s" "$p" "$n"
				done
			done
			((round % 2)) || rb twem "$TWEM_ADDR" "$p" "$n" get
		done
		((!(round % 2))) || rb_clients=1 rb c1/twem "$TWEM_ADDR" 1 "$N_C1" get
		for k in plain tls; do
			for s in "${order[@]}"; do
				rb_clients=1 cl_rb "$k" "$s" 1 "$N_C1" c1/
			done
		done
		((round % 2)) || rb_clients=1 rb c1/twem "$TWEM_ADDR" 1 "$N_C1" get
		for s in "${cl_builds[@]}"; do
			check_proxy "fenceproxy-$s" "${middle_of[${cl_addr[plain/$s]}]}" "$tmp/fenceproxy-$s.log"
			check_proxy "fenceproxy-$s-acl" "${middle_of[${cl_addr[acl/$s]}]}" "$tmp/fenceproxy-$s-acl.log"
			for pid in ${middle_of[${cl_addr[leader/$s]}]}; do
				kill -0 "$pid" 2>/dev/null || {
					tail -n 10 "$tmp/tier-$s"-n*.log >&2 || true
					die "a tier-$s node (pid $pid) died"
				}
			done
		done
	done
	cl_report "$((SECONDS - t0))"
}

# cl_report SECONDS: the --clients tables.
cl_report() {
	local mode=full p k s
	((quick)) && mode=quick
	echo
	echo "== fenceproxy per kind of client against twemproxy ($mode; $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores shared by"
	echo "   every process; loopback; one Redis master + replica, --min-replicas 1; $CL_ROUNDS rounds, each running every kind of"
	if ((compare)); then
		echo "   client through OLD and NEW back to back (OLD first in odd rounds) and twemproxy (first in odd rounds, last in even)"
		echo "   OLD: ${desc[old]}"
		echo "   NEW: ${desc[new]}"
	else
		echo "   client and twemproxy (first in odd rounds, last in even)"
		echo "   fenceproxy: ${desc[new]}"
	fi
	echo "   each run: redis-benchmark -h HOST -p PORT -c $CLIENTS -n N -r 100000 -t get -P {1,16} --csv KIND'S ARGS (n=$N_P1 at -P 1,"
	echo "   n=$N_P16 at -P 16), and at one client -c 1 -P 1 -n $N_C1; the kinds' ARGS and fenceproxy processes:"
	echo "     plaintext RESP2: none (fenceproxy --listen)            RESP3: -3 (the same fenceproxy)"
	echo "     ACL user: --user $CL_ACL_USER -a $CL_ACL_PASS (a fenceproxy with --aclfile: \"user $CL_ACL_USER $CL_ACL_RULES\")"
	echo "     Redis's user: --user $CL_REDIS_USER -a $CL_REDIS_PASS (the first fenceproxy; a user of Redis's own ACL, checked by Redis)"
	echo "     TLS: --tls --cacert ca.crt (the first fenceproxy's --tls-listen; a throwaway CA and ECDSA P-256 certificate)"
	echo "     tier: none, at the leader's or a follower's --listen of a tier of three (--peers); its CPU is that node's"
	echo "-- each figure is that of the better round (the higher rate; its CPU with it); CPU: us of user+sys CPU time of the"
	echo "   fenceproxy process(es) per request (/proc); xtwem (xtw): that over twemproxy's CPU per plaintext request at the same -P"
	if ((compare)); then
		echo "   (twemproxy's better round); rounds: the least, median and greatest NEW/OLD CPU of the rounds one by one (the noise)"
	else
		echo "   (twemproxy's better round)"
	fi
	for p in 1 16; do
		echo "-- GET -P $p, $CLIENTS clients"
		if ((compare)); then
			printf '%-26s %9s %9s %6s  %7s %7s %6s  %7s %6s   %s\n' kind "req/s OLD" NEW NEW/OLD "CPU OLD" NEW NEW/OLD \
				"xtw OLD" NEW "rounds: CPU NEW/OLD min med max"
		else
			printf '%-26s %10s %10s %8s\n' kind req/s "CPU us" xtwem
		fi
		cl_twem_row "$p"
		for k in $CL_KINDS; do
			cl_row "${cl_title[$k]}" "$k" "$p"
		done
	done
	echo "-- one client: GET -c 1 -P 1, p50/p99 (ms) of the better round"
	if ((compare)); then
		printf '%-26s %15s %15s %8s   %s\n' kind OLD NEW "p50 N/O" "rounds: p50 NEW/OLD min med max"
		printf '%-26s %15s\n' "twemproxy, plaintext" "$(cl_fmt %.3f "$(cl_get GET/1/c1/twem 2)")/$(cl_fmt %.3f "$(cl_get GET/1/c1/twem 3)")"
	else
		printf '%-26s %15s\n' kind p50/p99
		printf '%-26s %15s\n' "twemproxy, plaintext" "$(cl_fmt %.3f "$(cl_get GET/1/c1/twem 2)")/$(cl_fmt %.3f "$(cl_get GET/1/c1/twem 3)")"
	fi
	cl_c1_row "${cl_title[plain]}" plain
	cl_c1_row "${cl_title[tls]}" tls
	for s in "${cl_builds[@]}"; do
		for k in $CL_KINDS; do
			[[ -z ${cl_skip[$k/$s]:-} ]] || echo "not run: ${cl_title[$k]} through $s: ${cl_skip[$k/$s]}"
		done
	done
	echo "(run took $1 s)"
	local warn f
	for f in "$tmp"/fenceproxy-*.log "$tmp"/tier-*.log; do
		warn=$(grep -cE 'level=(WARN|ERROR)' "$f" || true)
		((warn == 0)) || {
			echo "${f##*/}: $warn WARN/ERROR lines"
			grep -E 'level=(WARN|ERROR)' "$f" | head -n 5
		}
	done
}

if ((clients)); then
	main_clients
elif ((compare && tier)); then
	main_tier_compare
elif ((compare)); then
	main_compare
elif ((cluster)); then
	main_cluster
elif ((tier)); then
	main_tier
else
	main
fi
if ((${#rb_failed[@]} > 0)); then
	printf 'FAIL %s\n' "${rb_failed[@]}"
	exit 1
fi
