"""Point-to-point bandwidth and latency on the GPU host: rank 0 sends to rank 1 (two processes
sharing the one GPU), back to back. Beside it, in the same run: a broadcast from rank 0 (the same
bytes moved the same way, through a collective), each both host-blocking (the raw binding,
wait() per call) and through the torch backend (timed with CUDA events on rank 1's stream; the
ranks share the GPU, so the backend waits on the host unless IRIS_TORCH_SHARED_GPU=stream, which
the table's title says); and the copy ceiling (cudaMemcpyAsync device to device on that GPU, the
path a transfer between two processes on one GPU takes). Prints a markdown table.
    python3 tests/bench/gpu/p2p_bench.py"""
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "python" / "gpu"))
import ranks  # noqa: E402

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]


def bench(rank, nranks):
    import torch
    import torch.distributed as dist

    import irisd

    client = irisd.Client(os.environ["IRIS_SOCKET"], name=f"p2p-bench rank {rank}")
    comm = irisd.Communicator(client, "p2p-bench", nranks, rank)
    peer = 1 - rank

    def timed_host(op, iters):
        for _ in range(3):
            op()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            op()
        return (time.perf_counter() - t0) / iters * 1e6

    def timed_stream(op, iters, together=True):
        for _ in range(3):
            op()
        torch.cuda.synchronize()
        if together:
            dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            op()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters * 1e3

    rows = []
    for nbytes in SIZES:
        iters = 200 if nbytes <= (1 << 20) else 20
        buf = torch.full((nbytes,), rank + 1, dtype=torch.uint8, device="cuda")
        keep = client.register_tensor(buf)
        p2p = (lambda: comm.send(buf, nbytes, peer).wait()) if rank == 0 else \
            (lambda: comm.recv(buf, nbytes, peer).wait())
        host_p2p = timed_host(p2p, iters)
        host_bcast = timed_host(lambda: comm.broadcast(buf, nbytes, 0).wait(), iters)
        torch_p2p = (lambda: dist.send(buf, peer)) if rank == 0 else (lambda: dist.recv(buf, peer))
        stream_p2p = timed_stream(torch_p2p, iters)
        stream_bcast = timed_stream(lambda: dist.broadcast(buf, 0), iters)
        dist.barrier()
        if rank == 1:
            assert int(buf[-1]) == 1, "the receive did not land"
            src = torch.empty_like(buf)
            ceiling = timed_stream(lambda: buf.copy_(src), iters, together=False)
            rows.append((nbytes, host_p2p, host_bcast, stream_p2p, stream_bcast, ceiling))
        keep.release()
    comm.destroy()
    client.close()
    return rows


def main():
    rows = ranks.run(bench, nranks=2, timeout=600)[1]
    mode = os.environ.get("IRIS_TORCH_SHARED_GPU", "host")
    print(f"torch backend with IRIS_TORCH_SHARED_GPU={mode}\n")
    print("| bytes | send/recv host-blocking us | broadcast host-blocking us | torch send/recv us "
          "| torch broadcast us | copy ceiling us | send/recv GB/s (host-blocking) | "
          "ceiling GB/s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for nbytes, hp, hb, sp, sb, c in rows:
        print(f"| {nbytes} | {hp:.1f} | {hb:.1f} | {sp:.1f} | {sb:.1f} | {c:.1f} | "
              f"{nbytes / hp / 1e3:.2f} | {nbytes / c / 1e3:.2f} |")


if __name__ == "__main__":
    main()
