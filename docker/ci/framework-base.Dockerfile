# CI only: a CPU stand-in for an NGC framework image, so that the tensorflow and mxnet stacks'
# Dockerfiles can be built and run where no registry is reachable. Like NGC's images, it holds
# the framework in the system Python's site-packages; the stack Dockerfile then adds the kit in a
# venv that sees them (--system-site-packages). The build context is a folder of wheels that the
# host's pip downloaded (docker/ci/build-ci-image.sh), so the build itself needs no network.
ARG BASE_IMAGE=tbdkit-ci/bookworm-base
FROM ${BASE_IMAGE}
ARG FRAMEWORK_REQUIREMENTS
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY . /tmp/wheels/
# Debian's python3 has no pip module; the pip wheel that python3-venv ships runs as a zip app.
# hadolint ignore=SC2086
RUN test -n "${FRAMEWORK_REQUIREMENTS}" \
 && pip_whl="$(ls /usr/share/python-wheels/pip-*.whl)" \
 && python3 "${pip_whl}/pip" install --no-cache-dir --break-system-packages --no-index \
      --find-links=/tmp/wheels ${FRAMEWORK_REQUIREMENTS} \
 && rm -rf /tmp/wheels
CMD ["/bin/bash"]
