#!/usr/bin/env bash
# Installs what is missing, then configures and builds irisd into build/ (RelWithDebInfo unless
# BUILD_TYPE says otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build build --parallel "$(nproc)"
