#!/bin/sh
# setup-runsc.sh — installs gVisor's runsc, pinned and statically built, into
# the project-local .tools/bin. Idempotent: a stamp file records the installed
# version and the build is skipped when it matches.
#
# runsc must be built with CGO_ENABLED=0: a cgo build fails at sandbox start
# with "fork/exec /proc/self/exe: no such file or directory", because the
# sandbox chroots into a root without the ELF interpreter.
set -eu

RUNSC_VERSION="${RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}"

repo="$(cd "$(dirname "$0")/.." && pwd -P)"
bin="$repo/.tools/bin"
stamp="$repo/.tools/runsc.version"

if [ -x "$bin/runsc" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$RUNSC_VERSION" ]; then
	echo "runsc $RUNSC_VERSION already installed in $bin"
	exit 0
fi

mkdir -p "$bin"
echo "building runsc $RUNSC_VERSION (static) into $bin; this takes several minutes"
# GOFLAGS is cleared so that a caller's -mod or -tags cannot change the build.
CGO_ENABLED=0 GOFLAGS= GOBIN="$bin" go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"

# Refuse a dynamically linked result: it would fail at sandbox start.
if command -v file >/dev/null 2>&1 && file "$bin/runsc" | grep -q "dynamically linked"; then
	echo "runsc was built dynamically linked; it cannot start sandboxes" >&2
	rm -f "$bin/runsc"
	exit 1
fi

echo "$RUNSC_VERSION" >"$stamp"
"$bin/runsc" --version
