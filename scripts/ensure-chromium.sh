#!/usr/bin/env bash
# Make sure a headless Chromium is installed for the shop's browser test (Debian's
# "chromium" package; nothing is downloaded by the test itself).
set -euo pipefail

have_chromium() {
	command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1
}

if have_chromium; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "lockguard: chromium is required for make e2e. Install it with: sudo apt-get install chromium" >&2
	exit 1
fi

echo "lockguard: installing chromium" >&2
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y chromium

if ! have_chromium; then
	echo "lockguard: chromium still missing after apt-get install" >&2
	exit 1
fi
