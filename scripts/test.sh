#!/usr/bin/env bash
# Every test: installs what is missing, builds, runs the fuzz targets for a bounded time
# (scripts/fuzz.sh) and the suite under ASan+UBSan and the core under TSan (scripts/sanitize.sh),
# checks that the installed package builds the example, builds the Debian package and tests it
# installed (scripts/check-deb.sh) and as a service under a real systemd with a job through its
# restarts (scripts/check-systemd.sh), and last runs the unit and integration tests (real irisd,
# real client processes, a real Prometheus) of the plain build with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
scripts/fuzz.sh
scripts/sanitize.sh
scripts/check-install.sh
scripts/check-deb.sh
scripts/check-systemd.sh
# GPU tests skip where no GPU is usable; say why, once.
if [ -x build/tests/gpu/gpu_tests ]; then
  build/tests/gpu/gpu_tests --gtest_filter='*TwoRanks*' 2>&1 | grep -m1 -E "no usable|OK \]" || true
fi
# Integration tests start their own daemons and rank processes; run them one at a time so that
# 8-rank cases do not share 2 cores with another test's ranks.
ctest --test-dir build --output-on-failure --timeout 600
