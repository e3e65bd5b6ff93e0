#!/usr/bin/env bash
# irisd across nodes against Open MPI on this one machine: three irisd daemons (host engine)
# stand in for three nodes, six MPI ranks (2 per node) run tests/bench/scale_out_bench.cpp, which
# checks irisd's results against MPI's and prints one markdown table (irisd p50, MPI p50, ratio;
# all-gather and all-to-all, 64 B to --max-bytes per rank). MPI ranks yield when idle, so that
# the daemons get the cores. A sanity figure: UCX runs over loopback TCP and shared memory here.
#   scripts/bench-scale-out.sh [max_bytes]
# IRISD_ARGS adds flags to the daemons (IRISD_ARGS="--resume-window-ms 0": without the copies
# kept for a node's restart). With BENCH_BUNDLE=DIR it runs a bundle's binaries (DIR/bin,
# DIR/lib, as scripts/bench.sh does) instead of building: the GPU host's 16 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
max=${1:-16777216}
if [ -n "${BENCH_BUNDLE:-}" ]; then
  bundle=$(realpath "$BENCH_BUNDLE")
  export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  irisd=$bundle/bin/irisd bench=$bundle/bin/iris-scale-out-bench
else
  scripts/build.sh >/dev/null
  irisd=build/daemon/irisd bench=build/tests/bench/iris-scale-out-bench
fi
run=$(mktemp -d /tmp/iris-bench-scale-out-XXXXXX)
source scripts/lib/node_daemons.sh
cleanup() { stop_node_daemons; rm -rf "$run"; }
trap cleanup EXIT
start_node_daemons "$irisd" "$run" 3
echo "- irisd ${IRISD_ARGS:-(defaults)}, $(uname -sr), $(nproc) cores, $(mpirun --version 2>/dev/null | head -1), UCX $(ucx_info -v 2>/dev/null | head -1 | awk '{print $3}')"
mpi=(mpirun --oversubscribe -np 6 --mca mpi_yield_when_idle 1)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
list=$(IFS=,; echo "${node_sockets[*]}")
"${mpi[@]}" "$bench" --sockets "$list" --min-bytes 64 \
  --max-bytes "$max" --iterations 20
