"""A communicator across two irisd daemons from Python: two rank processes, one per daemon,
bootstrap through torch's TCPStore with examples/multi_node/torch_store_bootstrap.py, then run an
all-gather and an all-to-all whose blocks cross between the daemons, checked byte for byte. Prints
"python scale-out: ok". Exit 77 without torch (the bootstrap's store).
    python3 python_scale_out_check.py --sockets node0.sock,node1.sock"""
import argparse
import multiprocessing as mp
import pathlib
import socket
import sys
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[2]
N = 70001  # bytes per block: odd


def rank_main(rank, sockets, port, queue):
    try:
        sys.path.insert(0, str(ROOT / "examples" / "multi_node"))
        import torch.distributed as dist
        from torch_store_bootstrap import node_set_from_store

        import irisd

        client = irisd.Client(socket_path=sockets[rank], name=f"python scale-out {rank}")
        store = dist.TCPStore("127.0.0.1", port, 2, rank == 0)
        nodes = node_set_from_store(client, store, rank, 2, node=rank)
        comm = irisd.Communicator(client, "python-scale-out", 2, rank, nodes=nodes)
        send, recv = client.allocate(2 * N), client.allocate(2 * N)
        send.view()[:] = bytes([0x40 + rank]) * N + bytes([0x50 + rank]) * N
        comm.all_gather(send, recv, N).wait()
        assert bytes(recv.view()) == b"\x40" * N + b"\x41" * N, "all_gather"
        comm.all_to_all(send, recv, N).wait()
        # Block j of rank s lands at rank j's recv + s * N.
        want = bytes([0x40 + 0x10 * rank]) * N + bytes([0x41 + 0x10 * rank]) * N
        assert bytes(recv.view()) == want, "all_to_all"
        comm.barrier()
        queue.put((rank, None))
    except BaseException:
        queue.put((rank, traceback.format_exc()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sockets", required=True)
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("python scale-out: skipped, no torch for its TCPStore (install python3-torch)")
        return 77
    sockets = args.sockets.split(",")
    with socket.socket() as s:  # a free port for the store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, sockets, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    failures = [f"rank {r}:\n{e}" for r, e in (queue.get(timeout=120) for _ in procs) if e]
    for p in procs:
        p.join(30)
    if failures:
        print("\n".join(failures))
        return 1
    print("python scale-out: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
