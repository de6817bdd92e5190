#!/usr/bin/env bash
# redis-cluster.sh: a throwaway Redis Cluster on loopback (3 masters, 3
# replicas), for development and the demo.
#
#   scripts/redis-cluster.sh start [DIR]   start the six nodes, create the cluster, print SEEDS
#   scripts/redis-cluster.sh stop  [DIR]   stop exactly the processes start started
#
# DIR (default ./tmp/redis-cluster) holds node1.pid .. node6.pid, each node's
# log and nodes-N.conf, and env, a shell-sourceable file:
#   SEEDS=127.0.0.1:PORT,...   the masters, for fenceproxy --backend
#   NODES=127.0.0.1:PORT,...   all six nodes
# Each node's cluster bus is on its port + 10000 (Redis's default), so both
# must be free. No persistence: --save "" --appendonly no.
set -euo pipefail

readonly WAIT_SECS=20
readonly NODES=6 REPLICAS=1

usage() {
	echo "usage: $0 start|stop [DIR]" >&2
	exit 2
}

PROG=redis-cluster
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# free_port: print a port in 20000-29999 (below Linux's ephemeral range)
# that nothing listens on, whose bus port (+10000) is free too, and that this
# run has not handed out already.
free_port() {
	local port i
	for i in $(seq 100); do
		port=$((20000 + RANDOM % 10000))
		if [[ " ${ports[*]} " != *" $port "* ]] && ! port_in_use "$port" && ! port_in_use $((port + 10000)); then
			echo "$port"
			return
		fi
	done
	die "no free port found after $i tries"
}

# alive PIDFILE: true if the pid in PIDFILE is a running redis-server.
alive() {
	local pid
	[[ -f $1 ]] || return 1
	pid=$(<"$1")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null || [[ "$(ps -o comm= -p "$pid" 2>/dev/null)" == redis* ]]
}

# start_one N PORT: start daemonized cluster node N on PORT and wait for PING.
start_one() {
	local name=node$1 port=$2
	rm -f "$dir/$name.pid" "$dir/nodes-$1.conf"
	redis-server \
		--port "$port" --bind 127.0.0.1 \
		--save "" --appendonly no \
		--dir "$dir" --dbfilename "$name.rdb" \
		--daemonize yes --pidfile "$dir/$name.pid" \
		--logfile "$dir/$name.log" \
		--repl-diskless-sync-delay 0 \
		--cluster-enabled yes --cluster-config-file "nodes-$1.conf" \
		--cluster-node-timeout 1000 \
		>>"$dir/$name.out" 2>&1 || fail "$name: redis-server failed to start"
	local i
	for ((i = 0; i < WAIT_SECS * 10; i++)); do
		if [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]] && [[ -s "$dir/$name.pid" ]]; then
			return
		fi
		sleep 0.1
	done
	fail "$name did not answer PING on 127.0.0.1:$port within ${WAIT_SECS}s"
}

# fail MSG: show the logs, stop whatever was started, exit 1.
fail() {
	echo "redis-cluster: $*" >&2
	local log
	for log in "$dir"/create.out "$dir"/node*.out "$dir"/node*.log; do
		if [[ -s $log ]]; then
			echo "--- $log" >&2
			tail -n 20 "$log" >&2
		fi
	done
	do_stop >/dev/null
	exit 1
}

# healthy: true if every node says cluster_state:ok and every replica's link
# is up.
healthy() {
	local port info
	for port in "${ports[@]}"; do
		redis-cli -h 127.0.0.1 -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
		info=$(redis-cli -h 127.0.0.1 -p "$port" info replication 2>/dev/null) || return 1
		if grep -q '^role:slave' <<<"$info"; then
			grep -q '^master_link_status:up' <<<"$info" || return 1
		fi
	done
}

do_start() {
	need_redis
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	local n
	for ((n = 1; n <= NODES; n++)); do
		if alive "$dir/node$n.pid"; then
			die "already running in $dir ($(tr '\n' ' ' <"$dir/env" 2>/dev/null)); run: $0 stop $dir"
		fi
	done
	rm -f "$dir"/*.rdb "$dir"/nodes-*.conf "$dir/env" "$dir/create.out"

	ports=()
	for ((n = 1; n <= NODES; n++)); do
		ports+=("$(free_port)")
		start_one "$n" "${ports[n - 1]}"
	done

	local addrs=() port
	for port in "${ports[@]}"; do
		addrs+=("127.0.0.1:$port")
	done
	timeout "$WAIT_SECS" redis-cli --cluster create "${addrs[@]}" \
		--cluster-replicas "$REPLICAS" --cluster-yes >"$dir/create.out" 2>&1 ||
		fail "redis-cli --cluster create failed (or took over ${WAIT_SECS}s)"

	local i
	for ((i = 0; i < WAIT_SECS * 10; i++)); do
		healthy && break
		sleep 0.1
	done
	((i < WAIT_SECS * 10)) || fail "cluster not healthy (cluster_state:ok, replica links up) within ${WAIT_SECS}s"

	local seeds=()
	for port in "${ports[@]}"; do
		if redis-cli -h 127.0.0.1 -p "$port" info replication | grep -q '^role:master'; then
			seeds+=("127.0.0.1:$port")
		fi
	done
	local IFS=,
	cat >"$dir/env" <<ENV
SEEDS=${seeds[*]}
NODES=${addrs[*]}
ENV
	echo "SEEDS=${seeds[*]}"
}

# running PID: true if PID exists and is not a zombie (a daemonized
# redis-server is reparented, and its new parent may reap it late).
running() {
	kill -0 "$1" 2>/dev/null && [[ "$(ps -o stat= -p "$1" 2>/dev/null)" != Z* ]]
}

# stop_one NAME: SIGTERM the pid in NAME.pid, wait up to WAIT_SECS, then SIGKILL.
stop_one() {
	local name=$1 pidfile="$dir/$1.pid" pid i
	if ! alive "$pidfile"; then
		rm -f "$pidfile"
		return
	fi
	pid=$(<"$pidfile")
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < WAIT_SECS * 10; i++)); do
		running "$pid" || break
		sleep 0.1
	done
	if running "$pid"; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile"
	echo "stopped $name (pid $pid)"
}

do_stop() {
	[[ -d $dir ]] || return 0
	# Replicas (started last) first, so no master waits on shutdown for a
	# replica and no replica fails over a master that is shutting down.
	local n
	for ((n = NODES; n >= 1; n--)); do
		stop_one "node$n"
	done
	rm -f "$dir/env" "$dir"/*.rdb "$dir"/nodes-*.conf
}

[[ $# -ge 1 && $# -le 2 ]] || usage
dir=${2:-./tmp/redis-cluster}
ports=()
case $1 in
start) do_start ;;
stop) do_stop ;;
*) usage ;;
esac
