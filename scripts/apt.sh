# apt.sh is sourced by the set-up scripts that install Debian packages.
#
# apt_install LABEL PACKAGE... installs the packages without recommends,
# running apt-get update only when the install fails (a fresh machine's
# package lists may be missing or stale). It needs root, or sudo.
apt_install() {
	label=$1
	shift
	sudo=
	if [ "$(id -u)" != 0 ]; then
		if ! command -v sudo >/dev/null 2>&1; then
			echo "$label: need root to install: $*" >&2
			return 1
		fi
		sudo=sudo
	fi
	if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"; then
		$sudo apt-get update
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
	fi
}
