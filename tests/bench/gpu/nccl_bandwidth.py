"""Bandwidth through NCCL's API on irisd against irisd's own torch backend, in one job: ranks
sharing the one GPU, the default group PyTorch's "nccl" backend (irisd's libnccl.so.2 preloaded),
a second group "cpu:gloo,cuda:irisd" over the same ranks; all_gather_into_tensor and all_reduce
(SUM, float32) from 4 KiB to 256 MiB per rank, timed alternately two ways: the median of single
calls between synchronizations (a barrier, then the call: any skew between the ranks that the
barrier leaves is in it), and back to back (the iterations queued one after another, one
synchronization at the end, time per call: the skew spread over them). Prints a markdown table
with the ratios (irisd backend time / NCCL API time: at least 0.98 means the NCCL API costs
nothing). Then, apart, what ProcessGroupNCCL's calls cost the GPU without any collective: per
iteration its stream waits for the current stream, the host waits for its stream (as a library
that waits on the host does), and the current stream waits for it; on a GPU that the ranks'
processes share, each such wait needs the GPU to switch to that process's context.
Needs IRIS_SOCKET, PYTHONPATH/IRIS_LIBRARY, LD_PRELOAD naming irisd's libnccl.so.2.
    python3 tests/bench/gpu/nccl_bandwidth.py [--ranks 2]"""
import argparse
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python" / "gpu"))
import ranks  # noqa: E402


def bench(rank, nranks, sizes):
    import torch
    import torch.distributed as dist

    from nccl_preload_test import check_library

    check_library()
    iris_group = dist.new_group(list(range(nranks)), backend="cpu:gloo,cuda:irisd")
    rows = []
    for size in sizes:
        n = size // 4
        x = torch.ones(n, device="cuda")
        out = torch.empty(n * nranks, device="cuda")
        iters = max(3, min(50, (64 << 20) // size))
        times = {}
        for op in ("all_gather", "all_reduce"):
            for name, group in (("nccl", None), ("irisd", iris_group)):
                samples = []
                for _ in range(iters + 1):
                    dist.barrier(group=group)
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    if op == "all_gather":
                        dist.all_gather_into_tensor(out, x, group=group)
                    else:
                        dist.all_reduce(x, group=group)
                    torch.cuda.synchronize()
                    samples.append(time.perf_counter() - t0)
                times[(op, name)] = statistics.median(samples[1:])
                dist.barrier(group=group)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(iters):
                    if op == "all_gather":
                        dist.all_gather_into_tensor(out, x, group=group)
                    else:
                        dist.all_reduce(x, group=group)
                torch.cuda.synchronize()
                times[(op, name, "b2b")] = (time.perf_counter() - t0) / iters
        rows.append((size, times))
    rows.append(("stream work", stream_work(iris_group)))
    return rows


def stream_work(group):
    """Seconds per iteration of ProcessGroupNCCL's stream work alone: single (between barriers)
    and back to back."""
    import torch
    import torch.distributed as dist

    current, side = torch.cuda.current_stream(), torch.cuda.Stream()

    def once():
        side.wait_stream(current)
        side.synchronize()
        current.wait_stream(side)

    samples = []
    for _ in range(51):
        dist.barrier(group=group)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        once()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - t0)
    dist.barrier(group=group)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50):
        once()
    torch.cuda.synchronize()
    return statistics.median(samples[1:]), (time.perf_counter() - t0) / 50


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args()
    sizes = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]
    rows = ranks.run(bench, args.ranks, (sizes,), backend="nccl")[0]
    print("| bytes per rank | op | NCCL API on irisd (us) | irisd torch backend (us) | ratio "
          "| back to back: NCCL API (us) | irisd torch backend (us) | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    work = rows.pop()[1]
    for size, times in rows:
        for op in ("all_gather", "all_reduce"):
            a, b = times[(op, "nccl")], times[(op, "irisd")]
            qa, qb = times[(op, "nccl", "b2b")], times[(op, "irisd", "b2b")]
            print(f"| {size} | {op} | {1e6 * a:.1f} | {1e6 * b:.1f} | {b / a:.2f} "
                  f"| {1e6 * qa:.1f} | {1e6 * qb:.1f} | {qb / qa:.2f} |")
    print(f"| stream work of one call, no collective (us) | single {1e6 * work[0]:.1f} "
          f"| back to back {1e6 * work[1]:.1f} |")


if __name__ == "__main__":
    main()
