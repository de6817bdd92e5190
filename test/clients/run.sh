#!/usr/bin/env bash
# run.sh: the client compatibility suites, against a real fenceproxy.
#
#   test/clients/run.sh                 every suite: python node go cli java failover
#   SUITES="go cli" test/clients/run.sh only those
#   REDISSON_VERSION=4.8.0 SUITES="java failover" test/clients/run.sh
#                                       the Java suites against that Redisson
#   FENCEPROXY_ADDR=host:port test/clients/run.sh   use a running proxy instead
#   test/clients/run.sh --cluster       the same suites, the proxy fronting a Redis Cluster
#   FENCEPROXY_BIN=/path test/clients/run.sh   that fenceproxy binary instead of building one
#
# When anything fails, the run's logs (the proxy's, every Redis node's, each suite's
# output) and the proxy's /metrics counters are kept in a directory named before the
# last line, with the tail of the proxy's log; FENCEPROXY_KEEP_LOGS=DIR names that
# directory (default a new fenceproxy-clients-failed.XXXXXX under $TMPDIR or /tmp).
# Otherwise the temp dir goes.
#
# It builds fenceproxy, starts a Redis master + replica (scripts/redis-local.sh)
# and the proxy (--min-replicas 1) in a temp dir, installs what each suite needs
# from its registry if missing (redis-py into test/clients/python/.venv, ioredis
# by `npm ci` in test/clients/node, go-redis/rueidis through go.mod), runs each
# suite against FENCEPROXY_ADDR, and stops exactly what it started on exit.
#
# Every suite prints `PASS ...` / `FAIL <client>: <case>: <call> -> <reply>` lines
# and one `<suite> totals: N passed, M failed` line; the last line here adds
# them up as `N passed, M failed`. Exit status is non-zero on any failure. A case
# that cannot run in a mode prints `SKIP <client>: <case>: <why>` (the Java suite
# lists them again before its totals); a skip is not a pass.
#
# The proxy this script starts can be restarted by a suite: FENCEPROXY_RESTART
# names restart-proxy.sh (SIGKILL, then the same command on the same port) and
# FENCEPROXY_PROXY_DIR the directory it reads; the Java suite does it mid-run and
# carries on with the same clients, so it runs last. With FENCEPROXY_ADDR given,
# neither is set and that case is skipped.
#
# The failover suite (test/clients/failover, a Go test) needs no running proxy: it
# installs what the python, node and java suites install, then starts its own
# master + replica + 3 Sentinels and fenceproxy --sentinel (testenv; the fenceproxy
# built here, or FENCEPROXY_BIN), and runs each real lock library (Redisson RLock,
# redis-py Lock, node-redlock 5, redsync) across a master killed right after a grant
# and a replica promoted by Sentinel: straight at Redis it must show the double
# grant, through fenceproxy at most one holder. Standalone only: SKIP with --cluster.
#
# --cluster: a 3-master/3-replica Redis Cluster (scripts/redis-cluster.sh) instead
# of master + replica, and fenceproxy --backend naming its masters. The suites run
# unchanged (every client in single-node mode: the proxy looks like one Redis) with
# FENCEPROXY_CLUSTER=1 and FENCEPROXY_CLUSTER_SEEDS=host:port,... (the masters) in
# their environment; the Java suite's main class is then fenceproxy.ClusterSuite
# (Suite's cases plus keys spread over many slots: cross-slot MSET/MGET/DEL, CROSSSLOT,
# Redisson's one-EVAL watchdog renewal of 30 locks in 30 slots). With FENCEPROXY_ADDR
# and --cluster, the running proxy is taken to front a cluster. The suites keep
# each run's keys under one hash tag, so their multi-key commands and transactions
# are valid on a cluster; where Redis Cluster itself answers differently (PUBLISH
# counts only its own node's subscribers) they accept both answers.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
cluster=0
case "${1:-}" in
"") ;;
--cluster) cluster=1 ;;
*) echo "usage: $0 [--cluster]" >&2; exit 2 ;;
esac
[[ $# -le 1 ]] || { echo "usage: $0 [--cluster]" >&2; exit 2; }
SUITES=${SUITES:-python node go cli java failover}
started=$(date +%s)

die() {
	echo "clients: $*" >&2
	[[ -d ${tmp:-} ]] && keep_run_logs
	echo "0 passed, 1 failed"
	exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fenceproxy-clients.XXXXXX")
# The proxy this script starts: $tmp/proxy.pid holds its pid, which restart-proxy.sh
# rewrites when a suite restarts the proxy mid-run. The first one is disowned once it
# is up, so bash does not report its death when a restart kills it.
proxy_pid=
current_proxy_pid() { cat "$tmp/proxy.pid" 2>/dev/null || echo "$proxy_pid"; }
cleanup() {
	local pid
	pid=$(current_proxy_pid)
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	[[ -d $tmp/redis ]] && scripts/redis-local.sh stop "$tmp/redis" >/dev/null 2>&1
	[[ -d $tmp/cluster ]] && scripts/redis-cluster.sh stop "$tmp/cluster" >/dev/null 2>&1
	rm -rf "$tmp"
}

# keep_run_logs: when something failed, copy the run's logs out of $tmp (which cleanup
# deletes), show the tail of the proxy's log and say where they are, before the
# totals line. Only logs: no binaries, data directories or RDB files.
keep_run_logs() {
	local keep=${FENCEPROXY_KEEP_LOGS:-} f
	if [[ -n $keep ]]; then
		mkdir -p "$keep" || return
	else
		keep=$(mktemp -d "${TMPDIR:-/tmp}/fenceproxy-clients-failed.XXXXXX") || return
	fi
	# The proxy's counters (lock results, replica shortfalls, clients closed...),
	# since its last restart.
	if [[ -n ${metrics_port:-} ]] && command -v curl >/dev/null; then
		curl -s -m 5 "http://127.0.0.1:$metrics_port/metrics" | grep '^fenceproxy_' >"$keep/proxy-metrics.txt"
	fi
	for f in "$tmp"/*.log "$tmp"/*.out "$tmp"/proxy.args; do
		[[ -f $f ]] && cp "$f" "$keep/"
	done
	for f in "$tmp"/redis/*.log "$tmp"/redis/*.out "$tmp"/cluster/*.log "$tmp"/cluster/*.out; do
		[[ -f $f ]] && cp "$f" "$keep/redis-$(basename "$(dirname "$f")")-$(basename "$f")"
	done
	if [[ -s $keep/proxy.log ]]; then
		echo "clients: the last 40 lines of the proxy's log:"
		tail -n 40 "$keep/proxy.log" | sed 's/^/  /'
	fi
	echo "clients: something failed: the proxy's log, the Redis logs and each suite's output are kept in $keep"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- tools -----------------------------------------------------------------------
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null || ! command -v redis-benchmark >/dev/null; then
	[[ $(id -u) -eq 0 ]] || die "redis-server, redis-cli and redis-benchmark are needed: sudo apt-get install -y redis-server redis-tools"
	echo "clients: installing redis-server and redis-tools with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >/dev/null && apt-get install -y -q redis-server redis-tools >/dev/null || die "apt-get install redis failed"
fi

want() { [[ " $SUITES " == *" $1 "* ]]; }

# The Java suite's build: pom.xml's Redisson, or REDISSON_VERSION's (another
# build directory, so that both stay built).
java_target=$here/java/target
[[ -n ${REDISSON_VERSION:-} ]] && java_target=$here/java/target/redisson-$REDISSON_VERSION

# The Go suite's test binary compiles while everything else is set up.
if want go; then
	(go test -c -o "$tmp/clients.test" ./test/clients/go >"$tmp/go-build.log" 2>&1; echo $? >"$tmp/go-build.rc") &
	go_build_pid=$!
fi

# The failover suite's test binary too (a SKIP line instead with --cluster).
if want failover && ((!cluster)); then
	(go test -c -o "$tmp/failover.test" ./test/clients/failover >"$tmp/failover-build.log" 2>&1; echo $? >"$tmp/failover-build.rc") &
	failover_build_pid=$!
fi

install_python() {
	local venv=$here/python/.venv
	if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c 'import redis' 2>/dev/null &&
		[[ $("$venv/bin/python" -c 'import redis; print(redis.__version__)') == "$(sed -n 's/^redis==//p' "$here/python/requirements.txt")" ]]; then
		return 0
	fi
	command -v python3 >/dev/null || { echo "clients: python3 is not installed"; return 1; }
	if ! python3 -m venv --clear "$venv" >/dev/null 2>&1; then
		if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
			echo "clients: installing python3-venv with apt-get"
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null 2>&1
		fi
		python3 -m venv --clear "$venv" || { echo "clients: python3 -m venv failed"; return 1; }
	fi
	echo "clients: pip install -r test/clients/python/requirements.txt"
	"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/python/requirements.txt"
}

install_node() {
	command -v node >/dev/null && command -v npm >/dev/null || { echo "clients: node and npm are needed"; return 1; }
	if [[ -f $here/node/node_modules/ioredis/package.json ]] &&
		[[ $here/node/node_modules/.package-lock.json -nt $here/node/package-lock.json ]]; then
		return 0
	fi
	echo "clients: npm ci in test/clients/node"
	(cd "$here/node" && npm ci --no-audit --no-fund --loglevel=error)
}

# The Java suite (Redisson, Jedis) builds with Maven into test/clients/java/target;
# Maven caches what it fetches in ~/.m2 (the first build downloads about 55 MB, ~30 s).
install_java() {
	if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
		[[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null || { echo "clients: java 17 and mvn are needed: sudo apt-get install -y maven"; return 1; }
		echo "clients: installing openjdk-17-jdk-headless and maven with apt-get"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jdk-headless maven >/dev/null 2>&1 || return 1
	fi
	local cp=$java_target/classpath.txt
	# Rebuild unless the build is newer than its sources and every jar it lists is still in the cache.
	local jar fresh=
	if [[ -s $cp ]] && [[ -z $(find "$here/java/pom.xml" "$here/java/src" -newer "$cp" -print -quit) ]]; then
		fresh=1
		for jar in $(tr ':' ' ' <"$cp"); do [[ -f $jar ]] || fresh=; done
	fi
	[[ -n $fresh ]] && return 0
	echo "clients: mvn package in test/clients/java${REDISSON_VERSION:+ (Redisson $REDISSON_VERSION)}"
	(cd "$here/java" && mvn -q -B package -DskipTests ${REDISSON_VERSION:+-Dredisson.version="$REDISSON_VERSION" -Dsuite.build="$java_target"}) && [[ -s $cp ]]
}

# ---- Redis and fenceproxy ----------------------------------------------------------
if [[ -z ${FENCEPROXY_ADDR:-} ]]; then
	if [[ -n ${FENCEPROXY_BIN:-} ]]; then
		[[ -x $FENCEPROXY_BIN ]] || die "FENCEPROXY_BIN=$FENCEPROXY_BIN is not an executable"
		cp "$FENCEPROXY_BIN" "$tmp/fenceproxy" || die "cannot copy FENCEPROXY_BIN=$FENCEPROXY_BIN"
	else
		go build -o "$tmp/fenceproxy" ./cmd/fenceproxy || die "go build ./cmd/fenceproxy failed"
	fi
	if ((cluster)); then
		# A second try: a port redis-cluster.sh found free can still be taken before
		# the node binds it.
		scripts/redis-cluster.sh start "$tmp/cluster" >/dev/null ||
			scripts/redis-cluster.sh start "$tmp/cluster" >/dev/null || die "scripts/redis-cluster.sh start failed (twice)"
		# shellcheck disable=SC1091
		. "$tmp/cluster/env"
		MASTER_ADDR=$SEEDS
	else
		scripts/redis-local.sh start "$tmp/redis" >/dev/null || die "scripts/redis-local.sh start failed"
		# shellcheck disable=SC1091
		. "$tmp/redis/env"
		# The Java suite's recipe case detaches the replica for a while.
		export FENCEPROXY_MASTER_ADDR=$MASTER_ADDR FENCEPROXY_REPLICA_ADDR=$REPLICA_ADDR
		# The suites' SET NX recipe locks (redis-py, redsync, redislock) use
		# recipelock:* keys, which the proxy's --lock-keys names (below).
		export FENCEPROXY_RECIPE_LOCKS=1
	fi
	for try in 1 2 3 4 5; do
		port=$((20000 + RANDOM % 10000))
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
		# /metrics on the next port: its counters are kept with the logs on a failure.
		metrics_port=$((port + 1))
		(exec 3<>"/dev/tcp/127.0.0.1/$metrics_port") 2>/dev/null && continue
		proxy_cmd=("$tmp/fenceproxy" --listen "127.0.0.1:$port" --backend "$MASTER_ADDR" --data-dir "$tmp/data"
			--min-replicas 1 --replica-timeout 2s --metrics-listen "127.0.0.1:$metrics_port" --lock-keys 'recipelock:*')
		"${proxy_cmd[@]}" >"$tmp/proxy.log" 2>&1 &
		proxy_pid=$!
		for _ in $(seq 100); do
			[[ $(redis-cli -p "$port" PING 2>/dev/null) == PONG ]] && break 2
			kill -0 "$proxy_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$proxy_pid" 2>/dev/null; wait "$proxy_pid" 2>/dev/null; proxy_pid=
		# In front of a cluster, only a port taken between the probe and the bind is worth another try.
		((cluster)) && ! grep -qi 'address already in use' "$tmp/proxy.log" && break
	done
	[[ -n $proxy_pid ]] || { cat "$tmp/proxy.log" >&2; die "fenceproxy did not start$( ((cluster)) && echo " in front of the Redis Cluster $SEEDS")"; }
	# What restart-proxy.sh needs to start the same proxy again (the Java suite's
	# reconnect case runs it as FENCEPROXY_RESTART).
	disown "$proxy_pid"
	echo "$proxy_pid" >"$tmp/proxy.pid"
	printf '%s\n' "${proxy_cmd[@]}" >"$tmp/proxy.args"
	export FENCEPROXY_RESTART=$here/restart-proxy.sh FENCEPROXY_PROXY_DIR=$tmp
	export FENCEPROXY_ADDR=127.0.0.1:$port
	if ((cluster)); then
		export FENCEPROXY_CLUSTER_SEEDS=$SEEDS
		echo "clients: redis cluster masters $SEEDS (nodes $NODES), fenceproxy $FENCEPROXY_ADDR (pid $proxy_pid)"
	else
		echo "clients: redis master $MASTER_ADDR replica $REPLICA_ADDR, fenceproxy $FENCEPROXY_ADDR (pid $proxy_pid)"
	fi
fi
((cluster)) && export FENCEPROXY_CLUSTER=1

# ---- suites --------------------------------------------------------------------------
total_pass=0
total_fail=0
# suite NAME TIMEOUT CMD...: run CMD, show its output, add its totals line.
suite() {
	local name=$1 limit=$2 out=$tmp/$1.out rc line p f t0=$SECONDS
	shift 2
	echo "== $name"
	timeout -k 5 "$limit" "$@" 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	line=$(grep -E "^$name totals: [0-9]+ passed, [0-9]+ failed$" "$out" | tail -1)
	if [[ -n $line ]]; then
		p=$(sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed/\1/' <<<"$line")
		f=$(sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed/\2/' <<<"$line")
		if [[ $rc -ne 0 && $f -eq 0 ]]; then
			echo "FAIL $name: the suite exited $rc with no failed case"
			f=1
		fi
	else
		echo "FAIL $name: the suite ended (exit $rc$([[ $rc -eq 124 ]] && echo ", timed out after ${limit}s")) without its totals line"
		p=0 f=1
	fi
	total_pass=$((total_pass + p))
	total_fail=$((total_fail + f))
	echo "-- $name: $p passed, $f failed in $((SECONDS - t0))s"
}
setup_failed() {
	echo "FAIL $1: could not install its packages (see above)"
	total_fail=$((total_fail + 1))
}

if want python; then
	if install_python; then suite python 120 "$here/python/.venv/bin/python" -W ignore "$here/python/suite.py"; else setup_failed python; fi
fi
if want node; then
	if install_node; then suite node 120 node "$here/node/suite.js"; else setup_failed node; fi
fi
if want go; then
	wait "$go_build_pid"
	if [[ $(cat "$tmp/go-build.rc" 2>/dev/null) == 0 ]]; then
		suite go 120 "$tmp/clients.test" -test.count=1 -test.timeout=110s
	else
		cat "$tmp/go-build.log"
		setup_failed go
	fi
fi
if want cli; then
	suite cli 180 "$here/cli.sh"
fi
if want java; then
	if install_java; then
		java_main=fenceproxy.Suite
		((cluster)) && java_main=fenceproxy.ClusterSuite
		# Redisson's log lines carry the time (to set beside the proxy's log), and
		# say when it closes a connection whose PING went unanswered within
		# pingConnectionInterval (PingConnectionHandler at debug, one line a
		# close, else silent): on a pub/sub connection its messages are lost
		# until it has resubscribed.
		suite java 150 java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
			-Dorg.slf4j.simpleLogger.showDateTime=true -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS \
			-Dorg.slf4j.simpleLogger.log.org.redisson.client.handler.PingConnectionHandler=debug \
			-cp "$java_target/classes:$(cat "$java_target/classpath.txt")" "$java_main"
	else setup_failed java; fi
fi
if want failover; then
	if ((cluster)); then
		echo "== failover"
		echo "SKIP failover: a master killed after a grant and a replica promoted by Sentinel: Sentinel fronts a standalone master, not a Redis Cluster"
	else
		wait "$failover_build_pid"
		if [[ $(cat "$tmp/failover-build.rc" 2>/dev/null) != 0 ]]; then
			cat "$tmp/failover-build.log"
			setup_failed failover
		elif install_python && install_node && install_java; then
			# Its own Redis, Sentinels and proxy; the proxy built above if there is one.
			bin=${FENCEPROXY_BIN:-}
			[[ -z $bin && -x $tmp/fenceproxy ]] && bin=$tmp/fenceproxy
			suite failover 300 env FENCEPROXY_CLIENTS_DIR="$here" FENCEPROXY_JAVA_TARGET="$java_target" ${bin:+FENCEPROXY_BIN="$bin"} \
				"$tmp/failover.test" -test.count=1 -test.timeout=280s
		else setup_failed failover; fi
	fi
fi

if [[ -n $proxy_pid ]] && ! kill -0 "$(current_proxy_pid)" 2>/dev/null; then
	echo "FAIL fenceproxy: the proxy died during the suites; its log:"
	tail -n 30 "$tmp/proxy.log"
	total_fail=$((total_fail + 1))
fi
echo "clients: suites [$SUITES]$( ((cluster)) && echo " (cluster)") took $(($(date +%s) - started))s"
((total_fail == 0)) || keep_run_logs
echo "$total_pass passed, $total_fail failed"
((total_fail == 0))
