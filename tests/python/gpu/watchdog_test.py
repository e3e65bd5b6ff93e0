"""The torch backend's watchdog on the GPU host: a group made with a 2 s timeout, 3 ranks sharing
the H200, rank 2 skipping one all-gather. Ranks 0 and 1 must get irisd.IrisError (timeout, naming
rank 2) from the call's Work or their next call, and their CUDA streams must go on (a bounded
torch.cuda.synchronize returns), in the backend's host path and, with IRIS_TORCH_SHARED_GPU=stream,
its streams' path; the mode set on the group with irisd.distributed.set_shared_gpu. Needs
IRIS_SOCKET (irisd --engine cuda). Prints "watchdog: ok"."""
import sys
import threading
from datetime import timedelta

import ranks


def synchronize_within(seconds):
    import torch
    done = threading.Event()
    threading.Thread(target=lambda: (torch.cuda.synchronize(), done.set()), daemon=True).start()
    return done.wait(seconds)


def job(rank, nranks):
    import torch
    import torch.distributed as dist

    import irisd

    import os

    import irisd.distributed as backend

    group = dist.new_group(list(range(nranks)), timeout=timedelta(seconds=2), backend="irisd")
    # The shared-GPU mode set on this group alone.
    mode = os.environ.get("IRIS_TORCH_SHARED_GPU", "host")
    backend.set_shared_gpu("stream" if mode == "host" else "host", group)
    backend.set_shared_gpu(mode, group)
    iris = group if isinstance(group, backend.IrisProcessGroup) else \
        group._get_backend(torch.device("cuda"))
    assert iris.waits_on_host == (mode == "host"), (mode, iris.waits_on_host)
    x = torch.full((1024,), float(rank), device="cuda")
    out = torch.empty(1024 * nranks, device="cuda")
    if rank == 2:
        return "skipped"
    error = None
    try:
        work = dist.all_gather_into_tensor(out, x, group=group, async_op=True)
        work.wait()
        torch.cuda.synchronize()
        dist.all_gather_into_tensor(out, x, group=group)  # the next call reports it, at the latest
    except irisd.IrisError as e:
        error = e
    assert error is not None, f"rank {rank}: a collective rank 2 never called did not fail"
    assert error.name == "timeout" and "rank 2" in error.message, f"rank {rank}: {error}"
    assert synchronize_within(30), f"rank {rank}: the stream still waits on irisd"
    return error.message[:80]


if __name__ == "__main__":
    results = ranks.run(job, nranks=3, timeout=240)
    print(results)
    print("watchdog: ok")
    sys.exit(0)
