"""FSDP2 on irisd, on the GPU host: a small transformer defined here, 2 ranks on the one GPU with
every all-gather and reduce-scatter through irisd (irisd.fsdp.use_iris; the group is
"cpu:gloo,cuda:irisd", so nothing else could move CUDA data), 50 SGD steps on random tokens. A
single process trains the same model on the concatenated batch; the losses and the final
parameters must match in fp32 (TF32 off): losses within rtol 1e-4, parameters within
atol 2e-5 + rtol 1e-4 (the two runs sum the gradient's halves in different orders).
With --restart-irisd N the script runs its own irisd (--irisd PATH, cuda engine) and kills it N
times (SIGKILL) while the ranks train, starting it again each time: the sessions resume and the
losses and parameters must still match the uninterrupted reference.
    python3 tests/python/gpu/fsdp_train_test.py [--steps 50] [--restart-irisd 5 --irisd PATH]"""
import argparse
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ranks  # noqa: E402

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 96, 64, 4, 2, 24, 8  # BATCH per rank


def build_model():
    import torch
    from torch import nn

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, DIM)
            self.layers = nn.ModuleList(
                nn.TransformerEncoderLayer(DIM, HEADS, dim_feedforward=2 * DIM + 3, dropout=0.0,
                                           batch_first=True) for _ in range(LAYERS))
            self.head = nn.Linear(DIM, VOCAB)

        def forward(self, tokens):
            x = self.embed(tokens)
            for layer in self.layers:
                x = layer(x)
            return self.head(x)

    torch.manual_seed(1234)
    return Transformer().cuda()


def batches(steps):
    import torch

    g = torch.Generator().manual_seed(99)
    return torch.randint(0, VOCAB, (steps, 2 * BATCH, SEQ + 1), generator=g)


def train_step(model, optimizer, tokens):
    import torch.nn.functional as F

    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def shard(model, mesh):
    """FSDP2 over `mesh`: each transformer layer a unit, then the whole model."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def rank_main(rank, nranks, steps, pool):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    import irisd.fsdp

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    mesh = DeviceMesh.from_group(dist.group.WORLD, "cuda")
    model = build_model()
    shard(model, mesh)
    modules = irisd.fsdp.use_iris(model, torch.cuda.MemPool() if pool == "torch-pool" else None)
    gathers = irisd.fsdp.IrisAllGather.calls
    scatters = irisd.fsdp.IrisReduceScatter.calls
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = batches(steps)
    losses = []
    for step in range(steps):
        mine = data[step, rank * BATCH:(rank + 1) * BATCH].cuda()
        losses.append(train_step(model, optimizer, mine))
        if step == 0 and os.environ.get("IRIS_TEST_TRAINING_MARKER"):
            pathlib.Path(os.environ["IRIS_TEST_TRAINING_MARKER"]).touch()
    torch.cuda.synchronize()
    # As numpy arrays: torch tensors would cross to the parent as shared memory, which needs
    # this process alive when the parent unpickles them.
    shards = {name: p.to_local().detach().cpu().numpy() for name, p in model.named_parameters()}
    return {"losses": losses, "shards": shards, "modules": modules,
            "all_gathers": irisd.fsdp.IrisAllGather.calls - gathers,
            "reduce_scatters": irisd.fsdp.IrisReduceScatter.calls - scatters}


def reference(steps):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = batches(steps)
    losses = [train_step(model, optimizer, data[step].cuda()) for step in range(steps)]
    return losses, {name: p.detach().cpu() for name, p in model.named_parameters()}


class RestartingIrisd:
    """An irisd of this script's own (cuda engine), SIGKILLed and started again `times` times
    once training is under way."""

    def __init__(self, binary, times):
        self.dir = tempfile.mkdtemp(prefix="iris-fsdp-restart-")
        self.socket = os.path.join(self.dir, "irisd.sock")
        self.binary, self.times = binary, times
        self.marker = os.path.join(self.dir, "training")
        self.done = threading.Event()
        self.under_training = 0
        self.start()
        os.environ["IRIS_SOCKET"] = self.socket
        os.environ["IRIS_TEST_TRAINING_MARKER"] = self.marker
        self.thread = threading.Thread(target=self.restart_loop, daemon=True)
        self.thread.start()

    def start(self):
        log = open(os.path.join(self.dir, "irisd.log"), "ab")
        self.proc = subprocess.Popen([self.binary, "--socket", self.socket, "--engine", "cuda",
                                      "--log-level", "info"], stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.socket + ".attach")
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("irisd did not start within 60 s")

    def restart_loop(self):
        deadline = time.monotonic() + 300
        while not os.path.exists(self.marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        for _ in range(self.times):
            if self.done.wait(0.3):
                return
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
            self.start()
            if not self.done.is_set():
                self.under_training += 1

    def stop(self):
        self.done.set()
        self.thread.join(120)
        self.proc.terminate()
        self.proc.wait(30)


def main():
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--pool", default="iris-pool", choices=["iris-pool", "torch-pool"],
                        help="where FSDP's communication buffers come from")
    parser.add_argument("--restart-irisd", type=int, default=0,
                        help="kill irisd this many times while the ranks train (needs --irisd)")
    parser.add_argument("--irisd", help="the irisd binary to run and restart")
    args = parser.parse_args()
    restarting = RestartingIrisd(args.irisd, args.restart_irisd) if args.restart_irisd else None
    try:
        results = ranks.run(rank_main, 2, (args.steps, args.pool))
    finally:
        if restarting:
            restarting.stop()
    ref_losses, ref_params = reference(args.steps)
    failures = []
    for step in range(args.steps):
        fsdp = (results[0]["losses"][step] + results[1]["losses"][step]) / 2
        if abs(fsdp - ref_losses[step]) > 1e-4 * abs(ref_losses[step]):
            failures.append(f"step {step}: loss {fsdp:.7f} vs reference {ref_losses[step]:.7f}")
    worst = 0.0
    for name, full in ref_params.items():
        for rank in (0, 1):
            want = torch.chunk(full, 2, dim=0)[rank]
            got = torch.from_numpy(results[rank]["shards"][name])
            if got.shape != want.shape:
                failures.append(f"{name} rank {rank}: shard {tuple(got.shape)} vs "
                                f"{tuple(want.shape)}")
                continue
            worst = max(worst, (got - want).abs().max().item() if got.numel() else 0.0)
            if not torch.allclose(got, want, atol=2e-5, rtol=1e-4):
                failures.append(f"{name} rank {rank}: max error "
                                f"{(got - want).abs().max().item():.3g}")
    for rank in (0, 1):
        r = results[rank]
        if r["all_gathers"] == 0 or r["reduce_scatters"] == 0:
            failures.append(f"rank {rank}: irisd was not used ({r['all_gathers']} all-gathers, "
                            f"{r['reduce_scatters']} reduce-scatters)")
    if restarting and restarting.under_training == 0:
        failures.append("training ended before irisd was restarted: train for more steps")
    for line in failures[:20]:
        print(line)
    r = results[0]
    mode = os.environ.get("IRIS_TORCH_SHARED_GPU", "host")
    print(f"FSDP2 on irisd ({args.pool}, shared GPU: {mode}): 2 ranks, {args.steps} steps, "
          f"{r['modules']} FSDP modules, "
          f"{r['all_gathers']} all-gathers and {r['reduce_scatters']} reduce-scatters per rank "
          f"through irisd; loss {ref_losses[0]:.4f} -> {ref_losses[-1]:.4f}; max parameter "
          f"difference to the single-process reference {worst:.2e}; "
          + (f"irisd SIGKILLed and restarted {restarting.under_training} times during training; "
             if restarting else "") + f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
