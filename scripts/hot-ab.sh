#!/usr/bin/env bash
# hot-ab.sh: two fenceproxy builds A/B on the hot lock (issue 26's handoffs/s
# and wait p99), each build alone on the machine for each of its runs:
#
#   scripts/hot-ab.sh OLD NEW [runs per build (16)] [seconds per run (8)]
#
# OLD and NEW are fenceproxy binaries (go build -o ...). Each run starts a
# fresh Redis master + replica (scripts/redis-local.sh) and one build in front
# of it (--min-replicas 1, a fresh data dir), runs scripts/lockbench -system
# fenceproxy -hot -clients 50 against it and stops what it started; runs
# alternate which build goes first. It prints each run's handoffs/s and wait
# p99, then each build's mean and median, NEW's mean over OLD's and a
# bootstrap 95% interval of that ratio.
#
# Why alone, and why so many runs: scripts/lock-ab.sh keeps both builds up in
# front of one Redis, where the idle one's heartbeat and the other's data dir
# share the machine; and on a shared 2-core machine one run's rate swings by a
# third, so eight runs a build cannot tell 0.92 from 1.0 (docs/performance.md,
# "The hot lock"). A benchmark, not a test.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"
alone_init hot-ab "OLD NEW [runs] [seconds]" "$@" # OLD and NEW as given, from where the script was run
cd "$root"
runs=${3:-16} secs=${4:-8}
go build -o "$tmp/lockbench" ./scripts/lockbench

# run BIN NAME: one run through BIN; appends "NAME handoffs/s p99_ms" to $tmp/results.
run() {
	local bin=$1 name=$2 out
	alone_start "$bin"
	out=$("$tmp/lockbench" -system fenceproxy -hot -clients 50 -duration "${secs}s" -addr "127.0.0.1:$port" | grep RESULT) || {
		cat "$tmp/proxy.log" >&2
		exit 1
	}
	alone_stop
	awk -v name="$name" '{
		for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
		printf "%s %s %s %s\n", name, v["ops_per_sec"], v["p99_ms"], v["errors"] }' <<<"$out" | tee -a "$tmp/results" |
		awk '{ printf "%-3s handoffs/s %6s  wait p99 %7s ms  errors %s\n", $1, $2, $3, $4 }'
}

alone_alternate "$runs" "$old" "$new"

for name in old new; do
	printf '%s: handoffs/s mean %s median %s, wait p99 median %s ms\n' "$name" \
		"$(awk -v name=$name '$1 == name { s += $2; n++ } END { printf "%.0f", s / n }' "$tmp/results")" \
		"$(alone_median $name 2)" "$(alone_median $name 3)"
done
# NEW's mean over OLD's, and the same of 2000 resamplings of each build's
# runs (with replacement): their 2.5th and 97.5th percentiles.
awk '{ n[$1]++; r[$1, n[$1]] = $2; s[$1] += $2 }
	END {
		printf "%.3f\n", s["new"] / n["new"] / (s["old"] / n["old"])
		srand(1)
		for (k = 1; k <= 2000; k++) {
			so = 0; sn = 0
			for (i = 1; i <= n["old"]; i++) so += r["old", int(rand() * n["old"]) + 1]
			for (i = 1; i <= n["new"]; i++) sn += r["new", int(rand() * n["new"]) + 1]
			printf "%.3f\n", (sn / n["new"]) / (so / n["old"])
		}
	}' "$tmp/results" >"$tmp/ratios"
printf 'new/old: handoffs/s mean %s (bootstrap 95%% interval %s-%s)\n' "$(head -1 "$tmp/ratios")" \
	"$(tail -n +2 "$tmp/ratios" | sort -g | sed -n 50p)" "$(tail -n +2 "$tmp/ratios" | sort -g | sed -n 1951p)"
