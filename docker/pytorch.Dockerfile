# The PyTorch stack: the kit's agent and the workloads on NVIDIA's NGC PyTorch image.
# BASE_IMAGE is pinned by tag and digest in docker/images.lock (`tbdkit images lock` fills the
# digest after a pull); CI builds this file on a small Debian bookworm base with a CPU wheel.
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:25.12-py3
# The kit's sources, gathered in a tiny stage so that the image takes them in one step.
FROM scratch AS kit
COPY pyproject.toml README.md /src/
COPY tbdkit /src/tbdkit
COPY workloads /src/workloads

FROM ${BASE_IMAGE}

# What pip installs for the framework; the default is the stack's pin in pyproject.toml.
ARG TORCH_REQUIREMENT="torch==2.14.1 torchvision==0.29.1"
# The workloads' own libraries: the rest of pyproject.toml's pytorch extra (a test keeps them equal).
ARG WORKLOAD_REQUIREMENTS="transformers>=4.40 gymnasium>=1.0 ale-py>=0.9 effdet==0.4.1 scikit-learn>=1.3 num2words>=0.5"
# Extra pip options, e.g. "--no-index --find-links=/tmp/wheels" for an offline build from
# wheels put in docker/wheels/ beforehand.
ARG PIP_OPTIONS=""
# 1: fail the build unless nsys and ncu are on PATH (the GPU images); 0: the CPU CI image.
ARG REQUIRE_NSIGHT=1
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

# The kit lives in its own virtual environment on top of the base's Python, seeing the base's
# packages (NGC's CUDA build of torch) unless TORCH_REQUIREMENT replaces them.
ENV VIRTUAL_ENV=/opt/tbdkit/venv \
    PATH=/opt/tbdkit/venv/bin:/opt/nvidia/nsight-compute:${PATH} \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_CONSTRAINT="" \
    PYTHONUNBUFFERED=1

# Metadata before the heavy layers: each step copies the whole tree on some storage drivers.
WORKDIR /tmp
ENTRYPOINT []
CMD ["python", "-m", "tbdkit.agent", "--help"]

COPY docker/wheels/ /tmp/wheels/
# hadolint ignore=DL3013,SC2086
RUN python3 -m venv --system-site-packages "${VIRTUAL_ENV}" \
 && if [ -n "${TORCH_REQUIREMENT}" ]; then \
      pip install ${PIP_OPTIONS} ${TORCH_REQUIREMENT}; \
    fi \
 && if [ -n "${WORKLOAD_REQUIREMENTS}" ]; then \
      pip install ${PIP_OPTIONS} ${WORKLOAD_REQUIREMENTS}; \
    fi

COPY --from=kit /src /opt/tbdkit/src
# The kit installs editable from its source tree (pinned by the image's commit), so the agent
# finds the workloads beside it; the image's environment is registered as the pytorch stack, so
# `tbdkit bench` inside the container (compose) runs natively there. GPU images must carry
# Nsight Systems and Nsight Compute (NGC's do): the kernel and counter collectors need them.
# hadolint ignore=DL3013,SC2086
RUN pip install ${PIP_OPTIONS} -e /opt/tbdkit/src \
 && rm -rf /tmp/wheels \
 && mkdir -p /opt/tbdkit/src/.venvs \
 && ln -s "${VIRTUAL_ENV}" /opt/tbdkit/src/.venvs/pytorch \
 && python -c "import json, torch, tbdkit; from tbdkit import stacks; \
print(json.dumps({'stack': 'pytorch', 'framework_version': torch.__version__, 'python': '${VIRTUAL_ENV}/bin/python', \
'kit_root': '/opt/tbdkit/src', 'requirements_digest': stacks._requirements_digest(stacks.get('pytorch'))}))" \
    > "${VIRTUAL_ENV}/tbdkit-stack.json" \
 && cat "${VIRTUAL_ENV}/tbdkit-stack.json" \
 && if [ "${REQUIRE_NSIGHT}" = "1" ]; then \
      if ! { command -v nsys && command -v ncu; }; then \
        echo "nsys/ncu missing from the base image: install Nsight Systems and Nsight Compute from the CUDA apt repository in this Dockerfile" >&2; \
        exit 1; \
      fi; \
    fi
