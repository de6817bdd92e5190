#!/usr/bin/env bash
# redis-suite.sh: run units of Redis 7.0.15's own Tcl test suite against
# plain Redis and through fenceproxy, and print the two side by side.
#
#   scripts/redis-suite.sh [options] [UNIT...]
#
#   UNIT          a unit of the suite without the .tcl, e.g. unit/multi or
#                 unit/type/list; the default is the thirty units below
#   --proxy-only  run only through fenceproxy (no baseline column)
#   --unit-timeout SECS
#                 bound on one run of one unit (default 300); a unit still
#                 running then is stopped and counted as a timeout
#   --fail-under-baseline
#                 exit 1 when any unit does worse through fenceproxy than
#                 against plain Redis: fewer passed, more failed, an
#                 exception or a timeout Redis did not have (for CI)
#   --multidb     run without the suite's --singledb, so its tests SELECT 9
#                 (and 10, 11, 12) as they do against a server of their own
#                 (standalone only)
#   --skiptest NAME
#                 skip the test NAME (the suite's --skiptest: an exact name,
#                 or a regexp if it starts with /) in both columns; may be
#                 repeated
#   --keep        keep the work directory (logs of every run) and print it
#   --cluster     in front of a Redis Cluster: fenceproxy fronts a fresh
#                 3-master cluster (no replicas), and the baseline column is
#                 a fresh one-node cluster that owns all 16384 slots (as
#                 Redis's own CI runs the suite against a cluster); both
#                 runs add the suite's --cluster-mode (which skips the
#                 tests tagged cluster:skip, and implies --singledb); the
#                 default units are then cluster_units below
#
# Each run of each unit gets a fresh redis-server (and a fresh fenceproxy in
# front of it) on free loopback ports, configured as the suite's own
# tests/assets/default.conf, and runs
#   ./runtest --host H --port P --single UNIT --singledb --tags -needs:repl
# (without --singledb under --multidb).
# A unit stops at its first exception, so "exc" marks where a run ended
# early; "timeout" marks a run this script stopped.
#
# The suite comes from Debian's source package of redis 7.0.15 (the upstream
# tarball, redis_7.0.15.orig.tar.gz), fetched once with apt-get source and
# kept under REDIS_SUITE_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/fenceproxy);
# REDIS_SUITE_SRC=DIR uses an unpacked redis-7.0.15 tree instead. Needs tclsh
# (apt-get install tcl), redis-server and Go. FENCEPROXY_BIN=PATH runs that
# fenceproxy binary instead of building this tree (to compare two builds).
# Only the processes this script starts are stopped, by pid.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)

readonly WAIT_SECS=10 CLUSTER_WAIT_SECS=60
readonly SUITE_VERSION=7.0.15

PROG=redis-suite
# shellcheck source=scripts/lib.sh
source "$repo/scripts/lib.sh"

log() { echo "redis-suite: $*" >&2; }

default_units=(
	unit/type/string unit/type/incr unit/type/list unit/type/list-2 unit/type/list-3
	unit/type/hash unit/type/set unit/type/zset unit/type/stream unit/type/stream-cgroups
	unit/expire unit/keyspace unit/scripting unit/functions unit/multi unit/pubsub
	unit/protocol unit/info-command unit/bitops unit/bitfield unit/geo unit/hyperloglog
	unit/sort unit/dump unit/querybuf unit/tracking unit/introspection unit/introspection-2
	unit/other unit/lazyfree unit/latency-monitor
)

# In front of a Redis Cluster the same units run; docs/compatibility.md says
# which of their tests cannot apply there (scripts that touch keys they do
# not declare, which Redis Cluster refuses on any master but the one they
# run on; DBSIZE and the proxy's own keys) and what each unit passes.
cluster_units=("${default_units[@]}")

proxy_only=0
cluster=0
unit_timeout=300
fail_under=0
keep=0
singledb=(--singledb)
skiptests=()
units=()
while (($#)); do
	case $1 in
	--proxy-only) proxy_only=1 ;;
	--unit-timeout)
		[[ ${2:-} =~ ^[0-9]+$ ]] || die "--unit-timeout needs a number of seconds"
		unit_timeout=$2
		shift
		;;
	--fail-under-baseline) fail_under=1 ;;
	--multidb) singledb=() ;;
	--skiptest)
		[[ -n ${2:-} ]] || die "--skiptest needs a test name"
		skiptests+=(--skiptest "$2")
		shift
		;;
	--keep) keep=1 ;;
	--cluster) cluster=1 ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	-*) die "unknown option $1 (see --help)" ;;
	*) units+=("${1%.tcl}") ;;
	esac
	shift
done
if ((cluster && !${#singledb[@]})); then
	die "--multidb and --cluster do not go together: a Redis Cluster has database 0 only (the suite's --cluster-mode implies --singledb)"
fi
if ((!${#units[@]})); then
	if ((cluster)); then
		units=("${cluster_units[@]}")
	else
		units=("${default_units[@]}")
	fi
fi

command -v tclsh >/dev/null || die "tclsh is needed: sudo apt-get install -y tcl"
need_redis
command -v go >/dev/null || die "Go is needed (the version in go.mod)"

# fetch_suite: print the path of an unpacked redis-7.0.15 tree, fetching the
# Debian source package the first time.
fetch_suite() {
	if [[ -n ${REDIS_SUITE_SRC:-} ]]; then
		[[ -x $REDIS_SUITE_SRC/runtest ]] || die "REDIS_SUITE_SRC=$REDIS_SUITE_SRC has no runtest"
		echo "$REDIS_SUITE_SRC"
		return
	fi
	local cache=${REDIS_SUITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fenceproxy}
	local tree=$cache/redis-$SUITE_VERSION
	if [[ ! -x $tree/runtest ]]; then
		[[ -r /usr/share/keyrings/debian-archive-keyring.gpg ]] ||
			die "fetching the suite needs Debian's archive keyring (apt-get install debian-archive-keyring), or set REDIS_SUITE_SRC"
		mkdir -p "$cache/apt/lists/partial" "$cache/apt/archives/partial"
		local sources=$cache/apt/debian-src.sources
		cat >"$sources" <<-EOF
			Types: deb-src
			URIs: http://deb.debian.org/debian
			Suites: bookworm
			Components: main
			Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
		EOF
		# Its own lists and cache directories: the machine's apt state is
		# left as it was.
		local apt=(apt-get -q -o "Dir::Etc::SourceList=$sources" -o Dir::Etc::SourceParts=/dev/null
			-o "Dir::State::Lists=$cache/apt/lists" -o "Dir::Cache=$cache/apt")
		log "fetching the source package of redis $SUITE_VERSION from deb.debian.org"
		"${apt[@]}" update >&2 || die "apt-get update of the deb-src list failed"
		(cd "$cache" && "${apt[@]}" source --download-only redis >&2) ||
			die "apt-get source redis failed (is redis $SUITE_VERSION still in bookworm?)"
		local tarball=$cache/redis_$SUITE_VERSION.orig.tar.gz
		[[ -f $tarball ]] || die "apt-get source brought no $tarball: bookworm carries another version of redis now; set REDIS_SUITE_SRC to an unpacked redis-$SUITE_VERSION tree"
		tar -xzf "$tarball" -C "$cache"
	fi
	grep -q "\"$SUITE_VERSION\"" "$tree/src/version.h" ||
		die "$tree is not redis $SUITE_VERSION (src/version.h says otherwise)"
	echo "$tree"
}

suite=$(fetch_suite)
work=$(mktemp -d "${TMPDIR:-/tmp}/redis-suite.XXXXXX")
dir=$work # lib.sh's start_redis and stop_one keep pid and log files here
proxy_pid= proxy_port=
ports=()

cleanup() {
	[[ -n $proxy_pid ]] && stop_pid fenceproxy "$proxy_pid" >/dev/null 2>&1
	stop_backend
	if ((keep)); then
		log "logs kept in $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
fail() {
	log "$*"
	for f in "$work"/redis.log "$work"/node*.log "$work"/create.out "$work"/fenceproxy.log; do
		[[ -s $f ]] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
	done
	exit 1
}

if [[ -n ${FENCEPROXY_BIN:-} ]]; then
	[[ -x $FENCEPROXY_BIN ]] || die "FENCEPROXY_BIN=$FENCEPROXY_BIN is not an executable"
	cp "$FENCEPROXY_BIN" "$work/fenceproxy"
else
	log "building fenceproxy"
	go build -o "$work/fenceproxy" ./cmd/fenceproxy
fi

# The suite's tests/assets/default.conf, less what a daemonized throwaway
# server sets itself.
redis_conf=(
	--notify-keyspace-events KEA --databases 16 --latency-monitor-threshold 1
	--enable-protected-configs yes --enable-debug-command yes --enable-module-command yes
	--propagation-error-behavior panic --loglevel verbose
)

# start_cluster NODES: a fresh Redis Cluster of NODES masters (no replicas)
# configured as above, every slot assigned; sets cluster_ports (the
# masters). A one-node cluster gets its slots with CLUSTER ADDSLOTSRANGE, as
# Redis's CI makes one.
cluster_ports=()
start_cluster() {
	local n=$1 i port bus
	cluster_ports=()
	for ((i = 1; i <= n; i++)); do
		port=$(free_port)
		ports+=("$port")
		bus=$(free_port)
		ports+=("$bus")
		# No data of an earlier run's node (DEBUG RELOAD saves it): a node
		# that loads keys of slots it does not own claims those slots.
		# Each node its own AOF directory: units that turn appendonly on
		# (unit/type/stream's DEBUG LOADAOF) had the three nodes write one
		# manifest, and a node loading another's exited.
		rm -rf "$work/nodes-$i.conf" "$work/node$i.rdb" "$work/appendonlydir-node$i"
		# A node timeout well above the suite's DEBUG SLEEPs and busy
		# scripts: a master taken for failed would end the run in
		# CLUSTERDOWN.
		start_redis "node$i" "$port" "${redis_conf[@]}" --cluster-enabled yes \
			--cluster-config-file "nodes-$i.conf" --cluster-port "$bus" --cluster-node-timeout 60000 \
			--appenddirname "appendonlydir-node$i"
		cluster_ports+=("$port")
	done
	if ((n == 1)); then
		local reply
		reply=$(redis-cli -p "${cluster_ports[0]}" cluster addslotsrange 0 16383 2>&1)
		[[ $reply == OK ]] || fail "CLUSTER ADDSLOTSRANGE 0 16383: $reply"
	else
		local addrs=()
		for port in "${cluster_ports[@]}"; do
			addrs+=("127.0.0.1:$port")
		done
		# redis-cli waits until every node shows the same slots, which
		# gossip spreads; on a loaded machine that took more than 10 s
		# once (CI, a unit's fresh cluster): give it the cluster's wait.
		timeout "$CLUSTER_WAIT_SECS" redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 \
			--cluster-yes >"$work/create.out" 2>&1 || fail "redis-cli --cluster create failed"
	fi
	# A master that owned no slots at start counts itself in a minority and
	# waits out a rejoin delay (up to 5 s) before it says ok: allow for it
	# on a loaded machine.
	for ((i = 0; i < CLUSTER_WAIT_SECS * 10; i++)); do
		local ok=1
		for port in "${cluster_ports[@]}"; do
			redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || ok=0
		done
		((ok)) && return
		sleep 0.1
	done
	fail "the cluster did not reach cluster_state:ok within ${CLUSTER_WAIT_SECS}s"
}

# stop_backend: stop whatever redis-server processes run_unit started.
stop_backend() {
	stop_one redis >/dev/null
	local i
	for i in 1 2 3; do
		stop_one "node$i" >/dev/null
	done
}

# start_proxy BACKEND: a fenceproxy on a free port in front of it (a port,
# or addresses for --backend); sets proxy_pid and proxy_port.
start_proxy() {
	local port tries
	for tries in 1 2 3; do
		port=$(free_port)
		ports+=("$port")
		rm -rf "$work/data"
		# No metrics listener (its default port may be taken by another
		# fenceproxy); no replicas to wait for.
		local backend=$1
		[[ $backend == *:* ]] || backend=127.0.0.1:$backend
		"$work/fenceproxy" --listen "127.0.0.1:$port" --backend "$backend" \
			--data-dir "$work/data" --metrics-listen "" --min-replicas 0 \
			>>"$work/fenceproxy.log" 2>&1 &
		proxy_pid=$!
		local i
		for ((i = 0; i < WAIT_SECS * 10; i++)); do
			if [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]]; then
				proxy_port=$port
				return
			fi
			kill -0 "$proxy_pid" 2>/dev/null || break
			sleep 0.1
		done
		stop_pid fenceproxy "$proxy_pid" >/dev/null 2>&1
		proxy_pid=
	done
	fail "fenceproxy did not answer PING"
}

# run_unit UNIT TARGET: one run of UNIT against a fresh redis (TARGET redis)
# or a fresh fenceproxy in front of one (TARGET proxy); sets passed, failed,
# exc and end (ok, exc or timeout).
run_unit() {
	local unit=$1 target=$2 rport port out mode=()
	ports=()
	if ((cluster)); then
		mode=(--cluster-mode)
		if [[ $target == proxy ]]; then
			start_cluster 3
			local seeds=() p
			for p in "${cluster_ports[@]}"; do
				seeds+=("127.0.0.1:$p")
			done
			start_proxy "$(IFS=,; echo "${seeds[*]}")"
			port=$proxy_port
		else
			start_cluster 1
			port=${cluster_ports[0]}
		fi
	else
		rport=$(free_port)
		ports=("$rport")
		start_redis redis "$rport" "${redis_conf[@]}"
		port=$rport
		if [[ $target == proxy ]]; then
			start_proxy "$rport"
			port=$proxy_port
		fi
	fi
	out="$work/$(tr / _ <<<"$unit").$target.out"
	local rc=0
	# runtest's own --timeout ends a run that makes no progress; timeout(1)
	# bounds the whole unit. Both only end hangs.
	# The suite's own test server listens on the first free port of the 32
	# below --baseport: away from the default, for runs side by side.
	local base
	base=$(($(free_port) + 32))
	(cd "$suite" && timeout -k 10 "$unit_timeout" ./runtest --host 127.0.0.1 --port "$port" \
		--single "$unit" "${singledb[@]}" "${mode[@]}" "${skiptests[@]}" --tags -needs:repl --timeout "$unit_timeout" \
		--baseport "$base" >"$out" 2>&1) || rc=$?
	if [[ -n $proxy_pid ]]; then
		stop_pid fenceproxy "$proxy_pid" >/dev/null 2>&1
		proxy_pid=
	fi
	stop_backend
	local plain
	end=ok
	plain=$(sed 's/\x1b\[[0-9;]*m//g' "$out")
	passed=$(grep -c '^\[ok\]:' <<<"$plain" || true)
	failed=$(grep -c '^\[err\]:' <<<"$plain" || true)
	exc=$(grep -c '^\[exception\]:' <<<"$plain" || true)
	if ((rc == 124 || rc == 137)) || grep -q '^\[TIMEOUT\]' <<<"$plain"; then
		end=timeout
	elif ((exc)); then
		end=exc
	fi
}

# first_problem UNIT TARGET: the name of the first failed test or the
# exception's message, for the table's last column.
first_problem() {
	local out
	out="$work/$(tr / _ <<<"$1").$2.out"
	sed 's/\x1b\[[0-9;]*m//g' "$out" | grep -m1 -E '^\[(err|exception)\]:' | cut -c1-90 || true
}

if ((proxy_only)); then
	printf '%-28s %-24s %s\n' unit "fenceproxy pass/fail/exc" "first problem"
else
	printf '%-28s %-20s %-24s %-7s %s\n' unit "redis pass/fail/exc" "fenceproxy pass/fail/exc" ratio "first problem through fenceproxy"
fi
total_r=0 total_p=0 units_equal=0 worse=0
for unit in "${units[@]}"; do
	[[ -f $suite/tests/$unit.tcl ]] || die "no such unit: $unit (see tests/unit in $suite)"
	run_unit "$unit" proxy
	pp=$passed pf=$failed pe=$exc pend=$end
	pcol="$pp/$pf/$pe"
	[[ $pend == ok ]] || pcol+=" $pend"
	problem=$(first_problem "$unit" proxy)
	total_p=$((total_p + pp))
	if ((proxy_only)); then
		printf '%-28s %-24s %s\n' "$unit" "$pcol" "$problem"
		continue
	fi
	run_unit "$unit" redis
	rp=$passed rf=$failed re=$exc rend=$end
	rcol="$rp/$rf/$re"
	[[ $rend == ok ]] || rcol+=" $rend"
	total_r=$((total_r + rp))
	ratio=n/a
	((rp > 0)) && ratio=$(awk -v p="$pp" -v r="$rp" 'BEGIN { printf "%.0f%%", 100 * p / r }')
	((pp >= rp && pf <= rf && pe <= re)) && units_equal=$((units_equal + 1))
	if ((pp < rp || pf > rf || pe > re)) || [[ $pend == timeout && $rend != timeout ]]; then
		worse=$((worse + 1))
	fi
	printf '%-28s %-20s %-24s %-7s %s\n' "$unit" "$rcol" "$pcol" "$ratio" "$problem"
done
if ((proxy_only)); then
	echo "total through fenceproxy: $total_p passed"
else
	ratio=n/a
	((total_r > 0)) && ratio=$(awk -v p="$total_p" -v r="$total_r" 'BEGIN { printf "%.1f%%", 100 * p / r }')
	echo "total: redis $total_r passed, fenceproxy $total_p passed ($ratio); $units_equal of ${#units[@]} units pass through fenceproxy as on Redis"
	if ((fail_under && worse)); then
		log "$worse unit(s) did worse through fenceproxy than on plain Redis (see the table)"
		exit 1
	fi
fi
