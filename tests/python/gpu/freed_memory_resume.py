"""GPU host: a job that freed GPU memory irisd had registered comes through a restart of irisd.

Seen: two ranks all-gather (tensors registered on first use), drop them and empty torch's cache;
irisd is SIGKILLed and started again; the next all-gather failed with daemon_gone, because the
resume registered the freed memory again and one failure ended the session. Graph captures (which
empty the cache when entered) and expandable segments did the same. Each case here: first
collectives, the memory freed (or a graph captured), irisd SIGKILLed and restarted by this
script, then collectives (and graph replays) on new tensors, every element checked.
    python3 tests/python/gpu/freed_memory_resume.py --irisd PATH [--case empty_cache|graph|plan_freed]
(plan_freed: a second graph's collective names memory freed before the restart; its plan must
fail alone at check_graphs with the reason, and the rest must resume.)
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for the expandable-segments case.)"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import ranks  # noqa: E402


def wait_for(path, seconds=120):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {seconds} s")
        time.sleep(0.01)


def gathered(rank_values, n):
    import torch
    return torch.cat([torch.full((n,), float(v), device="cuda") for v in rank_values])


def job(rank, nranks, case, marker, restarted):
    import torch
    import torch.distributed as dist

    n = 1 << 20
    checks = 0
    # First collectives: tensors registered with irisd on first use, then freed.
    for step in range(3):
        t = torch.full((n,), float(rank + 10 * step), device="cuda")
        out = torch.empty(n * nranks, device="cuda")
        dist.all_gather_into_tensor(out, t)
        torch.cuda.synchronize()
        assert torch.equal(out, gathered([r + 10 * step for r in range(nranks)], n))
        checks += 1
    del t, out
    graph = None
    lost_graph = None
    if case in ("graph", "plan_freed"):
        # A graph captured after the first collectives (irisd's own API, as graphs are captured
        # with it): entering the capture empties torch's cache, freeing the memory above.
        import irisd
        client = irisd.Client(name=f"freed graph {rank}")
        comm = irisd.Communicator(client, "freed/graph", nranks, rank)
        src = torch.empty(n, device="cuda")
        dst = torch.empty(n * nranks, device="cuda")
        client.register_tensor(src)
        client.register_tensor(dst)
        stream, graph = torch.cuda.Stream(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            comm.all_gather(src, dst, n * 4, stream=stream)
        torch.cuda.synchronize()
        if case == "plan_freed":
            # A second graph whose collective names memory freed before the restart (kept
            # neither by the graph nor by Python): its plan cannot resume, and must fail alone.
            gone_src = torch.empty(n, device="cuda")
            gone_dst = torch.empty(n * nranks, device="cuda")
            client.register_tensor(gone_src)
            client.register_tensor(gone_dst)
            lost_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(lost_graph, stream=stream):
                comm.all_gather(gone_src, gone_dst, n * 4, stream=stream)
            torch.cuda.synchronize()
            del gone_src, gone_dst
            torch.cuda.empty_cache()
    else:
        torch.cuda.empty_cache()
    dist.barrier()
    if rank == 0:
        open(marker, "w").close()
    wait_for(restarted)
    if lost_graph is not None:
        # The plan naming freed memory fails alone, with its reason; the other graph and the
        # collectives resume. (Not replayed: its own copy nodes would use the freed memory.)
        comm.barrier()  # through the ring: returns once this client's session resumed
        try:
            client.check_graphs()
            raise AssertionError("a graph naming freed memory resumed without a word")
        except irisd.IrisError as e:
            assert "could not be carried to the restarted irisd" in e.message, e
        checks += 1
        del lost_graph
        try:
            client.check_graphs()  # reported once more for the graph just destroyed
        except irisd.IrisError:
            pass
        client.check_graphs()
    # After the restart: new tensors (some at the freed addresses), and the graph replayed.
    for step in range(5):
        t = torch.full((n,), float(rank + 1000 + step), device="cuda")
        out = torch.empty(n * nranks, device="cuda")
        dist.all_gather_into_tensor(out, t)
        torch.cuda.synchronize()
        assert torch.equal(out, gathered([r + 1000 + step for r in range(nranks)], n)), step
        checks += 1
        if graph is not None:
            src.fill_(float(rank + 200 + step))
            torch.cuda.synchronize()  # every rank's new data is in place before any replays
            dist.barrier()
            graph.replay()
            torch.cuda.synchronize()
            client.check_graphs()
            assert torch.equal(dst, gathered([r + 200 + step for r in range(nranks)], n)), step
            checks += 1
    if graph is not None:
        del graph
        comm.destroy()
    return checks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--irisd", required=True)
    parser.add_argument("--case", default="empty_cache",
                        choices=["empty_cache", "graph", "plan_freed"])
    parser.add_argument("--nranks", type=int, default=2)
    args = parser.parse_args()
    d = tempfile.mkdtemp(prefix="iris-freed-")
    sock = os.path.join(d, "irisd.sock")
    log = open(os.path.join(d, "irisd.log"), "ab")

    def start():
        proc = subprocess.Popen([args.irisd, "--socket", sock, "--engine", "cuda"], stdout=log,
                                stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(sock + ".attach")
                return proc
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("irisd did not start within 60 s")

    state = {"proc": start()}
    os.environ["IRIS_SOCKET"] = sock
    marker, restarted = os.path.join(d, "freed"), os.path.join(d, "restarted")

    def restarter():
        wait_for(marker, 300)
        state["proc"].send_signal(signal.SIGKILL)
        state["proc"].wait(30)
        state["proc"] = start()
        open(restarted, "w").close()

    threading.Thread(target=restarter, daemon=True).start()
    results = ranks.run(job, nranks=args.nranks, args=(args.case, marker, restarted), timeout=300)
    state["proc"].terminate()
    state["proc"].wait(30)
    alloc = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default allocator")
    print(f"freed memory through a restart ({args.case}, {alloc}, {args.nranks} ranks): "
          f"{sum(results.values())} checks passed")


if __name__ == "__main__":
    main()
