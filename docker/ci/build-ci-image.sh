#!/usr/bin/env bash
# Build a framework stack's image for CI without any container registry: a base from mmdebstrap
# (make-base.sh: Debian bookworm with Python 3.11 for PyTorch and TensorFlow; Ubuntu 22.04 with
# Python 3.10, the OS and Python of NGC's MXNet image, for MXNet), a CPU stand-in for the stack's NGC
# base with the framework already in its system Python and pinned in PIP_CONSTRAINT
# (make-standin.sh; pytorch: the CPU torch wheel that lies on the CI machines), the kit's
# dependencies downloaded by the host's pip into docker/wheels/ (ignored by git) for the base's Python,
# and an offline `tbdkit images build` of the stack's own Dockerfile. For a base whose Python has an
# image lock (locks/<stack>-image-py<XY>.txt: MXNet's 3.10), the downloads are the lock's versions, as
# the image's build installs them.
# The CI image runs MiniGo only (tests/real_containers.py): WORKLOAD_REQUIREMENTS (the other workloads' libraries) is
# left empty, so nothing beyond the kit is downloaded.
# usage: docker/ci/build-ci-image.sh [TAG] [STACK]   (default tbdkit-ci/pytorch:cpu pytorch)
set -euo pipefail
cd "$(dirname "$0")/../.."
tag="${1:-tbdkit-ci/pytorch:cpu}"
stack="${2:-pytorch}"
cache="${TBDKIT_CI_CACHE:-$HOME/.cache/tbdkit-ci}"
# The CPU wheel that lies on the CI machines; its version is the build arg's pin.
torch_wheel="${TBDKIT_CI_TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}"

python="${PYTHON:-.venv/bin/python}"

# The base's OS and Python: NGC's MXNet image is Ubuntu 22.04 with Python 3.10; the stand-ins of the
# other two keep the machine's own Debian (their NGC bases run 3.12, which no registry here offers).
case "$stack" in
  mxnet) suite=jammy; py=3.10 ;;
  *) suite=bookworm; py=3.11 ;;
esac
base="tbdkit-ci/$suite-base"
base_tar=$(bash docker/ci/make-base.sh "$base" "$cache" "$suite" | tee /dev/stderr | sed -n 's/^make-base: tarball //p')
# pip downloads for the base's Python (binary wheels only, as no compiler is in the image), at the
# image lock's versions where the lock exists.
download=("$python" -m pip download --quiet --disable-pip-version-check)
if [ "$py" != "$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" ]; then
  download+=(--python-version "$py" --implementation cp --abi "cp${py/./}" --only-binary=:all:
             --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
             --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64)
fi
# `pip download` takes 15-20 CPU seconds a request even when every wheel is already in its folder (it
# resolves again): a folder in the cache keeps a stamp of the request it holds (the options, the
# requirements, the pins) and of the files it got, and the same request again, every file still there,
# downloads nothing. A changed request downloads as before; a range's newer release reaches the cache only
# then (or when the folder is removed), as with a lock.
fetch() {  # fetch DEST REQUIREMENT...: the download into DEST, unless DEST's stamp holds this very request
  local dest="$1"; shift
  local stamp="$dest/.tbdkit-download" request
  request=$(printf '%s\n' "${download[@]:1}" "$@"; [ -z "${pins:-}" ] || cat "$pins")
  if [ -f "$stamp" ] && [ "$(sed '/^--$/,$d' "$stamp")" = "$request" ] \
     && (cd "$dest" && sed '1,/^--$/d' .tbdkit-download | while IFS= read -r f; do [ -f "$f" ] || exit 1; done); then
    echo "build-ci-image: $dest holds this download already"
    return
  fi
  rm -f "$stamp"
  "${download[@]}" --dest "$dest" "$@"
  { printf '%s\n--\n' "$request"; find "$dest" -maxdepth 1 -type f ! -name .tbdkit-download -printf '%f\n' | sort; } \
    > "$stamp"
}
lock="locks/$stack-image-py${py/./}.txt"
if [ -f "$lock" ]; then
  pins="$cache/pins-$stack-py${py/./}.txt"
  "$python" - "$lock" > "$pins" <<'PY'
import sys
from pathlib import Path
from tbdkit.env import locks
for name, version in locks.pins(Path(sys.argv[1]).read_text()).items():
    print(f"{name}=={version}")
PY
  download+=(-c "$pins")
  echo "build-ci-image: downloads for Python $py pinned by $lock"
fi
# The kit's runtime dependencies (pyproject.toml), plus what pip needs to build the kit.
deps=$("$python" - <<'PY'
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))
PY
)
mapfile -t dep_list <<<"$deps"
case "$stack" in
  # pytorch: the wheel on the CI machines; the Dockerfile's FRAMEWORK_REQUIREMENTS names torch only
  # (the CI image needs no torchvision), so a build that replaced the base's torch would fail offline.
  pytorch) framework_reqs=("$torch_wheel"); base_reqs=("torch==$(basename "$torch_wheel" | cut -d- -f2)")
           build_args=(--build-arg "FRAMEWORK_REQUIREMENTS=torch==2.14.1") ;;
  # the framework's pin is the stack's extra in pyproject.toml, as in the native environment
  tensorflow|mxnet)
    mapfile -t framework_reqs < <("$python" - "$stack" <<'PY'
import sys, tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"][sys.argv[1]]))
PY
)
    build_args=()
    if [ "$stack" = tensorflow ]; then
      # NGC's TensorFlow image holds TensorFlow (and the Keras it requires), not the workloads' libraries:
      # the stand-in holds TensorFlow's closure, and the Dockerfile's own step installs keras-hub over it
      # (KERAS_HUB_REQUIREMENTS, from docker/wheels below), as it does on NGC's base.
      for req in "${framework_reqs[@]}"; do [[ "$req" =~ ^tensorflow[^a-z_-] ]] && base_reqs=("$req"); done
    else
      base_reqs=("${framework_reqs[@]}")  # MXNet's: the image lock's versions of all (the test compares them)
    fi ;;
  *) echo "build-ci-image: unknown stack '$stack' (pytorch, tensorflow or mxnet)" >&2; exit 2 ;;
esac
wheels="$cache/wheels-$stack-py$py"
mkdir -p "$wheels"
if [ -f "$lock" ]; then
  # The lock is the whole closure for the base's Python, its markers resolved for that Python (pip
  # evaluates them against its own): every pin, without pip's resolver.
  fetch "$wheels" --no-deps -r "$pins" pip
else
  fetch "$wheels" "${framework_reqs[@]}" pip
fi
framework_base="tbdkit-ci/$stack-base"
PYTHON="$python" bash docker/ci/make-standin.sh "$framework_base" "$base" "$base_tar" "$py" "$wheels" "${base_reqs[@]}"
echo "build-ci-image: built $framework_base (${base_reqs[*]})"
# docker/wheels is shared by every stack's build (the Dockerfiles COPY it): builds side by side (`make test`'s
# workers build each stack's image) download into it and send it as their context one at a time.
exec 8>"$cache/.docker-wheels.lock"
flock 8
# MXNet's Dockerfile adds numpy<1.24 beside the kit: it comes from docker/wheels too. pip evaluates a
# requirement's marker against its own Python, not the target's, so tomli (Python < 3.11) is named.
extra=()
[ "$stack" = mxnet ] && extra=("numpy<1.24")
[ "$py" = 3.10 ] && extra+=(tomli)
# downloaded into the cache (a folder per Python), then copied: docker/wheels starts empty in a clean checkout
kit_wheels="$cache/kit-wheels-py$py"
mkdir -p "$kit_wheels" docker/wheels
fetch "$kit_wheels" "${dep_list[@]}" "${extra[@]}" "setuptools>=68" wheel
# What the last build copied there goes first (its list is kept beside it; other files stay): the
# stacks' Pythons differ, and each build sends the whole folder as context and copies it into a layer.
copied=docker/wheels/.tbdkit-ci-copied
if [ -f "$copied" ]; then
  (cd docker/wheels && xargs -r -d '\n' rm -f -- < .tbdkit-ci-copied)
fi
mapfile -t ours < <(find "$kit_wheels" -maxdepth 1 -type f ! -name .tbdkit-download)
# TensorFlow's Dockerfile installs keras-hub and the two libraries it imports (KERAS_HUB_REQUIREMENTS) itself
if [ "$stack" = tensorflow ]; then
  ours+=("$wheels"/keras_hub-*.whl "$wheels"/regex-*.whl "$wheels"/tokenizers-*.whl)
fi
cp -p -t docker/wheels/ "${ours[@]}"
printf '%s\n' "${ours[@]##*/}" > "$copied"
"$python" -m tbdkit.cli images build "$stack" --base-image "$framework_base" --tag "$tag" \
  --build-arg "PIP_OPTIONS=--no-index --find-links=/tmp/wheels" --build-arg REQUIRE_NCU=0 \
  --build-arg WORKLOAD_REQUIREMENTS= --build-arg KERAS_REQUIREMENT= "${build_args[@]}"
