#!/bin/sh
# setup-inspector.sh installs the official MCP Inspector (its CLI mode) into
# .tools/inspector, with node and npm from Debian when they are missing. The
# MCP tests list and call every tool through it, as a client built on the
# TypeScript SDK sees them. Idempotent: nothing is fetched when the pinned
# version is already there.
set -eu
. "$(dirname "$0")/apt.sh"
cd "$(dirname "$0")/.."

version=2.12.0
dir=.tools/inspector
bin=.tools/bin/mcp-inspector

if ! command -v npm >/dev/null 2>&1; then
	apt_install setup-inspector nodejs npm
fi
if [ "$(cat "$dir/version" 2>/dev/null)" = "$version" ] && [ -x "$bin" ]; then
	echo "setup-inspector: MCP Inspector $version present"
	exit 0
fi
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp" .tools/bin
# Install scripts stay off: the CLI needs none, and they would fetch more.
npm install --prefix "$dir.tmp" --no-audit --no-fund --ignore-scripts --loglevel=error \
	"@modelcontextprotocol/inspector@$version"
echo "$version" >"$dir.tmp/version"
rm -rf "$dir"
mv "$dir.tmp" "$dir"
ln -sfn ../inspector/node_modules/.bin/mcp-inspector "$bin"
echo "setup-inspector: installed MCP Inspector $version"
