# The TensorFlow stack: the kit's agent on NVIDIA's NGC TensorFlow 2 image (see images.lock for
# which TensorFlow it ships). The framework comes from the base, under the base's own pip
# constraints (PIP_CONSTRAINT), so TensorFlow's pinned dependencies stay as NVIDIA tested them; the
# workloads are written for Keras 3 (`import keras`, keras.Variable), so Keras 3 is installed when
# the base's Keras is older (KERAS_REQUIREMENT), and the build fails if it cannot be.
# It runs the same workloads as the other stacks (their tensorflow.py files, from the same workload.toml).
ARG BASE_IMAGE=nvcr.io/nvidia/tensorflow:25.02-tf2-py3
# The kit's sources, gathered in a tiny stage so that the image takes them in one step.
FROM scratch AS kit
COPY pyproject.toml README.md /src/
COPY tbdkit /src/tbdkit
COPY workloads /src/workloads
COPY locks /src/locks

FROM ${BASE_IMAGE}

ARG PIP_OPTIONS=""
# Installed only when the base has no TensorFlow at all: pyproject's pin.
ARG FRAMEWORK_REQUIREMENTS="tensorflow==2.21.0"
# The Keras the workloads need (a no-op where the base's Keras is already 3).
ARG KERAS_REQUIREMENT="keras>=3.5"
# The workloads' own libraries: the rest of pyproject.toml's tensorflow extra (a test keeps them equal).
ARG WORKLOAD_REQUIREMENTS="gymnasium>=1.0 ale-py>=0.9 zeus>=0.16"
# keras-hub (Llama's and ViT's Keras networks) without its declared dependencies: its tensorflow-text needs
# TensorFlow >= 2.21 and the base brings NGC's own build under NVIDIA's constraints; keras_hub imports only regex
# and tokenizers of them (tensorflow-text, kagglehub and sentencepiece serve its tokenizers and preset downloads).
ARG KERAS_HUB_REQUIREMENTS="keras-hub==0.32.0 regex tokenizers"
ARG KIT_REQUIREMENTS=""
# 1: fail the build without Nsight Compute (the kit's hardware-counter pass calls it); 0: CI.
ARG REQUIRE_NCU=1
ARG BASE_IMAGE
ARG BASE_DIGEST=""
# The kit's revision label comes from `docker build --label` (tbdkit images build), so that a new
# commit of the kit does not rebuild the framework layers; the launcher passes it into env.json.
LABEL org.opencontainers.image.title="tbdkit-tensorflow" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.base.digest="${BASE_DIGEST}" \
      tbdkit.stack="tensorflow"

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
RUN WORKLOAD_REQUIREMENTS="${KERAS_REQUIREMENT} ${WORKLOAD_REQUIREMENTS}" /opt/tbdkit/stack-env.sh deps tensorflow \
    && python -m pip install ${PIP_OPTIONS} --no-deps -c /opt/tbdkit/lock-constraints.txt ${KERAS_HUB_REQUIREMENTS}

COPY --from=kit /src /opt/tbdkit/src
RUN /opt/tbdkit/stack-env.sh kit tensorflow && rm -rf /tmp/wheels
