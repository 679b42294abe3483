#!/usr/bin/env bash
# Installs Debian's chromium for the console's browser tests
# (cmd/mensageria/internal/console), only when it is missing. Safe to run any number of
# times; scripts/services.sh calls it. The tests run it headless with
# --headless --no-sandbox --disable-gpu and no network.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  echo "chromium: installed ($(chromium --version 2>/dev/null || echo unknown version))"
  exit 0
fi
echo "installing chromium"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends chromium fonts-dejavu-core
