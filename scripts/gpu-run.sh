#!/usr/bin/env bash
# Runs on the GPU host, from the repository root, with the bundle made by scripts/gpu-bundle.sh in
# .gpu/: the GPU tests, `iris-ctl status` with the cuda engine, and the spin proof; prints a short
# table last. Logs go to $OUT when it is set.
#   scripts/gpu-run.sh [PHASES]   PHASES: a comma list (default: all) of
#     tests       the GPU tests (gpu_tests)
#     readme      the README's torch example and the package's first example
#     bench       iris-gpu-bench sweeps (device, host, all-to-all, GEMM beside, graphs)
#     shared      small all-gathers of 2, 3 and 8 ranks sharing the GPU
#     probe       the signal probe
#     torch       a GEMM beside all-gathers in torch; CUDA graphs of ranks
#     pytorch     the torch.distributed backend, FSDP2, functional collectives, the per-call cost
#     ncclcost    a 4 KiB all-gather through irisd's libnccl.so.2 against irisd's API
#     nccl        PyTorch's own nccl backend with irisd's libnccl.so.2 preloaded (tests, per-call
#                 cost), and a C program on GPU streams through the API
#     ncclbw      bandwidth through irisd's libnccl.so.2 against irisd's torch backend
#     ncclpaths   a 4 KiB all-gather through the library by every way in (ProcessGroupNCCL, the
#                 API on torch's memory and streams, ncclMemAlloc'd memory, ...), both wait modes
#     jax         JAX's own collectives (XLA through NCCL's API) with irisd's libnccl.so.2
#                 preloaded, 2 processes sharing the GPU; the NCCL symbols JAX's plugin imports
#     p2p         pipelining, send/recv against broadcast, a GEMM beside sends and receives
#     resume      FSDP2 and pipelining through irisd restarts; how long a restart holds ranks
#     ncclresume  PyTorch's nccl backend (FSDP2, a 3-stage pipeline) through irisd restarts
#     freed       jobs that freed registered GPU memory through a restart of irisd
#     nodes       two irisd as two nodes, restarted one at a time under a job on CUDA tensors
#     tenants     two users on the cuda engine, irisd's pacing at its default, 2 MiB and off
#                 (TENANT_QUEUES: the --engine-queue-bytes values, each BYTES or BYTES:SLICE with
#                 SLICE the --engine-slice-bytes, default "auto 2097152:1048576 0";
#                 TENANT_RECV: 1 receives into host memory, 0 into GPU memory; default "1";
#                 TENANT_DAEMONS: the irisd builds of bin/ to run, default "irisd";
#                 TENANT_B_LOAD: MIN:MAX of B's all-gathers beside which A is measured, default
#                 4096:1048576)
#     ceprobe     the copy engines without irisd (iris-gpu-copy-engine-probe): what slicing device-to-
#                 host copies costs, a 4 KiB copy's wait beside bulk slices in flight, and
#                 which streams share a copy engine
#     hosttenants scripts/bench-tenants.sh: the same two users on the host engine (4 workers), for
#                 each irisd of TENANT_DAEMONS (BENCH_QUEUES: its bounds)
#     sweep       a single job's 8-rank all-gather sweep on this irisd and on .gpu/bin/irisd-landed
#                 (the last landing's, when bundled), alternately, and the ratios
#     cpu         scripts/bench.sh and scripts/bench-scale-out.sh on this host's CPUs
#     compare     scripts/bench-compare.sh (CPU only) between .gpu-old, when there is one, and .gpu
set -uo pipefail
phases=",${1:-tests,readme,bench,shared,probe,torch,pytorch,ncclcost,nccl,ncclbw,ncclpaths,jax,p2p,resume,ncclresume,freed,nodes,tenants,ceprobe,hosttenants,sweep,cpu,compare},"
want() { [[ $phases == *",$1,"* ]]; }
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/iris-gpu-out}
mkdir -p "$out"
rm -f "$out/pytorch.txt" "$out/pipeline.txt" "$out/p2p_bench.md" "$out/nccl_bandwidth.md" \
  "$out/nccl_c.txt" "$out/nccl_paths.md"
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export IRIS_BIN_DIR=$PWD/.gpu/bin
# Never NVLink multicast (see the GPU host's rules).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bin=.gpu/bin

nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv | tee "$out/gpu.txt"

tests_rc=skipped
if want tests; then
  timeout 420 "$bin/gpu_tests" --gtest_brief=0 2>&1 | tee "$out/gpu_tests.log" | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) "
  tests_rc=${PIPESTATUS[0]}
fi

run=$(mktemp -d /tmp/irisd-gpu-XXXXXX)
"$bin/irisd" --socket "$run/irisd.sock" --engine cuda >"$run/irisd.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S "$run/irisd.sock.attach" ] && break; sleep 0.1; done
timeout 30 "$bin/iris-ctl" --socket "$run/irisd.sock" status | tee "$out/status.txt"
timeout 120 "$bin/iris-gpu-spin-proof" --socket "$run/irisd.sock" --bytes $((256 << 20)) | tee "$out/spin_proof.txt"
if want readme; then
  # The README's torch example, as it stands, on the cuda engine.
  IRIS_SOCKET=$run/irisd.sock IRIS_LIBRARY=$PWD/.gpu/lib/libiris.so.0 PYTHONPATH=$PWD/client/python \
    timeout 120 python3 tests/python/gpu/readme_example.py python-torch >"$out/readme.txt" 2>&1
  IRIS_SOCKET=$run/irisd.sock IRIS_LIBRARY=$PWD/.gpu/lib/libiris.so.0 PYTHONPATH=$PWD/client/python \
    timeout 120 python3 tests/python/gpu/readme_example.py python-graph >>"$out/readme.txt" 2>&1
  # The package's own first example (its docstring): collectives on PyTorch's default stream.
  IRIS_SOCKET=$run/irisd.sock IRIS_LIBRARY=$PWD/.gpu/lib/libiris.so.0 PYTHONPATH=$PWD/client/python \
    timeout 150 python3 tests/python/gpu/package_example.py >>"$out/readme.txt" 2>&1
fi

# Benchmarks (not tests): ranks on the one GPU (8 unless RANKS says); rank 0 prints markdown tables.
bench() {  # bench NAME ARGS...
  local name=$1; shift
  local pids=() nranks=${RANKS:-8}
  for ((r = nranks - 1; r >= 0; r--)); do
    timeout 600 "$bin/iris-gpu-bench" --socket "$run/irisd.sock" --key "$name" --nranks "$nranks" \
      --rank "$r" "$@" >"$run/bench_$name.$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  cat "$run/bench_$name.0" >"$out/bench_$name.md"
}
if want bench; then
  bench device --max-bytes $((256 << 20))
  bench host --max-bytes $((64 << 20)) --host-recv 1
  bench alltoall_host --collective all_to_all --max-bytes $((64 << 20)) --host-recv 1
  bench gemm --mode gemm --gemm-seconds 3
  bench graph --mode graph --min-bytes 4096 --max-bytes $((64 << 20))
fi
if want shared; then
  for n in 2 3 8; do RANKS=$n bench "shared$n" --min-bytes 4096 --max-bytes 16384; done
fi
if want probe; then
  timeout 120 "$bin/iris-gpu-signal-probe" --iterations 2000 >"$out/signal_probe.md" 2>&1
fi
if want torch; then
  IRIS_LIBRARY=$PWD/.gpu/lib/libiris.so.0 PYTHONPATH=$PWD/client/python timeout 300 \
    python3 tests/bench/gpu/gemm_beside_allgather.py --socket "$run/irisd.sock" >"$out/gemm_torch.md" 2>&1
  IRIS_SOCKET=$run/irisd.sock IRIS_LIBRARY=$PWD/.gpu/lib/libiris.so.0 PYTHONPATH=$PWD/client/python \
    timeout 300 python3 tests/python/gpu/graph_ranks.py --replays 200 >"$out/graph_torch.txt" 2>&1
  echo "graph_ranks exit $?" >>"$out/graph_torch.txt"
fi
pytorch_rc=skipped
if want pytorch; then
  # The torch.distributed backend and FSDP2 (tests/python/gpu), and the per-call host cost.
  pyenv=(env IRIS_SOCKET="$run/irisd.sock" IRIS_LIBRARY="$PWD/.gpu/lib/libiris.so.0"
         PYTHONPATH="$PWD/client/python")
  pytorch_rc=0
  # Ranks sharing the GPU wait on the host by default; the stream-ordered path runs too.
  for alloc in caching expandable iris-pool torch-pool; do
    "${pyenv[@]}" timeout 300 python3 tests/python/gpu/torch_backend_test.py --alloc "$alloc" \
      >>"$out/pytorch.txt" 2>&1 || pytorch_rc=1
  done
  "${pyenv[@]}" IRIS_TORCH_SHARED_GPU=stream timeout 300 python3 \
    tests/python/gpu/torch_backend_test.py --alloc caching >>"$out/pytorch.txt" 2>&1 || pytorch_rc=1
  for pool in iris-pool torch-pool; do
    "${pyenv[@]}" timeout 300 python3 tests/python/gpu/fsdp_train_test.py --steps 50 \
      --pool "$pool" >>"$out/pytorch.txt" 2>&1 || pytorch_rc=1
  done
  "${pyenv[@]}" IRIS_TORCH_SHARED_GPU=stream timeout 300 python3 \
    tests/python/gpu/fsdp_train_test.py --steps 50 >>"$out/pytorch.txt" 2>&1 || pytorch_rc=1
  # FSDP2 steps of ranks sharing the GPU: irisd (host and stream) against gloo.
  "${pyenv[@]}" timeout 400 python3 tests/bench/gpu/fsdp_step_bench.py >"$out/fsdp_step.md" 2>&1
  # Functional collectives and torch.compile (eager and compiled, FSDP2 compiled).
  "${pyenv[@]}" timeout 400 python3 tests/python/gpu/functional_compile_test.py \
    >>"$out/pytorch.txt" 2>&1 || pytorch_rc=1
  # The README's FSDP2 example as users launch it.
  # The group's timeout as irisd's watchdog: a skipped collective fails, naming the rank.
  for mode in host stream; do
    "${pyenv[@]}" IRIS_TORCH_SHARED_GPU=$mode timeout 300 python3 tests/python/gpu/watchdog_test.py \
      >>"$out/pytorch.txt" 2>&1 || pytorch_rc=1
  done
  "${pyenv[@]}" timeout 300 python3 -m torch.distributed.run --nproc-per-node 2 \
    examples/fsdp_train.py --steps 5 >"$out/fsdp_example.txt" 2>&1 || pytorch_rc=1
  # Across nodes: a second irisd stands in for a second node.
  "$bin/irisd" --socket "$run/node1.sock" --engine cuda >"$run/node1.log" 2>&1 &
  node1=$!
  for _ in $(seq 100); do [ -S "$run/node1.sock.attach" ] && break; sleep 0.1; done
  "${pyenv[@]}" IRIS_SOCKETS="$run/irisd.sock,$run/node1.sock" timeout 300 \
    python3 tests/python/gpu/scale_out_gpu.py >"$out/scale_out_gpu.txt" 2>&1 || pytorch_rc=1
  kill "$node1"; wait "$node1"; cp "$run/node1.log" "$out/node1.log"
  "${pyenv[@]}" timeout 120 python3 tests/bench/gpu/call_overhead.py >"$out/call_overhead.txt" 2>&1
  timeout 120 "$bin/iris-gpu-bench" --socket "$run/irisd.sock" --key submit --nranks 1 --rank 0 --mode submit \
    >>"$out/call_overhead.txt" 2>&1
fi
ncclrank() {  # ncclrank NRANKS CASE [ARGS...]: ranks of the C program on irisd's libnccl.so.2
  local n=$1 case=$2 idf="$run/nccl-id-$2-$1-$RANDOM" pids=() rc=0
  shift 2
  for ((r = 0; r < n; r++)); do
    env IRIS_SOCKET="$run/irisd.sock" LD_LIBRARY_PATH="$PWD/.gpu/nccl:$LD_LIBRARY_PATH" \
      timeout 120 "$bin/iris-gpu-nccl-rank" --id-file "$idf" --nranks "$n" --rank "$r" \
      --case "$case" "$@" >>"$out/nccl_c.txt" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
nccl_rc=skipped
if want ncclcost; then
  # Where a small collective's time goes with ranks sharing the GPU: the C program's 4 KiB
  # all-gathers through the library (device memory on a stream, host memory on the host) in
  # both shared-GPU modes, beside irisd's own API (iris-gpu-bench, same size).
  for mode in stream host; do IRISD_NCCL_SHARED_GPU=$mode ncclrank 2 latency; done
  RANKS=2 bench ncclcost --min-bytes 4096 --max-bytes 4096
fi
# PyTorch's nccl backend on irisd: the library preloaded, the scripts unchanged.
ncclenv=(env IRIS_SOCKET="$run/irisd.sock" IRIS_LIBRARY="$PWD/.gpu/lib/libiris.so.0"
         PYTHONPATH="$PWD/client/python" LD_PRELOAD="$PWD/.gpu/nccl/libnccl.so.2")
# both_wait_modes SCRIPT TIMEOUT FILE: a Python benchmark under ncclenv, its ranks sharing the GPU
# ordered on streams, then waiting on the host; its output appended to FILE under each mode.
both_wait_modes() {
  for mode in stream host; do
    echo "IRISD_NCCL_SHARED_GPU=$mode" >>"$3"
    "${ncclenv[@]}" IRISD_NCCL_SHARED_GPU=$mode timeout "$2" python3 "$1" >>"$3" 2>&1
  done
}
if want nccl; then
  "${ncclenv[@]}" NCCL_DEBUG=WARN timeout 500 python3 tests/python/gpu/nccl_preload_test.py \
    --ranks 3 >"$out/nccl.txt" 2>&1
  nccl_rc=$?
  # Host cost per call: the same script with the real NCCL, then with irisd's library.
  env IRIS_SOCKET="$run/irisd.sock" IRIS_LIBRARY="$PWD/.gpu/lib/libiris.so.0" \
    PYTHONPATH="$PWD/client/python" timeout 120 python3 tests/bench/gpu/call_overhead.py \
    >"$out/nccl_call_overhead.txt" 2>&1
  "${ncclenv[@]}" timeout 120 python3 tests/bench/gpu/call_overhead.py \
    >>"$out/nccl_call_overhead.txt" 2>&1
  # Ranks sharing the GPU ordered on streams (IRISD_NCCL_SHARED_GPU=stream; the default waits on
  # the host): the same checks.
  "${ncclenv[@]}" IRISD_NCCL_SHARED_GPU=stream timeout 300 python3 \
    tests/python/gpu/nccl_preload_test.py --parts ops,fsdp,pipeline >>"$out/nccl.txt" 2>&1 ||
    nccl_rc=1
  # Eight ranks sharing the GPU: every op.
  "${ncclenv[@]}" NCCL_DEBUG=WARN timeout 300 python3 tests/python/gpu/nccl_preload_test.py \
    --parts ops --ranks 8 >>"$out/nccl.txt" 2>&1 || nccl_rc=1
  # A C program on GPU streams through the API (tests/gpu/nccl_stream_rank.cu): every operation
  # with kernels before and after (2 and 3 ranks, ordered on the streams and waiting on the
  # host), ncclCommAbort releasing a waiting stream, and checked loops through three SIGKILLs and
  # restarts of irisd.
  nccl_c_rc=0
  ncclrank 2 ops || nccl_c_rc=1
  IRISD_NCCL_SHARED_GPU=stream ncclrank 2 ops || nccl_c_rc=1
  IRISD_NCCL_SHARED_GPU=stream ncclrank 3 ops || nccl_c_rc=1
  IRISD_NCCL_SHARED_GPU=stream ncclrank 2 abort || nccl_c_rc=1
  # The real NCCL as the fallback for the reductions (world size 1: NCCL refuses a shared GPU).
  IRISD_NCCL_FALLBACK=$(python3 -c "import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], 'lib', 'libnccl.so.2'))") \
    NCCL_DEBUG=INFO ncclrank 1 ops || nccl_c_rc=1
  ncclrank 2 loops --stop-file "$run/nccl-stop" &
  loops=$!
  for _ in 1 2 3; do
    sleep 3
    kill -9 "$daemon"
    wait "$daemon" 2>/dev/null
    "$bin/irisd" --socket "$run/irisd.sock" --engine cuda >>"$run/irisd.log" 2>&1 &
    daemon=$!
  done
  sleep 3
  touch "$run/nccl-stop"
  wait "$loops" || nccl_c_rc=1
fi
if want ncclbw; then
  # Bandwidth through the library against irisd's torch backend, ranks sharing the GPU.
  both_wait_modes tests/bench/gpu/nccl_bandwidth.py 300 "$out/nccl_bandwidth.md"
fi
if want ncclpaths; then
  # Where a small collective's time goes through the library in a PyTorch job (each way in, the
  # same job), with the ranks' stream waits and with host waits.
  both_wait_modes tests/bench/gpu/nccl_call_paths.py 240 "$out/nccl_paths.md"
fi
jax_rc=skipped
if want jax; then
  env IRIS_SOCKET="$run/irisd.sock" LD_PRELOAD="$PWD/.gpu/nccl/libnccl.so.2" NCCL_DEBUG=WARN \
    timeout 300 python3 tests/python/gpu/jax_preload_test.py --ranks 2 >"$out/jax.txt" 2>&1
  jax_rc=$?
fi
p2p_rc=skipped
if want p2p; then
  # Point to point: torch.distributed.pipelining (GPipe, 1F1B; 2 and 3 stages), send/recv
  # against broadcast and the copy ceiling, and a GEMM beside a ring of sends and receives.
  pyenv=(env IRIS_SOCKET="$run/irisd.sock" IRIS_LIBRARY="$PWD/.gpu/lib/libiris.so.0"
         PYTHONPATH="$PWD/client/python")
  # The ranks share the GPU: the backend's host path, then its streams' path.
  "${pyenv[@]}" timeout 400 python3 tests/python/gpu/pipeline_test.py >"$out/pipeline.txt" 2>&1
  p2p_rc=$?
  "${pyenv[@]}" IRIS_TORCH_SHARED_GPU=stream timeout 400 python3 tests/python/gpu/pipeline_test.py \
    >>"$out/pipeline.txt" 2>&1 || p2p_rc=1
  for mode in host stream; do
    "${pyenv[@]}" IRIS_TORCH_SHARED_GPU=$mode timeout 300 python3 tests/bench/gpu/p2p_bench.py \
      >>"$out/p2p_bench.md" 2>&1
  done
  "${pyenv[@]}" timeout 200 python3 tests/bench/gpu/gemm_beside_allgather.py --op send_recv \
    --nranks 2 --socket "$run/irisd.sock" >"$out/gemm_p2p.md" 2>&1
fi
timeout 30 "$bin/iris-ctl" --socket "$run/irisd.sock" stats >"$out/stats.txt"
kill "$daemon"; wait "$daemon"
cp "$run/irisd.log" "$out/irisd.log"
resume_rc=skipped
if want resume; then
  # Restarts of irisd under running jobs: FSDP2 with irisd SIGKILLed 5 times (its own irisd), and
  # how long a restart holds 8 ranks with 100 registrations each (cuda and host engines).
  env IRIS_LIBRARY="$PWD/.gpu/lib/libiris.so.0" PYTHONPATH="$PWD/client/python" timeout 400 \
    python3 tests/python/gpu/fsdp_train_test.py --steps 300 --restart-irisd 5 --irisd "$bin/irisd" \
    >"$out/fsdp_restarts.txt" 2>&1
  resume_rc=$?
  # A 3-stage 1F1B pipeline (sends and receives) through 5 SIGKILLs of irisd.
  env IRIS_LIBRARY="$PWD/.gpu/lib/libiris.so.0" PYTHONPATH="$PWD/client/python" timeout 300 \
    python3 tests/python/gpu/pipeline_test.py --steps 150 --restart-irisd 5 --irisd "$bin/irisd" \
    >>"$out/fsdp_restarts.txt" 2>&1 || resume_rc=$?
  for engine in cuda host; do
    timeout 300 "$bin/iris-bench-resume" --engine "$engine" --ranks 8 --registrations 100 \
      --restarts 5 >"$out/resume_$engine.md" 2>&1
  done
fi
ncclresume_rc=skipped
if want ncclresume; then
  # PyTorch's nccl backend (irisd's library preloaded): FSDP2 and a 3-stage 1F1B pipeline, each
  # through 5 SIGKILLs of its own irisd.
  env IRIS_LIBRARY="$PWD/.gpu/lib/libiris.so.0" PYTHONPATH="$PWD/client/python" \
    LD_PRELOAD="$PWD/.gpu/nccl/libnccl.so.2" timeout 400 python3 \
    tests/python/gpu/nccl_preload_test.py --restart-irisd 5 --irisd "$bin/irisd" \
    >"$out/nccl_restarts.txt" 2>&1
  ncclresume_rc=$?
fi
freed_rc=0
if want freed; then
  # Registered GPU memory freed before a restart of irisd: each case must come through it.
  : >"$out/freed.txt"
  for case in empty_cache graph plan_freed expandable; do
    alloc=""; kind=$case
    [ "$case" = expandable ] && { alloc="expandable_segments:True"; kind=empty_cache; }
    env IRIS_LIBRARY="$PWD/.gpu/lib/libiris.so.0" PYTHONPATH="$PWD/client/python" \
      ${alloc:+PYTORCH_CUDA_ALLOC_CONF=$alloc} timeout 240 \
      python3 tests/python/gpu/freed_memory_resume.py --irisd "$bin/irisd" --case "$kind" \
      >>"$out/freed.txt" 2>&1 || freed_rc=$?
  done
fi
nodes_rc=skipped
tenants_rc=skipped
if want tenants; then
  # Issue 50: two users on the cuda engine, receiving into host memory (device to host on the
  # copy engines). B (uid 65534) all-gathers 4 KiB-1 MiB alone, then beside A (root)
  # all-gathering 256 MiB back to back; A alone, then beside B all-gathering back to back; A and
  # C (uid 65534) both at 256 MiB at once. irisd paced at its default (auto: 4 MiB while two
  # users are attached), at 2 MiB, and not at all (0). TENANT_DAEMONS: the irisd builds in bin/
  # to compare (irisd-landed: gpu-bundle.sh's LANDED_IRISD).
  tenants_rc=0
  for daemon in ${TENANT_DAEMONS:-irisd}; do
  for recv in ${TENANT_RECV:-1}; do
  for pacing in ${TENANT_QUEUES:-auto 2097152:1048576 0}; do
    trun=$(mktemp -d /tmp/irisd-tenants-XXXXXX)
    chmod 755 "$trun"
    queue=${pacing%%:*} slice=()
    [[ $pacing == *:* ]] && slice=(--engine-slice-bytes "${pacing#*:}")
    "$bin/$daemon" --socket "$trun/irisd.sock" --socket-mode 0666 --engine cuda \
      --engine-queue-bytes "$queue" "${slice[@]}" >"$trun/irisd.log" 2>&1 &
    tdaemon=$!
    for _ in $(seq 100); do [ -S "$trun/irisd.sock.attach" ] && break; sleep 0.1; done
    tenant() {  # tenant KEY UID MIN MAX [ARGS...]: 2 ranks of iris-gpu-bench; rank 0's tables
      local key=$1 uid=$2 min=$3 max=$4 pids=() as=()
      shift 4
      [ "$uid" != 0 ] && as=(setpriv --reuid="$uid" --regid="$uid" --clear-groups)
      for r in 1 0; do
        timeout 200 "${as[@]}" "$bin/iris-gpu-bench" --socket "$trun/irisd.sock" --key "$key" \
          --nranks 2 --rank $r --min-bytes "$min" --max-bytes "$max" --host-recv "$recv" \
          "$@" >"$trun/$key.$r" 2>&1 &
        pids+=($!)
      done
      for p in "${pids[@]}"; do wait "$p" || tenants_rc=1; done
      cat "$trun/$key.0"
    }
    # beside LOAD_UID LOAD_MIN LOAD_MAX KEY UID MIN MAX: KEY measured beside a load, which runs
    # until KEY is done and moves its bytes only through irisd (no ceiling: until 100ea5b the
    # load's rank 0 timed its own unpaced copies for about 40% of its time, and a measured
    # tenant's collectives waited ~1 ms for them whenever they ran), back to back in one
    # process pair (--load-calls: a new pair for each of its sweeps left the GPU idle while it
    # started, and a measured row could fall in that gap).
    beside() {
      local calls=$(( $3 >= (64 << 20) ? 5000 : 500000 ))
      (for k in $(seq 100); do
        tenant "load-$4-$k" "$1" "$2" "$3" --ceiling 0 --load-calls "$calls" >/dev/null
      done) &
      local load=$!
      sleep 2
      tenant "$4" "$5" "$6" "$7"
      kill "$load" 2>/dev/null; wait "$load" 2>/dev/null
      pkill -f "key load-" 2>/dev/null
      sleep 0.5
    }
    big=$((256 << 20))
    b_load=${TENANT_B_LOAD:-4096:1048576}
    what="$daemon, engine-queue-bytes $pacing, host-recv $recv"
    {
      echo "## $what: B alone"; tenant b-alone 65534 4096 1048576
      echo "## $what: B beside A"; beside 0 "$big" "$big" b-beside 65534 4096 1048576
      echo "## $what: A alone"; tenant a-alone 0 "$big" "$big"
      echo "## $what: A beside B ($b_load)"; beside 65534 "${b_load%%:*}" "${b_load#*:}" a-beside 0 "$big" "$big"
    } >>"$out/tenants.md"
    if [ "$queue" = auto ] && [ "$recv" = 1 ] && [ "$daemon" = irisd ]; then
      tenant bulk-a 0 "$big" "$big" >"$trun/bulk-a.md" &
      bulk_a=$!
      tenant bulk-c 65534 "$big" "$big" >"$trun/bulk-c.md"
      wait "$bulk_a"
      { echo "## engine-queue-bytes $queue: A and C at once: A"; cat "$trun/bulk-a.md"
        echo "## engine-queue-bytes $queue: A and C at once: C"; cat "$trun/bulk-c.md"; } \
        >>"$out/tenants.md"
    fi
    timeout 30 "$bin/iris-ctl" --socket "$trun/irisd.sock" stats >>"$out/tenants.md"
    kill "$tdaemon"; wait "$tdaemon"
  done
  done
  done
fi
if want ceprobe; then
  timeout 120 "$bin/iris-gpu-copy-engine-probe" >"$out/copy_engine_probe.md" 2>&1
fi
if want hosttenants; then
  rm -f "$out/tenants_host.md"
  for daemon_bin in ${TENANT_DAEMONS:-irisd}; do
    echo "### $daemon_bin" >>"$out/tenants_host.md"
    BENCH_BUNDLE=.gpu BENCH_DAEMON=$PWD/$bin/$daemon_bin timeout 500 scripts/bench-tenants.sh 4 \
      >>"$out/tenants_host.md" 2>&1
  done
fi
if want sweep && [ -x "$bin/irisd-landed" ]; then
  # Issue 50: a user alone must not lose bandwidth to pacing. The same 8-rank sweep (device
  # receive, 4 KiB-256 MiB) against this irisd and the last landing's, alternately, twice.
  for round in 1 2; do
    for daemon_bin in irisd-landed irisd; do
      srun=$(mktemp -d /tmp/irisd-sweep-XXXXXX)
      "$bin/$daemon_bin" --socket "$srun/irisd.sock" --engine cuda >"$srun/irisd.log" 2>&1 &
      sdaemon=$!
      for _ in $(seq 100); do [ -S "$srun/irisd.sock.attach" ] && break; sleep 0.1; done
      spids=()
      for r in 7 6 5 4 3 2 1 0; do
        timeout 300 "$bin/iris-gpu-bench" --socket "$srun/irisd.sock" --key sweep --nranks 8 \
          --rank $r --max-bytes $((256 << 20)) >"$srun/sweep.$r" 2>&1 &
        spids+=($!)
      done
      for p in "${spids[@]}"; do wait "$p"; done
      cp "$srun/sweep.0" "$run/sweep-$daemon_bin-$round.md"
      kill "$sdaemon"; wait "$sdaemon"
    done
  done
  # Columns 2 (blocking p50 us) and 9 (back-to-back us): this / landed, each round.
  python3 - "$run" >"$out/sweep.md" <<'PY'
import sys
def rows(name):
    out = {}
    for line in open(f"{sys.argv[1]}/{name}"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0].isdigit():
            out[int(cells[0])] = (float(cells[1]), float(cells[8]))
    return out
print("| bytes/block | round | landed p50 us | this p50 us | ratio | landed b2b us | this b2b us | ratio |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in (1, 2):
    old, new = rows(f"sweep-irisd-landed-{r}.md"), rows(f"sweep-irisd-{r}.md")
    for size in sorted(old):
        if size in new:
            (a, b), (c, d) = old[size], new[size]
            print(f"| {size} | {r} | {a:.1f} | {c:.1f} | {c / a:.2f} | {b:.1f} | {d:.1f} | {d / b:.2f} |")
PY
fi
if want nodes; then
  # Across nodes through restarts: two irisd (cuda engine) stand in for two nodes, the job of
  # tests/python/gpu/scale_out_gpu.py (CUDA tensors, host-blocking and stream-ordered, every
  # element checked) runs while node 1's irisd is SIGKILLed and started again 3 times, then node
  # 0's twice, one at a time, 2 s apart.
  nrun=$(mktemp -d /tmp/irisd-nodes-XXXXXX)
  node_pids=()
  start_node() {
    "$bin/irisd" --socket "$nrun/node$1.sock" --engine cuda >>"$nrun/node$1.log" 2>&1 &
    node_pids[$1]=$!
    sleep 1
  }
  start_node 0
  start_node 1
  env IRIS_LIBRARY="$PWD/.gpu/lib/libiris.so.0" PYTHONPATH="$PWD/client/python" \
    IRIS_SOCKETS="$nrun/node0.sock,$nrun/node1.sock" timeout 400 \
    python3 tests/python/gpu/scale_out_gpu.py --rounds 600 >"$out/nodes_restart.txt" 2>&1 &
  job=$!
  # Restarts start once both ranks attached (importing torch takes seconds).
  for _ in $(seq 600); do
    [ "$(cat "$nrun"/node*.log | grep -c "attached:")" -ge 2 ] && break
    sleep 0.1
  done
  sleep 1
  restarts=0
  for n in 1 1 1 0 0; do
    kill -0 "$job" 2>/dev/null || break
    kill -9 "${node_pids[$n]}"
    wait "${node_pids[$n]}" 2>/dev/null
    start_node "$n"
    restarts=$((restarts + 1))
    sleep 1
  done
  wait "$job"
  nodes_rc=$?
  kill "${node_pids[@]}" 2>/dev/null
  wait "${node_pids[@]}" 2>/dev/null
  cp "$nrun/node0.log" "$out/nodes_node0.log"
  cp "$nrun/node1.log" "$out/nodes_node1.log"
  {
    echo "restarts after the job attached: $restarts"
    echo "rejoins seen: $(cat "$nrun"/node*.log | grep -c "came back after its irisd restarted")"
    echo "sessions resumed: $(cat "$nrun"/node*.log | grep -c "resumed session")"
  } >>"$out/nodes_restart.txt"
fi
if want cpu; then
  BENCH_BUNDLE=.gpu timeout 1200 scripts/bench.sh 4 $((1 << 20)) >"$out/cpu_bench.md" 2>&1
  # Across nodes: three host-engine daemons as three nodes, against Open MPI.
  BENCH_BUNDLE=.gpu timeout 300 scripts/bench-scale-out.sh $((1 << 20)) >"$out/cpu_scale_out.md" 2>&1
  # Like for like: Open MPI over the loopback TCP that the daemons' UCX uses on one machine.
  MPI_OVER_TCP=1 BENCH_BUNDLE=.gpu timeout 300 scripts/bench-scale-out.sh $((1 << 16)) \
    >"$out/cpu_scale_out_tcp.md" 2>&1
fi
if want compare && [ -d .gpu-old ]; then
  timeout 900 scripts/bench-compare.sh .gpu-old .gpu 5 >"$out/compare.md" 2>&1
fi

echo
echo "== summary"
if want tests; then
  grep -E "^\[ +(PASSED|FAILED) " "$out/gpu_tests.log" | sed 's/^/gpu tests: /'
fi
echo "gpu tests exit: $tests_rc"
cat "$out/spin_proof.txt"
grep -E "copy_engine_bytes_total|compute_unit_bytes_total" "$out/stats.txt"
if want bench; then
  for name in device host alltoall_host gemm graph; do echo "-- bench $name"; cat "$out/bench_$name.md"; done
fi
if want shared; then
  for n in 2 3 8; do echo "-- $n ranks sharing the GPU"; cat "$out/bench_shared$n.md"; done
fi
if want cpu; then
  echo "-- host engine on this host's CPU against Open MPI"; cat "$out/cpu_bench.md"
  echo "-- across nodes (3 daemons on this host) against Open MPI"; cat "$out/cpu_scale_out.md"
  echo "-- the same, Open MPI over loopback TCP as the daemons' UCX"; cat "$out/cpu_scale_out_tcp.md"
fi
if want readme; then echo "-- README torch example"; cat "$out/readme.txt"; fi
if want nccl; then
  echo "-- PyTorch nccl backend on irisd's libnccl.so.2 (exit $nccl_rc)"
  grep -A12 "^PyTorch nccl backend" "$out/nccl.txt"
  echo "-- C program on GPU streams through the API (exit $nccl_c_rc)"
  grep -E "^nccl stream|bad elements|FAILED|error|runs .* on the GPU.s SMs" "$out/nccl_c.txt" | cut -c1-300 | head -12
  grep -E "backend nccl" "$out/nccl_call_overhead.txt"
fi
# A benchmark's tables, its modes and what failed (both_wait_modes keeps the whole output).
tables_of() { grep -E "^(\||IRISD)|Error|rank [0-9]" "$1"; }
if want ncclbw; then echo "-- bandwidth through the library"; tables_of "$out/nccl_bandwidth.md"; fi
if want ncclpaths; then echo "-- a 4 KiB all-gather by each way in"; tables_of "$out/nccl_paths.md"; fi
if want jax; then
  echo "-- JAX on irisd's libnccl.so.2 (exit $jax_rc)"
  grep -E "imports|checks passed|JAX on|Error|error" "$out/jax.txt" | cut -c1-300 | head -8
fi
if want ncclcost; then
  echo "-- 4 KiB all-gather, 2 ranks sharing the GPU: the library against irisd's API"
  grep -E "^nccl latency" "$out/nccl_c.txt"; cat "$out/bench_ncclcost.md"
fi
if want ncclresume; then
  echo "-- PyTorch nccl backend through irisd restarts (exit $ncclresume_rc)"
  grep -E "^  |Error|assert" "$out/nccl_restarts.txt" | tail -4
fi
if want probe; then echo "-- signal probe"; cat "$out/signal_probe.md"; fi
if want torch; then echo "-- GEMM (torch.matmul) beside all-gathers"; cat "$out/gemm_torch.md"; fi
if want torch; then echo "-- torch.cuda.graph with irisd collectives"; cat "$out/graph_torch.txt"; fi
if want pytorch; then
  echo "-- torch.distributed backend and FSDP2 (exit $pytorch_rc)"
  grep -E "^(torch backend|FSDP2|functional|torch point|pipelining)" "$out/pytorch.txt"
  echo "-- examples/fsdp_train.py (torchrun, 2 ranks)"; grep -E "^step|Error" "$out/fsdp_example.txt"
  echo "-- across nodes"; tail -3 "$out/scale_out_gpu.txt"
  echo "-- per-call host cost"; cat "$out/call_overhead.txt"
  echo "-- FSDP2 step, ranks sharing the GPU"; cat "$out/fsdp_step.md"
fi
if want p2p; then
  echo "-- point to point: pipelining (exit $p2p_rc)"; grep -E "^(torch point|pipelining)|Error" "$out/pipeline.txt"
  echo "-- send/recv (2 ranks, one GPU)"; cat "$out/p2p_bench.md"
  echo "-- GEMM beside sends and receives"; cat "$out/gemm_p2p.md"
fi
if want resume; then
  echo "-- FSDP2 and pipelining through irisd restarts (exit $resume_rc)"
  grep -E "^FSDP2|^pipelining|^step|Error|failures" "$out/fsdp_restarts.txt" | tail -6
  echo "-- resume time"; cat "$out/resume_cuda.md" "$out/resume_host.md"
fi
if want freed; then
  echo "-- freed GPU memory through a restart (exit $freed_rc)"
  grep -E "^freed memory|Error|assert" "$out/freed.txt" | tail -6
fi
if want tenants; then
  echo "-- two users on the cuda engine (exit $tenants_rc)"; grep -E "^## |^\| (4096|65536|1048576|268435456) " "$out/tenants.md"
fi
if want ceprobe; then echo "-- the copy engines without irisd"; cat "$out/copy_engine_probe.md"; fi
if want hosttenants; then echo "-- two users on the host engine"; cat "$out/tenants_host.md"; fi
if want sweep; then echo "-- a single job's sweep, this irisd against the last landing's"; cat "$out/sweep.md"; fi
if want nodes; then
  echo "-- across nodes through restarts on CUDA tensors (exit $nodes_rc)"; tail -4 "$out/nodes_restart.txt"
fi
if want compare && [ -d .gpu-old ]; then echo "-- .gpu-old against .gpu"; cat "$out/compare.md"; fi
