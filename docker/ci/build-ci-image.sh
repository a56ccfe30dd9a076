#!/usr/bin/env bash
# Build the pytorch stack's image for CI without any container registry: a Debian bookworm base
# from mmdebstrap (make-base.sh), the CPU torch wheel and the kit's dependencies downloaded by
# the host's pip into docker/wheels/ (ignored by git), and an offline `tbdkit images build`.
# usage: docker/ci/build-ci-image.sh [TAG]   (default tbdkit-ci/pytorch:cpu)
set -euo pipefail
cd "$(dirname "$0")/../.."
tag="${1:-tbdkit-ci/pytorch:cpu}"
base=tbdkit-ci/bookworm-base
# The CPU wheel that lies on the CI machines; its version is the build arg's pin.
torch_wheel="${TBDKIT_CI_TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}"
torch_pin="torch==$(basename "$torch_wheel" | cut -d- -f2 | cut -d+ -f1)"
python="${PYTHON:-.venv/bin/python}"

bash docker/ci/make-base.sh "$base"
# The kit's runtime dependencies (pyproject.toml), plus what pip needs to build the kit.
deps=$("$python" - <<'PY'
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))
PY
)
mapfile -t dep_list <<<"$deps"
"$python" -m pip download --quiet --disable-pip-version-check --dest docker/wheels \
  "$torch_wheel" "${dep_list[@]}" "setuptools>=68" wheel
"$python" -m tbdkit.cli images build pytorch --base-image "$base" --tag "$tag" \
  --build-arg "TORCH_REQUIREMENT=$torch_pin" --build-arg "PIP_OPTIONS=--no-index --find-links=/tmp/wheels" \
  --build-arg REQUIRE_NSIGHT=0
