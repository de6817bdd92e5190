#!/usr/bin/env bash
# demo.sh: the one-minute fenceproxy demo.
#
#   scripts/demo.sh          build, start Redis (master + replica) and fenceproxy,
#                            run a scripted redis-cli session, stop everything
#   scripts/demo.sh --keep   the same, but leave it all running to play with
#   scripts/demo.sh --cluster [--keep]
#                            the same in front of a Redis Cluster (3 masters,
#                            3 replicas) instead of one master
#   scripts/demo.sh stop     stop what a --keep run left running
#
# State lives under ./tmp/demo (pids, logs) and ./tmp/demo-data (the fence
# store, kept between runs: tokens keep growing, which is the point).
# FENCEPROXY_BIN=path skips the build and runs that binary instead.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

readonly STATE=./tmp/demo
readonly REDIS_DIR=$STATE/redis
readonly CLUSTER_DIR=$STATE/cluster
readonly DATA_DIR=./tmp/demo-data
readonly PIDFILE=$STATE/fenceproxy.pid
readonly LOG=$STATE/fenceproxy.log
readonly WAIT_SECS=15

port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# pick_port PREFERRED: PREFERRED if free, else a free port in 20000-29999.
pick_port() {
	local port=$1 i
	for i in $(seq 100); do
		port_in_use "$port" || {
			echo "$port"
			return
		}
		port=$((20000 + RANDOM % 10000))
	done
	echo "demo: no free port after $i tries" >&2
	exit 1
}

proxy_alive() {
	local pid
	[[ -f $PIDFILE ]] || return 1
	pid=$(<"$PIDFILE")
	[[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && grep -q fenceproxy "/proc/$pid/cmdline" 2>/dev/null
}

stop_all() {
	if proxy_alive; then
		local pid i
		pid=$(<"$PIDFILE")
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
		echo "stopped fenceproxy (pid $pid)"
	fi
	rm -f "$PIDFILE" "$STATE/env"
	[[ -d $REDIS_DIR ]] && scripts/redis-local.sh stop "$REDIS_DIR"
	[[ -d $CLUSTER_DIR ]] && scripts/redis-cluster.sh stop "$CLUSTER_DIR"
	return 0
}

if [[ ${1:-} == stop ]]; then
	stop_all
	exit 0
fi
keep=false cluster=false
for arg in "$@"; do
	case $arg in
	--keep) keep=true ;;
	--cluster) cluster=true ;;
	*)
		echo "usage: $0 [--cluster] [--keep] | stop" >&2
		exit 2
		;;
	esac
done

if proxy_alive; then
	echo "demo: already running (pid $(<"$PIDFILE")); run: scripts/demo.sh stop" >&2
	exit 1
fi

mkdir -p "$STATE"
cleanup() {
	local rc=$?
	if [[ $keep == false || $rc -ne 0 ]]; then
		echo
		echo "== cleaning up"
		stop_all || true
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bin=${FENCEPROXY_BIN:-}
if [[ -z $bin ]]; then
	echo "== go build -o ./bin/fenceproxy ./cmd/fenceproxy"
	go build -o ./bin/fenceproxy ./cmd/fenceproxy
	bin=./bin/fenceproxy
fi

if [[ $cluster == true ]]; then
	echo "== starting a Redis Cluster: 3 masters, 3 replicas"
	scripts/redis-cluster.sh start "$CLUSTER_DIR"
	# shellcheck source=/dev/null
	source "$CLUSTER_DIR/env"
	BACKEND=$SEEDS
else
	echo "== starting Redis master + replica"
	scripts/redis-local.sh start "$REDIS_DIR"
	# shellcheck source=/dev/null
	source "$REDIS_DIR/env"
	BACKEND=$MASTER_ADDR
fi

port=$(pick_port 7379)
metrics_port=$(pick_port 9121)
echo "== starting fenceproxy on 127.0.0.1:$port (backend $BACKEND, metrics 127.0.0.1:$metrics_port)"
nohup "$bin" \
	--listen "127.0.0.1:$port" \
	--backend "$BACKEND" \
	--data-dir "$DATA_DIR" \
	--min-replicas 1 \
	--replica-timeout 500ms \
	--metrics-listen "127.0.0.1:$metrics_port" \
	>"$LOG" 2>&1 </dev/null &
echo $! >"$PIDFILE"
printf 'PROXY_ADDR=127.0.0.1:%s\nMETRICS_ADDR=127.0.0.1:%s\n' "$port" "$metrics_port" >"$STATE/env"

for ((i = 0; ; i++)); do
	if ! kill -0 "$(<"$PIDFILE")" 2>/dev/null; then
		echo "demo: fenceproxy exited; last lines of $LOG:" >&2
		tail -n 20 "$LOG" >&2
		exit 1
	fi
	[[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == PONG ]] && break
	if ((i >= WAIT_SECS * 10)); then
		echo "demo: fenceproxy did not answer PING within ${WAIT_SECS}s; last lines of $LOG:" >&2
		tail -n 20 "$LOG" >&2
		exit 1
	fi
	sleep 0.1
done

failures=0
# cli ARGS...: run one command through fenceproxy, show it and its reply; the
# reply is left in $reply.
cli() {
	printf '\n127.0.0.1:%s> %s\n' "$port" "$*"
	reply=$(redis-cli --no-raw -h 127.0.0.1 -p "$port" "$@" 2>&1) || true
	printf '%s\n' "$reply"
}
# check WHAT TEST...: run TEST and report whether the reply was WHAT.
check() {
	local what=$1
	shift
	if "$@"; then
		printf '   ✓ %s\n' "$what"
	else
		printf '   ✗ expected %s\n' "$what"
		failures=$((failures + 1))
	fi
}
reply_is() { [[ $reply == "$1" ]]; }
# token: print the integer in $reply, or nothing.
token() {
	if [[ $reply =~ ^\(integer\)\ ([0-9]+)$ ]]; then
		echo "${BASH_REMATCH[1]}"
	fi
}
bigger() { [[ -n $1 && -n $2 ]] && (($2 > $1)); }

echo
echo "== ordinary commands pass through to Redis"
cli SET greeting hello
cli GET greeting
check "the value just set" reply_is '"hello"'

if [[ $cluster == true ]]; then
	echo
	echo "== in front of a cluster, keys in many slots still look like one Redis"
	cli MSET user:1 ann user:2 bob user:3 cy
	cli MGET user:1 user:2 user:3
	check "all three values, in order" reply_is $'1) "ann"\n2) "bob"\n3) "cy"'
	cli DEL user:1 user:2 user:3
	check "3 keys deleted across the masters" reply_is "(integer) 3"
fi

echo
echo "== worker-a takes the lock; the reply is its fencing token"
cli LOCK.ACQUIRE orders:42 worker-a 5000
tok_a=$(token)
check "an integer token" test -n "$tok_a"

echo
echo "== worker-b asks too: (nil), the lock is busy"
cli LOCK.ACQUIRE orders:42 worker-b 5000
check "(nil)" reply_is "(nil)"

echo
echo "== a storage service checks worker-a's token before accepting its write"
cli FENCE.CHECK orders:42 "${tok_a:-0}"
check "1: worker-a's token is the newest" reply_is "(integer) 1"

echo
echo "== worker-a releases"
cli LOCK.RELEASE orders:42 worker-a
check "1: released" reply_is "(integer) 1"

echo
echo "== worker-b gets the lock with a bigger token"
cli LOCK.ACQUIRE orders:42 worker-b 5000
tok_b=$(token)
check "a token bigger than ${tok_a:-the first}" bigger "$tok_a" "$tok_b"

echo
echo "== a late write from worker-a carries its old token: fenced off"
cli FENCE.CHECK orders:42 "${tok_a:-0}"
check "0: a newer token exists, worker-a is stale" reply_is "(integer) 0"

echo
echo "== the lock's state"
cli LOCK.INFO orders:42

echo
if ((failures > 0)); then
	echo "demo: $failures expectation(s) not met; fenceproxy log: $LOG" >&2
	exit 1
fi
echo "demo: all expectations met"

if [[ $keep == true ]]; then
	cat <<MSG

Everything is still running:
  fenceproxy   redis-cli -p $port          (log: $LOG)
  metrics      curl -s http://127.0.0.1:$metrics_port/metrics
  redis        $BACKEND
Stop it all:   scripts/demo.sh stop
MSG
fi
