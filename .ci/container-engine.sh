#!/usr/bin/env bash
# A copy of ../shared/tools/container-engine.sh (the tools of our machines), for a checkout that
# does not see that folder: .ci/run runs the shared script when it is there, this one otherwise.
# A container engine on this kind of machine (no Docker daemon, no image registry reachable):
# podman with runc and cgroupfs, and a local stand-in for python:3.11-slim-bookworm built from
# Debian's packages. Idempotent; run as root. Afterwards:
#   podman build --network host --pull=never -f images/Dockerfile.cpu -t pflpipe:0.1.0-cpu .
#   podman system service --time=0 unix:///tmp/podman.sock &  ; export DOCKER_HOST=unix:///tmp/podman.sock
# (the Docker-compatible API that the `docker` Python SDK, and so kfp.local.DockerRunner, talks to).
# Known here: crun fails on this host's hybrid cgroups (use runc); podman's default ulimits are
# refused (no CAP_SYS_RESOURCE); podman 4.3's compat API answers an inspect of an auto-removed
# container with 500 where Docker answers 404.
set -euo pipefail
BASE=${BASE:-localhost/python:3.11-slim-bookworm}
work=${WORK:-/var/tmp/container-engine}
mkdir -p "$work"

if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap uidmap fuse-overlayfs >/dev/null
fi
mkdir -p /etc/containers
cat > /etc/containers/containers.conf <<'CONF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF

if ! podman image exists localhost/debian:bookworm; then
  rm -rf "$work/rootfs"
  # the Debian mirror this machine's apt already uses
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1
  tar -C "$work/rootfs" -c . | podman import - localhost/debian:bookworm >/dev/null
  rm -rf "$work/rootfs"
fi

if ! podman image exists "$BASE"; then
  mkdir -p "$work/base"
  cp /etc/ssl/certs/ca-certificates.crt "$work/base/ca-certificates.crt"
  cat > "$work/base/Containerfile" <<'CF'
FROM localhost/debian:bookworm
ENV LANG=C.UTF-8
RUN apt-get update && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3-pip ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
RUN printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > /etc/pip.conf
RUN python3.11 -m venv /usr/local/py && ln -s /usr/local/py/bin/python /usr/local/bin/python \
    && ln -s /usr/local/py/bin/pip /usr/local/bin/pip
ENV PATH=/usr/local/py/bin:$PATH
CMD ["python3"]
CF
  podman build --network host --pull=never -t "$BASE" "$work/base" >"$work/base.log" 2>&1
fi
podman run --rm --network host "$BASE" python -c "import sys; print('container engine ready:', sys.version.split()[0])"
