#!/usr/bin/env bash
# Offline recipe for the sandbox base image: Debian packages only, no image registry.
#
#   images/debian-base.sh IMAGE_TAG
#
# debootstrap a minimal bookworm, install the kernel and data stack from Debian
# inside a chroot, and `docker import` the tree as IMAGE_TAG. The Python
# packages come from Debian (not PyPI) because HTTPS to PyPI is not reachable
# from every machine that builds this.
set -euo pipefail
tag=${1:?usage: debian-base.sh IMAGE_TAG}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages="python3-ipykernel python3-pandas python3-matplotlib"

need() { command -v "$1" >/dev/null 2>&1 || { echo "debian-base.sh: '$1' is missing; install it (apt-get install -y $2)" >&2; exit 1; }; }
need debootstrap debootstrap
need docker docker.io
[ "$(id -u)" = 0 ] || { echo "debian-base.sh: debootstrap needs root" >&2; exit 1; }

root=$(mktemp -d /var/tmp/codeact-base.XXXXXX)
cleanup() {
  umount "$root/proc" 2>/dev/null || true
  rm -rf "$root"
}
trap cleanup EXIT

debootstrap --variant=minbase bookworm "$root" "$mirror"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive bash -euc "
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $packages
  apt-get clean
  rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
"
umount "$root/proc"
: > "$root/etc/resolv.conf"
tar -C "$root" -c . | docker import -m "codeact offline base: $packages" - "$tag"
echo "built $tag"
