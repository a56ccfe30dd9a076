#!/usr/bin/env bash
# `docker import` of a root file system tarball under a tag, once per tarball: an image already tagged from
# this tarball (its label names the tarball's name, size and time) keeps its id, so the images built on it
# come from Docker's build cache on a second run on the same machine.
# usage: docker/ci/import-once.sh TAG TARBALL [--change INSTRUCTION]...
set -euo pipefail
tag="$1" tarball="$2"
shift 2
stamp="$(basename "$tarball"):$(stat -c %s:%Y "$tarball")"  # a new tarball of the same name is imported again
imported=$(docker image inspect --format '{{ index .Config.Labels "tbdkit.base-tarball" }}' "$tag" 2>/dev/null || true)
if [ "$imported" = "$stamp" ]; then
  echo "import-once: $tag already holds $(basename "$tarball")"
else
  docker import --change 'CMD ["/bin/bash"]' --change "LABEL tbdkit.base-tarball=$stamp" "$@" "$tarball" "$tag" >/dev/null
  echo "import-once: imported $tag"
fi
