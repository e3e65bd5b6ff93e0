"""Runs a function as N ranks (spawned processes) of one torch.distributed job on the one GPU,
with the "cpu:gloo,cuda:irisd" backend (or another one named); used by the GPU-host Python tests
here. Needs IRIS_SOCKET (an irisd with the cuda engine) and the iris package importable."""
import faulthandler
import multiprocessing as mp
import os
import sys
import tempfile
import traceback


def _child(fn, rank, nranks, store_path, args, queue, backend, barrier):
    faulthandler.enable()  # a crash in native code still says where
    try:
        import torch
        import torch.distributed as dist

        import irisd.distributed  # noqa: F401  registers the backend

        torch.cuda.set_device(0)
        dist.init_process_group(backend, init_method=f"file://{store_path}", rank=rank,
                                world_size=nranks)
        result = fn(rank, nranks, *args)
        if barrier:
            dist.barrier()
        dist.destroy_process_group()
        queue.put((rank, "ok", result))
    except BaseException:  # reported to the parent, which fails the test
        queue.put((rank, "error", traceback.format_exc()))


def run(fn, nranks=2, args=(), timeout=600, backend="cpu:gloo,cuda:irisd", barrier=True):
    """fn(rank, nranks, *args) in each rank, then a barrier unless `barrier` is False (a rank
    whose group can no longer run one); returns the results by rank, or exits with the failures
    printed."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    store = tempfile.NamedTemporaryFile(prefix="iris-ranks-", delete=False)
    store.close()
    os.unlink(store.name)
    procs = [ctx.Process(target=_child,
                         args=(fn, r, nranks, store.name, args, queue, backend, barrier))
             for r in range(nranks)]
    for p in procs:
        p.start()
    results, failed = {}, []
    try:
        for _ in procs:
            rank, status, value = queue.get(timeout=timeout)
            if status == "ok":
                results[rank] = value
            else:
                failed.append(f"rank {rank}:\n{value}")
    except Exception as e:  # a rank died without reporting, or the time ran out
        failed.append(f"ranks did not all report: {e!r}")
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    if failed:
        print("\n".join(failed), file=sys.stderr)
        sys.exit(1)
    return results
