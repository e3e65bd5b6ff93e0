"""A bf16 GEMM (torch.matmul, cuBLAS) on one GPU while all-gathers (or sends and receives) run back
to back beside it.

A benchmark, not a test (issue 3's GEMM target). One process runs the GEMM; --nranks rank
processes on the same GPU (an irisd with the cuda engine already running: scripts/gpu-run.sh
starts it) run, phase by phase, for --seconds each:
  alone         nothing
  irisd host    irisd all-gathers of --bytes per rank into pinned host memory (copy engines)
  irisd device  the same into GPU memory (same-GPU device-to-device copies: SMs on driver 580)
  SM gather     the same layout gathered by a copy kernel in each rank (SMs)
With --op send_recv each rank instead sends --bytes to the next rank and receives as many from
the one before (a ring of pipeline stages, one irisd group per step), and the SM phase copies the
same bytes with a copy kernel. It prints a markdown table: GEMM TFLOP/s, the ratio to alone, and collectives completed.

Ranks must run the same number of collectives in a phase (one more on a single rank waits for
peers that never come): the GEMM process ends a phase by fixing that number, under a lock, at
the most iterations any rank has begun, and every rank runs exactly that many. Every wait is
bounded (WAIT_S), so a hang reports itself."""
import argparse
import os
import time

import torch
import torch.multiprocessing as mp

PHASES = ("alone", "irisd host", "irisd device", "SM gather")
WAIT_S = 120  # the longest any one collective, barrier or join may take

for var, value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                   ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[var] = value


def may_begin(iteration, rank, lock, stop_after, begun):
    """True when this rank is to run `iteration` of the phase: until the GEMM process fixes
    stop_after, every rank may begin more; after, exactly stop_after in all."""
    with lock:
        if 0 <= stop_after.value <= iteration:
            return False
        begun[rank] = iteration + 1
        return True


def bounded_wait(request, what):
    if not request.wait(WAIT_S):
        raise SystemExit(f"{what} did not complete within {WAIT_S} s")


def rank_main(rank, args, barrier, sync, counts):
    lock, stop_after, begun = sync
    import irisd
    client = irisd.Client(args.socket, name=f"gemm-beside rank {rank}")
    comm = irisd.Communicator(client, "gemm-beside", args.nranks, rank)
    n, size = args.nranks, args.bytes
    send = torch.full((size,), rank + 1, dtype=torch.uint8, device="cuda")
    gpu_recv = torch.empty(n * size, dtype=torch.uint8, device="cuda")
    keep = [client.register_tensor(send), client.register_tensor(gpu_recv)]
    host_recv = client.allocate(n * size)
    torch.cuda.synchronize()

    def issue(recv):
        if args.op == "all_gather":
            return [comm.all_gather(send, recv, size)]
        with irisd.group():
            return [comm.send(send, size, (rank + 1) % n), comm.recv(recv, size, (rank - 1) % n)]

    for phase, _ in enumerate(PHASES):
        barrier.wait()
        done = 0
        while PHASES[phase] != "alone" and may_begin(done, rank, lock, stop_after, begun):
            if PHASES[phase] in ("irisd host", "irisd device"):
                recv = host_recv if PHASES[phase] == "irisd host" else gpu_recv
                for request in issue(recv):
                    bounded_wait(request, f"rank {rank} {args.op}")
            else:
                if args.op == "all_gather":
                    gpu_recv.view(n, size).copy_(send.expand(n, size))
                else:
                    gpu_recv[:size].copy_(send)
                torch.cuda.synchronize()
            done += 1
        counts[phase * n + rank] = done
        barrier.wait()
    for b in keep + [host_recv]:
        b.release()


def gemm_main(args, barrier, sync, counts):
    lock, stop_after, begun = sync
    m = args.gemm
    a = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    for _ in range(20):  # cuBLAS heuristics and clocks settle
        torch.matmul(a, b)
    torch.cuda.synchronize()
    rows, alone = [], None
    for phase, name in enumerate(PHASES):
        barrier.wait()
        time.sleep(0.2)  # the ranks' loops are running
        gemms, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            for _ in range(8):
                torch.matmul(a, b)
            gemms += 8
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        with lock:  # from now on every rank runs exactly this many
            stop_after.value = max(begun[:])
        barrier.wait()
        with lock:
            stop_after.value = -1
            for r in range(args.nranks):
                begun[r] = 0
        tflops = 2 * m ** 3 * gemms / seconds / 1e12
        alone = alone or tflops
        gathers = sum(counts[phase * args.nranks:(phase + 1) * args.nranks]) / args.nranks
        rows.append(f"| {name} | {tflops:.1f} | {tflops / alone:.3f} | {gathers:.0f} |")
    what = "all-gathers" if args.op == "all_gather" else "sends and receives (a ring)"
    print(f"\n### GEMM bf16 {m}^3 beside {args.nranks}-rank {what} of "
          f"{args.bytes >> 20} MiB per rank, one GPU, {args.seconds:.0f} s per phase\n")
    print("| beside it | GEMM TFLOP/s | vs alone | collectives |\n| --- | ---: | ---: | ---: |")
    print("\n".join(rows), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", default="/run/irisd/irisd.sock")
    p.add_argument("--nranks", type=int, default=8)
    p.add_argument("--bytes", type=int, default=64 << 20)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--gemm", type=int, default=8192)
    p.add_argument("--op", choices=("all_gather", "send_recv"), default="all_gather")
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(args.nranks + 1, timeout=WAIT_S)  # a failed rank must not hang the rest
    sync = (ctx.Lock(), ctx.Value("l", -1, lock=False), ctx.Array("l", args.nranks, lock=False))
    counts = ctx.Array("l", len(PHASES) * args.nranks)
    ranks = [ctx.Process(target=rank_main, args=(r, args, barrier, sync, counts))
             for r in range(args.nranks)]
    for r in ranks:
        r.start()
    gemm_main(args, barrier, sync, counts)
    for r in ranks:
        r.join(timeout=WAIT_S)
        if r.exitcode != 0:
            raise SystemExit(f"a rank process failed (exit {r.exitcode})")


if __name__ == "__main__":
    main()
