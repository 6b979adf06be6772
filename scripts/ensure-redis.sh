#!/usr/bin/env bash
# Make sure redis-server and redis-cli are installed: the tests start their own
# throwaway servers on ports 20000-22767 and never use one on 6379.
set -euo pipefail

# found NAME VAR: the binary named by the environment variable VAR (as the test harness
# reads it), or NAME on the PATH.
found() {
	if [ -n "${!2:-}" ]; then
		[ -x "${!2}" ]
	else
		command -v "$1" >/dev/null 2>&1
	fi
}

have_redis() {
	found redis-server REDIS_SERVER_BIN && found redis-cli REDIS_CLI_BIN
}

if have_redis; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "lockguard: redis-server is required. Install it with: sudo apt-get install redis-server redis-tools" >&2
	exit 1
fi

echo "lockguard: installing redis-server and redis-tools" >&2
apt-get update
# The package may try to start a service on 6379; without systemd (as in most
# containers) that fails harmlessly, and if it does start, the tests leave it alone.
DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools

if ! have_redis; then
	echo "lockguard: redis-server or redis-cli still missing after apt-get install" >&2
	exit 1
fi
redis-server --version >&2
