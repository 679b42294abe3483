#!/usr/bin/env bash
# Installs the tools the tests need beyond Go and the services: SPIN and a C
# compiler for the protocol model (docs/model/README.md), and
# systemd-analyze (package systemd) that verifies deploy/systemd's units
# (cmd/mensageria/internal/deploy). Safe to run any number of times; used
# by `make services` and so by CI.
set -euo pipefail

need=()
command -v spin >/dev/null 2>&1 || need+=(spin)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "tools.sh: ${need[*]} missing and not root; install them (apt-get install -y ${need[*]})" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
echo "tools: $(spin -V 2>&1 | head -n1); $(gcc --version | head -n1); $(systemd-analyze --version | head -n1)"
