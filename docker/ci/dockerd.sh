# Sourced by .ci/run: install Docker and the image-building tools, start dockerd if none runs,
# and export TBDKIT_DOCKERD_ERROR with the reason when it cannot start.
docker_need=()
command -v dockerd >/dev/null || docker_need+=(docker.io)
command -v mmdebstrap >/dev/null || docker_need+=(mmdebstrap)
command -v docker-compose >/dev/null || docker_need+=(docker-compose)
command -v setpriv >/dev/null || docker_need+=(util-linux)
if [ ${#docker_need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${docker_need[@]}" >/dev/null
fi
unset TBDKIT_DOCKERD_ERROR
if ! docker version >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    export TBDKIT_DOCKERD_ERROR="no Docker daemon runs and starting dockerd needs root"
  else
    mkdir -p "$CACHE"
    # overlay2 where the kernel mounts overlays (it shares layers); else vfs, which copies the
    # whole file system for every layer (a 1.3 GB image then takes several GB of disk).
    for driver in overlay2 vfs; do
      nohup dockerd --storage-driver="$driver" --iptables=false --bridge=none >"$CACHE/dockerd.log" 2>&1 &
      dockerd_pid=$!
      for _ in $(seq 1 30); do
        docker version >/dev/null 2>&1 && break
        kill -0 "$dockerd_pid" 2>/dev/null || break   # it refused this driver and exited
        sleep 1
      done
      docker version >/dev/null 2>&1 && break
      kill "$dockerd_pid" 2>/dev/null; wait "$dockerd_pid" 2>/dev/null || true
    done
    if ! docker version >/dev/null 2>&1; then
      export TBDKIT_DOCKERD_ERROR="dockerd did not start within 30 s: $(tail -n 3 "$CACHE/dockerd.log" | tr '\n' ' ')"
    fi
  fi
fi
if [ -n "${TBDKIT_DOCKERD_ERROR:-}" ]; then
  echo "ci: the real-container test will skip: $TBDKIT_DOCKERD_ERROR"
else
  echo "ci: docker server $(docker version --format '{{.Server.Version}}'), storage driver $(docker info --format '{{.Driver}}')"
fi
