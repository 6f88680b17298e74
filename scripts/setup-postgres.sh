#!/bin/sh
# setup-postgres.sh installs PostgreSQL's server binaries (Debian's
# postgresql), which the tests of the shared state store run: each test
# run makes its own throw-away cluster with initdb, on a Unix socket.
# Idempotent: it does nothing when initdb is already installed. The
# package's own cluster is not needed; it may be left stopped.
set -eu
. "$(dirname "$0")/apt.sh"

find_initdb() {
	ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1
}

if [ -z "$(find_initdb)" ]; then
	apt_install setup-postgres postgresql
fi
initdb=$(find_initdb)
if [ -z "$initdb" ]; then
	echo "setup-postgres: initdb not found after installing postgresql" >&2
	exit 1
fi
echo "initdb: $initdb ($("$initdb" --version))"
