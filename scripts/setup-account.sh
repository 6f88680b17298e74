#!/bin/sh
# Installs what level 5 (the account tier) and its tests use to make an
# account's OS user and start its executor under it: useradd and userdel
# (passwd), setpriv (util-linux), pkill (procps), and systemd-analyze
# (systemd), which checks the unit `airlock account add` writes. The
# tests make and remove their own user. Idempotent: does nothing when
# all are there. Needs root (apt-get) otherwise.
set -eu
. "$(dirname "$0")/apt.sh"
PATH=$PATH:/usr/sbin:/sbin
missing=""
command -v useradd >/dev/null 2>&1 && command -v userdel >/dev/null 2>&1 || missing="$missing passwd"
command -v setpriv >/dev/null 2>&1 || missing="$missing util-linux"
command -v pkill >/dev/null 2>&1 || missing="$missing procps"
command -v systemd-analyze >/dev/null 2>&1 || missing="$missing systemd"
if [ -z "$missing" ]; then
	exit 0
fi
# shellcheck disable=SC2086
apt_install setup-account $missing >/dev/null
command -v useradd >/dev/null && command -v setpriv >/dev/null && command -v pkill >/dev/null && command -v systemd-analyze >/dev/null
