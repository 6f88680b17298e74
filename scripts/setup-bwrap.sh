#!/bin/sh
# Installs bubblewrap (bwrap), the peer the process tier's benchmarks
# compare against. Idempotent: does nothing when bwrap is already on PATH
# or in .tools/bin. Needs root (apt-get) otherwise.
set -eu
cd "$(dirname "$0")/.."
if [ -x .tools/bin/bwrap ] || command -v bwrap >/dev/null 2>&1; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends bubblewrap >/dev/null 2>&1; then
	apt-get update >/dev/null
	apt-get install -y --no-install-recommends bubblewrap >/dev/null
fi
command -v bwrap >/dev/null
