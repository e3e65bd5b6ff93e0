#!/usr/bin/env bash
# Builds here and bundles what scripts/gpu-run.sh needs into .gpu/ (with the Debian libraries the
# GPU host lacks), for the device tool to carry. LANDED_IRISD=PATH adds another build's irisd
# (the last landing's, built from its commit) as bin/irisd-landed, for gpu-run.sh's sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
rm -rf .gpu
../shared/tools/device-bundle .gpu build/daemon/irisd build/client/iris-ctl \
  build/tests/gpu/gpu_tests build/tests/gpu/iris-gpu-rank build/tests/gpu/iris-gpu-spin-proof \
  build/tests/gpu/iris-gpu-bench build/tests/gpu/iris-gpu-signal-probe \
  build/tests/gpu/iris-gpu-nccl-rank build/tests/gpu/iris-gpu-copy-engine-probe \
  build/tests/bench/iris-bench-ring build/tests/bench/iris-collective-sweep \
  build/tests/bench/iris-bench-resume build/tests/bench/iris-bench-mpi \
  build/tests/bench/iris-bench-memcpy build/tests/bench/iris-scale-out-bench \
  build/client/libiris.so.0 build/client/libiris_torch.so.0 \
  build/client/nccl/lib/libnccl.so.2 \
  "$(ldconfig -p | awk '/libucp\.so\.0 / {print $NF; exit}')"  # irisd loads it at run time
# irisd's libnccl.so.2 apart from lib/ (on LD_LIBRARY_PATH there): only LD_PRELOAD brings it in.
mkdir -p .gpu/nccl
mv .gpu/lib/libnccl.so.2 .gpu/nccl/
if [ -n "${LANDED_IRISD:-}" ]; then strip -o .gpu/bin/irisd-landed "$LANDED_IRISD"; fi
