#!/usr/bin/env bash
# The first run of irisd on an MI300-series node (hsa engine): what a person with such a node runs
# first, from the repository root, after `scripts/build.sh` on that node (ROCm 6.x installed, the
# user in the render group, PyTorch for ROCm importable as python3's torch).
#
# It checks the node (the node's ROCm and PyTorch's HIP version, stopping where they sit on both
# sides of ROCm 6.1's dma-buf IPC change; HSA_ENABLE_SDMA / HSA_ENABLE_PEER_SDMA; the kernel's
# recommended SDMA engine mask per link), starts irisd with --engine hsa, shows what irisd sees (agents, xGMI links,
# SDMA engines per pair, whether copies go to a chosen engine), then for 2, 4 and 8 GPUs (as many
# as there are) runs tests/bench/gpu/allgather_vs_nccl.py against RCCL (torch.distributed's
# "nccl" backend is RCCL in ROCm builds of PyTorch):
#   1. correctness: bit for bit against all_gather_into_tensor, 1 B to 1 GiB per rank, odd sizes,
#      host-blocking, stream-ordered (hipStreamWriteValue32 / hipStreamWaitValue32), in place;
#      again with PyTorch's expandable segments (VMM memory, imported from file descriptors);
#   2. bus bandwidth and latency beside RCCL, with irisd's copies split across each link's
#      engines (--split-bytes) and not;
#   3. a bf16 GEMM's throughput while all-gathers run: irisd host-blocking and stream-ordered,
#      and RCCL; the stream-ordered row again with GPU_STREAMOPS_CP_WAIT=1 (ROCm 6.x runs each
#      stream wait as a one-thread kernel without it; with it HIP may refuse irisd's done flags);
#   4. the spin proof: a kernel fills every CU; irisd's all-gather finishes before it ends only if
#      SDMA engines moved the bytes;
# then PyTorch's nccl backend on irisd's librccl.so.1 preloaded (every op on 2 ranks, the
# reductions by the kernels hiprtc compiles on the node).
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

# ROCm versions: the node's runtime (what irisd loads) and the one PyTorch bundles (what the ranks
# load). ROCr 6.1 moved HIP IPC to dma-buf: irisd refuses imports across that change, so stop here.
node_rocm=$(cat "${ROCM_PATH:-/opt/rocm}/.info/version" 2>/dev/null | cut -d- -f1)
torch_hip=$(python3 -c "import torch; print(torch.version.hip or '')")
echo "ROCm on the node: ${node_rocm:-unknown} (${ROCM_PATH:-/opt/rocm}/.info/version);" \
  "PyTorch's HIP: ${torch_hip:-none}" | tee -a "$out/system.txt"
[ -n "$torch_hip" ] || fail "this PyTorch is not a ROCm build (torch.version.hip is empty)"
dma_buf_ipc() {  # dma_buf_ipc VERSION: yes when VERSION is 6.1 or later
  local major minor
  IFS=. read -r major minor _ <<<"$1"
  [ "${major:-0}" -gt 6 ] || { [ "${major:-0}" -eq 6 ] && [ "${minor:-0}" -ge 1 ]; }
}
if [ -n "$node_rocm" ] && [ "$(dma_buf_ipc "$node_rocm" && echo y)" != "$(dma_buf_ipc "$torch_hip" && echo y)" ]; then
  fail "ROCm $node_rocm on the node and HIP $torch_hip in PyTorch sit on both sides of ROCm 6.1's
  change to dma-buf IPC: irisd would refuse every GPU buffer. Install a PyTorch built for the
  node's ROCm (or the node's ROCm matching PyTorch's), then run this again"
fi

# SDMA switched off makes ROCr run copies as blit kernels on CUs; irisd --engine hsa refuses it.
echo "HSA_ENABLE_SDMA=${HSA_ENABLE_SDMA:-unset} HSA_ENABLE_PEER_SDMA=${HSA_ENABLE_PEER_SDMA:-unset}" |
  tee -a "$out/system.txt"
[ "${HSA_ENABLE_SDMA:-1}" != 0 ] && [ "${HSA_ENABLE_PEER_SDMA:-1}" != 0 ] ||
  fail "unset HSA_ENABLE_SDMA / HSA_ENABLE_PEER_SDMA: with either at 0 no copy runs on SDMA"

# The kernel's recommended SDMA engines per link (KFD topology; absent on older kernels, where
# irisd uses every engine the runtime offers, without splitting).
masks=$(for link in /sys/class/kfd/kfd/topology/nodes/*/io_links/*/properties; do
  [ -r "$link" ] || continue
  mask=$(awk '$1 == "recommended_sdma_engine_id_mask" {print $2}' "$link")
  [ -n "$mask" ] || continue
  printf '  %s -> %s  %s\n' "$(awk '$1 == "node_from" {print $2}' "$link")" \
    "$(awk '$1 == "node_to" {print $2}' "$link")" "$(printf '0x%x' "$mask")"
done)
{
  echo "recommended SDMA engine masks per link (KFD topology, node -> node):"
  echo "${masks:-  (none exposed by this kernel)}"
} | tee -a "$out/system.txt"
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

echo "== 2. what irisd sees (copy_method should name hsa_amd_memory_async_copy_on_engine; links"
echo "      lists the engines irisd uses per pair)"
run_with_irisd status -- sh -c '"$0" --socket "$SOCKET" status' "$ctl" | tee "$out/status.txt"

rc=0
for n in 2 4 8; do
  [ "$n" -le "$gpus" ] || continue
  for split in 0 67108864; do
    echo "== 3. $n GPUs, --split-bytes $split"
    phases=bandwidth
    [ "$split" = 0 ] && phases=correctness,bandwidth,gemm,spin
    run_with_irisd "${n}gpu_split$split" --split-bytes "$split" -- env -u GPU_STREAMOPS_CP_WAIT sh -c \
      'timeout 1800 python3 tests/bench/gpu/allgather_vs_nccl.py --socket "$SOCKET" "$@"' \
      sh --nranks "$n" --phases "$phases" "$@" 2>&1 | tee "$out/vs_rccl_${n}gpu_split$split.md"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  done
  echo "== 3a. $n GPUs, GEMM beside stream-ordered all-gathers with GPU_STREAMOPS_CP_WAIT=1"
  echo "      (above: unset, so each stream wait is a one-thread kernel holding a wave)"
  run_with_irisd "${n}gpu_cpwait" -- env GPU_STREAMOPS_CP_WAIT=1 sh -c \
    'timeout 900 python3 tests/bench/gpu/allgather_vs_nccl.py --socket "$SOCKET" "$@"' \
    sh --nranks "$n" --phases gemm 2>&1 | tee "$out/vs_rccl_${n}gpu_cpwait.md"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  echo "== 3b. $n GPUs, PyTorch expandable segments (VMM buffers, imported from file descriptors)"
  run_with_irisd "${n}gpu_vmm" -- env PYTORCH_HIP_ALLOC_CONF=expandable_segments:True \
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True sh -c \
    'timeout 900 python3 tests/bench/gpu/allgather_vs_nccl.py --socket "$SOCKET" "$@"' \
    sh --nranks "$n" --phases correctness 2>&1 | tee "$out/vs_rccl_${n}gpu_vmm.md"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  grep -E "copy_engine_bytes_total|compute_unit_bytes_total" "$out/stats_${n}gpu_split0.txt"
done

echo "== 3c. PyTorch's nccl backend (RCCL's API in ROCm builds) on irisd's librccl.so.1, 2 ranks"
echo "      sharing GPU 0: every collective and point-to-point op, checked; the reductions run the"
echo "      kernels hiprtc compiles on this node (NCCL_DEBUG=INFO says which engine moved what)"
run_with_irisd rccl_api -- env LD_PRELOAD="$PWD/build/client/nccl/lib-rccl/librccl.so.1" \
  NCCL_DEBUG=INFO sh -c 'IRIS_SOCKET="$SOCKET" timeout 600 python3 \
  tests/python/gpu/nccl_preload_test.py --parts ops' 2>&1 | tee "$out/rccl_api.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1

echo
echo "== 4. the figure to beat"
echo "Public result: an SDMA all-gather reached 361 GB/s against RCCL's 333 GB/s on 8 MI355X at"
echo "128 MB per rank, with no CUs. irisd's rows at 128 MiB (busbw irisd, RCCL, ratio):"
grep -h -E "^\| 134217728 \|" "$out"/vs_rccl_*gpu_split*.md || echo "(no 128 MiB rows: see the tables)"
echo "Tables: $out. Report them with the node's ROCm version, rocm-smi --showtopo and the command."
exit $rc
