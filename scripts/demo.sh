#!/usr/bin/env bash
# The demo: installs what is missing, builds and installs irisd, starts it on the host engine,
# runs examples/collective_sweep (built against the installed package) as 4 client processes doing
# verified all-gathers, prints their latency and bandwidth, shows `iris-ctl status` and
# `iris-ctl stats`, and stops the daemon.
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
== 4 ranks, verified all-gathers, 64 B to 16 MiB per rank (about a minute on 2 cores)
Columns: bytes/rank each rank contributes; iters timed; p50/p99 latency of one all-gather (the
slowest rank's time); algbw = one rank's output bytes / p50 (NCCL's algorithm bandwidth);
moved = every byte irisd copied / p50 (all 4 x 4 blocks). On the host engine irisd's worker
threads copy with memcpy, so these bytes count as "compute units" in iris-ctl stats; on a GPU
node the cuda or hsa engine moves them on copy engines instead.
EOF
pids=()
for rank in 3 2 1 0; do
  build/example/collective_sweep --socket "$socket" --nranks 4 --rank "$rank" \
    --max-bytes $((16 << 20)) &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
[ $status -eq 0 ] || { echo "a rank failed; daemon log:"; cat "$run/irisd.log"; exit 1; }

echo; echo "== iris-ctl status"; "$prefix/bin/iris-ctl" --socket "$socket" status
echo; echo "== iris-ctl stats"; "$prefix/bin/iris-ctl" --socket "$socket" stats
kill "$daemon"; wait "$daemon" || true
echo; echo "== irisd stopped; its log:"; cat "$run/irisd.log"
