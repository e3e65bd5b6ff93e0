"""JAX on irisd, on the GPU host: irisd's libnccl.so.2 preloaded (LD_PRELOAD) in front of the NCCL
that JAX's CUDA plugin links, N processes of one jax.distributed job sharing the one GPU, XLA's
own collectives unchanged. First it lists the NCCL symbols the plugin imports that irisd's
library does not define (a preloaded library leaves those to the real NCCL, which would then meet
irisd's communicators: each must be none), then each process runs, under jit and shard_map over
a mesh of the N devices, psum, pmax, all_gather, psum_scatter, ppermute and all_to_all on
float32 and bfloat16, each checked against numpy.
Needs IRIS_SOCKET (an irisd with the cuda engine) and LD_PRELOAD naming the library.
    python3 tests/python/gpu/jax_preload_test.py [--ranks 2]"""
import argparse
import ctypes
import glob
import os
import re
import socket
import subprocess
import sys

IRISD_NCCL = 22800  # ncclGetVersion of irisd's library


def defined_nccl_symbols(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True,
                         check=True).stdout
    return {m.group(1) for m in re.finditer(r" T (nccl\w+)", out)}


def check_symbols():
    """The NCCL symbols JAX's CUDA plugin imports, against those irisd's library defines."""
    preload = os.environ.get("LD_PRELOAD", "")
    ours = defined_nccl_symbols(preload)
    import jax  # noqa: F401  the plugin's location

    roots = [p for p in sys.path if os.path.isdir(p)]
    patterns = ("jax_*cuda*plugin*/*.so", "jax_plugins/*cuda*/*.so")
    plugins = sorted({f for r in roots for p in patterns for f in glob.glob(os.path.join(r, p))})
    if not plugins:
        raise AssertionError("no JAX CUDA plugin found under sys.path")
    for plugin in plugins:
        out = subprocess.run(["nm", "-D", "--undefined-only", plugin], capture_output=True,
                             text=True, check=True).stdout
        wanted = set(re.findall(r"\b(nccl\w+)", out))
        missing = sorted(wanted - ours)
        print(f"{os.path.basename(plugin)} imports {len(wanted)} NCCL symbols; "
              f"irisd's library lacks {len(missing)}: {' '.join(missing) or '-'}", flush=True)
        assert not missing, f"{plugin} would reach the real NCCL for {missing}"


def rank_main(rank, nranks, port):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # ranks share the GPU
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    try:
        from jax import shard_map
        # jax.shard_map cannot infer that an all_gather's output is the same on every rank (its
        # out_specs P() needs that); each rank checks its whole result below instead.
        unchecked = {"check_vma": False}
    except ImportError:
        from jax.experimental.shard_map import shard_map
        unchecked = {"check_rep": False}

    version = ctypes.c_int()
    ctypes.CDLL(None).ncclGetVersion(ctypes.byref(version))
    assert version.value == IRISD_NCCL, f"NCCL resolves to version {version.value}: preload it"
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=nranks,
                               process_id=rank, local_device_ids=[0])
    assert jax.device_count() == nranks, jax.devices()
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    n = 1027  # elements per rank, odd on purpose
    checks = 0
    for dtype in (jnp.float32, jnp.bfloat16):
        # Small integers: exact in both dtypes and every reduction order.
        every = np.stack([(np.arange(n) * (r + 1) + r) % 7 for r in range(nranks)]).astype(
            np.float32)
        local = jnp.asarray(every[rank][None, :], dtype=dtype)
        x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), local,
                                                   (nranks, n))

        def run(body, out_spec, arg=x):
            f = jax.jit(shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=out_spec,
                                  **unchecked))
            out = f(arg)
            return np.asarray(out.addressable_shards[0].data, dtype=np.float32)

        def same(got, want, what):
            nonlocal checks
            checks += 1
            if not np.array_equal(got, np.asarray(want, dtype=np.float32)):
                bad = np.argwhere(got != want)[:5].tolist()
                raise AssertionError(f"{what} {dtype.__name__}: differs at {bad}")

        same(run(lambda v: jax.lax.psum(v, "x"), P()), every.sum(0)[None, :], "psum")
        same(run(lambda v: jax.lax.pmax(v, "x"), P()), every.max(0)[None, :], "pmax")
        same(run(lambda v: jax.lax.all_gather(v, "x", tiled=True), P()), every, "all_gather")
        wide = np.stack([np.concatenate([every[r]] * nranks) for r in range(nranks)])
        xw = jax.make_array_from_process_local_data(
            NamedSharding(mesh, P("x")), jnp.asarray(wide[rank][None, :], dtype=dtype),
            (nranks, n * nranks))
        same(run(lambda v: jax.lax.psum_scatter(v, "x", scatter_dimension=1, tiled=True), P("x"),
                 xw), wide.sum(0)[None, rank * n:(rank + 1) * n], "psum_scatter")
        shift = [(r, (r + 1) % nranks) for r in range(nranks)]
        same(run(lambda v: jax.lax.ppermute(v, "x", shift), P("x")),
             every[(rank - 1) % nranks][None, :], "ppermute")
        blocks = np.stack([np.arange(nranks * 8, dtype=np.float32) + 100 * r
                           for r in range(nranks)])
        xb = jax.make_array_from_process_local_data(
            NamedSharding(mesh, P("x")), jnp.asarray(blocks[rank][None, :], dtype=dtype),
            (nranks, nranks * 8))
        same(run(lambda v: jax.lax.all_to_all(v, "x", 1, 1, tiled=True), P("x"), xb),
             np.concatenate([blocks[p][rank * 8:(rank + 1) * 8] for p in range(nranks)])[None, :],
             "all_to_all")
    print(f"jax rank {rank}: {checks} checks passed", flush=True)
    jax.distributed.shutdown()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rank", type=int, default=-1)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.rank >= 0:
        rank_main(args.rank, args.ranks, args.port)
        return
    check_symbols()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, "--ranks", str(args.ranks), "--rank",
                               str(r), "--port", str(port)]) for r in range(args.ranks)]
    failed = 0
    for p in procs:
        try:
            failed |= p.wait(timeout=240) != 0
        except subprocess.TimeoutExpired:
            failed = 1
    for p in procs:
        if p.poll() is None:
            p.kill()
    print(f"JAX on irisd's libnccl.so.2, {args.ranks} ranks sharing the GPU: "
          f"{'FAILED' if failed else 'passed'}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
