#!/usr/bin/env bash
# CI only: a CPU stand-in for an NGC framework image, so that the stacks' Dockerfiles can be built and
# run where no registry is reachable. Like NGC's images, it holds pip and the framework in the system
# Python's site-packages (with the bytecode of what importing the framework loads) and pins every installed package in
# PIP_CONSTRAINT (/etc/pip/constraint.txt, as NGC does); like NGC's MXNet image it has no venv module with
# ensurepip (no python3-venv). The stack Dockerfile then adds the kit in an environment that sees them
# (--system-site-packages); the real-container tests check that the framework it imports is this one.
#
# Made without a Dockerfile, in one layer: uv unpacks the wheels that the host's pip downloaded
# (build-ci-image.sh) into a folder laid out as the base's /usr/local; the base's own Python, run with that
# folder mounted (no network), imports the framework, which writes the bytecode of the modules it loads
# (NGC's pip compiled every file; the tests run only what an import loads), and lists the packages; then
# the OS tarball, its end-of-archive marker cut, and that folder go as one stream into `docker import`,
# with no tarball written (docs/measured-here.md, "Containers", has what each step cost).
# The image is labelled with a key of its inputs (the base tarball, the Python, the wheel folder's download
# stamp, the requirements, uv's version and this script): a daemon that already holds it under the tag
# makes nothing (it keeps its id, so Docker's build cache then serves the stack's layers before the kit's).
# usage: docker/ci/make-standin.sh TAG BASE_IMAGE BASE_TARBALL PYTHON_VERSION WHEELS REQUIREMENT...
#   the first REQUIREMENT names the framework (its module is imported: torch, tensorflow, mxnet)
set -euo pipefail
tag="$1" base="$2" base_tar="$3" py="$4" wheels="$5"
shift 5
cache="$(dirname "$base_tar")"
uv=("${PYTHON:-.venv/bin/python}" -m uv)  # the kit's own (its test extra)
site="usr/local/lib/python$py/dist-packages"
name="standin-${tag//\//-}"
module=$(echo "$1" | sed 's/[=<>!~ ;[].*//')
key=$({ basename "$base_tar"; echo "$py"; printf '%s\n' "$@"; cat "$wheels/.tbdkit-download"; "${uv[@]}" --version
        cat "$0"; } | sha256sum | cut -c1-12)
exec 7>"$cache/.$name.lock"
flock 7
rm -f "$cache/$name"-*.tar  # the tarballs an earlier version of this script cached
label=$(docker image inspect --format '{{ index .Config.Labels "tbdkit.standin" }}' "$tag" 2>/dev/null || true)
if [ "$label" = "$name-$key" ]; then
  echo "make-standin: $tag already holds $name-$key"
  exit 0
fi
echo "make-standin: unpacking $* for Python $py"
stage="$cache/partial-$name"
rm -rf "$stage".* 2>/dev/null || true  # an earlier run's, should its removal have been cut short
rm -rf "$stage" && mkdir -p "$stage/$site" "$stage/etc/pip"
# From uv's cache (CI's, beside this cache, where .ci/run sets UV_CACHE_DIR), whose unpacked wheels it links
# into the stage: from the second run on a machine, nothing is unzipped or written again, and the stage's removal
# only unlinks.
"${uv[@]}" pip install --quiet --cache-dir "${UV_CACHE_DIR:-$cache/uv}" --link-mode hardlink --no-index \
  --find-links "$wheels" --target "$stage/$site" --python-version "$py" --python-platform x86_64-manylinux_2_28 pip "$@"
# --target puts console scripts in its bin/ with this machine's interpreter in their shebangs: the
# stacks run `python -m pip` and never these.
rm -rf "${stage:?}/$site/bin"
echo "make-standin: unpacked at ${SECONDS} s"
# The base's Python imports the framework (writing the bytecode of what it loads), lists what it sees (pip
# list --format=freeze: the constraint file NGC writes); its venv module must lack ensurepip.
docker run --rm --network none --user "$(id -u):$(id -g)" -v "$stage/$site:/$site" -v "$stage/etc/pip:/etc/pip" \
  "$base" bash -c "python3 -c 'import $module' \
    && python3 -m pip list --format=freeze --disable-pip-version-check > /etc/pip/constraint.txt \
    && if python3 -c 'import ensurepip' 2>/dev/null; then echo 'the stand-in must lack ensurepip' >&2; exit 1; fi"
echo "make-standin: imported $module and listed at ${SECONDS} s"
# One stream: the OS tarball up to its end-of-archive marker (`tar -R` numbers its blocks), then every
# staged path the OS tarball lacks (docker import refuses a path twice, and the base has
# /usr/local/lib/python$py/dist-packages/ itself), owned by root as pip's files were.
listing=$(tar -tRf "$base_tar")
end=$(tail -n 1 <<<"$listing" | sed -n 's/^block \([0-9]*\): \*\* Block of NULs \*\*$/\1/p')
[ -n "$end" ] || { echo "make-standin: no end-of-archive marker in $base_tar" >&2; exit 1; }
{ head -c $((end * 512)) "$base_tar"
  (cd "$stage" && find ./usr ./etc | sort) | comm -23 - <(sed -e '$d' -e 's/^block [0-9]*: //' -e 's|/$||' <<<"$listing" | sort) \
    | tar --create --file - --owner=0 --group=0 --numeric-owner --no-recursion -C "$stage" --verbatim-files-from -T -
} | docker import --change 'CMD ["/bin/bash"]' --change "LABEL tbdkit.standin=$name-$key" \
      --change "ENV PIP_CONSTRAINT=/etc/pip/constraint.txt" - "$tag" >/dev/null
# The staged files are removed in the background: deleting a file waits for its pages that the kernel is
# writing back, and the image's build goes on meanwhile (the output is closed, so no caller waits for it).
mv "$stage" "$stage.$$"
rm -rf "$stage.$$" >/dev/null 2>&1 </dev/null &
echo "make-standin: $tag imported at ${SECONDS} s"
