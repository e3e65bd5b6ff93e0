"""torch's functional collectives and torch.compile on the irisd backend, on the GPU host: 2 ranks
on the one GPU ("cpu:gloo,cuda:irisd"). Checks, each against the values every rank can compute
on its own: _functional_collectives.all_gather_tensor, reduce_scatter_tensor (sum) and
all_to_all_single, eagerly and inside a torch.compile'd function; then three steps of a
torch.compile'd FSDP2 model (irisd.fsdp.use_iris) whose losses must equal an eager run's
(rtol 1e-4). Exits non-zero on any mismatch.
    python3 tests/python/gpu/functional_compile_test.py"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import fsdp_train_test  # noqa: E402  the model and its data
import ranks  # noqa: E402


def check_functional(rank, nranks):
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    group = dist.group.WORLD
    n = 1000 + 37  # odd on purpose
    mine = torch.arange(n, dtype=torch.float32, device="cuda") + 1000 * rank
    every = torch.cat([torch.arange(n, dtype=torch.float32, device="cuda") + 1000 * r
                       for r in range(nranks)])

    def collectives(x):
        gathered = fc.all_gather_tensor(x, 0, group)
        summed = fc.reduce_scatter_tensor(gathered * 2, "sum", 0, group)
        swapped = fc.all_to_all_single(gathered, None, None, group)
        return gathered, summed, swapped

    checks = 0
    for name, fn in (("eager", collectives), ("compiled", torch.compile(collectives))):
        gathered, summed, swapped = (fc.wait_tensor(t) for t in fn(mine))
        torch.cuda.synchronize()
        assert torch.equal(gathered, every), f"{name} all_gather_tensor"
        # Every rank contributes 2*every; rank r's block of the sum is nranks*2*every's block r.
        assert torch.equal(summed, (nranks * 2 * every).view(nranks, n)[rank]), \
            f"{name} reduce_scatter_tensor"
        # all_to_all_single of the gathered tensor: block j of rank r's input goes to rank j,
        # and every rank holds the same input, so rank r receives nranks copies of block r.
        assert torch.equal(swapped, every.view(nranks, n)[rank].repeat(nranks)), \
            f"{name} all_to_all_single"
        checks += 3
    return checks


def compiled_fsdp_losses(rank, nranks, compiled, steps):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    import irisd.fsdp

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    mesh = DeviceMesh.from_group(dist.group.WORLD, "cuda")
    model = fsdp_train_test.build_model()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    irisd.fsdp.use_iris(model)
    gathers = irisd.fsdp.IrisAllGather.calls
    step_model = torch.compile(model) if compiled else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = fsdp_train_test.batches(steps)
    B = fsdp_train_test.BATCH
    losses = [fsdp_train_test.train_step(step_model, optimizer,
                                         data[s, rank * B:(rank + 1) * B].cuda())
              for s in range(steps)]
    torch.cuda.synchronize()
    return losses, irisd.fsdp.IrisAllGather.calls - gathers


def rank_main(rank, nranks, steps):
    checks = check_functional(rank, nranks)
    eager, _ = compiled_fsdp_losses(rank, nranks, False, steps)
    compiled, gathers = compiled_fsdp_losses(rank, nranks, True, steps)
    return {"checks": checks, "eager": eager, "compiled": compiled, "gathers": gathers}


def main():
    steps = 3
    results = ranks.run(rank_main, nranks=2, args=(steps,))
    failures = 0
    for rank, r in sorted(results.items()):
        for e, c in zip(r["eager"], r["compiled"]):
            if abs(e - c) > 1e-4 * max(1.0, abs(e)):
                failures += 1
        if r["gathers"] == 0:
            failures += 1  # the compiled model's all-gathers did not go through irisd
    checks = sum(r["checks"] for r in results.values())
    print(f"functional collectives on irisd: {checks} checks (eager and torch.compile), 0 failures; "
          f"torch.compile'd FSDP2: {steps} steps, losses {results[0]['compiled']} vs eager "
          f"{results[0]['eager']}, {results[0]['gathers']} all-gathers through irisd per rank; "
          f"{failures} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
