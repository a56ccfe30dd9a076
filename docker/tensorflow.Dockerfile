# The TensorFlow stack: the kit's agent on NVIDIA's last NGC TensorFlow 2 image (25.02, TF 2.17,
# Python 3.12). The framework comes from the base; the kit is installed beside it under the
# base's own pip constraints, so TensorFlow's pinned dependencies stay as NVIDIA tested them.
# It runs the same workloads as the other stacks (their tensorflow.py files, from the same workload.toml).
ARG BASE_IMAGE=nvcr.io/nvidia/tensorflow:25.02-tf2-py3
# The kit's sources, gathered in a tiny stage so that the image takes them in one step.
FROM scratch AS kit
COPY pyproject.toml README.md /src/
COPY tbdkit /src/tbdkit
COPY workloads /src/workloads

FROM ${BASE_IMAGE}

ARG PIP_OPTIONS=""
# The workloads' own libraries: the rest of pyproject.toml's tensorflow extra (a test keeps them equal).
ARG WORKLOAD_REQUIREMENTS="gymnasium>=1.0 ale-py>=0.9"
ARG REQUIRE_NSIGHT=1
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
    PYTHONUNBUFFERED=1 \
    TBDKIT_WORKLOADS=/opt/tbdkit/src/workloads

COPY docker/wheels/ /tmp/wheels/
COPY --from=kit /src /opt/tbdkit/src
# The kit installs from its own source tree; versions are pinned by build args and pyproject.toml.
# hadolint ignore=DL3013,SC2086
RUN python3 -m venv --system-site-packages "${VIRTUAL_ENV}" \
 && pip install ${PIP_OPTIONS} /opt/tbdkit/src ${WORKLOAD_REQUIREMENTS} \
 && rm -rf /tmp/wheels \
 && python -c "import tbdkit, tensorflow as tf; print('tbdkit', tbdkit.__version__, 'tensorflow', tf.__version__)"

RUN if [ "${REQUIRE_NSIGHT}" = "1" ]; then \
      if ! { command -v nsys && command -v ncu; }; then \
        echo "nsys/ncu missing from the base image: install Nsight Systems and Nsight Compute from the CUDA apt repository in this Dockerfile" >&2; \
        exit 1; \
      fi; \
    fi

WORKDIR /tmp
ENTRYPOINT []
CMD ["python", "-m", "tbdkit.agent", "--help"]
