"""GPU host: the irisd package's first example (its docstring), as written: collectives ordered on
torch.cuda.current_stream(), which is PyTorch's default stream (handle 0, the legacy stream). Two
ranks (processes) on the one GPU; what follows the call on the same stream, without a wait, sees
every byte (the example's wait() is also run). Needs IRIS_SOCKET (an irisd with the cuda engine).
    python3 tests/python/gpu/package_example.py"""
import multiprocessing as mp
import sys
import traceback


def rank_main(rank, nranks, queue):
    try:
        import irisd
        import torch

        torch.cuda.set_device(0)
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
        queue.put((rank, "ok", checks))
    except BaseException:
        queue.put((rank, "error", traceback.format_exc()))


def main():
    nranks = 2
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, nranks, queue)) for r in range(nranks)]
    for p in procs:
        p.start()
    checks, failed = 0, []
    for _ in procs:
        try:
            rank, status, value = queue.get(timeout=120)
        except Exception as e:  # noqa: BLE001 - a rank died or hung
            failed.append(repr(e))
            break
        if status == "ok":
            checks += value
        else:
            failed.append(f"rank {rank}:\n{value}")
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    if failed:
        print("\n".join(failed), file=sys.stderr)
        sys.exit(1)
    print(f"package example on the default stream: {nranks} ranks, {checks} checks passed")


if __name__ == "__main__":
    main()
