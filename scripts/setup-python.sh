#!/bin/sh
# setup-python.sh: install python3, which corpus cases and tier tests run
# inside sandboxes (memory hogs, TIOCSTI, socket probes, a mapped file).
# Idempotent; installs with apt-get only when it is missing. Needs root
# then.
set -eu
if command -v python3 >/dev/null 2>&1 && [ -x /usr/bin/python3 ]; then
	echo "setup-python: $(python3 --version 2>&1) present"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "setup-python: need root to install python3" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends python3-minimal; then
	apt-get update
	apt-get install -y --no-install-recommends python3-minimal
fi
echo "setup-python: installed python3"
