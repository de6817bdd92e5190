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

# free_port: print a port in 20000-29999 (below Linux's ephemeral range)
# that nothing listens on.
free_port() {
	local port i
	for i in $(seq 100); do
		port=$((20000 + RANDOM % 10000))
		if ! port_in_use "$port"; then
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

# start_one NAME PORT [ARGS...]: start a daemonized redis-server and wait
# for PING.
start_one() {
	local name=$1 port=$2
	shift 2
	rm -f "$dir/$name.pid"
	redis-server \
		--port "$port" --bind 127.0.0.1 \
		--save "" --appendonly no \
		--dir "$dir" --dbfilename "$name.rdb" \
		--daemonize yes --pidfile "$dir/$name.pid" \
		--logfile "$dir/$name.log" \
		--repl-diskless-sync-delay 0 \
		"$@" >>"$dir/$name.out" 2>&1 || fail "$name: redis-server failed to start"
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
	start_one master "$mport"
	rport=$(free_port)
	start_one replica "$rport" --replicaof 127.0.0.1 "$mport"

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
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$pidfile"
	echo "stopped $name (pid $pid)"
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
