#!/usr/bin/env bash
# restart-proxy.sh [DIR]: kill the fenceproxy that run.sh started with SIGKILL (a
# crash: no connection is closed politely), start the same command again on the same
# port, and return once it answers PING.
#
# DIR (default $FENCEPROXY_PROXY_DIR, which run.sh exports with FENCEPROXY_RESTART
# naming this script) holds proxy.pid (the running proxy), proxy.args (its command
# line, one argument a line) and proxy.log (the new process appends to it). The new
# pid is written to proxy.pid, where run.sh's cleanup and its "did the proxy die"
# check look. The Java suite's reconnect case runs this mid-suite.
#
# Prints one line, "restart-proxy: pid OLD killed, pid NEW answers PING on ADDR after
# N ms"; exits non-zero (and says why) if the proxy does not come back within 20 s.
set -uo pipefail
dir=${1:-${FENCEPROXY_PROXY_DIR:?restart-proxy.sh: give the run directory or set FENCEPROXY_PROXY_DIR}}
old=$(cat "$dir/proxy.pid") || exit 1
mapfile -t cmd <"$dir/proxy.args"
addr=
for ((i = 0; i < ${#cmd[@]}; i++)); do [[ ${cmd[i]} == --listen ]] && addr=${cmd[i + 1]}; done
[[ -n $addr ]] || { echo "restart-proxy: no --listen in $dir/proxy.args" >&2; exit 1; }
host=${addr%:*} port=${addr##*:}
t0=$(date +%s%N)

kill -KILL "$old" 2>/dev/null
# The killed process may stay a zombie of run.sh's until run.sh reaps it, so wait for
# its port to close (the kernel closes its sockets, and drops its lock on the data
# directory, as it exits), not for the pid to go.
for _ in $(seq 200); do
	(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null || break
	sleep 0.05
done

# stdin from /dev/null and output to the log: the caller (a Java process) reads this
# script's output to its end, which must not wait for the proxy.
"${cmd[@]}" </dev/null >>"$dir/proxy.log" 2>&1 &
new=$!
echo "$new" >"$dir/proxy.pid"
for _ in $(seq 200); do
	if [[ $(redis-cli -h "$host" -p "$port" PING 2>/dev/null) == PONG ]]; then
		echo "restart-proxy: pid $old killed, pid $new answers PING on $addr after $((($(date +%s%N) - t0) / 1000000)) ms"
		exit 0
	fi
	kill -0 "$new" 2>/dev/null || { echo "restart-proxy: the new proxy exited; its log:" >&2; tail -n 20 "$dir/proxy.log" >&2; exit 1; }
	sleep 0.1
done
echo "restart-proxy: pid $new did not answer PING on $addr within 20 s" >&2
exit 1
