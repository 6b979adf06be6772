#!/usr/bin/env bash
# Make sure Go can build with cgo: the race detector (go test -race) needs a C compiler,
# which a Go installed from the official tarball on a minimal Debian does not bring.
set -euo pipefail

go_cgo() { [ "$(${GO:-go} env CGO_ENABLED 2>/dev/null)" = "1" ]; }

if go_cgo; then
	exit 0
fi

if command -v "$(${GO:-go} env CC 2>/dev/null || echo gcc)" >/dev/null 2>&1; then
	echo "lockguard: go test -race needs cgo, and CGO_ENABLED is 0 here; unset it or set CGO_ENABLED=1" >&2
	exit 1
fi

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "lockguard: go test -race needs a C compiler. Install one with: sudo apt-get install gcc libc6-dev" >&2
	exit 1
fi

echo "lockguard: installing gcc and libc6-dev (the race detector needs cgo)" >&2
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y gcc libc6-dev

if ! go_cgo; then
	echo "lockguard: cgo still off after installing gcc: check CGO_ENABLED and CC" >&2
	exit 1
fi
