#!/usr/bin/env bash
# demo.sh: the one-minute fenceproxy demo.
#
#   scripts/demo.sh          build, start Redis (master + replica) and fenceproxy,
#                            run a scripted redis-cli session, stop everything
#   scripts/demo.sh --keep   the same, but leave it all running to play with
#   scripts/demo.sh --cluster [--keep]
#                            the same in front of a Redis Cluster (3 masters,
#                            3 replicas) instead of one master
#   scripts/demo.sh --tier [--keep]
#                            a tier of three fenceproxy nodes (one Raft group,
#                            one token authority) in front of that Redis
#                            Cluster: a lock taken on one node, checked on
#                            another, and each node's INFO tier
#   scripts/demo.sh stop     stop what a --keep run left running
#
# State lives under ./tmp/demo (pids, logs) and ./tmp/demo-data (the fence
# store, kept between runs: tokens keep growing, which is the point). A tier
# starts afresh each run (./tmp/demo-tier-data): its nodes get new ports, and
# a node's Raft state remembers its peers' addresses.
# FENCEPROXY_BIN=path skips the build and runs that binary instead.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

readonly STATE=./tmp/demo
readonly REDIS_DIR=$STATE/redis
readonly CLUSTER_DIR=$STATE/cluster
readonly DATA_DIR=./tmp/demo-data
readonly TIER_DATA_DIR=./tmp/demo-tier-data
readonly TIER_IDS=(n1 n2 n3)
readonly PIDFILE=$STATE/fenceproxy.pid
readonly LOG=$STATE/fenceproxy.log
readonly WAIT_SECS=15

port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# picked: ports this run has handed out (a tier node's ports are all picked
# before the first node listens on any).
picked=()
# pick_port VAR PREFERRED: set VAR to PREFERRED if free, else to a free port
# in 20000-29999.
pick_port() {
	local -n out=$1
	local cand=$2 i
	for i in $(seq 100); do
		if ! port_in_use "$cand" && [[ " ${picked[*]} " != *" $cand "* ]]; then
			picked+=("$cand")
			# shellcheck disable=SC2034 # out is a nameref: this sets the caller's VAR
			out=$cand
			return
		fi
		cand=$((20000 + RANDOM % 10000))
	done
	echo "demo: no free port after $i tries" >&2
	exit 1
}

# proxy_alive [PIDFILE]: true if the fenceproxy PIDFILE names is running.
proxy_alive() {
	local pidfile=${1:-$PIDFILE} pid
	[[ -f $pidfile ]] || return 1
	pid=$(<"$pidfile")
	[[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && grep -q fenceproxy "/proc/$pid/cmdline" 2>/dev/null
}

# proxy_pidfiles: the single proxy's pid file and each tier node's.
proxy_pidfiles() {
	local id
	echo "$PIDFILE"
	for id in "${TIER_IDS[@]}"; do
		echo "$STATE/fenceproxy-$id.pid"
	done
}

stop_all() {
	local pidfile pid i
	for pidfile in $(proxy_pidfiles); do
		if proxy_alive "$pidfile"; then
			pid=$(<"$pidfile")
			kill -TERM "$pid" 2>/dev/null || true
			for ((i = 0; i < 100; i++)); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
			kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
			echo "stopped fenceproxy (pid $pid)"
		fi
		rm -f "$pidfile"
	done
	rm -f "$STATE/env"
	[[ -d $REDIS_DIR ]] && scripts/redis-local.sh stop "$REDIS_DIR"
	[[ -d $CLUSTER_DIR ]] && scripts/redis-cluster.sh stop "$CLUSTER_DIR"
	return 0
}

if [[ ${1:-} == stop ]]; then
	stop_all
	exit 0
fi
keep=false cluster=false tier=false
for arg in "$@"; do
	case $arg in
	--keep) keep=true ;;
	--cluster) cluster=true ;;
	--tier) tier=true cluster=true ;;
	*)
		echo "usage: $0 [--cluster | --tier] [--keep] | stop" >&2
		exit 2
		;;
	esac
done

for pidfile in $(proxy_pidfiles); do
	if proxy_alive "$pidfile"; then
		echo "demo: already running (pid $(<"$pidfile")); run: scripts/demo.sh stop" >&2
		exit 1
	fi
done

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

# start_proxy PIDFILE LOG PORT METRICS_PORT DATA_DIR [FLAG...]: start one
# fenceproxy in the background, loopback only.
start_proxy() {
	local pidfile=$1 log=$2 port=$3 metrics_port=$4 data_dir=$5
	shift 5
	nohup "$bin" \
		--listen "127.0.0.1:$port" \
		--backend "$BACKEND" \
		--data-dir "$data_dir" \
		--min-replicas 1 \
		--replica-timeout 500ms \
		--metrics-listen "127.0.0.1:$metrics_port" \
		"$@" \
		>"$log" 2>&1 </dev/null &
	echo $! >"$pidfile"
}

# wait_until WHAT PIDFILE LOG TEST...: poll TEST until it succeeds; fail with
# the log's tail if the process dies or WAIT_SECS pass.
wait_until() {
	local what=$1 pidfile=$2 log=$3 i
	shift 3
	for ((i = 0; ; i++)); do
		if ! kill -0 "$(<"$pidfile")" 2>/dev/null; then
			echo "demo: fenceproxy exited; last lines of $log:" >&2
			tail -n 20 "$log" >&2
			exit 1
		fi
		"$@" && return
		if ((i >= WAIT_SECS * 10)); then
			echo "demo: fenceproxy did not $what within ${WAIT_SECS}s; last lines of $log:" >&2
			tail -n 20 "$log" >&2
			exit 1
		fi
		sleep 0.1
	done
}
answers_ping() { [[ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" == PONG ]]; }
# tier_field PORT FIELD: FIELD of INFO tier on the node at PORT.
tier_field() {
	redis-cli -h 127.0.0.1 -p "$1" info tier 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"
}
leader_ready() { [[ "$(tier_field "$1" tier_role)" == leader && "$(tier_field "$1" tier_ready)" == 1 ]]; }
# some_leader_ready: true once one of the tier's nodes is its ready leader.
some_leader_ready() {
	local p
	for p in "${ports[@]}"; do
		leader_ready "$p" && return
	done
	return 1
}

if [[ $tier == true ]]; then
	# Every port first (the peers list names each node's Raft port), then
	# the nodes.
	ports=() metrics_ports=() raft_ports=() peers=()
	for i in "${!TIER_IDS[@]}"; do
		pick_port "ports[$i]" $((7381 + i))
		pick_port "metrics_ports[$i]" $((9131 + i))
		pick_port "raft_ports[$i]" $((7391 + i))
		peers+=("${TIER_IDS[$i]}=127.0.0.1:${raft_ports[$i]}")
	done
	peer_list=$(IFS=,; echo "${peers[*]}")
	rm -rf "$TIER_DATA_DIR"
	: >"$STATE/env"
	for i in "${!TIER_IDS[@]}"; do
		id=${TIER_IDS[$i]}
		echo "== starting tier node $id on 127.0.0.1:${ports[$i]} (Raft 127.0.0.1:${raft_ports[$i]}, metrics 127.0.0.1:${metrics_ports[$i]})"
		start_proxy "$STATE/fenceproxy-$id.pid" "$STATE/fenceproxy-$id.log" "${ports[$i]}" "${metrics_ports[$i]}" \
			"$TIER_DATA_DIR/$id" --node-id "$id" --raft-listen "127.0.0.1:${raft_ports[$i]}" --peers "$peer_list"
		printf 'PROXY_ADDR_%s=127.0.0.1:%s\nMETRICS_ADDR_%s=127.0.0.1:%s\n' "$id" "${ports[$i]}" "$id" "${metrics_ports[$i]}" >>"$STATE/env"
	done
	echo "   peers: $peer_list; backend: $BACKEND"
	for i in "${!TIER_IDS[@]}"; do
		wait_until "answer PING" "$STATE/fenceproxy-${TIER_IDS[$i]}.pid" "$STATE/fenceproxy-${TIER_IDS[$i]}.log" answers_ping "${ports[$i]}"
	done
	echo "== waiting for the tier to elect a leader"
	wait_until "elect a leader" "$STATE/fenceproxy-n1.pid" "$STATE/fenceproxy-n1.log" some_leader_ready
	printf '   connect to any node:'
	printf ' redis-cli -p %s |' "${ports[@]:0:2}"
	printf ' redis-cli -p %s\n' "${ports[2]}"
	port=${ports[0]}
else
	pick_port port 7379
	pick_port metrics_port 9121
	echo "== starting fenceproxy on 127.0.0.1:$port (backend $BACKEND, metrics 127.0.0.1:$metrics_port)"
	start_proxy "$PIDFILE" "$LOG" "$port" "$metrics_port" "$DATA_DIR"
	printf 'PROXY_ADDR=127.0.0.1:%s\nMETRICS_ADDR=127.0.0.1:%s\n' "$port" "$metrics_port" >"$STATE/env"
	wait_until "answer PING" "$PIDFILE" "$LOG" answers_ping "$port"
fi

failures=0
# cli ARGS...: run one command through fenceproxy (the node at $port), show
# it and its reply; the reply is left in $reply.
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

if [[ $tier == true ]]; then
	# on ID: send the next commands to tier node ID.
	on() {
		local i
		for i in "${!TIER_IDS[@]}"; do
			if [[ ${TIER_IDS[$i]} == "$1" ]]; then
				port=${ports[$i]}
			fi
		done
	}
	leader=
	for i in "${!TIER_IDS[@]}"; do
		if leader_ready "${ports[$i]}"; then
			leader=${TIER_IDS[$i]}
		fi
	done
	echo
	echo "== the tier: $leader leads; every node takes lock commands (a follower relays them to the leader)"

	echo
	echo "== worker-a takes the lock on n1; the reply is its fencing token"
	on n1
	cli LOCK.ACQUIRE orders:42 worker-a 5000
	tok_a=$(token)
	check "an integer token" test -n "$tok_a"

	echo
	echo "== worker-b asks on n3: (nil), the lock is busy tier-wide"
	on n3
	cli LOCK.ACQUIRE orders:42 worker-b 5000
	check "(nil)" reply_is "(nil)"

	echo
	echo "== a storage service checks worker-a's token on n2"
	on n2
	cli FENCE.CHECK orders:42 "${tok_a:-0}"
	check "1: worker-a's token is the newest" reply_is "(integer) 1"

	echo
	echo "== worker-a releases on n3; worker-b takes the lock on n2"
	on n3
	cli LOCK.RELEASE orders:42 worker-a
	check "1: released" reply_is "(integer) 1"
	on n2
	cli LOCK.ACQUIRE orders:42 worker-b 5000
	tok_b=$(token)
	check "a token bigger than ${tok_a:-the first}" bigger "$tok_a" "$tok_b"

	echo
	echo "== worker-a's late write, checked on n1: fenced off"
	on n1
	cli FENCE.CHECK orders:42 "${tok_a:-0}"
	check "0: a newer token exists, worker-a is stale" reply_is "(integer) 0"

	echo
	echo "== INFO tier on each node: role, term, leader, commit and applied index, peers"
	for id in "${TIER_IDS[@]}"; do
		on "$id"
		printf '\n127.0.0.1:%s> INFO tier\n' "$port"
		redis-cli -h 127.0.0.1 -p "$port" info tier | tr -d '\r' |
			grep -E '^tier_(node_id|role|ready|term|leader_id|leader_addr|commit_index|applied_index|peer_)' || true
	done
	leaders=0
	for p in "${ports[@]}"; do
		if [[ "$(tier_field "$p" tier_role)" == leader ]]; then
			leaders=$((leaders + 1))
		fi
	done
	reply=$leaders
	check "exactly one leader" reply_is 1
else
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
fi

echo
if ((failures > 0)); then
	echo "demo: $failures expectation(s) not met; fenceproxy log: $LOG" >&2
	exit 1
fi
echo "demo: all expectations met"

if [[ $keep == true && $tier == true ]]; then
	echo
	echo "Everything is still running. Connect to any node:"
	for i in "${!TIER_IDS[@]}"; do
		printf '  %s   redis-cli -p %s   metrics: curl -s http://127.0.0.1:%s/metrics   (log: %s)\n' \
			"${TIER_IDS[$i]}" "${ports[$i]}" "${metrics_ports[$i]}" "$STATE/fenceproxy-${TIER_IDS[$i]}.log"
	done
	cat <<MSG
  redis        $BACKEND
Try:           redis-cli -p ${ports[0]} info tier
Stop it all:   scripts/demo.sh stop
MSG
elif [[ $keep == true ]]; then
	cat <<MSG

Everything is still running:
  fenceproxy   redis-cli -p $port          (log: $LOG)
  metrics      curl -s http://127.0.0.1:$metrics_port/metrics
  redis        $BACKEND
Stop it all:   scripts/demo.sh stop
MSG
fi
