"""GPU host: the irisd package's first example (its docstring), as written: collectives ordered on
torch.cuda.current_stream(), which is PyTorch's default stream (handle 0, the legacy stream). Two
ranks (processes) on the one GPU; what follows the call on the same stream, without a wait, sees
every byte (the example's wait() is also run). Needs IRIS_SOCKET (an irisd with the cuda engine).
    python3 tests/python/gpu/package_example.py"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import ranks  # noqa: E402


def rank_main(rank, nranks):
    import irisd
    import torch

    client = irisd.Client(name=f"package example {rank}")
    comm = irisd.Communicator(client, "package-example", nranks=nranks, rank=rank)
    checks = 0
    for step in range(20):
        x = torch.full((1 << 18,), float(rank + 10 * step), device="cuda")
        y = torch.empty(x.numel() * nranks, device="cuda")
        assert torch.cuda.current_stream().cuda_stream == 0
        request = comm.all_gather(x, y, x.numel() * x.element_size(),
                                  stream=torch.cuda.current_stream())
        z = y.clone()  # on the same stream, after the collective: no wait needed
        request.wait()
        torch.cuda.synchronize()
        expect = torch.cat([torch.full((x.numel(),), float(r + 10 * step), device="cuda")
                            for r in range(nranks)])
        assert torch.equal(z, expect), f"step {step}: the stream did not wait for irisd"
        assert torch.equal(y, expect), f"step {step}: wrong bytes"
        checks += 2
    comm.destroy()
    return checks


def main():
    nranks = 2
    # The ranks meet through gloo only (the example itself uses irisd's own API).
    results = ranks.run(rank_main, nranks=nranks, timeout=120, backend="gloo")
    print(f"package example on the default stream: {nranks} ranks, "
          f"{sum(results.values())} checks passed")


if __name__ == "__main__":
    main()
