"""PyTorch's own "nccl" backend on irisd, on the GPU host: irisd's libnccl.so.2 preloaded
(LD_PRELOAD) in front of the NCCL that torch loads, ranks sharing the one GPU, the training
scripts unchanged. Checks that the library answers (ncclGetVersion as the process resolves it is irisd's 22800,
the real one's is 22809), then, each against a reference computed here:
  ops       every torch.distributed collective and point-to-point op, several dtypes and
            reductions, on 2 and 3 ranks (8 with --ranks 8)
  fsdp      FSDP2 (fully_shard) against one process training the same model
  hsdp      HSDP on a 2x2 mesh (4 ranks: sub-groups made by torch through NCCL's API)
  pipeline  torch.distributed.pipelining 1F1B with 3 stages
  graph     a CUDA graph capturing NCCL all-reduces and all-gathers, replayed
  compile   functional collectives inside torch.compile
  strict    IRISD_NCCL_STRICT=1: an all-gather runs, an all-reduce (a kernel) is refused
With --restart-irisd N the script runs its own irisd (--irisd PATH, cuda engine) and SIGKILLs and
starts it again N times once training is under way; the parts fsdp and pipeline then train 150
steps each, through the restarts, and are checked as above.
Needs IRIS_SOCKET (an irisd with the cuda engine) and LD_PRELOAD naming the library (on an AMD
node, PyTorch for ROCm and irisd's librccl.so.1 with the hsa engine: scripts/mi300-first-run.sh).
    python3 tests/python/gpu/nccl_preload_test.py [--parts ops,fsdp,...] [--ranks 8]
                                                  [--restart-irisd 5 --irisd PATH]"""
import argparse
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ranks  # noqa: E402

IRISD_NCCL = 22800  # ncclGetVersion of irisd's library (the real one on the GPU host: 22809)


def check_library():
    """The process resolves NCCL's symbols to irisd's library (torch.cuda.nccl.version() gives the
    version torch was built against, not the one it runs on)."""
    import ctypes

    version = ctypes.c_int()
    ctypes.CDLL(None).ncclGetVersion(ctypes.byref(version))
    assert version.value == IRISD_NCCL, \
        f"NCCL's symbols resolve to version {version.value}, not irisd's library: preload it"


def ops_main(rank, nranks, seed):
    import torch
    import torch.distributed as dist

    check_library()
    dev = torch.device("cuda", 0)
    g = torch.Generator(device="cpu").manual_seed(seed)
    checks = 0

    def inputs(shape, dtype, r):
        # Small integers: exact in every dtype and every reduction order.
        t = torch.randint(0, 4, shape, generator=torch.Generator().manual_seed(seed + 7 * r))
        return t.to(dtype).to(dev)

    def same(got, want, what):
        nonlocal checks
        checks += 1
        if not torch.equal(got.cpu(), want.cpu()):
            bad = (got.cpu() != want.cpu()).nonzero()[:5].tolist()
            raise AssertionError(f"{what}: differs at {bad}")

    n = 4099 + int(torch.randint(0, 100, (1,), generator=g))
    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int8]
    for dtype in dtypes:
        mine = inputs((n,), dtype, rank)
        every = [inputs((n,), dtype, r) for r in range(nranks)]
        stacked = torch.stack([e.double() for e in every])
        for op, want in [(dist.ReduceOp.SUM, stacked.sum(0)), (dist.ReduceOp.MAX, stacked.max(0).values),
                         (dist.ReduceOp.MIN, stacked.min(0).values),
                         (dist.ReduceOp.PRODUCT, stacked.prod(0))]:
            if op == dist.ReduceOp.PRODUCT and dtype in (torch.float16, torch.bfloat16, torch.int8):
                continue  # 4^ranks leaves the exact range
            t = mine.clone()
            dist.all_reduce(t, op=op)
            same(t, want.to(dtype), f"all_reduce {op} {dtype}")
        if dtype.is_floating_point:
            t = mine.clone()
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            same(t, (stacked.sum(0) / nranks).to(dtype), f"all_reduce AVG {dtype}")
        # reduce_scatter_tensor and all_gather_into_tensor.
        big = torch.cat([inputs((n,), dtype, r * 31 + rank) for r in range(nranks)])
        out = torch.empty(n, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(out, big)
        want = sum(inputs((n,), dtype, rank * 31 + r).double() for r in range(nranks))
        same(out, want.to(dtype), f"reduce_scatter_tensor {dtype}")
        gathered = torch.empty(n * nranks, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(gathered, mine)
        same(gathered, torch.cat(every), f"all_gather_into_tensor {dtype}")
    # The list forms, broadcast, reduce, gather, scatter, all_to_all(_single), send/recv.
    mine = inputs((n,), torch.float32, rank)
    every = [inputs((n,), torch.float32, r) for r in range(nranks)]
    outs = [torch.empty_like(mine) for _ in range(nranks)]
    dist.all_gather(outs, mine)
    for r in range(nranks):
        same(outs[r], every[r], "all_gather")
    root = nranks - 1
    t = mine.clone()
    dist.broadcast(t, src=root)
    same(t, every[root], "broadcast")
    t = mine.clone()
    dist.reduce(t, dst=0)
    if rank == 0:
        same(t, sum(every), "reduce")
    gl = [torch.empty_like(mine) for _ in range(nranks)] if rank == root else None
    dist.gather(mine, gl, dst=root)
    if rank == root:
        for r in range(nranks):
            same(gl[r], every[r], "gather")
    parts = [inputs((n,), torch.float32, 100 * root + r) for r in range(nranks)]
    t = torch.empty_like(mine)
    dist.scatter(t, parts if rank == root else None, src=root)
    same(t, inputs((n,), torch.float32, 100 * root + rank), "scatter")
    blocks = torch.cat([inputs((64,), torch.float32, 1000 * rank + p) for p in range(nranks)])
    t = torch.empty_like(blocks)
    dist.all_to_all_single(t, blocks)
    same(t, torch.cat([inputs((64,), torch.float32, 1000 * p + rank) for p in range(nranks)]),
         "all_to_all_single")
    # Uneven splits: rank r sends r + p + 1 elements to p (torch runs it as a group of sends
    # and receives).
    send_splits = [rank + p + 1 for p in range(nranks)]
    recv_splits = [p + rank + 1 for p in range(nranks)]
    src = torch.cat([torch.full((send_splits[p],), float(rank * 10 + p), device=dev)
                     for p in range(nranks)])
    t = torch.empty(sum(recv_splits), device=dev)
    dist.all_to_all_single(t, src, recv_splits, send_splits)
    same(t, torch.cat([torch.full((recv_splits[p],), float(p * 10 + rank), device=dev)
                       for p in range(nranks)]), "all_to_all_single uneven")
    ins = [inputs((33,), torch.float32, 50 * rank + p) for p in range(nranks)]
    outs = [torch.empty(33, device=dev) for _ in range(nranks)]
    dist.all_to_all(outs, ins)
    for p in range(nranks):
        same(outs[p], inputs((33,), torch.float32, 50 * p + rank), "all_to_all")
    right, left = (rank + 1) % nranks, (rank - 1) % nranks
    got = torch.empty(n, device=dev)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, right),
                                   dist.P2POp(dist.irecv, got, left)])
    for r in reqs:
        r.wait()
    same(got, every[left], "batch_isend_irecv ring")
    if nranks >= 2:
        if rank == 0:
            dist.send(mine, 1)
        elif rank == 1:
            got = torch.empty(n, device=dev)
            dist.recv(got, 0)
            same(got, every[0], "send/recv")
    work = dist.all_reduce(mine.clone(), async_op=True)
    work.wait()
    dist.barrier()
    torch.cuda.synchronize()
    return checks


def train_sharded(rank, nranks, steps, mesh_of):
    """FSDP2 over the mesh `mesh_of()` makes, each rank training on its share of every step's
    batch; returns (losses, one process's losses, the largest parameter difference from one
    process trained on the whole batches)."""
    import torch

    from fsdp_train_test import batches, build_model, reference, shard, train_step, BATCH

    check_library()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ref_losses, ref_params = reference(steps)
    model = build_model()
    shard(model, mesh_of())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = batches(steps)
    per = 2 * BATCH // nranks
    losses = []
    for step in range(steps):
        losses.append(train_step(model, optimizer, data[step, rank * per:(rank + 1) * per].cuda()))
        if step == 0 and rank == 0 and os.environ.get("IRIS_TEST_TRAINING_MARKER"):
            pathlib.Path(os.environ["IRIS_TEST_TRAINING_MARKER"]).touch()  # restarts may begin
    worst = max(float((p.full_tensor().detach().cpu() - ref_params[name]).abs().max())
                for name, p in model.named_parameters())
    return losses, ref_losses, worst


def fsdp_main(rank, nranks, steps):
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    losses, ref_losses, worst = train_sharded(
        rank, nranks, steps, lambda: DeviceMesh.from_group(dist.group.WORLD, "cuda"))
    assert worst < 1e-3, f"FSDP2 parameters differ from one process's by {worst}"
    return {"worst": worst, "loss0": losses[0], "loss_last": losses[-1],
            "ref_last": ref_losses[-1]}


def hsdp_main(rank, nranks, steps):
    from torch.distributed.device_mesh import init_device_mesh

    _, _, worst = train_sharded(
        rank, nranks, steps,
        lambda: init_device_mesh("cuda", (2, nranks // 2), mesh_dim_names=("replicate", "shard")))
    assert worst < 1e-3, f"HSDP parameters differ from one process's by {worst}"
    return worst


def pipeline_main(rank, nranks, steps):
    from pipeline_test import pipeline_run

    check_library()
    return pipeline_run(rank, nranks, "Schedule1F1B", steps)


def graph_main(rank, nranks, replays):
    import torch
    import torch.distributed as dist

    check_library()
    dev = torch.device("cuda", 0)
    x = torch.zeros(1 << 16, device=dev)
    summed = torch.empty_like(x)
    gathered = torch.empty(x.numel() * nranks, device=dev)
    dist.all_reduce(torch.ones(1, device=dev))  # the communicator exists before the capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        summed.copy_(x)
        dist.all_reduce(summed)
        dist.all_gather_into_tensor(gathered, x)
    torch.cuda.current_stream().wait_stream(side)
    for k in range(replays):
        x.fill_(float(rank + k))
        graph.replay()
        torch.cuda.synchronize()
        want = float(sum(r + k for r in range(nranks)))
        assert bool((summed == want).all()), f"replay {k}: all-reduce gave {summed[0].item()}"
        for r in range(nranks):
            part = gathered[r * x.numel():(r + 1) * x.numel()]
            assert bool((part == float(r + k)).all()), f"replay {k}: block {r}"
    return replays


def compile_main(rank, nranks):
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    check_library()

    @torch.compile
    def step(x):
        y = funcol.all_reduce(x * 2, "sum", dist.group.WORLD)
        return funcol.all_gather_tensor(y + 1, 0, dist.group.WORLD)

    x = torch.full((1024,), float(rank), device="cuda")
    out = step(x)
    want = 2 * sum(range(nranks)) + 1
    assert bool((out == want).all()), f"compiled functional collectives gave {out[0].item()}"
    return out.numel()


def strict_main(rank, nranks):
    import torch
    import torch.distributed as dist

    check_library()
    x = torch.ones(4096, device="cuda")
    out = torch.empty(4096 * nranks, device="cuda")
    dist.all_gather_into_tensor(out, x)  # copy engines only: allowed
    torch.cuda.synchronize()
    assert bool((out == 1).all())
    try:
        dist.all_reduce(x)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - torch wraps NCCL's error in its own
        assert "IRISD_NCCL_STRICT" in str(e), f"refused for another reason: {e}"
        return str(e).splitlines()[0][:200]
    raise AssertionError("IRISD_NCCL_STRICT=1 let an all-reduce run its kernel")


def restarts_main(irisd, times, parts):
    """FSDP2 and the 3-stage pipeline, each with irisd SIGKILLed and restarted `times` times
    while it trains; fails unless every restart came while the ranks trained."""
    from fsdp_train_test import RestartingIrisd

    steps = 150
    print(f"PyTorch nccl backend on irisd through {times} SIGKILLs of irisd per part:")
    for part in ("fsdp", "pipeline"):
        if part not in parts:
            continue
        restarting = RestartingIrisd(irisd, times)
        try:
            if part == "fsdp":
                r = ranks.run(fsdp_main, 2, (steps,), backend="nccl")[0]
                what = (f"FSDP2, 2 ranks, {steps} steps: max parameter difference "
                        f"{r['worst']:.2e}")
            else:
                ranks.run(pipeline_main, 3, (steps,), backend="nccl")
                what = f"pipelining 1F1B, 3 stages, {steps} steps: as one process"
        finally:
            restarting.stop()
        assert restarting.under_training == times, \
            f"{part}: training ended after {restarting.under_training} of {times} restarts"
        print(f"  {what}; irisd restarted {restarting.under_training} times under it")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="ops,fsdp,hsdp,pipeline,graph,compile,strict")
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(3), "little"))
    parser.add_argument("--restart-irisd", type=int, default=0,
                        help="kill irisd this many times in each training part (needs --irisd)")
    parser.add_argument("--irisd", help="the irisd binary to run and restart")
    args = parser.parse_args()
    parts = args.parts.split(",")
    preload = os.environ.get("LD_PRELOAD", "")
    assert "libnccl" in preload or "librccl" in preload, \
        "preload irisd's libnccl.so.2 (librccl.so.1 with PyTorch for ROCm)"
    if args.restart_irisd:
        restarts_main(args.irisd, args.restart_irisd, parts)
        return
    report = []
    if "ops" in parts:
        for n in sorted({2, args.ranks}):
            checks = ranks.run(ops_main, n, (args.seed,), backend="nccl")
            report.append(f"ops, {n} ranks: {sum(checks.values())} checks")
    if "fsdp" in parts:
        r = ranks.run(fsdp_main, 2, (20,), backend="nccl")[0]
        report.append(f"FSDP2, 2 ranks, 20 steps: max parameter difference {r['worst']:.2e}, "
                      f"loss {r['loss0']:.4f} -> {r['loss_last']:.4f} (one process "
                      f"{r['ref_last']:.4f})")
    if "hsdp" in parts:
        worst = ranks.run(hsdp_main, 4, (10,), backend="nccl")[0]
        report.append(f"HSDP 2x2, 4 ranks, 10 steps: max parameter difference {worst:.2e}")
    if "pipeline" in parts:
        ranks.run(pipeline_main, 3, (3,), backend="nccl")
        report.append("pipelining 1F1B, 3 stages, 3 steps: losses and parameters as one process")
    if "graph" in parts:
        n = ranks.run(graph_main, 2, (20,), backend="nccl")[0]
        report.append(f"CUDA graph with NCCL calls, 2 ranks: {n} replays checked")
    if "strict" in parts:
        os.environ["IRISD_NCCL_STRICT"] = "1"
        why = ranks.run(strict_main, 2, (), backend="nccl", barrier=False)[0]
        del os.environ["IRISD_NCCL_STRICT"]
        report.append(f"IRISD_NCCL_STRICT=1: all-gather ran, all-reduce refused: {why}")
    if "compile" in parts:
        ranks.run(compile_main, 2, (), backend="nccl")
        report.append("functional collectives under torch.compile, 2 ranks: checked")
    print("PyTorch nccl backend on irisd (libnccl.so.2 preloaded):")
    for line in report:
        print("  " + line)


if __name__ == "__main__":
    main()
