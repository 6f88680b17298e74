#!/bin/sh
# setup-wabt.sh installs wat2wasm (Debian's wabt), which the WASM tier's
# tests use to build their WAT test modules. Idempotent: it does nothing
# when wat2wasm is already installed.
set -eu
. "$(dirname "$0")/apt.sh"

if command -v wat2wasm >/dev/null 2>&1; then
	echo "wat2wasm: $(command -v wat2wasm) ($(wat2wasm --version))"
	exit 0
fi
apt_install setup-wabt wabt
echo "wat2wasm: $(command -v wat2wasm) ($(wat2wasm --version))"
