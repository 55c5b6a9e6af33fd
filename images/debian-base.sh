#!/usr/bin/env bash
# Offline recipe for the sandbox base image: a minimal Debian with its Python, no image registry.
#
#   images/debian-base.sh IMAGE_TAG
#
# debootstrap a minimal bookworm, install Debian's python3 (3.11, the version
# images/requirements.txt names) and nothing else, strip documentation and
# package caches, and `docker import` the tree as IMAGE_TAG. The kernel's Python
# packages do NOT come from Debian: sandbox/image.py fetches binary wheels on the
# host (the same resolver and cache as run-time installs, sandbox/packages.py)
# and the Dockerfile copies them in. Debian's python3-pandas/-matplotlib would
# bring compilers' runtimes, BLAS and fonts (1.28 GB); the wheels carry their own.
set -euo pipefail
tag=${1:?usage: debian-base.sh IMAGE_TAG}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages="python3"

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
"
umount "$root/proc"
# Nothing in the sandbox reads documentation, translations or package lists, nor
# uses ensurepip, IDLE or Tk (Debian's python3 ships no Tk library anyway).
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
       "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/* \
       "$root"/usr/share/lintian "$root"/var/log/* "$root"/tmp/* \
       "$root"/usr/lib/python3.11/ensurepip \
       "$root"/usr/lib/python3.11/idlelib "$root"/usr/lib/python3.11/tkinter "$root"/usr/lib/python3.11/turtledemo
: > "$root/etc/resolv.conf"
tar -C "$root" -c . | docker import -m "codeact offline base: debian bookworm minbase + $packages" - "$tag"
echo "built $tag"
