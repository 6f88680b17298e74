#!/bin/sh
# setup-wabt.sh installs wat2wasm (Debian's wabt), which the WASM tier's
# tests use to build their WAT test modules. Idempotent: it does nothing
# when wat2wasm is already installed.
set -eu

if command -v wat2wasm >/dev/null 2>&1; then
	echo "wat2wasm: $(command -v wat2wasm) ($(wat2wasm --version))"
	exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
fi

export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends wabt; then
	$SUDO apt-get update
	$SUDO apt-get install -y --no-install-recommends wabt
fi
echo "wat2wasm: $(command -v wat2wasm) ($(wat2wasm --version))"
