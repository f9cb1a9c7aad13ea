#!/usr/bin/env bash
# Installs the Debian packages the tests drive, when missing: kcat (librdkafka's CLI) and
# zookeeper (cluster tests). Needs root; without it, says what is missing and fails.
set -euo pipefail
missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "system-deps: missing Debian packages: ${missing[*]} (run as root or install them)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
