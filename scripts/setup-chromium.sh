#!/bin/sh
# setup-chromium.sh installs Debian's chromium, which the console's browser
# tests drive headless (chromedp). Idempotent: it does nothing when a
# chromium is already installed.
set -eu
. "$(dirname "$0")/apt.sh"

for b in chromium chromium-browser google-chrome; do
	if command -v "$b" >/dev/null 2>&1; then
		echo "chromium: $(command -v "$b") ($("$b" --version 2>/dev/null || echo unknown version))"
		exit 0
	fi
done
apt_install setup-chromium chromium
echo "chromium: $(command -v chromium) ($(chromium --version 2>/dev/null || echo unknown version))"
