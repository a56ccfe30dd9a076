#!/usr/bin/env bash
# A small CPU base image for the real-container CI test, made without any container registry:
# mmdebstrap builds Debian bookworm (Python 3.11) from this machine's own apt sources, fed on
# stdin, and `docker import` turns the tarball into an image. No python3-venv: like NGC's MXNet
# image, the base Python has no ensurepip (python3 -m venv works only --without-pip). Debian has no
# Python 3.10 in any current suite (bullseye 3.9, bookworm 3.11, trixie 3.13), so the MXNet stand-in
# is 3.11; the kit's 3.10 compatibility is checked by tests/test_docker_py310.py. The tarball is cached outside the
# repo, so a second CI run on the same machine skips the bootstrap.
# usage: docker/ci/make-base.sh IMAGE_TAG [CACHE_DIR]
set -euo pipefail
tag="${1:?usage: make-base.sh IMAGE_TAG [CACHE_DIR]}"
cache="${2:-${TBDKIT_CI_CACHE:-$HOME/.cache/tbdkit-ci}}"
sources=/etc/apt/sources.list.d/debian.sources
packages="python3,ca-certificates,tini,libgomp1,libquadmath0"  # libgomp1, libquadmath0: MXNet's libmxnet.so links them (NGC bases have them)
# The cache key: the package set and the sources the tarball was made from.
key=$(printf '%s\n' "$packages" | cat - "$sources" | sha256sum | cut -c1-12)
tarball="$cache/bookworm-base-$key.tar"
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
  echo "make-base: bootstrapping Debian bookworm into $tarball"
  mmdebstrap --quiet --variant=minbase --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --format=tar bookworm "$cache/partial-$key.tar" - < "$sources"
  mv "$cache/partial-$key.tar" "$tarball"
else
  echo "make-base: using the cached $tarball"
fi
docker import --change 'CMD ["/bin/bash"]' "$tarball" "$tag" >/dev/null
echo "make-base: imported $tag"
