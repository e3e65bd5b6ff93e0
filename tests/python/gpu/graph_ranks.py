"""Two ranks (processes) on one GPU capture torch work and an irisd all-gather and all-to-all into
CUDA graphs with torch.cuda.graph, replay them, and check every replay's result on the GPU (a
replay counter in the graph makes new data each time). Prints one line per collective; exits
non-zero on a mismatch or a failed replay. Needs IRIS_SOCKET, PYTHONPATH / IRIS_LIBRARY.
    python3 tests/python/gpu/graph_ranks.py [--replays N]"""
import argparse
import multiprocessing as mp
import sys


def rank_main(rank, nranks, replays, queue):
    import irisd
    import torch

    torch.cuda.set_device(0)
    client = irisd.Client(name=f"graph_ranks {rank}")
    results = []
    for collective in ("all_gather", "all_to_all"):
        comm = irisd.Communicator(client, f"graph_ranks/{collective}", nranks, rank)
        n = 4099  # elements per block: odd, so blocks start at odd offsets
        blocks = nranks if collective == "all_to_all" else 1
        send = torch.empty(n * blocks, dtype=torch.float32, device="cuda")
        recv = torch.empty(n * nranks, dtype=torch.float32, device="cuda")
        step = torch.zeros(1, dtype=torch.float32, device="cuda")
        mismatches = torch.zeros(1, dtype=torch.int64, device="cuda")
        base = torch.arange(n, dtype=torch.float32, device="cuda")
        client.register_tensor(send)
        client.register_tensor(recv)

        def value(src, dst):  # block src -> dst in replay `step`
            return base + 1000.0 * src + 10.0 * dst + step * 100000.0

        stream, graph = torch.cuda.Stream(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            step.add_(1)
            for j in range(blocks):
                send[j * n:(j + 1) * n].copy_(value(rank, j if blocks > 1 else 0))
            recv.fill_(-1)
            nbytes = n * 4
            if collective == "all_to_all":
                comm.all_to_all(send, recv, nbytes, stream=stream)
            else:
                comm.all_gather(send, recv, nbytes, stream=stream)
            for src in range(nranks):
                expect = value(src, rank if blocks > 1 else 0)
                mismatches.add_((recv[src * n:(src + 1) * n] != expect).sum())
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
        client.check_graphs()
        results.append((collective, int(step.item()), int(mismatches.item())))
        del graph
        comm.destroy()
    queue.put((rank, results))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--replays", type=int, default=200)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, 2, args.replays, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(60)
    ok = all(p.exitcode == 0 for p in procs)
    for collective, replays, bad in results[0]:
        print(f"torch.cuda.graph {collective}: 2 ranks, {replays} replays, "
              f"{bad + dict((c, b) for c, _, b in results[1])[collective]} mismatched elements")
        ok = ok and bad == 0 and replays == args.replays
    ok = ok and all(b == 0 for _, _, b in results[1])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
