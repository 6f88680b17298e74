#!/bin/sh
# setup.sh: install everything the heavier tiers and their tests need, by
# running every scripts/setup-*.sh in order (with bash). Each is idempotent: a second
# run finds what is there and installs nothing. Needs root (apt-get).
set -eu
cd "$(dirname "$0")/.."
mkdir -p .tools/bin
failed=""
for s in scripts/setup-*.sh; do
	[ -e "$s" ] || continue
	echo "== $s"
	start=$(date +%s)
	if ! bash "$s"; then
		failed="$failed $s"
	fi
	echo "== $s: $(( $(date +%s) - start ))s"
done
if [ -n "$failed" ]; then
	echo "setup failed:$failed" >&2
	exit 1
fi
