"""Two irisd daemons with the cuda engine on the one GPU stand in for two nodes; two ranks, one
per daemon, bootstrap through torch's TCPStore (examples/multi_node/torch_store_bootstrap.py) and
run all-gathers and all-to-alls on CUDA tensors (registered on first use), host-blocking and
stream-ordered, random odd sizes, checked against the inputs every rank can make. The GPU data
crosses between the daemons staged through pinned host memory by the copy engines (Debian's UCX
has no CUDA support). Prints one line; exits non-zero on a mismatch.
    IRIS_SOCKETS=a.sock,b.sock python3 tests/python/gpu/scale_out_gpu.py [--rounds 20]"""
import argparse
import multiprocessing as mp
import os
import pathlib
import socket
import sys
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[3]


def rank_main(rank, sockets, port, rounds, queue):
    try:
        sys.path.insert(0, str(ROOT / "examples" / "multi_node"))
        import torch
        import torch.distributed as dist
        from torch_store_bootstrap import node_set_from_store

        import irisd

        torch.cuda.set_device(0)
        client = irisd.Client(socket_path=sockets[rank], name=f"scale-out gpu {rank}")
        store = dist.TCPStore("127.0.0.1", port, 2, rank == 0)
        comm = irisd.Communicator(client, "scale-out-gpu", 2, rank,
                                 nodes=node_set_from_store(client, store, rank, 2, node=rank))
        stream = torch.cuda.Stream()
        checks, failures = 0, []
        for r in range(rounds):
            n = (1 + (r * 7919) % 300000) | 1  # elements per block: odd, up to ~1.2 MB

            def block(src, j):  # rank src's block j, the same wherever it is made
                g = torch.Generator().manual_seed(r * 1000 + src * 10 + j)
                return torch.randn(n, generator=g).cuda()

            def run(call, stream_ordered):
                if stream_ordered:
                    stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(stream):
                        call(stream)
                    stream.synchronize()
                else:
                    # Host-blocking: irisd reads and writes at once, so the tensors' producers
                    # (the copy of the inputs, the fill of the outputs) must have run.
                    torch.cuda.synchronize()
                    call(None).wait()

            for stream_ordered in (False, True):
                x = block(rank, 0)
                y = torch.full((2 * n,), -7.0, device="cuda")
                run(lambda s: comm.all_gather(x, y, 4 * n, stream=s), stream_ordered)
                checks += 1
                if not torch.equal(y, torch.cat([block(0, 0), block(1, 0)])):
                    failures.append(f"round {r} all_gather (stream {stream_ordered})")
                send = torch.cat([block(rank, 1), block(rank, 2)])
                recv = torch.full((2 * n,), -7.0, device="cuda")
                run(lambda s: comm.all_to_all(send, recv, 4 * n, stream=s), stream_ordered)
                checks += 1
                if not torch.equal(recv, torch.cat([block(0, 1 + rank), block(1, 1 + rank)])):
                    failures.append(f"round {r} all_to_all (stream {stream_ordered})")
        comm.barrier()
        queue.put((rank, checks, failures, None))
    except BaseException:
        queue.put((rank, 0, [], traceback.format_exc()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    sockets = os.environ["IRIS_SOCKETS"].split(",")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, sockets, port, args.rounds, queue))
             for r in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    checks = sum(r[1] for r in results)
    failures = [f"rank {r[0]}: {f}" for r in results for f in r[2]]
    errors = [f"rank {r[0]}:\n{r[3]}" for r in results if r[3]]
    for line in failures[:10] + errors:
        print(line)
    print(f"scale-out on GPU (2 daemons, cuda engine, CUDA tensors): {checks} checks, "
          f"{len(failures)} mismatches, {len(errors)} errors")
    return 1 if failures or errors else 0


if __name__ == "__main__":
    sys.exit(main())
