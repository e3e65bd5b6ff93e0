"""The torch.distributed backend "irisd" where torch has no CUDA (CI: Debian's python3-torch 1.13,
CPU only) against a real irisd: registration with torch.distributed, two real rank processes
joining a group through init_process_group, CPU tensors through the group's gloo, the barrier
through irisd, a group's traffic class through pg_options, the reductions and split arithmetic the CUDA path uses (on CPU tensors), and the
refusals (a receive from any source, CUDA tensors under the host engine); CPU sends and receives
go through the group's gloo. With several sockets, rank r uses daemon
r % n, so the group spans "nodes". Prints "torch backend: ok" on success.
    python3 python_torch_check.py --socket PATH[,PATH...]"""
import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import traceback


def expect_error(what, call, words):
    import irisd

    try:
        call()
    except irisd.IrisError as e:
        assert all(w in e.message for w in words), f"{what}: message {e.message!r} lacks {words}"
        return
    raise AssertionError(f"{what}: no error")


def rank_main(rank, store, sockets, queue):
    try:
        os.environ["IRIS_SOCKET"] = sockets[rank % len(sockets)]
        import torch
        import torch.distributed as dist
        from torch.distributed import ReduceOp

        import irisd.distributed as backend

        dist.init_process_group("irisd", init_method=f"file://{store}", rank=rank, world_size=2)
        group = dist.distributed_c10d._get_default_group()
        assert isinstance(group, backend.IrisProcessGroup), type(group)
        assert (group.nodes is not None) == (len(sockets) > 1), "nodes found wrongly"
        # No CUDA here, so no two ranks share a GPU; a bad setting of the shared-GPU mode is named.
        assert group.waits_on_host is False, "ranks without a GPU found sharing one"
        os.environ["IRIS_TORCH_SHARED_GPU"] = "sometimes"
        expect_error("IRIS_TORCH_SHARED_GPU=sometimes", backend._shared_gpu_mode,
                     ["IRIS_TORCH_SHARED_GPU", "host", "stream"])
        del os.environ["IRIS_TORCH_SHARED_GPU"]
        # Per group: the mode is set, a bad one named, and ranks without a shared GPU stay off it.
        backend.set_shared_gpu("host")
        assert group.waits_on_host is False, "set_shared_gpu made ranks on no shared GPU wait"
        group.shares_a_gpu = True  # as on one GPU: the setting now decides
        backend.set_shared_gpu("host", group)
        assert group.waits_on_host is True
        backend.set_shared_gpu("stream", group)
        assert group.waits_on_host is False
        group.shares_a_gpu = False
        expect_error("set_shared_gpu('sometimes')", lambda: backend.set_shared_gpu("sometimes"),
                     ["set_shared_gpu", "host", "stream"])
        # A group's traffic class through pg_options; a bad class or options type is named.
        bulk = dist.new_group([0, 1], backend="irisd", pg_options=backend.Options("bulk"))
        assert bulk.comm.traffic_class == "bulk", bulk.comm.traffic_class
        assert group.comm.traffic_class == "auto", group.comm.traffic_class
        dist.barrier(group=bulk)
        expect_error("Options('urgent')", lambda: backend.Options("urgent"),
                     ["traffic_class='urgent'", "latency", "bulk"])
        expect_error("pg_options of gloo's type",
                     lambda: backend._create(None, dist.ProcessGroupGloo._Options()),
                     ["irisd.distributed.Options", "_Options"])
        expect_error("set_shared_gpu on gloo",
                     lambda: backend.set_shared_gpu("host", dist.new_group([0, 1], backend="gloo")),
                     ["not irisd"])
        assert dist.get_rank() == rank and dist.get_world_size() == 2

        t = torch.arange(6, dtype=torch.float32) + 100 * rank
        outs = [torch.empty(6) for _ in range(2)]
        dist.all_gather(outs, t)
        for r in range(2):
            assert torch.equal(outs[r], torch.arange(6, dtype=torch.float32) + 100 * r), outs
        b = t.clone()
        dist.broadcast(b, src=1)
        assert torch.equal(b, torch.arange(6, dtype=torch.float32) + 100), b
        s = t.clone()
        dist.all_reduce(s)
        assert torch.equal(s, 2 * torch.arange(6, dtype=torch.float32) + 100), s
        for _ in range(3):
            dist.barrier()  # through irisd: a collective that moves nothing

        # The reductions the CUDA path runs after irisd's all-to-all, on CPU tensors here.
        stacked = torch.tensor([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]])
        for op, want in [(ReduceOp.SUM, stacked.sum(0)), (ReduceOp.AVG, stacked.sum(0) / 2),
                         (ReduceOp.PRODUCT, stacked.prod(0)), (ReduceOp.MIN, stacked.amin(0)),
                         (ReduceOp.MAX, stacked.amax(0))]:
            out = torch.empty(3)
            backend._reduce(stacked, op, out, 2, "reduce_scatter")
            assert torch.equal(out, want), (op, out, want)
        expect_error("BAND", lambda: backend._reduce(stacked, ReduceOp.BAND, torch.empty(3), 2,
                                                     "all_reduce"), ["all_reduce", "SUM"])
        expect_error("AVG of ints", lambda: backend._reduce(
            stacked.int(), ReduceOp.AVG, torch.empty(3, dtype=torch.int32), 2, "all_reduce"),
            ["floating-point"])

        rows = torch.empty(5, 3)  # 5 rows of 12 bytes
        assert backend._split_bytes(rows, [2, 3], 2, "x", "input") == [24, 36]
        assert backend._displacements([24, 36]) == [0, 24]
        expect_error("splits not adding up", lambda: backend._split_bytes(
            rows, [2, 2], 2, "all_to_all_single", "input"), ["adding up to 5"])
        expect_error("equal split of an odd count", lambda: backend._split_bytes(
            rows, [], 2, "all_to_all_single", "input"), ["divide by 2"])

        # Point to point: CPU tensors through the group's gloo; irisd matches a receive with the
        # sends of one named rank, so a receive from any source is refused, whatever the tensor.
        got = torch.full((6,), -1.0)
        if rank == 0:
            dist.send(t, dst=1)
            dist.recv(got, src=1)
        else:
            dist.recv(got, src=0)
            dist.send(t, dst=0)
        assert torch.equal(got, torch.arange(6, dtype=torch.float32) + 100 * (1 - rank)), got
        expect_error("recv from any source", lambda: dist.recv(got), ["any source"])
        expect_error("CUDA work on the host engine", lambda: group._check_engine(),
                     ["host engine", "--engine cuda"])
        dist.barrier()
        dist.destroy_process_group()
        queue.put((rank, None))
    except BaseException:
        queue.put((rank, traceback.format_exc()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    args = parser.parse_args()
    sockets = args.socket.split(",")
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch backend: skipped, no torch for this python3 (install python3-torch)")
        return 77
    store = tempfile.mktemp(prefix="iris-torch-")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, store, sockets, queue)) for r in range(2)]
    for p in procs:
        p.start()
    failures = []
    for _ in procs:
        rank, error = queue.get(timeout=120)
        if error:
            failures.append(f"rank {rank}:\n{error}")
    for p in procs:
        p.join(30)
    if failures:
        print("\n".join(failures))
        return 1
    print("torch backend: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
