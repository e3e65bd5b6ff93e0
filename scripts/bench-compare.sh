#!/usr/bin/env bash
# Two builds of irisd side by side on one machine, in one run (machines are noisy: only the ratio
# means something): the ring round trip and the host engine's all-gather p50 (or that of
# COLLECTIVE=all_to_all or broadcast) for 2 and 4 ranks (and 8 where the machine has 12 cores or
# more), each build measured `rounds` times, the median of its rounds kept. The builds take turns
# going first (A B, B A, A B, ...): on the GPU host the second build of a round came out 12-14%
# slower in the 8-rank all-gather, whichever build it was, so a fixed order made the newer build
# look slower.
# Use it to show that a change made nothing slower. With BENCH_PIN=1 irisd and each rank run on CPUs
# of their own, the same in every round (scripts/lib/pinning.sh).
# Each build is a bundle made by ../shared/tools/device-bundle (DIR/bin: irisd, iris-bench-ring,
# iris-collective-sweep; DIR/lib: libiris.so.0 and what they load); scripts/gpu-bundle.sh makes
# .gpu for the build of this tree.
#   scripts/bench-compare.sh OLD_BUNDLE NEW_BUNDLE [rounds, default 3] [max bytes, default 1 MiB]
set -euo pipefail
source "$(dirname "$0")/lib/pinning.sh"
old=$(realpath "$1") new=$(realpath "$2") rounds=${3:-3} max=${4:-1048576}
collective=${COLLECTIVE:-all_gather}
run=$(mktemp -d /tmp/irisd-compare-XXXXXX)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$run"' EXIT
sizes="2 4"
[ "$(nproc)" -ge 12 ] && sizes="2 4 8"
plan_pinning 8 4

# measure BUNDLE TAG ROUND: one irisd of BUNDLE, its ring bench and sweeps, into $run/TAG.ROUND.*
measure() {
  local dir=$1 tag=$2 round=$3 socket="$run/$2.$3.sock"
  local env=(env "LD_LIBRARY_PATH=$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "IRIS_BIN_DIR=$dir/bin")
  "${env[@]}" "${irisd_pin[@]}" "$dir/bin/irisd" --socket "$socket" --engine host --engine-workers 4 \
    --log-level warn >"$run/$tag.$round.log" 2>&1 &
  local daemon=$!
  for _ in $(seq 100); do [ -S "$socket.attach" ] && break; sleep 0.1; done
  # The ring bench starts its own irisd, from IRIS_BIN_DIR.
  "${env[@]}" timeout 120 "${ring_pin[@]}" "$dir/bin/iris-bench-ring" --benchmark_filter=RingRoundTrip \
    --benchmark_min_time=0.5 --benchmark_format=csv 2>/dev/null |
    awk -F, '/RingRoundTrip/ {print $(NF-1)}' >"$run/$tag.$round.ring"
  for nranks in $sizes; do
    local pids=()
    for ((r = 0; r < nranks; r++)); do
      # shellcheck disable=SC2086
      "${env[@]}" timeout 300 ${rank_pin[r]:-} "$dir/bin/iris-collective-sweep" --socket "$socket" \
        --key "cmp-$nranks" --collective "$collective" --nranks "$nranks" --rank "$r" \
        --no-verify --max-bytes "$max" \
        --csv >"$run/$tag.$round.$nranks.$r" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    # nranks,bytes_per_rank,iterations,p50_us,...: bytes and p50.
    tail -n +2 "$run/$tag.$round.$nranks.0" | cut -d, -f2,4 >"$run/$tag.$round.sweep$nranks"
  done
  kill "$daemon"
  wait "$daemon" 2>/dev/null || true
}

for ((i = 0; i < rounds; i++)); do
  if ((i % 2 == 0)); then
    measure "$old" old "$i"
    measure "$new" new "$i"
  else
    measure "$new" new "$i"
    measure "$old" old "$i"
  fi
done

# The median of a build's rounds, and their spread (lowest-highest): a new/old ratio inside the
# spread of either build's own rounds says nothing.
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
spread() { sort -g | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%s-%s", lo, hi}'; }
ratio() { awk -v o="$1" -v n="$2" 'BEGIN {printf "%.2f", n / o}'; }
row() {  # row LABEL FILES-OF-OLD FILES-OF-NEW (one figure per line)
  local o n
  o=$(median <"$2") n=$(median <"$3")
  echo "| $1 | $o ($(spread <"$2")) | $n ($(spread <"$3")) | $(ratio "$o" "$n") |"
}
echo "$(nproc) cores, threads $(placement); host engine, 4 workers; median of $rounds rounds" \
  "each, the builds taking turns going first (in brackets: the lowest and highest round)"
echo "| what | old p50 us | new p50 us | new/old |"
echo "| --- | ---: | ---: | ---: |"
cat "$run"/old.*.ring >"$run/old.rings"
cat "$run"/new.*.ring >"$run/new.rings"
row "ring round trip" "$run/old.rings" "$run/new.rings"
for nranks in $sizes; do
  for bytes in $(cut -d, -f1 "$run/old.0.sweep$nranks"); do
    for tag in old new; do
      awk -F, -v b="$bytes" '$1 == b {print $2}' "$run/$tag".*.sweep"$nranks" >"$run/$tag.rows"
    done
    row "$collective $nranks ranks, $bytes B" "$run/old.rows" "$run/new.rows"
  done
done
