#!/usr/bin/env bash
# Benchmarks (not tests): ring round trip; all-gather p50/p99 and bandwidth for 2, 4 and 8 ranks
# and all-to-all and broadcast for 4 and 8 on the host engine; in the same run, a plain memcpy of
# the same bytes by the same number of threads, and Open MPI's MPI_Allgather, MPI_Alltoall and
# MPI_Bcast with the same ranks and sizes. Prints markdown tables.
#   scripts/bench.sh [engine workers, default 2] [largest block, default 64 MiB (16 MiB at 8 ranks)]
# With BENCH_BUNDLE=DIR it runs the binaries of a bundle made by ../shared/tools/device-bundle
# (scripts/gpu-bundle.sh's .gpu: DIR/bin, DIR/lib) instead of building: how the GPU host's 16 CPU
# cores run it, under that host's own mpirun. With BENCH_PIN=1, irisd and each rank run on CPUs of
# their own (scripts/lib/pinning.sh), and Open MPI's ranks on the same CPUs as irisd's ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/pinning.sh
workers=${1:-2}
largest=${2:-}
plan_pinning 8 "$workers"
if [ -n "${BENCH_BUNDLE:-}" ]; then
  bin=$(realpath "$BENCH_BUNDLE")/bin
  daemon_bin=$bin/irisd
  export LD_LIBRARY_PATH=$(realpath "$BENCH_BUNDLE")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export IRIS_BIN_DIR=$bin
else
  scripts/build.sh >/dev/null
  bin=build/tests/bench
  daemon_bin=build/daemon/irisd
fi
run=$(mktemp -d /tmp/irisd-bench-XXXXXX)
socket=$run/irisd.sock
"${irisd_pin[@]}" "$daemon_bin" --socket "$socket" --engine host --engine-workers "$workers" \
  --log-level warn >"$run/irisd.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$run"' EXIT
for _ in $(seq 100); do [ -S "$socket.attach" ] && break; sleep 0.1; done

echo "## Machine"
echo "- $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB"
echo "- $(uname -sr), $(g++ --version | head -1), $(mpirun --version 2>/dev/null | head -1)"
# The binary's own build, not this checkout's: a bundle may come from another commit.
echo "- $("$daemon_bin" --version), host engine with $workers worker threads"
echo "- $(lscpu | sed -n 's/^Socket(s): *//p') socket(s), $(lscpu |
  sed -n 's/^Thread(s) per core: *//p') thread(s) per core; threads $(placement)"
echo
echo "## Ring round trip (no-op submitted, completion seen by the client) against the floor"
echo "(the floor: a cache-line handoff there and back between two threads pinned to two cores;"
echo "the session ring alone: the same handoff through the ring's entries, with no irisd)"
timeout 300 "${ring_pin[@]}" "$bin/iris-bench-ring" --benchmark_format=csv 2>/dev/null |
  awk -F, '/RingRoundTrip/ {r = $(NF-1); printf "ring p50 %.3f us, p99 %.3f us\n", $(NF-1), $NF}
    /CacheLineRoundTrip/ {f = $(NF-1); printf "floor p50 %.3f us, p99 %.3f us\n", $(NF-1), $NF}
    /RingHandoff/ {n = $1; gsub(/"|BM_RingHandoff|\/min_time:[0-9.]*|\/real_time/, "", n)
      sub(/\//, ", consumer ", n)
      printf "session ring alone (%s) p50 %.3f us, p99 %.3f us\n", n, $(NF-1), $NF}
    END {if (f > 0) printf "ring / floor (p50): %.1f\n", r / f}'
echo

# One table: collective $1 at $2 ranks up to $3 bytes per block; irisd, Open MPI, and (for the
# all-gather and all-to-all, whose n x n block copies it makes) memcpy by the same threads.
sweep() {
  local collective=$1 nranks=$2 max=$3 pids=() mpi_pin=()
  for ((r = nranks - 1; r >= 0; r--)); do
    # shellcheck disable=SC2086
    timeout 600 ${rank_pin[r]:-} "$bin/iris-collective-sweep" --socket "$socket" \
      --key "bench-$collective-$nranks" --collective "$collective" --nranks "$nranks" --rank "$r" --no-verify --max-bytes "$max" \
      --csv >"$run/iris.$r" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  tail -n +2 "$run/iris.0" >"$run/iris.csv"
  : >"$run/memcpy.csv"
  if [ "$collective" != broadcast ]; then
    for bytes in $(cut -d, -f2 "$run/iris.csv"); do
      if [ "$bytes" -ge $((4 << 20)) ]; then
        "$bin/iris-bench-memcpy" --nranks "$nranks" --bytes "$bytes" --threads "$workers" >>"$run/memcpy.csv"
      fi
    done
  fi
  [ -z "$rank_cpu_list" ] ||
    mpi_pin=(--bind-to none -x "IRIS_RANK_CPUS=$rank_cpu_list" "$PWD/scripts/lib/pinned_mpi_rank.sh")
  timeout 600 mpirun --allow-run-as-root --oversubscribe -np "$nranks" "${mpi_pin[@]}" \
    "$bin/iris-bench-mpi" \
    --collective "$collective" --max-bytes "$max" 2>"$run/mpi.err" | tail -n +2 >"$run/mpi.csv" ||
    echo "(Open MPI did not run here: $(tail -1 "$run/mpi.err"))"
  echo "## $collective, $nranks ranks"
  echo "| bytes/block | irisd p50 us | irisd p99 us | MPI p50 us | MPI p99 us | irisd/MPI p50 | irisd moved GB/s | memcpy GB/s ($workers threads) | irisd/memcpy | ranks' calls spread p50 us | last return after last call p50 us |"
  echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  awk -F, -v OFS=' | ' '
    FILENAME ~ /memcpy/ {mem[$2] = $4; next}
    FILENAME ~ /mpi/ {mp50[$2] = $4; mp99[$2] = $5; next}
    {
      b = $2; m = (b in mem) ? sprintf("%.2f", mem[b]) : "-";
      r = (b in mem) ? sprintf("%.2f", $7 / mem[b]) : "-";
      lr = (b in mp50) ? sprintf("%.2f", $4 / mp50[b]) : "-";
      print "| " b, $4, $5, mp50[b], mp99[b], lr, $7, m, r, $8, $9 " |"
    }' "$run/memcpy.csv" "$run/mpi.csv" "$run/iris.csv"
  echo
}

for nranks in 2 4 8; do
  max=$((64 << 20)); [ "$nranks" -eq 8 ] && max=$((16 << 20))
  sweep all_gather "$nranks" "${largest:-$max}"
done
for collective in all_to_all broadcast; do
  for nranks in 4 8; do sweep "$collective" "$nranks" "${largest:-$((16 << 20))}"; done
done
