#!/bin/sh
# setup-egress.sh: install what the egress tests and the tiers' egress
# checks run inside sandboxes: curl (HTTP through the proxy) and nslookup
# (dnsutils; DNS through the resolver). Idempotent; installs with apt-get
# only what is missing. Needs root when something is missing.
set -eu
. "$(dirname "$0")/apt.sh"

missing=""
command -v curl >/dev/null 2>&1 || missing="$missing curl"
command -v nslookup >/dev/null 2>&1 || missing="$missing dnsutils"
command -v update-ca-certificates >/dev/null 2>&1 || missing="$missing ca-certificates"

if [ -z "$missing" ]; then
	echo "setup-egress: curl, nslookup and ca-certificates present"
	exit 0
fi
# shellcheck disable=SC2086 # word splitting of the package list is intended
apt_install setup-egress $missing
echo "setup-egress: installed$missing"
