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
# Each node's cluster bus gets a free port of its own (--cluster-port), also
# below Linux's ephemeral range: Redis's default, port + 10000, would land in
# it and clash with outgoing connections. No persistence.
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

# start_one N PORT BUSPORT: start cluster node N on PORT and wait for PING.
start_one() {
	rm -f "$dir/nodes-$1.conf"
	start_redis "node$1" "$2" \
		--cluster-enabled yes --cluster-config-file "nodes-$1.conf" \
		--cluster-port "$3" --cluster-node-timeout 1000
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
	local bus
	for ((n = 1; n <= NODES; n++)); do
		ports+=("$(free_port)")
		bus=$(free_port)
		ports+=("$bus") # handed out: free_port skips it from now on
		start_one "$n" "${ports[-2]}" "$bus"
		unset 'ports[-1]'
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
