"""Point-to-point bandwidth through the torch.distributed backend "irisd" on the GPU host: rank 0
sends to rank 1 (two processes sharing the one GPU), back to back, timed on the receiver's stream
with CUDA events; beside it, in the same run, the copy ceiling: the same bytes copied once by
torch (cudaMemcpyAsync device to device on that GPU, the path a transfer between two processes on
one GPU takes). Prints a markdown table.
    python3 tests/bench/gpu/p2p_bench.py"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "python" / "gpu"))
import ranks  # noqa: E402

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]


def bench(rank, nranks):
    import torch
    import torch.distributed as dist

    rows = []
    for nbytes in SIZES:
        iters = 200 if nbytes <= (1 << 20) else 20
        buf = torch.full((nbytes,), rank + 1, dtype=torch.uint8, device="cuda")
        for _ in range(3):  # warm-up: registrations, first copies
            dist.send(buf, 1) if rank == 0 else dist.recv(buf, 0)
        torch.cuda.synchronize()
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.send(buf, 1) if rank == 0 else dist.recv(buf, 0)
        end.record()
        end.synchronize()
        per = start.elapsed_time(end) / iters * 1e3  # us
        dist.barrier()
        if rank == 1:
            assert int(buf[-1]) == 1, "the receive did not land"
            src = torch.empty_like(buf)
            for _ in range(3):
                buf.copy_(src)
            start.record()
            for _ in range(iters):
                buf.copy_(src)
            end.record()
            end.synchronize()
            ceiling = start.elapsed_time(end) / iters * 1e3
            rows.append((nbytes, per, nbytes / per / 1e3, ceiling, nbytes / ceiling / 1e3))
    return rows


def main():
    rows = ranks.run(bench, nranks=2, timeout=600)[1]
    print("| bytes | irisd send/recv us | GB/s | torch copy_ us (ceiling) | GB/s | irisd/ceiling |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for nbytes, per, bw, ceiling, cbw in rows:
        print(f"| {nbytes} | {per:.1f} | {bw:.2f} | {ceiling:.1f} | {cbw:.2f} | {bw / cbw:.2f} |")


if __name__ == "__main__":
    main()
