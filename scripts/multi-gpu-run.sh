#!/usr/bin/env bash
# irisd against NCCL on every GPU of this host (2, 4 and 8 ranks, as many as there are GPUs): runs
# on the GPU host from the repository root with the bundle of scripts/gpu-bundle.sh in .gpu/.
# Starts irisd (cuda engine), runs tests/bench/gpu/allgather_vs_nccl.py for each rank count, its
# correctness phase again with PyTorch's expandable segments (VMM memory), then NCCL's copy-engine
# path in a process of its own (NCCL_CTA_POLICY is read once per process).
# Extra arguments go to the Python script. Tables go to stdout and to $OUT (or /tmp) as markdown.
#   scripts/multi-gpu-run.sh [--phases correctness,bandwidth,gemm,spin] [--max-bytes N] ...
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/iris-multi-gpu-out}
mkdir -p "$out"
# Never NVLink multicast (see the GPU host's rules); keep these in every environment started here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export IRIS_LIBRARY=$PWD/.gpu/lib/libiris.so.0 PYTHONPATH=$PWD/client/python PYTHONUNBUFFERED=1
bin=.gpu/bin
gpus=$(nvidia-smi -L | wc -l)

{
  nvidia-smi topo -m
  nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda,
'NCCL', '.'.join(map(str, torch.cuda.nccl.version())))"
} 2>&1 | tee "$out/system.txt"

run=$(mktemp -d /tmp/irisd-multi-XXXXXX)
"$bin/irisd" --socket "$run/irisd.sock" --engine cuda >"$run/irisd.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S "$run/irisd.sock.attach" ] && break; sleep 0.1; done
"$bin/iris-ctl" --socket "$run/irisd.sock" status | tee "$out/status.txt"

rc=0
for n in 2 4 8; do
  [ "$n" -le "$gpus" ] || continue
  echo "== $n GPUs"
  timeout 900 python3 tests/bench/gpu/allgather_vs_nccl.py --socket "$run/irisd.sock" \
    --nranks "$n" "$@" 2>&1 | tee "$out/vs_nccl_$n.md" || rc=1
  echo "== $n GPUs, PyTorch expandable segments (VMM buffers, imported from file descriptors)"
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 300 python3 \
    tests/bench/gpu/allgather_vs_nccl.py --socket "$run/irisd.sock" --nranks "$n" \
    --phases correctness 2>&1 | tee -a "$out/vs_nccl_$n.md" || rc=1
  NCCL_CTA_POLICY=2 timeout 300 python3 tests/bench/gpu/allgather_vs_nccl.py --nranks "$n" \
    --nccl-ce 2>&1 | tee -a "$out/vs_nccl_$n.md"
done
"$bin/iris-ctl" --socket "$run/irisd.sock" stats | tee "$out/stats.txt" |
  grep -E "copy_engine_bytes_total|compute_unit_bytes_total"
kill "$daemon"
wait "$daemon"
cp "$run/irisd.log" "$out/irisd_multi.log"
[ "$gpus" -ge 2 ] || { echo "multi-gpu-run: only $gpus GPU visible; nothing compared"; rc=1; }
exit $rc
