#!/usr/bin/env bash
# A small CPU base image for the real-container CI test, made without any container registry:
# mmdebstrap bootstraps a Debian or Ubuntu root file system and `docker import` turns the tarball
# into an image. Neither has python3-venv: like NGC's images, the base Python has no ensurepip
# (python3 -m venv works only --without-pip).
#   bookworm  Debian 12, Python 3.11, from this machine's own apt sources (fed on stdin): the
#             PyTorch and TensorFlow stand-ins.
#   jammy     Ubuntu 22.04, Python 3.10: the OS and Python of NGC's MXNet image, so the MXNet
#             stand-in runs the kit on the Python it meets there. The mirror is mmdebstrap's own
#             default for an Ubuntu suite; the archive's signing keys come from Debian's
#             ubuntu-keyring package (Debian trixie, through this machine's Debian sources, so
#             Debian's signature vouches for them), and mmdebstrap checks Ubuntu's signatures with them.
# The tarball is cached outside the repo, so a second CI run on the same machine skips the bootstrap; it
# ends its output with the tarball's path (build-ci-image.sh makes the stand-ins from it).
# usage: docker/ci/make-base.sh IMAGE_TAG [CACHE_DIR] [bookworm|jammy]
set -euo pipefail
tag="${1:?usage: make-base.sh IMAGE_TAG [CACHE_DIR] [bookworm|jammy]}"
cache="${2:-${TBDKIT_CI_CACHE:-$HOME/.cache/tbdkit-ci}}"
suite="${3:-bookworm}"
sources=/etc/apt/sources.list.d/debian.sources
packages="python3,ca-certificates,tini,libgomp1,libquadmath0"  # libgomp1, libquadmath0: MXNet's libmxnet.so links them (NGC bases have them)
mkdir -p "$cache"

# Debian's ubuntu-keyring package, fetched and verified by apt from this machine's first Debian source
# with its suite set to trixie (the package is not in bookworm); prints the folder holding the keyring.
ubuntu_keyring() {
  local dir="$cache/ubuntu-keyring" apt_dir="$cache/ubuntu-keyring/apt"
  if [ ! -s "$dir/ubuntu-archive-keyring.gpg" ]; then
    rm -rf "$apt_dir" && mkdir -p "$apt_dir/sources" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    awk 'BEGIN { RS = ""; ORS = "\n\n" } NR == 1' "$sources" | sed 's/^Suites: .*/Suites: trixie/' \
      > "$apt_dir/sources/trixie.sources"
    local opts=(-qq -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/sources"
                -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
                -o "Dir::State::Status=/dev/null" -o "APT::Sandbox::User=root")
    apt-get "${opts[@]}" update >&2
    (cd "$apt_dir" && apt-get "${opts[@]}" download ubuntu-keyring >&2)
    dpkg-deb --fsys-tarfile "$apt_dir"/ubuntu-keyring_*.deb \
      | tar -x -O ./usr/share/keyrings/ubuntu-archive-keyring.gpg > "$dir/partial.gpg"
    mv "$dir/partial.gpg" "$dir/ubuntu-archive-keyring.gpg"
    rm -rf "$apt_dir"
  fi
  echo "$dir"
}

case "$suite" in
  bookworm) source_args=(-); components=main ;;
  jammy) source_args=(); components=main,universe ;;  # tini is in Ubuntu's universe
  *) echo "make-base: unknown suite '$suite' (bookworm or jammy)" >&2; exit 2 ;;
esac
# Builds side by side (`make test`'s workers build each stack's image) share the tarball and its import:
# one at a time per suite.
exec 9>"$cache/.make-base-$suite.lock"
flock 9
# The cache key: the suite, the package set and the sources the tarball was made from.
key=$(printf '%s\n' "$suite" "$packages" | cat - "$sources" | sha256sum | cut -c1-12)
tarball="$cache/$suite-base-$key.tar"
if [ ! -s "$tarball" ]; then
  echo "make-base: bootstrapping $suite into $tarball"
  keyring_args=()
  # apt checks signatures as its sandbox user, who cannot read a keyring under a private home (the
  # cache): apt runs as root here, as it does for the download of the keyring itself.
  [ "$suite" = jammy ] && keyring_args=(--keyring="$(ubuntu_keyring)" --aptopt='APT::Sandbox::User "root"')
  mmdebstrap --quiet --variant=minbase --components="$components" --include="$packages" \
    "${keyring_args[@]}" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --format=tar "$suite" "$cache/partial-$key.tar" "${source_args[@]}" < "$sources"
  mv "$cache/partial-$key.tar" "$tarball"
else
  echo "make-base: using the cached $tarball"
fi
# Imported once per tarball (import-once.sh): the stand-ins are made from the same tarball (make-standin.sh).
bash "$(dirname "$0")/import-once.sh" "$tag" "$tarball"
echo "make-base: tarball $tarball"
