# The PyTorch stack: the kit's agent and the workloads on NVIDIA's NGC PyTorch image, with NGC's own
# PyTorch build (its CUDA, cuDNN and NCCL, as images.lock and env.json describe them): nothing
# replaces it. NGC pins its packages in PIP_CONSTRAINT (/etc/pip/constraint.txt), which pip respects
# here; only what the base lacks is installed (docker/stack-env.sh).
# BASE_IMAGE is pinned by tag and digest in docker/images.lock (`tbdkit images lock` fills the
# digest after a pull); CI builds this file on a Debian stand-in that holds a CPU torch the same way.
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.12-py3
# The kit's sources, gathered in a tiny stage so that the image takes them in one step.
FROM scratch AS kit
COPY pyproject.toml README.md /src/
COPY tbdkit /src/tbdkit
COPY workloads /src/workloads
COPY locks /src/locks

FROM ${BASE_IMAGE}

# Installed only when the base has no torch/torchvision at all (a plain CUDA base): pyproject's pins.
ARG FRAMEWORK_REQUIREMENTS="torch==2.14.1 torchvision==0.29.1"
# The workloads' own libraries: the rest of pyproject.toml's pytorch extra (a test keeps them equal).
ARG WORKLOAD_REQUIREMENTS="transformers>=4.40 gymnasium>=1.0 ale-py>=0.9 effdet==0.4.1 scikit-learn>=1.3 num2words>=0.5 zeus>=0.16 diffusers==0.42.1 torchao==0.18.0"
# Extra pip options, e.g. "--no-index --find-links=/tmp/wheels" for an offline build from
# wheels put in docker/wheels/ beforehand.
ARG PIP_OPTIONS=""
ARG KIT_REQUIREMENTS=""
# 1: fail the build without Nsight Compute, which the kit's hardware-counter pass calls (NGC's
# images ship it); 0: the CPU CI image.
ARG REQUIRE_NCU=1
ARG BASE_IMAGE
ARG BASE_DIGEST=""
# The kit's revision label comes from `docker build --label` (tbdkit images build), so that a new
# commit of the kit does not rebuild the framework layers; the launcher passes it into env.json.
LABEL org.opencontainers.image.title="tbdkit-pytorch" \
      org.opencontainers.image.source="tbdkit" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}" \
      tbdkit.stack="pytorch"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV VIRTUAL_ENV=/opt/tbdkit/venv \
    PATH=/opt/tbdkit/venv/bin:${PATH} \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1

# Metadata before the heavy layers: each step copies the whole tree on some storage drivers.
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
RUN /opt/tbdkit/stack-env.sh deps pytorch

COPY --from=kit /src /opt/tbdkit/src
RUN /opt/tbdkit/stack-env.sh kit pytorch && rm -rf /tmp/wheels
