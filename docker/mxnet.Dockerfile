# The MXNet stack: the kit's agent on NVIDIA's NGC MXNet image (24.06, MXNet 1.9.1; see images.lock).
# Apache MXNet is archived (retired to the Apache Attic in 2023): this image is frozen with it.
# That base is Ubuntu 22.04 with Python 3.10 and no python3.10-venv (no ensurepip): the kit runs on
# Python 3.10 (tomli standing in for tomllib), and its environment is made without pip, using the
# base's own pip through --system-site-packages (docker/stack-env.sh). MXNet 1.9.1 needs numpy<1.24.
# It runs the same workloads as the other stacks (their mxnet.py files, from the same workload.toml).
ARG BASE_IMAGE=nvcr.io/nvidia/mxnet:24.06-py3
# The kit's sources, gathered in a tiny stage so that the image takes them in one step.
FROM scratch AS kit
COPY pyproject.toml README.md /src/
COPY tbdkit /src/tbdkit
COPY workloads /src/workloads
COPY locks /src/locks

FROM ${BASE_IMAGE}

ARG PIP_OPTIONS=""
# Installed only when the base has no MXNet at all: pyproject's pin.
ARG FRAMEWORK_REQUIREMENTS="mxnet==1.9.1"
# The workloads' own libraries: the rest of pyproject.toml's mxnet extra (a test keeps them equal).
ARG WORKLOAD_REQUIREMENTS="gymnasium>=1.0 ale-py>=0.9 zeus>=0.16"
ARG KIT_REQUIREMENTS="numpy<1.24"
# 1: fail the build without Nsight Compute (the kit's hardware-counter pass calls it); 0: CI.
ARG REQUIRE_NCU=1
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
    PYTHONUNBUFFERED=1

WORKDIR /tmp
ENTRYPOINT []
CMD ["python", "-m", "tbdkit.agent", "--help"]

COPY docker/wheels/ /tmp/wheels/
COPY docker/stack-env.sh /opt/tbdkit/stack-env.sh
# The image's lock pins every package the base lacks (docker/stack-env.sh; docs/environments.md).
COPY locks/ /opt/tbdkit/locks/
# The kit's own libraries (pyproject.toml's dependencies) go in with the stack's, so that a change of the kit's
# code rebuilds only its last step (the kit, editable, and the stack's record), not them.
COPY pyproject.toml /opt/tbdkit/pyproject.toml
RUN /opt/tbdkit/stack-env.sh deps mxnet

COPY --from=kit /src /opt/tbdkit/src
RUN /opt/tbdkit/stack-env.sh kit mxnet && rm -rf /tmp/wheels
