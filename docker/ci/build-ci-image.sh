#!/usr/bin/env bash
# Build a framework stack's image for CI without any container registry: a Debian bookworm base
# from mmdebstrap (make-base.sh), a CPU stand-in for the stack's NGC base with the framework already
# in its system Python and pinned in PIP_CONSTRAINT (framework-base.Dockerfile; pytorch: the CPU
# torch wheel that lies on the CI machines), the kit's dependencies downloaded by the host's pip into
# docker/wheels/ (ignored by git), and an offline `tbdkit images build` of the stack's own Dockerfile.
# The CI image runs Deep Speech 2 only: WORKLOAD_REQUIREMENTS (the other workloads' libraries) is
# left empty, so nothing beyond the kit is downloaded.
# usage: docker/ci/build-ci-image.sh [TAG] [STACK]   (default tbdkit-ci/pytorch:cpu pytorch)
set -euo pipefail
cd "$(dirname "$0")/../.."
tag="${1:-tbdkit-ci/pytorch:cpu}"
stack="${2:-pytorch}"
base=tbdkit-ci/bookworm-base
cache="${TBDKIT_CI_CACHE:-$HOME/.cache/tbdkit-ci}"
# The CPU wheel that lies on the CI machines; its version is the build arg's pin.
torch_wheel="${TBDKIT_CI_TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}"

python="${PYTHON:-.venv/bin/python}"

bash docker/ci/make-base.sh "$base"
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
    base_reqs=("${framework_reqs[@]}"); build_args=() ;;
  *) echo "build-ci-image: unknown stack '$stack' (pytorch, tensorflow or mxnet)" >&2; exit 2 ;;
esac
wheels="$cache/wheels-$stack"
mkdir -p "$wheels"
"$python" -m pip download --quiet --disable-pip-version-check --dest "$wheels" "${framework_reqs[@]}" pip
framework_base="tbdkit-ci/$stack-base"
docker build --quiet --tag "$framework_base" --build-arg "BASE_IMAGE=$base" \
  --build-arg "FRAMEWORK_REQUIREMENTS=${base_reqs[*]}" \
  --file docker/ci/framework-base.Dockerfile "$wheels" >/dev/null
echo "build-ci-image: built $framework_base (${base_reqs[*]})"
# MXNet's Dockerfile adds numpy<1.24 beside the kit: it comes from docker/wheels too.
extra=()
[ "$stack" = mxnet ] && extra=("numpy<1.24")
"$python" -m pip download --quiet --disable-pip-version-check --dest docker/wheels \
  "${dep_list[@]}" "${extra[@]}" "setuptools>=68" wheel
"$python" -m tbdkit.cli images build "$stack" --base-image "$framework_base" --tag "$tag" \
  --build-arg "PIP_OPTIONS=--no-index --find-links=/tmp/wheels" --build-arg REQUIRE_NCU=0 \
  --build-arg WORKLOAD_REQUIREMENTS= --build-arg KERAS_REQUIREMENT= "${build_args[@]}"
