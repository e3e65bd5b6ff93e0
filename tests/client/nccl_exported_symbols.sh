#!/bin/sh
# irisd's libnccl.so.2 exports every nccl* symbol PyTorch 2.11's libtorch_cuda.so imports (a
# preloaded library that lacks one leaves torch calling the real NCCL with our communicator), and
# nothing that is not nccl* (no libiris, protobuf or C++ runtime symbols to collide with).
set -eu
lib="$1"
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
torch_imports="ncclAllGather ncclAllReduce ncclAlltoAll ncclBcast ncclBroadcast ncclCommAbort
ncclCommCount ncclCommDeregister ncclCommDestroy ncclCommFinalize ncclCommGetAsyncError
ncclCommInitAll ncclCommInitRank ncclCommInitRankConfig ncclCommInitRankScalable ncclCommRegister
ncclCommShrink ncclCommSplit ncclCommUserRank ncclCommWindowDeregister ncclCommWindowRegister
ncclDevCommCreate ncclDevCommDestroy ncclGetErrorString ncclGetLastError ncclGetUniqueId
ncclGetVersion ncclGroupEnd ncclGroupSimulateEnd ncclGroupStart ncclMemAlloc ncclMemFree ncclRecv
ncclRedOpCreatePreMulSum ncclRedOpDestroy ncclReduce ncclReduceScatter ncclSend"
status=0
count=0
for symbol in $torch_imports; do
  count=$((count + 1))
  if ! echo "$exported" | grep -qx "$symbol"; then
    echo "missing: $symbol (PyTorch imports it)"
    status=1
  fi
done
[ "$count" -eq 38 ] || { echo "the list of torch's imports has $count names, not 38"; status=1; }
others=$(echo "$exported" | grep -v '^nccl' || true)
if [ -n "$others" ]; then
  echo "exported besides NCCL's API:"
  echo "$others"
  status=1
fi
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[ "$soname" = "libnccl.so.2" ] || { echo "SONAME is $soname, not libnccl.so.2"; status=1; }
[ $status -eq 0 ] && echo "libnccl.so.2: $(echo "$exported" | wc -l) nccl* symbols, every one torch imports"
exit $status
