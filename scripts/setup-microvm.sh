#!/usr/bin/env bash
# setup-microvm.sh: installs what the microvm tier needs, idempotently.
#
#   - QEMU (qemu-system-x86), a static busybox and erofs-utils (the
#     tier builds each image's read-only disk with mkfs.erofs), from
#     Debian's apt;
#   - a guest kernel from Debian's linux-image-<version>-cloud-amd64 package,
#     fetched with `apt-get download` and unpacked with `dpkg -x` (never
#     installed on the host), with an uncompressed vmlinux extracted from
#     its vmlinuz (the kernel's extract-vmlinux approach: find the
#     compression magic, decompress from there, keep the first ELF);
#   - the guest modules the agent loads (virtio_mmio, virtio_blk,
#     virtio_console, virtio_net, failover, net_failover, the vsock
#     transport Firecracker needs, erofs and overlay for image roots, and their
#     dependencies per modules.dep), decompressed, in load order;
#   - the guest agent (/init), built static from this checkout
#     (CGO_ENABLED=0) when Go is available.
#
# Everything lands in $AIRLOCK_TOOLS (default: <repo>/.tools) under
# microvm/, with the versions used recorded in microvm/STAMP. Re-running
# with the same versions does nothing but rebuild a stale agent.
set -euo pipefail

# Pinned guest kernel. If Debian has dropped this version from the archive
# the script falls back to the newest linux-image-*-cloud-amd64 apt offers
# and says so (the stamp records what was used).
KERNEL_ABI_PINNED="6.1.0-47-cloud-amd64"
KERNEL_PKGVER_PINNED="6.1.170-3"
# crc32c_generic comes before erofs: erofs's libcrc32c needs a crc32c
# implementation at load time, and the guest CPU model has no SSE4.2 for
# crc32c-intel (no modprobe in the guest loads one on demand). Debian's
# cloud kernel builds it in; a kernel that ships it as a module gets it
# loaded first.
MODULES_WANTED="virtio_mmio virtio_blk virtio_console virtio_net failover net_failover vmw_vsock_virtio_transport crc32c_generic erofs overlay"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${AIRLOCK_TOOLS:-$repo/.tools}"
dest="$tools/microvm"
mkdir -p "$tools/bin" "$dest"

log() { echo "setup-microvm: $*" >&2; }
die() { log "error: $*"; exit 1; }

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=0
apt_update_once() {
	if [ "$apt_updated" = 0 ]; then
		as_root apt-get update -qq
		apt_updated=1
	fi
}

# apt_install PKG...: installs the packages that are missing, running
# apt-get update first only when a package is not found.
apt_install() {
	local missing=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ "${#missing[@]}" = 0 ] && return 0
	log "apt-get install ${missing[*]}"
	if ! DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
		apt_update_once
		DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
}

# --- host packages -----------------------------------------------------------
apt_install qemu-system-x86 busybox-static erofs-utils xz-utils zstd gzip bzip2 lz4
qemu="$(command -v qemu-system-x86_64)" || die "qemu-system-x86_64 not on PATH after install"
ln -sf "$qemu" "$tools/bin/qemu-system-x86_64"
busybox=/bin/busybox
[ -x "$busybox" ] || die "static busybox not found at $busybox"
"$busybox" --list | grep -x sh >/dev/null || die "$busybox has no sh applet"
qemu_ver="$(dpkg-query -W -f='${Version}' qemu-system-x86)"
busybox_ver="$(dpkg-query -W -f='${Version}' busybox-static)"

# --- guest kernel --------------------------------------------------------------
pkg_available() { apt-cache show "$1" >/dev/null 2>&1; }

kabi="$KERNEL_ABI_PINNED"
pkg="linux-image-$kabi"
if ! pkg_available "$pkg"; then
	apt_update_once
fi
if ! pkg_available "$pkg"; then
	newest="$(apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-cloud-amd64$' | awk '{print $1}' | sort -V | tail -n1)"
	[ -n "$newest" ] || die "no linux-image-*-cloud-amd64 package offered by apt"
	log "WARNING: pinned kernel $pkg is gone from the archive; falling back to the newest available, $newest"
	pkg="$newest"
	kabi="${pkg#linux-image-}"
fi
pkgver="$(apt-cache policy "$pkg" | awk '/Candidate:/ {print $2}')"

want_stamp="kernel=$pkg $pkgver
qemu=$qemu_ver
busybox=$busybox_ver
modules=$MODULES_WANTED"

if [ -f "$dest/STAMP.kernel" ] && [ "$(cat "$dest/STAMP.kernel")" = "$want_stamp" ] &&
	[ -s "$dest/vmlinux" ] && [ -s "$dest/rootfs/etc/modules.order" ]; then
	log "kernel $pkg $pkgver already in place"
else
	work="$(mktemp -d)"
	trap 'rm -rf "$work"' EXIT
	log "fetching $pkg $pkgver"
	chmod 0777 "$work" # apt-get download drops privileges to _apt
	(cd "$work" && apt-get download -qq "$pkg=$pkgver" 2>/dev/null || { apt_update_once; apt-get download -qq "$pkg=$pkgver"; })
	deb="$(ls "$work"/*.deb)"
	dpkg -x "$deb" "$work/root"
	vmlinuz="$work/root/boot/vmlinuz-$kabi"
	[ -f "$vmlinuz" ] || die "no /boot/vmlinuz-$kabi in $deb"

	# extract-vmlinux: try each compression magic at each offset where it
	# occurs; the first stream that decompresses to an ELF image wins.
	is_elf() { [ "$(head -c4 "$1" | od -An -c | tr -d ' \n')" = "177ELF" ]; }
	try_decomp() { # magic-regex command...
		local magic="$1"; shift
		local off
		for off in $(LC_ALL=C grep -obUaP "$magic" "$vmlinuz" | cut -d: -f1 | head -n 8); do
			tail -c +"$((off + 1))" "$vmlinuz" | "$@" >"$work/vmlinux" 2>/dev/null || true
			if [ -s "$work/vmlinux" ] && is_elf "$work/vmlinux"; then
				return 0
			fi
		done
		return 1
	}
	if try_decomp '\x1f\x8b\x08' gzip -dc ||
		try_decomp '\xfd\x37\x7a\x58\x5a\x00' xz -dc ||
		try_decomp '\x28\xb5\x2f\xfd' zstd -dc ||
		try_decomp '\x42\x5a\x68' bzip2 -dc ||
		try_decomp '\x5d\x00\x00\x00' xz -dc --format=lzma ||
		try_decomp '\x02\x21\x4c\x18' lz4 -dc; then
		:
	else
		die "could not extract an uncompressed vmlinux from $vmlinuz"
	fi
	install -m 0644 "$work/vmlinux" "$dest/vmlinux.new"
	install -m 0644 "$vmlinuz" "$dest/vmlinuz.new"

	# Modules: the package ships no modules.dep (depmod runs at install
	# time), so dependencies come from each module's own modinfo
	# "depends=" string; dependencies are loaded first.
	moddir="$work/root/lib/modules/$kabi"
	[ -f "$moddir/modules.order" ] || die "no modules.order in $deb"
	rm -rf "$dest/rootfs.new"
	mkdir -p "$dest/rootfs.new/lib/modules" "$dest/rootfs.new/etc"
	declare -A seen=()
	order=()
	modpath() { # module name -> path relative to $moddir ("" if not shipped)
		awk -v m="$1" '{ n = $0; sub(".*/", "", n); sub(/\.ko(\.[a-z]+)?$/, "", n); gsub("-", "_", n); if (n == m) { print $0; exit } }' "$moddir/modules.order"
	}
	resolve() { # module name
		local m="${1//-/_}"
		[ -n "${seen[$m]:-}" ] && return 0
		seen[$m]=1
		local rel
		rel="$(modpath "$m")"
		if [ -z "$rel" ]; then
			if grep -q "/$m.ko\$" "$moddir/modules.builtin" 2>/dev/null || grep -q "/${m//_/-}.ko\$" "$moddir/modules.builtin" 2>/dev/null; then
				return 0 # built in
			fi
			die "module $m not found in $kabi"
		fi
		local f="$moddir/$rel" deps d
		case "$f" in
		*.xz) deps="$(xz -dc "$f" | tr '\0' '\n' | sed -n 's/^depends=//p' | head -n1)" ;;
		*.zst) deps="$(zstd -qdc "$f" | tr '\0' '\n' | sed -n 's/^depends=//p' | head -n1)" ;;
		*) deps="$(tr '\0' '\n' <"$f" | sed -n 's/^depends=//p' | head -n1)" ;;
		esac
		for d in ${deps//,/ }; do resolve "$d"; done
		order+=("$rel")
	}
	for m in $MODULES_WANTED; do resolve "$m"; done
	: >"$dest/rootfs.new/etc/modules.order"
	for rel in "${order[@]}"; do
		base="$(basename "$rel")"
		case "$base" in
		*.ko.xz) xz -dc "$moddir/$rel" >"$dest/rootfs.new/lib/modules/${base%.xz}"; base="${base%.xz}" ;;
		*.ko.zst) zstd -qdc "$moddir/$rel" >"$dest/rootfs.new/lib/modules/${base%.zst}"; base="${base%.zst}" ;;
		*.ko.gz) gzip -dc "$moddir/$rel" >"$dest/rootfs.new/lib/modules/${base%.gz}"; base="${base%.gz}" ;;
		*.ko) cp "$moddir/$rel" "$dest/rootfs.new/lib/modules/$base" ;;
		*) die "unexpected module file $rel" ;;
		esac
		echo "$base" >>"$dest/rootfs.new/etc/modules.order"
	done
	log "modules: $(tr '\n' ' ' <"$dest/rootfs.new/etc/modules.order")"
	echo "$kabi" >"$dest/rootfs.new/etc/kernel-release"

	rm -rf "$dest/rootfs"
	mv "$dest/rootfs.new" "$dest/rootfs"
	mv "$dest/vmlinux.new" "$dest/vmlinux"
	mv "$dest/vmlinuz.new" "$dest/vmlinuz"
	printf '%s\n' "$want_stamp" >"$dest/STAMP.kernel"
	rm -rf "$work"
	trap - EXIT
fi

# busybox goes into the guest root (the tier adds its applet links).
mkdir -p "$dest/rootfs/bin"
cp "$busybox" "$dest/rootfs/bin/busybox.new" && mv "$dest/rootfs/bin/busybox.new" "$dest/rootfs/bin/busybox"

# --- guest agent -----------------------------------------------------------------
# Built from this checkout so the agent matches the host side; rebuilt when
# its sources change. Without Go the tier looks for AIRLOCK_MICROVM_AGENT.
if command -v go >/dev/null 2>&1 && [ -d "$repo/tiers/microvm/cmd/airlock-agent" ]; then
	# Every package of this module the agent is built from, and go.sum.
	src_sum="$(cd "$repo" && {
		CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go list -deps -f '{{if not .Standard}}{{if .Module}}{{if .Module.Main}}{{range .GoFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}{{end}}' ./tiers/microvm/cmd/airlock-agent
		echo "$repo/go.sum"
	} | sort | tr '\n' '\0' | xargs -0 sha256sum | sha256sum | cut -c1-16)"
	if [ ! -x "$dest/airlock-agent" ] || [ "$(cat "$dest/STAMP.agent" 2>/dev/null)" != "$src_sum" ]; then
		log "building the guest agent"
		(cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags='-s -w' \
			-o "$dest/airlock-agent.new" ./tiers/microvm/cmd/airlock-agent)
		mv "$dest/airlock-agent.new" "$dest/airlock-agent"
		echo "$src_sum" >"$dest/STAMP.agent"
	fi
else
	log "go (or the agent source) not found: the guest agent was not built"
fi

{
	echo "$want_stamp"
	echo "kernel_release=$kabi"
	echo "agent=$(cat "$dest/STAMP.agent" 2>/dev/null || echo none)"
} >"$dest/STAMP"
log "ready in $dest ($pkg $pkgver, qemu $qemu_ver, busybox $busybox_ver)"
