#!/usr/bin/env bash
# Three irisd daemons stand in for three nodes; six Open MPI ranks (2 per node) bootstrap a
# communicator across them with examples/multi_node/mpi_bootstrap.hpp and check irisd's
# all-gather and all-to-all against MPI_Allgather / MPI_Alltoall byte for byte (sizes
# 64 B to 64 KiB by 4x with 2+2+2 ranks, then 1 B to 1 KiB with 1+2+3). Exit 77 (skipped)
# without mpirun.
#   tests/bench/scale_out_mpi_check.sh IRISD IRIS_SCALE_OUT_BENCH
set -euo pipefail
irisd=$1 bench=$2
command -v mpirun >/dev/null || { echo "mpirun not found (install openmpi-bin)"; exit 77; }
run=$(mktemp -d /tmp/iris-scale-out-XXXXXX)
source "$(dirname "$0")/../../scripts/lib/node_daemons.sh"
cleanup() { stop_node_daemons; rm -rf "$run"; }
trap cleanup EXIT
start_node_daemons "$irisd" "$run" 3
list=$(IFS=,; echo "${node_sockets[*]}")
mpi=(mpirun --oversubscribe -np 6)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
"${mpi[@]}" "$bench" --sockets "$list" --min-bytes 64 --max-bytes 65536 --iterations 2
"${mpi[@]}" "$bench" --sockets "$list" --node-of-rank 0,1,1,2,2,2 --min-bytes 1 \
  --max-bytes 3001 --iterations 2
echo "scale-out matches Open MPI"
