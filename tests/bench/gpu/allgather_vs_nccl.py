"""irisd against NCCL on the GPUs of one node: one process per GPU (torch.multiprocessing), an
irisd with the cuda engine already running (scripts/multi-gpu-run.sh starts it), or with the hsa
engine on AMD nodes (scripts/mi300-first-run.sh), where "NCCL" is RCCL: torch.distributed's
"nccl" backend in ROCm builds of PyTorch.

Phases (rank 0 prints a markdown table for each):
  correctness  random sizes, odd ones included, random bytes made on the GPU; irisd's result
               (host-blocking, stream-ordered, in place) compared bit for bit with
               torch.distributed.all_gather_into_tensor on NCCL; receive buffers poisoned first
  bandwidth    p50/p99 latency and busbw = (N-1) x bytes / time, irisd and NCCL, same run
  gemm         bf16 GEMM throughput on every GPU alone, while irisd all-gathers (in place: peer
               copies only) run back to back, host-blocking and stream-ordered (a side stream
               waits on irisd's done flag: on ROCm 6.x a one-thread kernel unless
               GPU_STREAMOPS_CP_WAIT is set), and while NCCL's do, each for --gemm-seconds
  spin         the spin proof: a kernel fills every SM of every GPU for ~50 ms; an in-place
               irisd all-gather (peer copies only) issued during it finishes first only if copy
               engines moved its bytes
With --nccl-ce the script instead measures NCCL's copy-engine all-gather (NCCL 2.28+: symmetric
memory windows, NCCL_CTA_POLICY=2, set by the caller) and reports why when it is unavailable."""
import argparse
import inspect
import os
import random
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

try:
    import triton
    import triton.language as tl

    @triton.jit
    def spin_kernel(out, iters):
        x = tl.program_id(0).to(tl.float32)
        for _ in range(iters):
            x = x * 1.0000001 + 0.5
        tl.store(out + tl.program_id(0), x)
except ImportError:
    triton = None

# Never NVLink multicast on shared GPU hosts.
for var, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                   ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[var] = value

MiB = 1 << 20


def table(rank, title, header, rows):
    if rank != 0:
        return
    print(f"\n### {title}\n\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    sys.stdout.flush()


def worst(value, op=dist.ReduceOp.MAX):
    t = torch.tensor([float(value)], device="cuda")
    dist.all_reduce(t, op=op)
    return t.item()


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * (len(values) - 1) + 0.5))]


class Iris:
    """irisd through the Python binding, registering torch tensors on demand."""

    def __init__(self, socket, nranks, rank):
        import irisd
        self.iris = irisd
        self.client = irisd.Client(socket, name=f"allgather-vs-nccl rank {rank}")
        self.comm = irisd.Communicator(self.client, f"vs-nccl-{nranks}", nranks, rank)
        self.keep = []

    def register(self, *tensors):
        self.keep += [self.client.register_tensor(t) for t in tensors]

    def release(self):
        for b in self.keep:
            b.release()
        self.keep = []

    def all_gather(self, send, recv, stream=None):
        return self.comm.all_gather(send, recv, send.numel() * send.element_size(), stream)


def correctness(args, rank, n, irisd):
    rng = random.Random(args.seed)
    sizes = [1, 3, 4095, 4096, 65_537, MiB + 13, rng.randrange(2, 64 * MiB) | 1,
             rng.randrange(2, 64 * MiB), 256 * MiB - 1, args.max_bytes]
    sizes = sorted({s for s in sizes if s <= args.max_bytes})
    gen = torch.Generator(device="cuda")
    stream = torch.cuda.Stream()  # stream-ordered calls need a created stream, not the default
    rows, failures = [], 0
    for size in sizes:
        gen.manual_seed(args.seed * 1000 + rank * 7 + size)
        send = torch.randint(0, 256, (size,), dtype=torch.uint8, device="cuda", generator=gen)
        expected = torch.empty(n * size, dtype=torch.uint8, device="cuda")
        dist.all_gather_into_tensor(expected, send)
        poison = torch.bitwise_not(expected)  # differs from the right answer in every byte
        recv = poison.clone()
        irisd.register(send, recv)
        verdicts = []
        for mode in ("blocking", "stream", "in-place"):
            if mode == "stream":
                # Poison, all-gather and check all queued on one stream, no host sync between.
                with torch.cuda.stream(stream):
                    recv.copy_(poison)
                    request = irisd.all_gather(send, recv, stream)
                    bad_count = (recv != expected).sum()
                stream.synchronize()
                request.wait()
                bad = int(bad_count.item())
            else:
                recv.copy_(poison)
                torch.cuda.synchronize()
                if mode == "blocking":
                    irisd.all_gather(send, recv).wait()
                else:
                    mine = recv[rank * size:(rank + 1) * size]
                    mine.copy_(send)
                    torch.cuda.synchronize()
                    irisd.all_gather(mine, recv).wait()
                bad = int((recv != expected).sum().item())
            wrong = int(worst(bad, dist.ReduceOp.SUM))
            failures += wrong != 0
            verdicts.append("identical" if wrong == 0 else f"{wrong} bytes differ")
        irisd.release()
        del send, expected, poison, recv
        rows.append([size] + verdicts)
    table(rank, f"correctness: {n} ranks, irisd vs NCCL all_gather_into_tensor (seed {args.seed})",
          ["bytes/rank", "host-blocking", "stream-ordered", "in place"], rows)
    return failures


BATCH = 10  # collectives per sample, back to back, so that rank skew after a barrier averages out


def timed_events(fn, iters, stream):
    """us per call as seen by `stream`: BATCH calls back to back between two events, slowest
    rank."""
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            start.record()
            requests = [fn() for _ in range(BATCH)]
            end.record()
        end.synchronize()
        for request in requests:
            if request is not None:
                request.wait()
        times.append(worst(start.elapsed_time(end) * 1e3 / BATCH))
    return times


def bandwidth(args, rank, n, irisd):
    rows = []
    size = args.min_bytes
    while size <= args.max_bytes:
        iters = max(5, min(30, (8 << 30) // (size * n * BATCH)))
        send = torch.full((size,), rank + 1, dtype=torch.uint8, device="cuda")
        recv = torch.empty(n * size, dtype=torch.uint8, device="cuda")
        irisd.register(send, recv)
        for _ in range(2):
            dist.all_gather_into_tensor(recv, send)
            irisd.all_gather(send, recv).wait()
        stream = torch.cuda.Stream()
        nccl = timed_events(lambda: dist.all_gather_into_tensor(recv, send), iters, stream)
        ordered = timed_events(lambda: irisd.all_gather(send, recv, stream), iters, stream)
        blocking = []
        for _ in range(iters):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(BATCH):
                irisd.all_gather(send, recv).wait()
            blocking.append(worst((time.perf_counter() - t0) * 1e6 / BATCH))
        irisd.release()
        busbw = lambda us: (n - 1) * size / (us * 1e3)
        b, o, c = pct(blocking, 0.5), pct(ordered, 0.5), pct(nccl, 0.5)
        rows.append([size, f"{b:.1f}", f"{pct(blocking, 0.99):.1f}", f"{o:.1f}",
                     f"{pct(ordered, 0.99):.1f}", f"{c:.1f}", f"{pct(nccl, 0.99):.1f}",
                     f"{busbw(b):.1f}", f"{busbw(o):.1f}", f"{busbw(c):.1f}",
                     f"{c / min(b, o):.2f}"])
        del send, recv
        size *= 4
    table(rank, f"bandwidth: {n} ranks (us per collective, {BATCH} back to back per sample; "
          "busbw GB/s = (N-1) x bytes / p50)",
          ["bytes/rank", "irisd blocking p50", "p99", "irisd stream p50", "p99", "NCCL p50",
           "p99", "irisd blocking busbw", "irisd stream busbw", "NCCL busbw",
           "irisd/NCCL busbw"], rows)


def gemm(args, rank, n, irisd):
    m = 8192
    a = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    size = args.gemm_gather_bytes
    recv = torch.zeros(n * size, dtype=torch.uint8, device="cuda")
    mine = recv[rank * size:(rank + 1) * size]
    irisd.register(recv)
    side = torch.cuda.Stream()

    def calibrate(kind):
        """How many back-to-back all-gathers of `kind` last about --gemm-seconds."""
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        gathers(kind, 20)
        each = worst((time.perf_counter() - t0) / 20)
        return max(20, int(args.gemm_seconds / each))

    refused = {}

    def gathers(kind, count):
        try:
            gather_loop(kind, count)
        except RuntimeError as e:  # irisd.IrisError, e.g. a refused HIP CP wait: in the table
            refused[kind] = str(e)

    def gather_loop(kind, count):
        for _ in range(count):
            if kind == "irisd":  # in place: only peer copies, all on copy engines
                irisd.all_gather(mine, recv).wait()
            elif kind == "irisd-stream":  # stream-ordered: the side stream waits on the done flag
                with torch.cuda.stream(side):
                    irisd.all_gather(mine, recv, side)
                side.synchronize()
            else:
                with torch.cuda.stream(side):
                    dist.all_gather_into_tensor(recv, mine)
                side.synchronize()

    rows, alone = [], None
    for kind in ("alone", "irisd", "irisd-stream", "nccl"):
        count = 0 if kind == "alone" else calibrate(kind)
        torch.matmul(a, b)
        dist.barrier()
        torch.cuda.synchronize()
        worker = None if kind == "alone" else threading.Thread(target=gathers, args=(kind, count))
        start = time.perf_counter()
        if worker:
            worker.start()
        gemms = 0
        while (worker and worker.is_alive()) or (not worker and time.perf_counter() - start <
                                                   args.gemm_seconds):
            for _ in range(8):
                torch.matmul(a, b)
            gemms += 8
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        if worker:
            worker.join()
        tflops = worst(2 * m ** 3 * gemms / seconds / 1e12, dist.ReduceOp.MIN)
        alone = alone or tflops
        if kind in refused:
            rows.append([kind, "refused", "-", refused[kind], "-"])
            continue
        rows.append([kind, f"{tflops:.1f}", f"{tflops / alone:.3f}", count, f"{seconds:.2f}"])
    irisd.release()
    table(rank, f"GEMM bf16 {m}^3 on every GPU while {size // MiB} MiB/rank all-gathers run "
          f"back to back ({n} ranks; slowest GPU)",
          ["beside it", "TFLOP/s", "vs alone", "all-gathers", "seconds"], rows)


def spin(args, rank, n, irisd):
    if triton is None:
        table(rank, "spin proof", ["status"], [["not run: triton is not installed"]])
        return
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = (sms * 32,)
    sink = torch.empty(grid[0], dtype=torch.float32, device="cuda")
    iters = 100_000
    for _ in range(4):  # calibrate to about 50 ms
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        spin_kernel[grid](sink, iters)
        end.record()
        end.synchronize()
        iters = max(1000, int(iters * 50 / start.elapsed_time(end)))
    size = args.spin_bytes
    recv = torch.zeros(n * size, dtype=torch.uint8, device="cuda")
    mine = recv[rank * size:(rank + 1) * size]
    irisd.register(recv)
    irisd.all_gather(mine, recv).wait()
    dist.barrier()
    t0 = time.perf_counter()
    irisd.all_gather(mine, recv).wait()
    alone_ms = worst((time.perf_counter() - t0) * 1e3)
    spinner = torch.cuda.Stream()
    dist.barrier()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(spinner):
        start.record()
        spin_kernel[grid](sink, iters)
        end.record()
    t0 = time.perf_counter()
    irisd.all_gather(mine, recv).wait()
    under = (time.perf_counter() - t0) * 1e3
    running = not end.query()  # before any NCCL call: NCCL's kernels would wait for the spin
    end.synchronize()
    under_ms = worst(under)
    still_running = worst(1.0 if running else 0.0, dist.ReduceOp.MIN)
    kernel_ms = start.elapsed_time(end)
    irisd.release()
    table(rank, f"spin proof: in-place all-gather of {size // MiB} MiB/rank between {n} GPUs "
          "(peer copies only) while a kernel fills every SM of every GPU",
          ["alone ms", "under busy SMs ms", "kernel ms", "verdict"],
          [[f"{alone_ms:.2f}", f"{under_ms:.2f}", f"{kernel_ms:.1f}",
            "finished while every GPU's kernel ran: copy engines" if still_running
            else "waited for a kernel"]])


def nccl_copy_engine(args, rank, n):
    backend = dist.group.WORLD._get_backend(torch.device("cuda"))
    try:
        kwargs = {"symmetric": True} if "symmetric" in inspect.signature(
            torch.cuda.MemPool).parameters else {}
        pool = torch.cuda.MemPool(backend.mem_allocator, **kwargs)

        def register(p):
            try:
                backend.register_mem_pool(p, symm=True)  # NCCL symmetric windows
            except TypeError:
                backend.register_mem_pool(p)
    except Exception as e:  # the installed torch/NCCL lacks the path
        table(rank, "NCCL copy-engine all-gather", ["status"], [[f"unavailable: {e}"]])
        return
    rows = []
    size = max(args.min_bytes, MiB)
    while size <= args.max_bytes:
        try:
            rows.append(nccl_copy_engine_size(rank, n, size, pool, register, backend))
        except Exception as e:
            rows.append([size, "-", "-", f"failed: {e}"])
            break
        size *= 4
    table(rank, f"NCCL copy-engine path: {n} ranks, symmetric windows, NCCL_CTA_POLICY="
          f"{os.environ.get('NCCL_CTA_POLICY', 'unset')}",
          ["bytes/rank", "p50 us", "busbw GB/s", "data right"], rows)


def nccl_copy_engine_size(rank, n, size, pool, register, backend):
    with torch.cuda.use_mem_pool(pool):
        send = torch.full((size,), rank + 1, dtype=torch.uint8, device="cuda")
        recv = torch.empty(n * size, dtype=torch.uint8, device="cuda")
    register(pool)
    for _ in range(2):
        dist.all_gather_into_tensor(recv, send)
    times = timed_events(lambda: dist.all_gather_into_tensor(recv, send),
                         max(5, min(30, (8 << 30) // (size * n * BATCH))), torch.cuda.Stream())
    ok = bool((recv.view(n, size)[:, 0].cpu() == torch.arange(1, n + 1, dtype=torch.uint8)).all())
    backend.deregister_mem_pool(pool)
    p50 = pct(times, 0.5)
    return [size, f"{p50:.1f}", f"{(n - 1) * size / (p50 * 1e3):.1f}", "yes" if ok else "NO"]


def run(rank, args):
    torch.cuda.set_device(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    dist.init_process_group("nccl", rank=rank, world_size=args.nranks,
                            device_id=torch.device("cuda", rank))
    failures = 0
    try:
        if args.nccl_ce:
            nccl_copy_engine(args, rank, args.nranks)
            return
        irisd = Iris(args.socket, args.nranks, rank)
        phases = args.phases.split(",")
        if "correctness" in phases:
            failures = correctness(args, rank, args.nranks, irisd)
        if "bandwidth" in phases:
            bandwidth(args, rank, args.nranks, irisd)
        if "gemm" in phases:
            gemm(args, rank, args.nranks, irisd)
        if "spin" in phases:
            spin(args, rank, args.nranks, irisd)
    finally:
        dist.destroy_process_group()
    if failures:
        sys.exit(f"rank {rank}: {failures} sizes differ from NCCL")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", default="/run/irisd/irisd.sock")
    p.add_argument("--nranks", type=int, default=torch.cuda.device_count())
    p.add_argument("--phases", default="correctness,bandwidth,gemm,spin")
    p.add_argument("--min-bytes", type=int, default=4096)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--gemm-gather-bytes", type=int, default=64 * MiB)
    p.add_argument("--gemm-seconds", type=float, default=3.0)
    p.add_argument("--spin-bytes", type=int, default=256 * MiB)
    p.add_argument("--seed", type=int, default=random.SystemRandom().randrange(1 << 30))
    p.add_argument("--port", type=int, default=29500 + os.getpid() % 1000)
    p.add_argument("--nccl-ce", action="store_true")
    args = p.parse_args()
    if args.nranks > torch.cuda.device_count():
        sys.exit(f"{args.nranks} ranks need {args.nranks} GPUs; "
                 f"{torch.cuda.device_count()} are visible")
    mp.spawn(run, args=(args,), nprocs=args.nranks)


if __name__ == "__main__":
    main()
