#!/usr/bin/env bash
# Make sure redis-server and redis-cli are installed: the tests start their own
# throwaway servers on ports 20000-22767 and never use one on 6379.
set -euo pipefail

# The test harness looks REDIS_SERVER_BIN and REDIS_CLI_BIN up as names on the PATH or
# absolute paths; it runs in each package's own directory, where a relative path would not
# resolve.
for var in REDIS_SERVER_BIN REDIS_CLI_BIN; do
	case "${!var:-}" in
	/* | "") ;;
	*/*)
		echo "lockguard: $var=${!var}: give a name on the PATH or an absolute path" >&2
		exit 1
		;;
	esac
done

# found NAME VAR: the binary named by the environment variable VAR, or NAME, is on the PATH
# (or, given as an absolute path, is there), as an executable file at an absolute path: the
# harness's exec.LookPath refuses a file without the execute bit and a match found through
# a relative PATH entry, which bash's command -v would accept.
found() {
	local p
	p="$(command -v "${!2:-$1}" 2>/dev/null)" || return 1
	case "$p" in
	/*) [ -f "$p" ] && [ -x "$p" ] ;;
	*) return 1 ;;
	esac
}

# missing lists what is not found, by name, space separated.
missing() {
	local out=""
	found redis-server REDIS_SERVER_BIN || out="${REDIS_SERVER_BIN:-redis-server}"
	found redis-cli REDIS_CLI_BIN || out="${out:+$out }${REDIS_CLI_BIN:-redis-cli}"
	echo "$out"
}

if [ -z "$(missing)" ]; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "lockguard: $(missing) not found; the tests and the demo start their own Redis." >&2
	echo "Install it with: sudo apt-get install redis-server redis-tools" >&2
	exit 1
fi

echo "lockguard: installing redis-server and redis-tools" >&2
apt-get update
# The package may try to start a service on 6379; without systemd (as in most
# containers) that fails harmlessly, and if it does start, the tests leave it alone.
DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools

if [ -n "$(missing)" ]; then
	echo "lockguard: $(missing) still missing after apt-get install" >&2
	exit 1
fi
redis-server --version >&2
