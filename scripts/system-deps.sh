#!/usr/bin/env bash
# Installs the Debian packages the tests drive, when missing: kcat (librdkafka's CLI),
# zookeeper (cluster tests), docker.io, docker-compose and debootstrap (the image and
# Compose tests),
# chromium (the admin page rendered headless), and
# starts the Docker daemon when it is not running. Needs root; without it, says what is
# missing and fails.
set -euo pipefail
missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "system-deps: missing Debian packages: ${missing[*]} (run as root or install them)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "system-deps: the Docker daemon is not running (start dockerd as root)" >&2
    exit 1
  fi
  mkdir -p .cache
  nohup dockerd >.cache/dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { echo "system-deps: dockerd did not start (see .cache/dockerd.log)" >&2; exit 1; }
fi
