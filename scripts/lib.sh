# shellcheck shell=bash
# shellcheck disable=SC2154 # dir and WAIT_SECS belong to the sourcing script
# lib.sh: helpers shared by the scripts that start local Redis servers.
# The sourcing script sets PROG (its name, for messages) first; start_redis
# and stop_one use its dir (where pid and log files go) and WAIT_SECS, and
# start_redis calls its fail on error.

die() {
	echo "${PROG:-script}: $*" >&2
	exit 1
}

# stop_pid NAME PID: SIGTERM a child this script started, wait up to 10 s,
# then SIGKILL; logs with the sourcing script's log.
stop_pid() {
	local name=$1 pid=$2 i
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	log "stopped $name (pid $pid)"
}

# need_redis: make sure redis-server and redis-cli exist, installing them
# with apt-get when root.
need_redis() {
	if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
		return
	fi
	if [[ ${EUID} -eq 0 ]]; then
		echo "${PROG:-script}: installing redis-server and redis-tools" >&2
		apt-get update && apt-get install -y redis-server redis-tools
	else
		die "redis-server/redis-cli not found; install them: sudo apt-get install -y redis-server redis-tools"
	fi
}

# port_in_use PORT: true if something accepts connections on 127.0.0.1:PORT.
port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
	if command -v ss >/dev/null; then
		[[ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]] && return 0
	fi
	return 1
}

# free_port [OFFSET...]: print a port in 20000-29999 (below Linux's ephemeral
# range) that nothing listens on and that this run has not handed out yet
# (the caller's ports array, if any), with PORT+OFFSET free as well for each
# OFFSET (a cluster node's bus port).
# shellcheck disable=SC2120 # the offsets are optional
free_port() {
	local port i off ok
	for i in $(seq 100); do
		port=$((20000 + RANDOM % 10000))
		ok=1
		[[ " ${ports[*]:-} " == *" $port "* ]] && ok=0
		port_in_use "$port" && ok=0
		for off in "$@"; do
			port_in_use $((port + off)) && ok=0
		done
		if ((ok)); then
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
	running "$pid" || return 1
	grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null || [[ "$(ps -o comm= -p "$pid" 2>/dev/null)" == redis* ]]
}

# running PID: true if PID exists and is not a zombie (a daemonized
# redis-server is reparented, and its new parent may reap it late).
running() {
	kill -0 "$1" 2>/dev/null && [[ "$(ps -o stat= -p "$1" 2>/dev/null)" != Z* ]]
}

# start_redis NAME PORT [ARGS...]: start a daemonized redis-server on
# 127.0.0.1:PORT with no persistence, its files in $dir, and wait up to
# $WAIT_SECS for PING. On failure it calls the script's fail.
start_redis() {
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

# stop_one NAME: SIGTERM the pid in $dir/NAME.pid, wait up to $WAIT_SECS,
# then SIGKILL. Only a pid that is a running redis-server is signalled.
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

# The A/B scripts that run one fenceproxy build at a time, alone in front of
# a fresh Redis master + replica (scripts/hot-ab.sh, scripts/redisson-ab.sh):
# alone_init first, then alone_start and alone_stop around each run.

# alone_init NAME USAGE ARG...: PROG=NAME; old and new, the absolute paths
# of the first two ARGs (each an executable fenceproxy build; fewer ARGs
# print "usage: scripts/NAME.sh USAGE" and exit 2); tmp, a scratch dir
# removed at exit with whatever alone_start left running.
alone_init() {
	PROG=$1
	if (($# < 4)); then
		echo "usage: scripts/$PROG.sh $2" >&2
		exit 2
	fi
	old=$(realpath "$3") new=$(realpath "$4")
	local b
	for b in "$old" "$new"; do
		[[ -x $b ]] || {
			echo "$PROG: $b is not an executable fenceproxy build" >&2
			exit 2
		}
	done
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/$PROG.XXXXXX")
	proxy_pid=
	trap 'alone_stop; rm -rf "$tmp"' EXIT
}

# alone_start BIN [FLAG...]: a fresh master + replica in $tmp/redis (its env
# sourced: MASTER_ADDR, REPLICA_ADDR), and BIN in front of it on a free
# loopback port (set in port), with --min-replicas 1, a fresh data dir, no
# metrics listener and FLAGs; returns once it answers PING (10 s at most).
alone_start() {
	local bin=$1
	shift
	scripts/redis-local.sh start "$tmp/redis" >/dev/null
	# shellcheck disable=SC1091
	. "$tmp/redis/env"
	port=$(free_port)
	"$bin" --listen "127.0.0.1:$port" --backend "$MASTER_ADDR" --data-dir "$tmp/data" \
		--min-replicas 1 --metrics-listen '' "$@" >"$tmp/proxy.log" 2>&1 &
	proxy_pid=$!
	for _ in $(seq 100); do
		[[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]] && return 0
		sleep 0.1
	done
	cat "$tmp/proxy.log" >&2
	die "$bin did not answer PING on port $port within 10 s"
}

# alone_stop: stops what alone_start started and removes its dirs.
alone_stop() {
	if [[ -n $proxy_pid ]]; then
		kill -TERM "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null || true
	fi
	proxy_pid=
	if [[ -d $tmp/redis ]]; then scripts/redis-local.sh stop "$tmp/redis" >/dev/null 2>&1 || true; fi
	rm -rf "$tmp/redis" "$tmp/data"
}

# alone_alternate RUNS OLD NEW: the sourcing script's run BIN NAME, RUNS
# times a build, alternating which goes first, so that neither always runs
# on the other's heels.
alone_alternate() {
	local i
	for ((i = 1; i <= $1; i++)); do
		if ((i % 2)); then
			run "$2" old
			run "$3" new
		else
			run "$3" new
			run "$2" old
		fi
	done
}

# alone_median NAME COL: the median of column COL of $tmp/results's rows
# whose first column is NAME (the A/B scripts' run results).
alone_median() {
	awk -v name="$1" -v col="$2" '$1 == name { print $col }' "$tmp/results" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
