#!/usr/bin/env bash
# irisd across nodes against Open MPI on this one machine: irisd daemons (host engine; NODE_ENGINE
# names another) stand in for nodes (3 unless NODES says), MPI ranks (RANKS_PER_NODE, default 2) run
# tests/bench/scale_out_bench.cpp, which checks irisd's results against MPI's and prints one
# markdown table (irisd p50, MPI p50, ratio; all-gather and all-to-all, 64 B to --max-bytes per
# rank). MPI ranks yield when idle, so that the daemons get the cores.
#   scripts/bench-scale-out.sh [max_bytes]
# The daemons reach each other over UCX's TCP even on one machine: UCX 1.13's shared-memory
# transports cannot report a dead peer, which irisd asks of every connection (it is how a node's
# death is found). MPI_OVER_TCP=1 gives Open MPI the same loopback TCP (its ob1 and tcp BTL) for a
# like-for-like ratio; by default it uses shared memory, which no two nodes have.
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
nodes=${NODES:-3} per_node=${RANKS_PER_NODE:-2}
start_node_daemons "$irisd" "$run" "$nodes"
mpi=(mpirun --oversubscribe -np $((nodes * per_node)) --mca mpi_yield_when_idle 1)
mpi_path="shared memory"
if [ "${MPI_OVER_TCP:-0}" = 1 ]; then
  mpi+=(--mca pml ob1 --mca btl tcp,self)
  mpi_path="loopback TCP"
fi
ucx=$(ucx_info -v 2>/dev/null | head -1 | awk '{print $3}')
echo "- $nodes irisd as $nodes nodes, $per_node ranks each; irisd ${IRISD_ARGS:-(defaults)}," \
  "$(uname -sr), $(nproc) cores, $(mpirun --version 2>/dev/null | head -1) over $mpi_path," \
  "UCX ${ucx:-(version unknown: no ucx_info)}"
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
list=$(IFS=,; echo "${node_sockets[*]}")
"${mpi[@]}" "$bench" --sockets "$list" --min-bytes 64 \
  --max-bytes "$max" --iterations 20
