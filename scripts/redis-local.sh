#!/usr/bin/env bash
# redis-local.sh: a throwaway Redis master and replica on loopback, for
# development and the demo.
#
#   scripts/redis-local.sh start [DIR]   start master + replica, print their addresses
#   scripts/redis-local.sh stop  [DIR]   stop exactly the processes start started
#
# DIR (default ./tmp/redis-local) holds master.pid, replica.pid, the logs and
# env, a shell-sourceable file: MASTER_ADDR=127.0.0.1:PORT REPLICA_ADDR=...
# No persistence: --save "" --appendonly no.
set -euo pipefail

readonly WAIT_SECS=10

usage() {
	echo "usage: $0 start|stop [DIR]" >&2
	exit 2
}

PROG=redis-local
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# fail MSG: show the logs, stop whatever was started, exit 1.
fail() {
	echo "redis-local: $*" >&2
	local log
	for log in "$dir"/master.out "$dir"/master.log "$dir"/replica.out "$dir"/replica.log; do
		if [[ -s $log ]]; then
			echo "--- $log" >&2
			tail -n 20 "$log" >&2
		fi
	done
	do_stop >/dev/null
	exit 1
}

do_start() {
	need_redis
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	if alive "$dir/master.pid" || alive "$dir/replica.pid"; then
		die "already running in $dir ($(tr '\n' ' ' <"$dir/env" 2>/dev/null)); run: $0 stop $dir"
	fi
	rm -f "$dir"/*.rdb "$dir/env"

	local mport rport
	mport=$(free_port)
	start_redis master "$mport"
	rport=$(free_port)
	start_redis replica "$rport" --replicaof 127.0.0.1 "$mport"

	local i
	for ((i = 0; i < WAIT_SECS * 10; i++)); do
		if redis-cli -h 127.0.0.1 -p "$rport" info replication | grep -q '^master_link_status:up' &&
			redis-cli -h 127.0.0.1 -p "$mport" info replication | grep -q "port=$rport,state=online"; then
			break
		fi
		sleep 0.1
	done
	((i < WAIT_SECS * 10)) || fail "replica link not up within ${WAIT_SECS}s"

	cat >"$dir/env" <<ENV
MASTER_ADDR=127.0.0.1:$mport
REPLICA_ADDR=127.0.0.1:$rport
MASTER_PORT=$mport
REPLICA_PORT=$rport
ENV
	echo "master=127.0.0.1:$mport replica=127.0.0.1:$rport"
}

do_stop() {
	[[ -d $dir ]] || return 0
	stop_one replica
	stop_one master
	rm -f "$dir/env" "$dir"/*.rdb
}

[[ $# -ge 1 && $# -le 2 ]] || usage
dir=${2:-./tmp/redis-local}
case $1 in
start) do_start ;;
stop) do_stop ;;
*) usage ;;
esac
