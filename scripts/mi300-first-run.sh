#!/usr/bin/env bash
# The first run of irisd on an MI300-series node (hsa engine): what a person with such a node runs
# first, from the repository root, after `scripts/build.sh` on that node (ROCm 6.x installed, the
# user in the render group, PyTorch for ROCm importable as python3's torch).
#
# It checks the node, starts irisd with --engine hsa, shows what irisd sees (agents, xGMI links,
# SDMA engines per pair, whether copies go to a chosen engine), then for 2, 4 and 8 GPUs (as many
# as there are) runs scripts/multi_gpu/allgather_vs_nccl.py against RCCL (torch.distributed's
# "nccl" backend is RCCL in ROCm builds of PyTorch):
#   1. correctness: bit for bit against all_gather_into_tensor, 1 B to 1 GiB per rank, odd sizes,
#      host-blocking, stream-ordered (hipStreamWriteValue32 / hipStreamWaitValue32), in place;
#      again with PyTorch's expandable segments (VMM memory, imported from file descriptors);
#   2. bus bandwidth and latency beside RCCL, with irisd's copies split across each link's
#      engines (--split-bytes) and not;
#   3. a bf16 GEMM's throughput while all-gathers run, irisd and RCCL;
#   4. the spin proof: a kernel fills every CU; irisd's all-gather finishes before it ends only if
#      SDMA engines moved the bytes.
# Last, the figure to beat. Everything goes to stdout and to $OUT (default /tmp/iris-mi300-out).
#   scripts/mi300-first-run.sh [extra arguments for allgather_vs_nccl.py]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/iris-mi300-out}
mkdir -p "$out"
bin=${IRIS_BIN_DIR:-}
irisd=${bin:+$bin/irisd}
irisd=${irisd:-build/daemon/irisd}
ctl=${bin:+$bin/iris-ctl}
ctl=${ctl:-build/client/iris-ctl}
lib=${bin:+$bin/libiris.so.0}
lib=${lib:-build/client/libiris.so.0}
export IRIS_LIBRARY=$PWD/$lib PYTHONPATH=$PWD/client/python PYTHONUNBUFFERED=1

fail() { echo "mi300-first-run: $*" >&2; exit 1; }

echo "== 1. the node"
[ -x "$irisd" ] || fail "no irisd at $irisd: run scripts/build.sh first (or set IRIS_BIN_DIR)"
[ -e /dev/kfd ] || fail "no /dev/kfd: the amdgpu kernel driver is not loaded"
[ -r /dev/kfd ] && [ -w /dev/kfd ] ||
  fail "this user may not open /dev/kfd: add it to the render group (and video) and log in again"
{
  command -v rocm-smi >/dev/null && rocm-smi --showproductname --showtopo
  command -v rocminfo >/dev/null && rocminfo | grep -E "^  Name: +gfx|Marketing Name" | sort | uniq -c
  python3 -c "import torch; print('torch', torch.__version__, 'HIP', torch.version.hip,
'RCCL', '.'.join(map(str, torch.cuda.nccl.version())), 'GPUs', torch.cuda.device_count())"
} 2>&1 | tee "$out/system.txt"
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())") ||
  fail "python3 cannot import PyTorch for ROCm"
[ "$gpus" -ge 2 ] || fail "$gpus GPU visible: the comparison needs at least 2"

run_with_irisd() {  # run_with_irisd NAME IRISD-ARGS... -- COMMAND...
  local name=$1
  shift
  local args=()
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  shift
  local dir
  dir=$(mktemp -d /tmp/irisd-mi300-XXXXXX)
  "$irisd" --socket "$dir/irisd.sock" --engine hsa "${args[@]}" >"$out/irisd_$name.log" 2>&1 &
  local daemon=$!
  for _ in $(seq 100); do [ -S "$dir/irisd.sock.attach" ] && break; sleep 0.1; done
  kill -0 "$daemon" 2>/dev/null || { cat "$out/irisd_$name.log"; fail "irisd did not start"; }
  SOCKET=$dir/irisd.sock "$@"
  local rc=$?
  "$ctl" --socket "$dir/irisd.sock" stats >"$out/stats_$name.txt"
  kill "$daemon"
  wait "$daemon"
  return $rc
}

echo "== 2. what irisd sees (copy_method should name hsa_amd_memory_async_copy_on_engine)"
run_with_irisd status -- sh -c '"$0" --socket "$SOCKET" status' "$ctl" | tee "$out/status.txt"

rc=0
for n in 2 4 8; do
  [ "$n" -le "$gpus" ] || continue
  for split in 0 67108864; do
    echo "== 3. $n GPUs, --split-bytes $split"
    phases=bandwidth
    [ "$split" = 0 ] && phases=correctness,bandwidth,gemm,spin
    run_with_irisd "${n}gpu_split$split" --split-bytes "$split" -- sh -c \
      'timeout 1800 python3 scripts/multi_gpu/allgather_vs_nccl.py --socket "$SOCKET" "$@"' \
      sh --nranks "$n" --phases "$phases" "$@" 2>&1 | tee "$out/vs_rccl_${n}gpu_split$split.md"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  done
  echo "== 3b. $n GPUs, PyTorch expandable segments (VMM buffers, imported from file descriptors)"
  run_with_irisd "${n}gpu_vmm" -- env PYTORCH_HIP_ALLOC_CONF=expandable_segments:True \
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True sh -c \
    'timeout 900 python3 scripts/multi_gpu/allgather_vs_nccl.py --socket "$SOCKET" "$@"' \
    sh --nranks "$n" --phases correctness 2>&1 | tee "$out/vs_rccl_${n}gpu_vmm.md"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  grep -E "copy_engine_bytes_total|compute_unit_bytes_total" "$out/stats_${n}gpu_split0.txt"
done

echo
echo "== 4. the figure to beat"
echo "Public result: an SDMA all-gather reached 361 GB/s against RCCL's 333 GB/s on 8 MI355X at"
echo "128 MB per rank, with no CUs. irisd's rows at 128 MiB (busbw irisd, RCCL, ratio):"
grep -h -E "^\| 134217728 \|" "$out"/vs_rccl_*gpu_split*.md || echo "(no 128 MiB rows: see the tables)"
echo "Tables: $out. Report them with the node's ROCm version, rocm-smi --showtopo and the command."
exit $rc
