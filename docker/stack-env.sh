#!/usr/bin/env bash
# The kit's environment inside a framework image, the same for every stack (run by the Dockerfiles).
#   stack-env.sh deps STACK   a virtual environment on top of the base's Python that sees the base's
#                             packages; the framework is installed only when the base lacks it (NGC's
#                             images bring their own CUDA build, pinned in PIP_CONSTRAINT, which pip
#                             respects here); then the workloads' libraries and the kit's own
#                             (pyproject.toml's dependencies), under the same constraints.
#   stack-env.sh kit STACK    the kit, editable from /opt/tbdkit/src; the environment registered as the
#                             stack (so `tbdkit bench` inside the container, e.g. under compose, runs
#                             natively there); Nsight Compute linked onto PATH from where NVIDIA's images
#                             put it (/opt/nvidia/nsight-compute/<version>/ncu); REQUIRE_NCU=1 fails
#                             the build without it. Nsight Systems is never required: the kit never calls it.
# NGC's MXNet image (Ubuntu 22.04, Python 3.10) has no python3.10-venv, so no ensurepip: the environment
# is made without pip and runs the base's own pip, seen through --system-site-packages.
# Locks: when locks/<stack>-image-py<XY>.txt exists for the base's Python (NGC's: 3.12 for PyTorch and
# TensorFlow, 3.10 for MXNet), every package the base lacks is installed at the lock's version (a pip
# constraint); the base's own packages (NGC's builds) are kept, and each run's env.json lists where they
# differ from the lock. A base of another Python (the CI stand-ins) installs from the ranges, and says so.
# Build args arrive as environment: PIP_OPTIONS, FRAMEWORK_REQUIREMENTS, WORKLOAD_REQUIREMENTS,
# KIT_REQUIREMENTS, REQUIRE_NCU.
set -euo pipefail -f  # -f: requirement words such as "numpy<1.24" are never globbed
step="${1:?usage: stack-env.sh deps|kit STACK}"
stack="${2:?usage: stack-env.sh deps|kit STACK}"
venv="${VIRTUAL_ENV:?VIRTUAL_ENV must name the environment}"
python="$venv/bin/python"
constraints=/opt/tbdkit/lock-constraints.txt
# shellcheck disable=SC2086  # PIP_OPTIONS and the requirement lists are word lists
case "$step" in
  deps)
    python3 -m venv --without-pip --system-site-packages "$venv"
    "$python" -m pip --version
    echo "stack-env: PIP_CONSTRAINT=${PIP_CONSTRAINT:-(none)}"
    pyver=$("$python" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
    lock="/opt/tbdkit/locks/$stack-image-py$pyver.txt"
    if [ -f "$lock" ]; then
      "$python" - "$lock" > "$constraints" <<'PY'
import importlib.metadata, re, sys
for line in open(sys.argv[1]):
    m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
    if m:
        try:
            importlib.metadata.version(m.group(1))  # the base has it: NGC's build stays
        except importlib.metadata.PackageNotFoundError:
            print(f"{m.group(1)}=={m.group(2)}")
PY
      echo "stack-env: $(wc -l < "$constraints") packages the base lacks pinned by $lock"
    else
      : > "$constraints"
      echo "stack-env: no lock for this base's Python 3.${pyver#3} ($lock): pyproject.toml's ranges apply"
    fi
    # Only what the base lacks: a requirement whose distribution is installed (any version) is kept.
    missing=$("$python" - ${FRAMEWORK_REQUIREMENTS:-} <<'PY'
import importlib.metadata, re, sys
for req in sys.argv[1:]:
    name = re.match(r"[A-Za-z0-9._-]+", req).group(0)
    try:
        print(f"stack-env: keeping the base's {name} {importlib.metadata.version(name)}", file=sys.stderr)
    except importlib.metadata.PackageNotFoundError:
        print(req)
PY
)
    # one word list, blanks collapsed (an empty build arg leaves nothing to install)
    reqs=$(echo $missing ${WORKLOAD_REQUIREMENTS:-})
    # The kit's own libraries (pyproject.toml's dependencies, where the Dockerfile copied it), installed here under
    # the same constraints, so that the kit's step, rebuilt whenever the kit's code changes, installs only the kit.
    kit_reqs=/opt/tbdkit/kit-requirements.txt
    : > "$kit_reqs"
    if [ -f /opt/tbdkit/pyproject.toml ]; then
      "$python" - /opt/tbdkit/pyproject.toml > "$kit_reqs" <<'PY'
import sys
try:
    import tomllib
except ImportError:  # Python 3.10 (NGC's MXNet image): the same parser, as pip carries it
    from pip._vendor import tomli as tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
PY
      echo "stack-env: $(wc -l < "$kit_reqs") kit libraries from pyproject.toml"
    fi
    if [ -n "$reqs" ] || [ -s "$kit_reqs" ]; then
      "$python" -m pip install ${PIP_OPTIONS:-} -c "$constraints" $reqs -r "$kit_reqs"
    fi
    ;;
  kit)
    [ -f "$constraints" ] || : > "$constraints"
    "$python" -m pip install ${PIP_OPTIONS:-} -c "$constraints" -e /opt/tbdkit/src ${KIT_REQUIREMENTS:-}
    mkdir -p /opt/tbdkit/src/.venvs
    ln -sfn "$venv" "/opt/tbdkit/src/.venvs/$stack"
    "$python" - "$stack" <<'PY'
import importlib, json, os, sys
from tbdkit.env import locks, nsight, stacks
stack = stacks.get(sys.argv[1])
image_lock = locks.get(f"{stack.name}-image")
pinned = image_lock.python == "%d.%d" % sys.version_info[:2] and image_lock.file.is_file()
module = importlib.import_module(stack.module)
venv = os.environ["VIRTUAL_ENV"]
record = {"stack": stack.name, "framework_version": str(module.__version__), "framework_file": module.__file__,
          "python": f"{venv}/bin/python", "kit_root": "/opt/tbdkit/src",
          "requirements_digest": stacks._requirements_digest(stack),
          "lock": image_lock.name if pinned else None, "lock_digest": locks.digest(image_lock.file) if pinned else None}
with open(os.path.join(venv, stacks.MARKER), "w") as f:
    json.dump(record, f, indent=2)
print(json.dumps(record))
ncu = nsight.find("ncu")
if ncu and not nsight.find("ncu", path_only=True):
    os.symlink(ncu, os.path.join(venv, "bin", "ncu"))
print(f"stack-env: ncu {nsight.version(ncu) if ncu else None} at {ncu}")
if stack.name == "tensorflow":  # the workloads are Keras 3 code (`import keras`, keras.Variable)
    import keras
    if int(keras.__version__.split(".")[0]) < 3:
        sys.exit(f"stack-env: this base's Keras is {keras.__version__} and the TensorFlow workloads need Keras 3: "
                 "build with --build-arg KERAS_REQUIREMENT='keras>=3.5' on a base that allows it")
if not ncu and os.environ.get("REQUIRE_NCU") == "1":
    sys.exit("stack-env: Nsight Compute (ncu) is missing from the base image, and the kit's hardware-counter "
             "pass calls it: use an NGC base (they ship it), or build with --build-arg REQUIRE_NCU=0")
PY
    ;;
  *) echo "stack-env: unknown step '$step' (deps or kit)" >&2; exit 2 ;;
esac
