#!/usr/bin/env bash
# Benchmark (not a test): one job alone on the host engine, irisd with pacing forced on
# (--engine-queue-bytes Q, default 8 MiB) and off (0), taking turns 4 times: rank 0's
# all-gather p50 and bandwidth at one block size. The A/B behind docs/PERFORMANCE.md,
# "Copy engines shared between tenants", measured on ababa6e, when every copy was paced. Since
# cb1498d a user alone is never paced: on today's irisd both columns take the same path, so the
# script checks that a single job pays nothing (the two columns agree within the noise).
#   NR=ranks W=engine-workers B=block-bytes Q=queue-bytes scripts/bench-pacing-ab.sh
set -u
cd "$(dirname "$0")/.."
NR=${NR:-2}; W=${W:-1}; B=${B:-67108864}
for rep in 1 2 3 4; do
for mode in paced off; do
  run=$(mktemp -d /tmp/ab-XXXX)
  extra=(--engine-queue-bytes ${Q:-8388608}); [ $mode = off ] && extra=(--engine-queue-bytes 0)
  build/daemon/irisd --socket $run/s --engine host --engine-workers $W --log-level warn "${extra[@]}" >$run/log 2>&1 &
  d=$!
  for _ in $(seq 100); do [ -S $run/s.attach ] && break; sleep 0.05; done
  pids=()
  for ((r=NR-1;r>=0;r--)); do
    timeout 300 build/tests/bench/iris-collective-sweep --nranks $NR --rank $r --socket $run/s --min-bytes $B --max-bytes $B --iterations 20 --no-verify --csv >$run/out.$r 2>&1 & pids+=($!)
  done
  for p in "${pids[@]}"; do wait $p; done
  echo "$mode $(tail -1 $run/out.0 | cut -d, -f2,4,6)"
  kill $d; wait $d 2>/dev/null; rm -rf $run
done; done
