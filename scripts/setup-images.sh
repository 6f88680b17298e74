#!/bin/sh
# Installs mmdebstrap and builds the catalogue's images (minimal, node, python)
# from Debian packages into the image store ($AIRLOCK_IMAGES, else the
# default for this user: /var/lib/airlock/images for root). Idempotent: an
# image built from the current recipe is kept, so a second run builds
# nothing. Needs root (apt-get) when mmdebstrap is missing.
set -eu
cd "$(dirname "$0")/.."
. scripts/apt.sh
if ! command -v mmdebstrap >/dev/null 2>&1; then
	apt_install setup-images mmdebstrap >/dev/null
	command -v mmdebstrap >/dev/null
fi
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
CGO_ENABLED=0 go build -o "$bin/airlock" ./cmd/airlock
"$bin/airlock" image build --missing minimal node python
