#!/bin/sh
# setup-stage.sh builds airlock-stage, the process tier's small stage
# binary, into .tools/bin, where the tier (and its tests) find it. It is
# built on every run: the tier uses it only if it carries the same stage
# code as the binary that runs the tier, and Go's build cache makes an
# unchanged rebuild quick. CGO_ENABLED=0 keeps it static, which is part of
# why it starts fast.
set -eu
cd "$(dirname "$0")/.."
out="${AIRLOCK_TOOLS:-.tools}/bin/airlock-stage"
mkdir -p "$(dirname "$out")"
CGO_ENABLED=0 "${GO:-go}" build -o "$out.tmp" ./tiers/process/cmd/airlock-stage
chmod 0755 "$out.tmp"
mv -f "$out.tmp" "$out"
echo "airlock-stage: $out"
