#!/bin/sh
# Installs mmdebstrap, which `airlock image build` uses to build the
# catalogue's images from Debian packages. Idempotent: does nothing when
# mmdebstrap is on PATH. Needs root (apt-get) otherwise.
set -eu
. "$(dirname "$0")/apt.sh"
if command -v mmdebstrap >/dev/null 2>&1; then
	exit 0
fi
apt_install setup-images mmdebstrap >/dev/null
command -v mmdebstrap >/dev/null
