#!/usr/bin/env bash
# Builds the tidegate Docker image from this checkout without any image registry:
#   compose/build-image.sh [TAG]        (default tidegate:dev)
# 1. a wheelhouse of tidegate and its dependencies, built on the host with pip;
# 2. the base image: $TIDEGATE_BASE_IMAGE if set (e.g. python:3.11-slim-bookworm where a
#    registry is reachable), else `tidegate-base:bookworm`, made once with debootstrap from
#    the host's Debian mirror and `docker import` (needs root and debootstrap);
# 3. `docker build` of compose/Dockerfile on that base.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
tag=${1:-tidegate:dev}
python=${PYTHON:-python3}
context="$root/.cache/docker-context"

rm -rf "$context"
mkdir -p "$context/wheelhouse"
"$python" -m pip wheel -q --wheel-dir "$context/wheelhouse" "$root" >/dev/null
cp "$here/Dockerfile" "$context/Dockerfile"

base=${TIDEGATE_BASE_IMAGE:-}
if [ -z "$base" ]; then
  base=tidegate-base:bookworm
  if ! docker image inspect "$base" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null || { echo "build-image: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
    # The mirror the host's apt uses, so the image needs no other network.
    mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
    [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
    [ -n "$mirror" ] || { echo "build-image: no Debian mirror found in the host's apt sources" >&2; exit 1; }
    rootfs=$(mktemp -d)
    trap 'rm -rf "$rootfs"' EXIT
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
      bookworm "$rootfs" "$mirror" >/dev/null
    tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
  fi
fi
docker build -q --build-arg "BASE=$base" -t "$tag" "$context" >/dev/null
echo "$tag"
