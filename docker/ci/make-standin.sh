#!/usr/bin/env bash
# CI only: a CPU stand-in for an NGC framework image, so that the stacks' Dockerfiles can be built and
# run where no registry is reachable. Like NGC's images, it holds pip and the framework in the system
# Python's site-packages (compiled to bytecode, as pip leaves them) and pins every installed package in
# PIP_CONSTRAINT (/etc/pip/constraint.txt, as NGC does); like NGC's MXNet image it has no venv module with
# ensurepip (no python3-venv). The stack Dockerfile then adds the kit in an environment that sees them
# (--system-site-packages); the real-container tests check that the framework it imports is this one.
#
# Made without a Dockerfile, in one layer: uv unpacks the wheels that the host's pip downloaded
# (build-ci-image.sh) into a folder laid out as the base's /usr/local, the base's own Python compiles them
# and lists them (run in the base with that folder mounted, no network), and the OS tarball with that
# folder appended is imported once. A Dockerfile build sent the wheels as its context, committed them as
# a layer (776 MB for TensorFlow), unpacked them with pip inside and committed those 2.7 GB again.
# The tarball is cached beside the base's (keyed by the base tarball, the Python, the wheel folder's
# download stamp, the requirements, uv's version and this script), so a second CI run on the same
# machine only imports it; an image already imported from it is kept with its id (Docker's build cache
# then serves the stack's layers before the kit's own).
# usage: docker/ci/make-standin.sh TAG BASE_IMAGE BASE_TARBALL PYTHON_VERSION WHEELS REQUIREMENT...
set -euo pipefail
tag="$1" base="$2" base_tar="$3" py="$4" wheels="$5"
shift 5
cache="$(dirname "$base_tar")"
uv=("${PYTHON:-.venv/bin/python}" -m uv)  # the kit's own (its test extra)
site="usr/local/lib/python$py/dist-packages"
name="standin-${tag//\//-}"
key=$({ basename "$base_tar"; echo "$py"; printf '%s\n' "$@"; cat "$wheels/.tbdkit-download"; "${uv[@]}" --version
        cat "$0"; } | sha256sum | cut -c1-12)
tarball="$cache/$name-$key.tar"
exec 7>"$cache/.$name.lock"
flock 7
if [ ! -s "$tarball" ]; then
  echo "make-standin: unpacking $* for Python $py into $tarball"
  stage="$cache/partial-$name"
  rm -rf "$stage" && mkdir -p "$stage/$site" "$stage/etc/pip"
  "${uv[@]}" pip install --quiet --no-cache --no-index --find-links "$wheels" --target "$stage/$site" \
    --python-version "$py" --python-platform x86_64-manylinux_2_28 pip "$@"
  # --target puts console scripts in its bin/ with this machine's interpreter in their shebangs: the
  # stacks run `python -m pip` and never these.
  rm -rf "${stage:?}/$site/bin"
  echo "make-standin: unpacked at ${SECONDS} s"
  # The base's Python compiles the files (as pip does, passing over the few that are not Python 3 of this
  # version, such as torch's templates) and lists what it sees (pip list --format=freeze: the constraint
  # file NGC writes); its venv module must lack ensurepip.
  docker run --rm --network none --user "$(id -u):$(id -g)" -v "$stage/$site:/$site" -v "$stage/etc/pip:/etc/pip" \
    "$base" bash -c "{ python3 -m compileall -q -j 0 /$site >/dev/null || true; } \
      && python3 -m pip list --format=freeze --disable-pip-version-check > /etc/pip/constraint.txt \
      && if python3 -c 'import ensurepip' 2>/dev/null; then echo 'the stand-in must lack ensurepip' >&2; exit 1; fi"
  # appended: every staged path the OS tarball lacks (docker import refuses a path twice, and the base has
  # /usr/local/lib/python$py/dist-packages/ itself), owned by root as pip's files were
  echo "make-standin: compiled and listed at ${SECONDS} s"
  cp "$base_tar" "$cache/partial-$name.tar"
  (cd "$stage" && find ./usr ./etc | sort) | comm -23 - <(tar -tf "$base_tar" | sed 's|/$||' | sort) \
    | tar --append --file "$cache/partial-$name.tar" --owner=0 --group=0 --numeric-owner --no-recursion \
        -C "$stage" --verbatim-files-from -T -
  rm -rf "$stage" "$cache/$name"-*.tar  # this stand-in's older tarballs go
  mv "$cache/partial-$name.tar" "$tarball"
  echo "make-standin: tarball written at ${SECONDS} s"
else
  echo "make-standin: using the cached $tarball"
fi
bash "$(dirname "$0")/import-once.sh" "$tag" "$tarball" --change "ENV PIP_CONSTRAINT=/etc/pip/constraint.txt"
echo "make-standin: $tag ready at ${SECONDS} s"
