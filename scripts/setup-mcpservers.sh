#!/bin/sh
# setup-mcpservers.sh installs the reference MCP servers the mcp-wrap tests
# run inside a sandbox (@modelcontextprotocol/server-filesystem and
# server-everything) into .tools/mcpservers, with npm from Debian when it is
# missing. The directory is granted read-only to the sandbox, whose node
# image runs them. Idempotent: nothing is fetched when the pinned versions
# are already there.
set -eu
. "$(dirname "$0")/apt.sh"
cd "$(dirname "$0")/.."

version=2026.8.31
dir=.tools/mcpservers

if ! command -v npm >/dev/null 2>&1; then
	apt_install setup-mcpservers nodejs npm
fi
if [ "$(cat "$dir/version" 2>/dev/null)" = "$version" ]; then
	echo "setup-mcpservers: reference MCP servers $version present"
	exit 0
fi
rm -rf "$dir.tmp"
mkdir -p "$dir.tmp"
# Install scripts stay off: the servers need none, and they would fetch more.
npm install --prefix "$dir.tmp" --no-audit --no-fund --ignore-scripts --loglevel=error \
	"@modelcontextprotocol/server-filesystem@$version" \
	"@modelcontextprotocol/server-everything@$version"
echo "$version" >"$dir.tmp/version"
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "setup-mcpservers: installed reference MCP servers $version"
