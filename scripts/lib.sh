# shellcheck shell=bash
# lib.sh: helpers shared by the scripts that start local Redis servers.
# The sourcing script sets PROG (its name, for messages) first.

die() {
	echo "${PROG:-script}: $*" >&2
	exit 1
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
