"""Where a 4 KiB all-gather's time goes through irisd's libnccl.so.2 in a PyTorch job whose ranks
share the GPU: through ProcessGroupNCCL a call took ~450 us, through the C program on the same API
37 us (host waits) or 455 us (stream waits), through irisd's torch backend 65-110 us. Each way in
is timed in the same job, one after another, so that what differs between them is named:

  pg            dist.all_gather_into_tensor on the default ("nccl") group
  api-side      ncclAllGather called directly (ctypes) on a communicator of this library made
                through the API, torch tensors, a stream of torch's (not the legacy one)
  api-pg-order  the same ordered as ProcessGroupNCCL orders it: the side stream waits for the
                current one (torch's legacy default stream), the call, the current stream waits
                for the side one
  api-group     api-side inside ncclGroupStart/ncclGroupEnd
  api-memalloc  api-side on ncclMemAlloc'd buffers instead of torch's
  api-null      torch tensors, the null (legacy) stream, torch's current one

then, once a group of irisd's torch backend exists in the job ("+irisd" rows), pg, api-side and
api-memalloc again, and that backend itself. Each: the median of single calls (a CPU barrier,
then the call and a device synchronization) and back to back (the calls queued, one
synchronization, time per call). Prints one markdown row per way in.
Needs IRIS_SOCKET, PYTHONPATH/IRIS_LIBRARY, LD_PRELOAD naming irisd's libnccl.so.2.
    python3 tests/bench/gpu/nccl_call_paths.py [--ranks 2] [--calls 200]"""
import argparse
import ctypes
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python" / "gpu"))
import ranks  # noqa: E402

BYTES = 4096
NCCL_INT8 = 0


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def nccl_check(result, what):
    if result != 0:
        raise RuntimeError(f"{what} failed: ncclResult_t {result}")


def bench(rank, nranks, calls):
    import torch
    import torch.distributed as dist

    from nccl_preload_test import check_library

    check_library()
    lib = ctypes.CDLL(None)
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId,
                                     ctypes.c_int]
    lib.ncclAllGather.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                  ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.ncclMemAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cpu = dist.new_group(list(range(nranks)), backend="gloo")

    uid = UniqueId()
    if rank == 0:
        nccl_check(lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    shared = [bytes(uid) if rank == 0 else None]
    dist.broadcast_object_list(shared, src=0, group=cpu)
    uid = UniqueId.from_buffer_copy(shared[0])
    comm = ctypes.c_void_p()
    nccl_check(lib.ncclCommInitRank(ctypes.byref(comm), nranks, uid, rank), "ncclCommInitRank")

    x = torch.full((BYTES,), rank + 1, dtype=torch.uint8, device="cuda")
    out = torch.empty(BYTES * nranks, dtype=torch.uint8, device="cuda")
    current, side = torch.cuda.current_stream(), torch.cuda.Stream()
    send, recv = ctypes.c_void_p(), ctypes.c_void_p()
    nccl_check(lib.ncclMemAlloc(ctypes.byref(send), BYTES), "ncclMemAlloc")
    nccl_check(lib.ncclMemAlloc(ctypes.byref(recv), BYTES * nranks), "ncclMemAlloc")
    torch.cuda.synchronize()

    def api(sendbuf, recvbuf, stream):
        nccl_check(lib.ncclAllGather(sendbuf, recvbuf, BYTES, NCCL_INT8, comm, stream),
                   "ncclAllGather")

    def api_pg_order():
        side.wait_stream(current)
        api(x.data_ptr(), out.data_ptr(), side.cuda_stream)
        current.wait_stream(side)

    def api_group():
        nccl_check(lib.ncclGroupStart(), "ncclGroupStart")
        api(x.data_ptr(), out.data_ptr(), side.cuda_stream)
        nccl_check(lib.ncclGroupEnd(), "ncclGroupEnd")

    ways = [
        ("pg", lambda: dist.all_gather_into_tensor(out, x)),
        ("api-side", lambda: api(x.data_ptr(), out.data_ptr(), side.cuda_stream)),
        ("api-pg-order", api_pg_order),
        ("api-group", api_group),
        ("api-memalloc", lambda: api(send, recv, side.cuda_stream)),
        ("api-null", lambda: api(x.data_ptr(), out.data_ptr(), None)),
    ]

    def time_way(call):
        call()  # warm: first-use registration
        torch.cuda.synchronize()
        samples = []
        for _ in range(calls):
            dist.barrier(group=cpu)
            t0 = time.perf_counter()
            call()
            torch.cuda.synchronize()
            samples.append(time.perf_counter() - t0)
        dist.barrier(group=cpu)
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        return statistics.median(samples), (time.perf_counter() - t0) / calls

    def checked(name):
        out.zero_()
        torch.cuda.synchronize()
        dict(ways)[name]()
        torch.cuda.synchronize()
        want = torch.cat([torch.full((BYTES,), r + 1, dtype=torch.uint8) for r in range(nranks)])
        assert torch.equal(out.cpu(), want), f"{name}: wrong all-gather result"

    rows = []
    for name, call in ways:
        if name != "api-memalloc":
            checked(name)
        rows.append((name, *time_way(call)))
    iris = dist.new_group(list(range(nranks)), backend="cpu:gloo,cuda:irisd")
    dist.all_gather_into_tensor(out, x, group=iris)
    torch.cuda.synchronize()
    for name, call in ways:
        if name in ("pg", "api-side", "api-memalloc"):
            rows.append((name + " +irisd", *time_way(call)))
    rows.append(("irisd torch backend",
                 *time_way(lambda: dist.all_gather_into_tensor(out, x, group=iris))))
    nccl_check(lib.ncclCommDestroy(comm), "ncclCommDestroy")
    lib.ncclMemFree(send)
    lib.ncclMemFree(recv)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    rows = ranks.run(bench, args.ranks, (args.calls,), backend="nccl")[0]
    print("| way in (4 KiB all-gather) | single call, median (us) | back to back (us a call) |")
    print("| --- | ---: | ---: |")
    for name, single, b2b in rows:
        print(f"| {name} | {1e6 * single:.1f} | {1e6 * b2b:.1f} |")


if __name__ == "__main__":
    main()
