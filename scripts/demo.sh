#!/usr/bin/env bash
# The demo: installs what is missing, builds and installs irisd, starts it on the host engine,
# runs examples/collective_sweep (built against the installed package) as 4 client processes doing
# all-gathers (each size verified byte for byte first, then timed without verification), runs
# Open MPI's MPI_Allgather with the same ranks and sizes on the same machine, prints both and
# their ratio, shows `iris-ctl status` and `iris-ctl stats`, and stops the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
scripts/check-install.sh
prefix=$PWD/build/install
run=$(mktemp -d /tmp/irisd-demo-XXXXXX)
socket=$run/irisd.sock
"$prefix/sbin/irisd" --socket "$socket" --engine host >"$run/irisd.log" 2>&1 &
daemon=$!
cleanup() {
  kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT
for _ in $(seq 100); do [ -S "$socket.attach" ] && break; sleep 0.1; done
[ -S "$socket.attach" ] || { cat "$run/irisd.log"; exit 1; }
export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

cat <<'EOF'
== 4 ranks, all-gathers, 64 B to 16 MiB per rank (about a minute on 2 cores)
Each size is first verified (3 rounds, every byte checked), then timed with nothing but the
all-gather in the loop. Columns: bytes/rank each rank contributes; iters timed; p50/p99 latency
of one all-gather (the slowest rank's time); algbw = one rank's output bytes / p50 (NCCL's
algorithm bandwidth); then Open MPI's MPI_Allgather p50 on this machine, same ranks and sizes,
also the slowest rank's time, and irisd/MPI (below 1: irisd faster). The figures depend on the
machine; the ratio is what to read. On the host engine irisd's worker threads copy with memcpy,
so these bytes count as "compute units" in iris-ctl stats; on a GPU node the cuda or hsa engine
moves them on copy engines instead.
EOF
pids=()
for rank in 3 2 1 0; do
  timeout 600 build/example/collective_sweep --socket "$socket" --nranks 4 --rank "$rank" \
    --max-bytes $((16 << 20)) --csv >"$run/iris.$rank" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
[ $status -eq 0 ] || { echo "a rank failed; daemon log:"; cat "$run/irisd.log"; exit 1; }
: >"$run/mpi.csv"
if command -v mpirun >/dev/null; then
  timeout 600 mpirun --allow-run-as-root --oversubscribe -np 4 build/tests/bench/iris-bench-mpi \
    --collective all_gather --max-bytes $((16 << 20)) 2>/dev/null | tail -n +2 >"$run/mpi.csv" ||
    echo "(Open MPI did not run here: no comparison)"
fi
printf "%12s %6s %10s %10s %11s %10s %9s\n" bytes/rank iters "p50 us" "p99 us" "algbw GB/s" \
  "MPI p50 us" irisd/MPI
awk -F, 'FILENAME ~ /mpi/ {mpi[$2] = $4; next}
  FNR > 1 {
    m = ($2 in mpi) ? sprintf("%.1f", mpi[$2]) : "-"
    r = ($2 in mpi && mpi[$2] > 0) ? sprintf("%.2f", $4 / mpi[$2]) : "-"
    printf "%12s %6s %10.1f %10.1f %11.2f %10s %9s\n", $2, $3, $4, $5, $6, m, r
  }' "$run/mpi.csv" "$run/iris.0"

echo; echo "== iris-ctl status"; "$prefix/bin/iris-ctl" --socket "$socket" status
echo; echo "== iris-ctl stats"; "$prefix/bin/iris-ctl" --socket "$socket" stats
kill "$daemon"; wait "$daemon" || true
echo; echo "== irisd stopped; its log:"; cat "$run/irisd.log"
