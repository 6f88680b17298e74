#!/bin/sh
# setup-bench.sh installs bubblewrap, the `bwrap` peer that `airlock bench`
# measures beside the process tier. Idempotent: it does nothing when bwrap
# is already installed. The other baselines come with the tiers' own
# scripts (runsc: setup-runsc.sh; QEMU and the kernel: setup-microvm.sh) or
# are Go libraries (expr, Starlark, wazero, cel-go).
set -eu

if command -v bwrap >/dev/null 2>&1; then
	echo "bwrap: $(command -v bwrap) ($(bwrap --version))"
	exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
fi

export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y --no-install-recommends bubblewrap; then
	$SUDO apt-get update
	$SUDO apt-get install -y --no-install-recommends bubblewrap
fi
echo "bwrap: $(command -v bwrap) ($(bwrap --version))"
