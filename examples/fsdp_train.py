"""FSDP2 training steps with the parameters' all-gathers and the gradients' reduce-scatters on
irisd (the GPU's copy engines), a small transformer defined here and random tokens.

    pip install --no-build-isolation ./client/python       # once
    IRIS_SOCKET=/run/irisd/irisd.sock torchrun --nproc-per-node 2 examples/fsdp_train.py

Needs irisd with the cuda engine and torch 2.11 or newer. Ranks share the GPUs there are (two
ranks on one GPU work too)."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import irisd.distributed  # noqa: F401  registers the "irisd" backend
import irisd.fsdp


class Transformer(nn.Module):
    def __init__(self, vocab=1000, dim=256, heads=8, layers=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True)
            for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank % torch.cuda.device_count())
    dist.init_process_group(backend="cpu:gloo,cuda:irisd")

    torch.manual_seed(0)  # the same initial model on every rank
    model = Transformer().cuda()
    mesh = DeviceMesh.from_group(dist.group.WORLD, "cuda")
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    irisd.fsdp.use_iris(model)  # all-gathers and reduce-scatters through irisd
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    g = torch.Generator().manual_seed(1 + dist.get_rank())  # each rank its own batches
    for step in range(args.steps):
        tokens = torch.randint(0, 1000, (8, 129), generator=g).cuda()
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 1000), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if dist.get_rank() == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
