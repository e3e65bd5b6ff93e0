#!/usr/bin/env bash
# Benchmark (not a test): two tenants on one irisd's host engine, as issue 50 measures them on
# the GPU: tenant A (root) all-gathers 256 MiB blocks back to back with 2 ranks, tenant B (uid
# 65534, through setpriv) all-gathers small blocks with 2 ranks. B's p50/p99 alone and beside A,
# A's bandwidth alone and beside B, with irisd's pacing on (--engine-queue-bytes 8 MiB, the host
# engine's auto; the GPU engines' is 4 MiB) and off
# (0: every copy straight to the engine, as before) in the same run (BENCH_QUEUES: the
# --engine-queue-bytes values, default "8388608 0"). Needs root. Prints markdown.
# With BENCH_BUNDLE=DIR it runs a bundle's binaries (scripts/gpu-bundle.sh's .gpu on the GPU host);
# BENCH_DAEMON=PATH runs that irisd instead (another build, for an A/B in one run).
#   scripts/bench-tenants.sh [engine workers, default 2]
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${1:-2}
[ "$(id -u)" = 0 ] || { echo "bench-tenants.sh: needs root (tenant B runs as uid 65534)" >&2; exit 1; }
if [ -n "${BENCH_BUNDLE:-}" ]; then
  sweep=$(realpath "$BENCH_BUNDLE")/bin/iris-collective-sweep
  daemon_bin=${BENCH_DAEMON:-$(realpath "$BENCH_BUNDLE")/bin/irisd}
  export LD_LIBRARY_PATH=$(realpath "$BENCH_BUNDLE")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  sweep=build/tests/bench/iris-collective-sweep
  daemon_bin=${BENCH_DAEMON:-build/daemon/irisd}
fi
big=$((256 << 20))
run=$(mktemp -d /tmp/irisd-tenants-XXXXXX)
chmod 755 "$run"
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$run"' EXIT

# tenant NAME UID BYTES ITERATIONS: 2 ranks, rank 0's CSV row on stdout (each wait bounded).
tenant() {
  local name=$1 uid=$2 bytes=$3 iterations=$4 pids=() as=()
  [ "$uid" != 0 ] && as=(setpriv --reuid="$uid" --regid="$uid" --clear-groups)
  for r in 1 0; do
    timeout 300 "${as[@]}" "$sweep" --nranks 2 --rank $r --socket "$run/irisd.sock" --key "$name" \
      --min-bytes "$bytes" --max-bytes "$bytes" --iterations "$iterations" --no-verify --csv \
      >"$run/$name.$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  tail -1 "$run/$name.0"
}
# Column of a CSV row: 4 p50_us, 5 p99_us, 6 algbw_GBps.
col() { cut -d, -f"$2" <<<"$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > 0 ? a / b : 0) }'; }

echo "## Two tenants on the host engine ($workers workers; $(nproc) cores, $("$daemon_bin" --version))"
echo
echo "| pacing | B block | B alone p50 / p99 us | B beside A p50 / p99 us | p99 ratio | A alone GB/s | A beside B GB/s | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for mode in ${BENCH_QUEUES:-8388608 0}; do
  for small in $((4 << 10)) $((64 << 10)) $((1 << 20)); do
    "$daemon_bin" --socket "$run/irisd.sock" --socket-mode 0666 --engine host \
      --engine-workers "$workers" --engine-queue-bytes "$mode" --log-level warn >"$run/irisd.log" 2>&1 &
    daemon=$!
    for _ in $(seq 100); do [ -S "$run/irisd.sock.attach" ] && break; sleep 0.1; done
    b_alone=$(tenant b 65534 "$small" 300)
    a_alone=$(tenant a 0 "$big" 8)
    # A back to back in the background; B measured beside it; then A measured beside B's loop.
    # A runs until B is done: a loop of fixed length ended before B's slow rows did.
    (while true; do tenant a-loop 0 "$big" 40 >/dev/null; done) &
    loop_a=$!
    sleep 1
    b_beside=$(tenant b 65534 "$small" 300)
    kill "$loop_a" 2>/dev/null; wait "$loop_a" 2>/dev/null || true
    pkill -f "key a-loop " 2>/dev/null || true
    (while true; do tenant b-loop 65534 "$small" 300 >/dev/null; done) &
    loop_b=$!
    a_beside=$(tenant a 0 "$big" 8)
    kill "$loop_b" 2>/dev/null; wait "$loop_b" 2>/dev/null || true
    pkill -f "key b-loop " 2>/dev/null || true
    kill "$daemon"; wait "$daemon" 2>/dev/null || true
    printf "| %s | %s | %s / %s | %s / %s | %.1fx | %s | %s | %.2f |\n" \
      "$([ "$mode" = 0 ] && echo off || echo "$mode")" "$small" \
      "$(col "$b_alone" 4)" "$(col "$b_alone" 5)" "$(col "$b_beside" 4)" "$(col "$b_beside" 5)" \
      "$(ratio "$(col "$b_beside" 5)" "$(col "$b_alone" 5)")" \
      "$(col "$a_alone" 6)" "$(col "$a_beside" 6)" \
      "$(ratio "$(col "$a_beside" 6)" "$(col "$a_alone" 6)")"
  done
done
