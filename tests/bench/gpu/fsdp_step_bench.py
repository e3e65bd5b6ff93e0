"""FSDP2 training steps of ranks sharing the one GPU (2 and 3 processes on one device, as
`torchrun --nproc-per-node N` on a workstation with one GPU), timed per step, with the
parameters' all-gathers and the gradients' reduce-scatters through:
  - irisd, collectives waiting on the host (IRIS_TORCH_SHARED_GPU=host, the default for such
    ranks),
  - irisd, collectives ordered on streams (IRIS_TORCH_SHARED_GPU=stream),
  - torch's gloo backend (the baseline a user compares with: it copies through host memory).
The model is the small transformer of tests/python/gpu/fsdp_train_test.py; each rank trains on
its own random tokens. Prints a markdown table: median step time over the timed steps (after a
warm-up) on rank 0, and its ratio to gloo's in the same run. Needs IRIS_SOCKET (cuda engine),
PYTHONPATH / IRIS_LIBRARY and torch 2.11 with CUDA.
    python3 tests/bench/gpu/fsdp_step_bench.py [--steps 40] [--warmup 10] [--ranks 2,3]"""
import argparse
import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python" / "gpu"))
import fsdp_train_test  # noqa: E402  the model and a step
import ranks  # noqa: E402


def rank_main(rank, nranks, steps, warmup, use_iris):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    mesh = DeviceMesh.from_group(dist.group.WORLD, "cuda")
    model = fsdp_train_test.build_model()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if use_iris:
        import irisd.fsdp

        irisd.fsdp.use_iris(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = fsdp_train_test.batches(warmup + steps)
    B = fsdp_train_test.BATCH
    times = []
    for step in range(warmup + steps):
        mine = data[step, (rank % 2) * B:(rank % 2 + 1) * B].cuda()
        torch.cuda.synchronize()
        start = time.perf_counter()
        fsdp_train_test.train_step(model, optimizer, mine)  # loss.item() waits for the step
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--ranks", default="2,3")
    args = parser.parse_args()
    runs = [("gloo", "gloo", None), ("irisd, waits on the host", "cpu:gloo,cuda:irisd", "host"),
            ("irisd, ordered on streams", "cpu:gloo,cuda:irisd", "stream")]
    print("| ranks on one GPU | backend | median step ms | / gloo |")
    print("| ---: | --- | ---: | ---: |")
    for nranks in [int(n) for n in args.ranks.split(",")]:
        gloo = None
        for label, backend, mode in runs:
            if mode is not None:
                os.environ["IRIS_TORCH_SHARED_GPU"] = mode
            result = ranks.run(rank_main, nranks, (args.steps, args.warmup, mode is not None),
                               timeout=300, backend=backend)
            ms = 1e3 * result[0]
            gloo = gloo if mode is not None else ms
            print(f"| {nranks} | {label} | {ms:.2f} | {ms / gloo:.2f} |", flush=True)


if __name__ == "__main__":
    main()
