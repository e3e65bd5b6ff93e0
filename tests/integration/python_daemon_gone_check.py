"""The Python binding while irisd dies: a wait(), a wait(timeout) loop, a test() loop and a
barrier, each on its own client and waiting for a rank that never comes, must each raise
IrisError daemon_gone once this script SIGKILLs irisd, within seconds (not hang). Where torch
loads (not under a preloaded sanitizer runtime), so must dist.barrier() of the torch backend in a
two-rank group whose other rank never calls it. Run by integration_tests
(PythonBinding.NoticesThatIrisdDied); prints the delays.
    python3 python_daemon_gone_check.py --socket PATH --daemon-pid PID"""
import argparse
import multiprocessing as mp
import os
import signal
import tempfile
import threading
import time

HUNG_S = 5.0


def wait_forever(request):
    request.wait()


def wait_in_slices(request):
    while not request.wait(timeout=0.01):
        pass


def test_in_a_loop(request):
    while not request.test():
        pass


def barrier(comm):
    comm.barrier()


def torch_rank(rank, store, socket, ready, seen):
    """Rank 0 calls dist.barrier(); rank 1 joins the group and never does."""
    os.environ["IRIS_SOCKET"] = socket
    import torch.distributed as dist

    import irisd.distributed  # noqa: F401  registers the backend

    dist.init_process_group("irisd", init_method=f"file://{store}", rank=rank, world_size=2)
    ready.release()
    if rank == 1:
        time.sleep(3600)
    try:
        dist.barrier()
        seen.put(("returned", time.monotonic()))
    except Exception as e:  # noqa: BLE001 - torch may wrap it; irisd's name is in the text
        seen.put(("daemon_gone" if "daemon_gone" in str(e) else repr(e), time.monotonic()))


def start_torch_ranks(socket):
    """Two torch ranks, rank 0 in a barrier; ([], None) where torch does not load."""
    if "LD_PRELOAD" in os.environ:
        return [], None
    try:
        import torch  # noqa: F401
    except ImportError:
        return [], None
    ctx = mp.get_context("spawn")
    store = tempfile.mktemp(prefix="iris-gone-store-")
    ready, seen = ctx.Semaphore(0), ctx.Queue()
    ranks = [ctx.Process(target=torch_rank, args=(r, store, socket, ready, seen), daemon=True)
             for r in range(2)]
    for p in ranks:
        p.start()
    for _ in ranks:
        assert ready.acquire(timeout=60), "the torch ranks did not form their group"
    return ranks, seen


def main():
    import irisd

    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--daemon-pid", type=int, required=True)
    args = parser.parse_args()

    torch_ranks, torch_seen = start_torch_ranks(args.socket)
    paths = {"wait()": wait_forever, "wait(0.01) in a loop": wait_in_slices,
             "test() in a loop": test_in_a_loop, "barrier()": barrier}
    seen, keep, threads = {}, [], []
    for i, (name, body) in enumerate(paths.items()):
        client = irisd.Client(args.socket, name=f"python-gone-{i}")
        comm = irisd.Communicator(client, f"python-gone-{i}", 2, 0)  # rank 1 never comes
        send, recv = client.allocate(64), client.allocate(128)
        request = comm.all_gather(send, recv, 64)
        keep.append((client, comm, request, send, recv))

        def run(name=name, body=body, target=comm if body is barrier else request):
            try:
                body(target)
                seen[name] = ("returned", time.monotonic())
            except irisd.IrisError as e:
                seen[name] = (e.name, time.monotonic())

        threads.append(threading.Thread(target=run, daemon=True))
    for t in threads:
        t.start()
    time.sleep(0.3)
    assert not seen, f"ended before irisd did: {seen}"
    killed = time.monotonic()
    os.kill(args.daemon_pid, signal.SIGKILL)
    for t in threads:
        t.join(HUNG_S)
    if torch_ranks:
        paths["torch dist.barrier()"] = None
        try:
            seen["torch dist.barrier()"] = torch_seen.get(timeout=HUNG_S)
        except Exception:  # noqa: BLE001 - queue.Empty: the barrier hung
            pass
        for p in torch_ranks:
            p.kill()
    failed = []
    for name in paths:
        if name not in seen:
            failed.append(f"{name}: still waiting {HUNG_S} s after irisd died")
            continue
        what, at = seen[name]
        print(f"python: {name:24s} noticed after {(at - killed) * 1e3:7.2f} ms as {what}")
        if what != "daemon_gone":
            failed.append(f"{name}: {what}, expected daemon_gone")
    if failed:
        raise SystemExit("\n".join(failed))
    print("python daemon gone: ok")


if __name__ == "__main__":
    main()
