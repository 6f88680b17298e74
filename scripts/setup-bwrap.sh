#!/bin/sh
# Installs bubblewrap (bwrap), the peer the process tier's benchmarks
# compare against. Idempotent: does nothing when bwrap is already on PATH
# or in .tools/bin. Needs root (apt-get) otherwise.
set -eu
. "$(dirname "$0")/apt.sh"
cd "$(dirname "$0")/.."
if [ -x .tools/bin/bwrap ] || command -v bwrap >/dev/null 2>&1; then
	exit 0
fi
apt_install setup-bwrap bubblewrap >/dev/null
command -v bwrap >/dev/null
