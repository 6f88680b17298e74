#!/bin/sh
# setup-egress.sh: install what the egress tests and the tiers' egress
# checks run inside sandboxes: curl (HTTP through the proxy) and nslookup
# (dnsutils; DNS through the resolver). Idempotent; installs with apt-get
# only what is missing. Needs root when something is missing.
set -eu

missing=""
command -v curl >/dev/null 2>&1 || missing="$missing curl"
command -v nslookup >/dev/null 2>&1 || missing="$missing dnsutils"
command -v update-ca-certificates >/dev/null 2>&1 || missing="$missing ca-certificates"

if [ -z "$missing" ]; then
	echo "setup-egress: curl, nslookup and ca-certificates present"
	exit 0
fi

if [ "$(id -u)" != 0 ]; then
	echo "setup-egress: need root to install:$missing" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086 # word splitting of the package list is intended
if ! apt-get install -y --no-install-recommends $missing; then
	apt-get update
	apt-get install -y --no-install-recommends $missing
fi
echo "setup-egress: installed$missing"
