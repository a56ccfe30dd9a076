# The MXNet stack: the kit's agent on NVIDIA's last NGC MXNet image (23.09, MXNet 1.9.1).
# Apache MXNet is archived (retired to the Apache Attic in 2023): this image is frozen with it.
# MXNet 1.9.1 needs numpy<1.24, and NGC built it for the base's Python 3.10; the kit asks for
# 3.11 only for tomllib, so here it is installed for 3.10 with tomli standing in for tomllib.
# It runs the same workloads as the other stacks (their mxnet.py files, from the same workload.toml).
ARG BASE_IMAGE=nvcr.io/nvidia/mxnet:23.09-py3
# The kit's sources, gathered in a tiny stage so that the image takes them in one step.
FROM scratch AS kit
COPY pyproject.toml README.md /src/
COPY tbdkit /src/tbdkit
COPY workloads /src/workloads

FROM ${BASE_IMAGE}

ARG PIP_OPTIONS=""
# The workloads' own libraries: the rest of pyproject.toml's mxnet extra (a test keeps them equal).
ARG WORKLOAD_REQUIREMENTS="gymnasium>=1.0 ale-py>=0.9"
ARG REQUIRE_NSIGHT=1
ARG BASE_IMAGE
ARG BASE_DIGEST=""
# The kit's revision label comes from `docker build --label` (tbdkit images build), so that a new
# commit of the kit does not rebuild the framework layers; the launcher passes it into env.json.
LABEL org.opencontainers.image.title="tbdkit-mxnet" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}" \
      tbdkit.stack="mxnet"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV VIRTUAL_ENV=/opt/tbdkit/venv \
    PATH=/opt/tbdkit/venv/bin:${PATH} \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    TBDKIT_WORKLOADS=/opt/tbdkit/src/workloads

COPY docker/wheels/ /tmp/wheels/
COPY --from=kit /src /opt/tbdkit/src
# The kit installs from its own source tree; versions are pinned by build args and pyproject.toml.
# hadolint ignore=DL3013,SC2086
RUN python3 -m venv --system-site-packages "${VIRTUAL_ENV}" \
 && pip install ${PIP_OPTIONS} --ignore-requires-python "numpy<1.24" "tomli>=2" /opt/tbdkit/src ${WORKLOAD_REQUIREMENTS} \
 && site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
 && if ! python -c "import tomllib" 2>/dev/null; then echo "from tomli import *  # noqa" > "${site}/tomllib.py"; fi \
 && rm -rf /tmp/wheels \
 && python -c "import tbdkit, mxnet; print('tbdkit', tbdkit.__version__, 'mxnet', mxnet.__version__)"

RUN if [ "${REQUIRE_NSIGHT}" = "1" ]; then \
      if ! { command -v nsys && command -v ncu; }; then \
        echo "nsys/ncu missing from the base image: install Nsight Systems and Nsight Compute from the CUDA apt repository in this Dockerfile" >&2; \
        exit 1; \
      fi; \
    fi

WORKDIR /tmp
ENTRYPOINT []
CMD ["python", "-m", "tbdkit.agent", "--help"]
