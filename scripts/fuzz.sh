#!/usr/bin/env bash
# libFuzzer targets (tests/fuzz: ring-entry validation, the attach listener's frame reassembly
# and parsing, a session's calls against a real runtime), built with clang and run from the
# committed corpus for a bounded time each (default 30 s; FUZZ_SECONDS overrides). New inputs go
# to a scratch copy; a crash fails the run and leaves its input in build-fuzz/crashes.
#   scripts/fuzz.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${FUZZ_SECONDS:-30}}
scripts/install-deps.sh >/dev/null
# -O1 with line tables only, as OSS-Fuzz builds its targets: the build is most of this script's time.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" -DIRIS_FUZZ=ON >/dev/null
targets=(ring_entry attach_frames session_calls)
cmake --build build-fuzz --parallel "$(nproc)" --target "${targets[@]/#/fuzz_}"
mkdir -p build-fuzz/crashes
for t in "${targets[@]}"; do
  scratch=build-fuzz/corpus/$t
  rm -rf "$scratch"
  mkdir -p "$scratch"
  cp tests/fuzz/corpus/"$t"/* "$scratch"/
  echo "fuzz_$t: ${seconds} s from $(ls "$scratch" | wc -l) inputs"
  build-fuzz/tests/fuzz/fuzz_"$t" "$scratch" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -artifact_prefix=build-fuzz/crashes/"$t"- -print_final_stats=1 2>&1 |
    grep -aE "^(stat::number_of_executed_units|stat::peak_rss_mb)|ERROR: |SUMMARY" || true
  if ls build-fuzz/crashes/"$t"-* >/dev/null 2>&1; then
    echo "fuzz_$t found a crash: build-fuzz/crashes/$t-*" >&2
    exit 1
  fi
done
