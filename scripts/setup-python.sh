#!/bin/sh
# setup-python.sh: install python3, which corpus cases and tier tests run
# inside sandboxes (memory hogs, TIOCSTI, socket probes, a mapped file).
# Idempotent; installs with apt-get only when it is missing. Needs root
# then.
set -eu
. "$(dirname "$0")/apt.sh"
if command -v python3 >/dev/null 2>&1 && [ -x /usr/bin/python3 ]; then
	echo "setup-python: $(python3 --version 2>&1) present"
	exit 0
fi
apt_install setup-python python3-minimal
echo "setup-python: installed python3"
