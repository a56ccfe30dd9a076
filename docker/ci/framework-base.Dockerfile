# CI only: a CPU stand-in for an NGC framework image, so that the stacks' Dockerfiles can be built and
# run where no registry is reachable. Like NGC's images, it holds pip and the framework in the system
# Python's site-packages and pins every installed package in PIP_CONSTRAINT (/etc/pip/constraint.txt,
# as NGC does); like NGC's MXNet image it has no venv module with ensurepip (no python3-venv). The
# stack Dockerfile then adds the kit in an environment that sees them (--system-site-packages); the
# real-container test checks that the framework it imports is this one. The build context is a folder
# of wheels that the host's pip downloaded (docker/ci/build-ci-image.sh): the build needs no network.
ARG BASE_IMAGE=tbdkit-ci/bookworm-base
FROM ${BASE_IMAGE}
ARG FRAMEWORK_REQUIREMENTS
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY . /tmp/wheels/
# pip's own wheel runs as a zip app to install pip itself and the framework.
# hadolint ignore=SC2086
RUN test -n "${FRAMEWORK_REQUIREMENTS}" \
 && pip_whl="$(ls /tmp/wheels/pip-*.whl)" \
 && python3 "${pip_whl}/pip" install --no-cache-dir --break-system-packages --no-index \
      --find-links=/tmp/wheels pip ${FRAMEWORK_REQUIREMENTS} \
 && rm -rf /tmp/wheels \
 && mkdir -p /etc/pip \
 && python3 -m pip list --format=freeze --disable-pip-version-check > /etc/pip/constraint.txt \
 && if python3 -c "import ensurepip" 2>/dev/null; then echo "the stand-in must lack ensurepip" >&2; exit 1; fi
ENV PIP_CONSTRAINT=/etc/pip/constraint.txt
CMD ["/bin/bash"]
