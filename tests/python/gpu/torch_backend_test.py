"""The torch.distributed backend "irisd" on the GPU host: two ranks on the one GPU, every op
against a reference computed locally with torch (each rank can make every rank's input), random
and odd sizes, several dtypes, blocking and async, on the current stream and on a side stream,
with tensors from the allocator named by --alloc. The two ranks share the GPU, so their
collectives wait on the host ($IRIS_TORCH_SHARED_GPU=stream: ordered on streams instead). Then
(caching allocator) memory PyTorch frees is released in irisd: 30 rounds of fresh 256 MiB tensors
leave neither registrations nor VRAM behind. Exits non-zero on any mismatch.
    python3 tests/python/gpu/torch_backend_test.py --alloc caching|expandable|iris-pool|torch-pool
"""
import argparse
import contextlib
import os
import pathlib
import random
import sys
import zlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ranks  # noqa: E402

DTYPES = ["float32", "bfloat16", "float16", "int32", "float64"]


def rank_main(rank, nranks, alloc, seed):
    import torch
    import torch.distributed as dist
    from torch.distributed import ReduceOp

    import irisd
    import irisd.distributed
    import irisd.memory

    torch.backends.cuda.matmul.allow_tf32 = False
    pool = None
    if alloc == "iris-pool":
        pool = irisd.memory.mem_pool()
    elif alloc == "torch-pool":
        pool = torch.cuda.MemPool()
    rng = random.Random(seed)  # the same draws on every rank
    failures, checked = [], 0
    # Both ranks share the one GPU: their collectives wait on the host unless told otherwise.
    mode = os.environ.get("IRIS_TORCH_SHARED_GPU", "host")
    if dist.distributed_c10d._get_default_group().waits_on_host != (mode == "host"):
        failures.append(f"IRIS_TORCH_SHARED_GPU={mode}: the group's waits_on_host is wrong")

    def tensor_alloc():
        return torch.cuda.use_mem_pool(pool) if pool is not None else contextlib.nullcontext()

    def make(r, shape, dtype, salt):
        """Rank r's input `salt`: the same on every rank that makes it."""
        g = torch.Generator().manual_seed(zlib.crc32(repr((seed, r, salt)).encode()))
        dt = getattr(torch, dtype)
        if dt.is_floating_point:
            host = torch.randn(shape, generator=g, dtype=torch.float32).to(dt)
        else:
            host = torch.randint(-1000, 1000, shape, generator=g, dtype=dt)
        with tensor_alloc():
            return host.cuda()

    def empty(shape, dtype):
        with tensor_alloc():
            out = torch.empty(shape, dtype=getattr(torch, dtype), device="cuda")
        return out.fill_(-7)  # poisoned: an element irisd does not write shows

    def check(what, got, want, reduced=False):
        nonlocal checked
        checked += 1
        got, want = got.cpu(), want.cpu()
        if got.shape != want.shape:
            failures.append(f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}")
        elif reduced and got.is_floating_point():
            tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(got.dtype, 1e-5)
            if not torch.allclose(got.double(), want.double(), rtol=tol, atol=tol):
                err = (got.double() - want.double()).abs().max().item()
                failures.append(f"{what}: max error {err}")
        elif not torch.equal(got, want):
            bad = (got != want).sum().item()
            failures.append(f"{what}: {bad} of {got.numel()} elements differ")

    side = torch.cuda.Stream()
    modes = [("blocking", False, None), ("async", True, None),
             ("blocking/side-stream", False, side), ("async/side-stream", True, side)]

    def run(mode, call):
        """call(async_op) on the mode's stream; returns once the result may be read."""
        _, async_op, stream = mode
        ctx = contextlib.nullcontext()
        if stream is not None:
            # The inputs were made on the default stream: as with NCCL, the caller orders its
            # streams; the collective follows the stream current at the call.
            stream.wait_stream(torch.cuda.current_stream())
            ctx = torch.cuda.stream(stream)
        with ctx:
            work = call(async_op)
            if async_op:
                assert work is not None, "async_op=True must return a Work"
                work.wait()
        torch.cuda.synchronize()

    def reduce_ref(stacked, op):
        if op == ReduceOp.SUM:
            return stacked.sum(0)
        if op == ReduceOp.AVG:
            return stacked.sum(0) / nranks
        if op == ReduceOp.MAX:
            return stacked.amax(0)
        return stacked.amin(0)

    for round_ in range(3):
        for mode in modes:
            dtype = rng.choice(DTYPES)
            tag = f"[{mode[0]} {dtype} round {round_}]"
            n = rng.randrange(1, 6000) | 1  # odd element counts
            salt = (round_, mode[0])

            ins = [make(r, (n,), dtype, ("ag",) + salt) for r in range(nranks)]
            out = empty((n * nranks,), dtype)
            run(mode, lambda a: dist.all_gather_into_tensor(out, ins[rank], async_op=a))
            check(f"all_gather_into_tensor {tag}", out, torch.cat(ins))

            outs = [empty((n,), dtype) for _ in range(nranks)]
            run(mode, lambda a: dist.all_gather(outs, ins[rank], async_op=a))
            for r in range(nranks):
                check(f"all_gather[{r}] {tag}", outs[r], ins[r])

            rows, cols = rng.randrange(1, 9) * nranks, rng.randrange(1, 300)
            a2a = [make(r, (rows, cols), dtype, ("a2a",) + salt) for r in range(nranks)]
            out = empty((rows, cols), dtype)
            run(mode, lambda a: dist.all_to_all_single(out, a2a[rank], async_op=a))
            per = rows // nranks
            check(f"all_to_all_single equal {tag}", out,
                  torch.cat([a2a[r][rank * per:(rank + 1) * per] for r in range(nranks)]))

            splits = [[rng.randrange(0, 7) for _ in range(nranks)] for _ in range(nranks)]
            uneven = [make(r, (sum(splits[r]), cols), dtype, ("a2av",) + salt)
                      for r in range(nranks)]
            recv_rows = [splits[r][rank] for r in range(nranks)]
            out = empty((sum(recv_rows), cols), dtype)
            run(mode, lambda a: dist.all_to_all_single(out, uneven[rank], recv_rows,
                                                       splits[rank], async_op=a))
            want = [uneven[r][sum(splits[r][:rank]):sum(splits[r][:rank + 1])]
                    for r in range(nranks)]
            check(f"all_to_all_single uneven {splits} {tag}", out, torch.cat(want))

            sizes = [[rng.randrange(1, 500) for _ in range(nranks)] for _ in range(nranks)]
            lists = [[make(r, (sizes[r][j],), dtype, ("a2al", j) + salt) for j in range(nranks)]
                     for r in range(nranks)]
            outs = [empty((sizes[r][rank],), dtype) for r in range(nranks)]
            run(mode, lambda a: dist.all_to_all(outs, lists[rank], async_op=a))
            for r in range(nranks):
                check(f"all_to_all[{r}] {tag}", outs[r], lists[r][rank])

            root = rng.randrange(nranks)
            value = make(root, (n,), dtype, ("bc",) + salt)
            buf = value.clone() if rank == root else empty((n,), dtype)
            run(mode, lambda a: dist.broadcast(buf, root, async_op=a))
            check(f"broadcast root {root} {tag}", buf, value)

            gathered = [empty((n,), dtype) for _ in range(nranks)] if rank == root else None
            run(mode, lambda a: dist.gather(ins[rank], gathered, dst=root, async_op=a))
            if rank == root:
                for r in range(nranks):
                    check(f"gather[{r}] root {root} {tag}", gathered[r], ins[r])

            pieces = [make(root, (n,), dtype, ("sc", j) + salt) for j in range(nranks)]
            mine = empty((n,), dtype)
            run(mode, lambda a: dist.scatter(mine, pieces if rank == root else None, src=root,
                                             async_op=a))
            check(f"scatter root {root} {tag}", mine, pieces[rank])

            ops = [ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN]
            if dtype != "int32":
                ops.append(ReduceOp.AVG)
            op = rng.choice(ops)
            big = [make(r, (n * nranks,), dtype, ("rs",) + salt) for r in range(nranks)]
            out = empty((n,), dtype)
            run(mode, lambda a: dist.reduce_scatter_tensor(out, big[rank], op=op, async_op=a))
            want = reduce_ref(torch.stack([b[rank * n:(rank + 1) * n] for b in big]), op)
            check(f"reduce_scatter_tensor {op} {tag}", out, want, reduced=True)

            out = empty((n,), dtype)
            chunks = [list(b.chunk(nranks)) for b in big]
            run(mode, lambda a: dist.reduce_scatter(out, chunks[rank], op=op, async_op=a))
            check(f"reduce_scatter {op} {tag}", out, want, reduced=True)

            t = ins[rank].clone()
            run(mode, lambda a: dist.all_reduce(t, op=op, async_op=a))
            check(f"all_reduce {op} {tag}", t, reduce_ref(torch.stack(ins), op), reduced=True)

            t = ins[rank].clone()
            run(mode, lambda a: dist.reduce(t, dst=root, op=op, async_op=a))
            if rank == root:
                check(f"reduce {op} root {root} {tag}", t, reduce_ref(torch.stack(ins), op),
                      reduced=True)

            run(mode, lambda a: dist.barrier(async_op=a))

    # Blocking calls on a created stream, with nothing waited for on the host between them: the
    # fill before each call and the sum after it are ordered with it by the stream alone. On
    # streams (not waiting on the host) the group issues them on that stream itself: it makes
    # no stream of its own for them.
    fresh = dist.new_group(list(range(nranks)))
    own = torch.cuda.Stream()
    own.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(own), tensor_alloc():
        x = torch.empty(1024, device="cuda")
        out = torch.empty(nranks * 1024, device="cuda")
        acc = torch.zeros_like(out)
        for i in range(20):
            x.fill_(100 * rank + i)
            dist.all_gather_into_tensor(out, x, group=fresh)
            acc += out
    own.synchronize()
    check("20 blocking all-gathers ordered by the caller's stream alone", acc,
          torch.cat([torch.full((1024,), float(sum(100 * r + i for i in range(20))))
                     for r in range(nranks)]))
    streams = getattr(fresh, "_streams", None)
    if streams is None:
        failures.append("the new group is not the irisd group: cannot see its streams")
    elif mode == "stream" and streams:
        failures.append(f"blocking calls on a created stream made the group's streams {streams}")

    # CPU tensors go to gloo.
    cpu = torch.arange(5, dtype=torch.float32) + 10 * rank
    cpu_out = torch.empty(5 * nranks)
    dist.all_gather_into_tensor(cpu_out, cpu)
    check("cpu all_gather_into_tensor (gloo)", cpu_out,
          torch.cat([torch.arange(5, dtype=torch.float32) + 10 * r for r in range(nranks)]))

    # Refusals name the op and say what to do; nothing is submitted.
    for what, call in [
        ("recv from any source", lambda: dist.recv(torch.empty(4, device="cuda"))),
        ("not contiguous", lambda: dist.all_gather_into_tensor(
            torch.empty(8, 2, device="cuda"), torch.ones(4, 2, device="cuda").t())),
        ("bad output size", lambda: dist.all_gather_into_tensor(
            torch.empty(3, device="cuda"), torch.ones(4, device="cuda"))),
    ]:
        try:
            call()
            failures.append(f"{what}: no error")
        except irisd.IrisError as e:
            checked += 1
            if len(e.message) < 20:
                failures.append(f"{what}: unhelpful message {e.message!r}")

    registrations = None
    if alloc == "caching":
        group = dist.distributed_c10d._get_default_group()
        client = irisd.distributed.client()
        torch.cuda.synchronize()
        free_before = torch.cuda.mem_get_info()[0]
        most = 0
        for i in range(30):
            x = torch.full((64 << 20,), float(rank + i), device="cuda")  # 256 MiB
            y = torch.empty(nranks * x.numel(), device="cuda")
            dist.all_gather_into_tensor(y, x)
            torch.cuda.synchronize()
            if y[-1].item() != float(nranks - 1 + i):
                failures.append(f"fresh tensors round {i}: wrong data")
            del x, y
            torch.cuda.empty_cache()  # gives the segments back: the next round's are new
            most = max(most, client.gpu_registrations()[0])
        dist.barrier()
        torch.cuda.synchronize()
        free_after = torch.cuda.mem_get_info()[0]
        lost = (free_before - free_after) / 2**30
        registrations = (most, client.gpu_registrations(), round(lost, 2))
        # 30 rounds x 768 MiB per rank would be 45 GiB kept if irisd held freed memory.
        if lost > 3.0:
            failures.append(f"{lost:.1f} GiB of VRAM not given back after 30 rounds")
        if most > 16:
            failures.append(f"{most} registrations held at once")
        del group
    return {"checked": checked, "failures": failures, "registrations": registrations}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--alloc", default="caching",
                        choices=["caching", "expandable", "iris-pool", "torch-pool"])
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    args = parser.parse_args()
    if args.alloc == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    results = ranks.run(rank_main, 2, (args.alloc, args.seed))
    failures = [f"rank {r}: {f}" for r, res in results.items() for f in res["failures"]]
    checked = sum(res["checked"] for res in results.values())
    for line in failures[:40]:
        print(line)
    extra = ""
    if results[0]["registrations"] is not None:
        most, now, lost = results[0]["registrations"]
        extra = (f"; fresh 256 MiB tensors x30: at most {most} registrations held, {now} at the "
                 f"end, {lost} GiB VRAM not back")
    mode = os.environ.get("IRIS_TORCH_SHARED_GPU", "host")
    print(f"torch backend ({args.alloc}, shared GPU: {mode}, seed {args.seed}): {checked} checks, "
          f"{len(failures)} failures{extra}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
