"""Host cost of one stream-ordered 4 KiB all-gather call from Python, measured as
iris-gpu-bench --mode submit measures the C++ one: 2000 calls enqueued on one stream and kept (not
waited) while timing, then synchronized; one rank. Three ways in: the ctypes binding on tensors
registered by hand (register_tensor), the same on tensors never registered (libiris's first-use
registration: a lookup per call), and torch.distributed.all_gather_into_tensor through the "irisd"
backend, with async_op=True and blocking (both enqueue-only: a blocking call makes the stream,
not the host, wait), with NCCL's backend through the same calls as the baseline, and torch's own
C++ no-op backend ("fake", where this torch has it: every collective returns a finished Work at
once), which is what torch.distributed's wrapper and dispatch cost any backend written in C++,
the floor of a C++ ProcessGroup for irisd. Then where the backend's time goes: the group's own
method called directly (what torch.distributed's wrapper adds is the difference), and with
--profile a cProfile of the backend's calls (its own overhead inflates every figure; read the
order, not the values).
Needs IRIS_SOCKET, PYTHONPATH / IRIS_LIBRARY and torch with CUDA.
    python3 tests/bench/gpu/call_overhead.py [--profile]"""
import cProfile
import pstats
import sys
import tempfile
import time
from datetime import timedelta

import irisd
import irisd.distributed
import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d  # the options types, in every torch version

CALLS, BYTES = 2000, 4096


def nccl_version():
    """Which NCCL torch calls: irisd's libnccl.so.2 when preloaded (its ncclGetVersion, 22800,
    resolves globally), else the one torch loaded privately (torch's version of it)."""
    import ctypes

    version = ctypes.c_int()
    try:
        ctypes.CDLL(None).ncclGetVersion(ctypes.byref(version))
        return f"irisd {version.value}"
    except AttributeError:
        return "NCCL " + ".".join(map(str, torch.cuda.nccl.version()))


def timed(label, call, stream):
    for sample in range(3):  # the first warms up
        t0 = time.perf_counter()
        kept = [call() for _ in range(CALLS)]
        elapsed = time.perf_counter() - t0
        stream.synchronize()
        for k in kept:
            if isinstance(k, irisd.Request):
                k.wait()
        if sample > 0:
            print(f"{label}: {CALLS} stream-ordered {BYTES}-byte all-gathers, "
                  f"host time per call {1e6 * elapsed / CALLS:.2f} us")


client = irisd.Client(name="call_overhead")
comm = irisd.Communicator(client, "call_overhead", nranks=1, rank=0)
stream = torch.cuda.Stream()
x = torch.ones(BYTES // 4, device="cuda")
y = torch.empty_like(x)
client.register_tensor(x)
client.register_tensor(y)
timed("Python (ctypes), registered tensors", lambda: comm.all_gather(x, y, BYTES, stream=stream),
      stream)
u = torch.ones(BYTES // 4, device="cuda") * 2
v = torch.empty_like(u)
timed("Python (ctypes), first-use registration",
      lambda: comm.all_gather(u, v, BYTES, stream=stream), stream)
with tempfile.NamedTemporaryFile() as store:
    dist.init_process_group("cpu:gloo,cuda:irisd", init_method=f"file://{store.name}", rank=0,
                            world_size=1)
    nccl = dist.new_group([0], backend="nccl")
    try:
        import torch.testing._internal.distributed.fake_pg  # noqa: F401 (registers "fake")
        fake = dist.new_group([0], backend="fake")
    except Exception as e:  # torch versions without it
        fake = None
        print(f"torch's no-op C++ backend (fake): not in this torch ({e})")
    with torch.cuda.stream(stream):
        for async_op in (True, False):
            form = "async_op=True" if async_op else "blocking"
            timed(f"torch.distributed backend irisd, all_gather_into_tensor, {form}",
                  lambda: dist.all_gather_into_tensor(v, u, async_op=async_op), stream)
            timed(f"torch.distributed backend nccl {nccl_version()} (baseline), "
                  f"all_gather_into_tensor, {form}",
                  lambda: dist.all_gather_into_tensor(v, u, group=nccl, async_op=async_op),
                  stream)
            if fake is not None:
                timed(f"torch.distributed backend fake (C++, moves nothing), all_gather_into_tensor,"
                      f" {form}",
                      lambda: dist.all_gather_into_tensor(v, u, group=fake, async_op=async_op),
                      stream)
        with tempfile.NamedTemporaryFile() as own_store:
            iris_group = irisd.distributed.IrisProcessGroup(dist.FileStore(own_store.name, 1), 0,
                                                            1, timedelta(seconds=60))
        opts = c10d.AllgatherOptions()
        timed("the irisd group's _allgather_base, called directly",
              lambda: iris_group._allgather_base(v, u, opts), stream)
        if "--profile" in sys.argv:
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(CALLS):
                dist.all_gather_into_tensor(v, u, async_op=True)
            profile.disable()
            stream.synchronize()
            pstats.Stats(profile).sort_stats("tottime").print_stats(18)
    dist.destroy_process_group()
