"""Point to point through the torch.distributed backend "irisd", on the GPU host: send, recv,
isend, irecv and batch_isend_irecv between ranks sharing the one GPU (every element checked),
then torch.distributed.pipelining with ScheduleGPipe and Schedule1F1B, 2 and 3 stages of a small
transformer, every activation and gradient between stages moved by irisd (the group is
"cpu:gloo,cuda:irisd": nothing else moves CUDA data). Each rank also trains the whole model in
one process on the same micro-batches; in fp32 with TF32 off the pipeline's losses must match
within rtol 1e-4 and its stage's parameters after the steps within atol 2e-5 + rtol 1e-4 (the
same tolerance as the FSDP2 test: the two sum the micro-batches' gradients in different orders).
Last, Schedule1F1B with 2 stages whose modules are torch.compile'd (Module.compile: the stages'
compute compiled, their sends and receives issued by the schedule around it), same tolerances.
The ranks share the GPU, so the backend's sends and receives wait on the host; with
IRIS_TORCH_SHARED_GPU=stream the same checks run on its streams.
    python3 tests/python/gpu/pipeline_test.py [--steps 3]"""
import argparse
import inspect
import os
import pathlib
import sys
import threading

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ranks  # noqa: E402
from fsdp_train_test import (  # noqa: E402  the same small transformer, and irisd restarted
    LAYERS, VOCAB, RestartingIrisd, build_model)

SEQ, BATCH, MICRO = 16, 8, 4
# How the backend orders ranks sharing a GPU, as on the GPU host (irisd.distributed).
SHARED_GPU = os.environ.get("IRIS_TORCH_SHARED_GPU", "host")


def p2p_checks(rank, nranks):
    """send/recv, isend/irecv and batch_isend_irecv in both orders; returns the checks made."""
    import torch
    import torch.distributed as dist

    checks = 0
    nxt, prev = (rank + 1) % nranks, (rank - 1) % nranks
    for size, dtype in [(1, torch.float32), (1000, torch.bfloat16), (65_537, torch.int32),
                        (1 << 20, torch.float32)]:
        def data(src):
            return (torch.arange(size, device="cuda") * (src + 3) % 251).to(dtype)

        # Blocking: even ranks send first, odd ones receive first (a ring needs that order).
        out = torch.full((size,), -1, dtype=dtype, device="cuda")
        if rank % 2 == 0:
            dist.send(data(rank), nxt)
            dist.recv(out, prev)
        else:
            dist.recv(out, prev)
            dist.send(data(rank), nxt)
        assert torch.equal(out, data(prev)), f"send/recv of {size} {dtype} wrong"
        checks += 1
        # Ranks sharing a GPU, on the host: every rank sends first with blocking calls, which
        # no send waits for its receive to allow (irisd sends a copy; the send is done when the
        # call returns). On streams, as with NCCL, this would hang: the receive's stream
        # follows the caller's, which waits for the send.
        if SHARED_GPU == "host":
            out = torch.full((size,), -1, dtype=dtype, device="cuda")
            sent = dist.isend(data(rank), nxt)
            assert sent.is_completed(), "a send on the host waited for its receive"
            sent.wait()
            dist.send(data(rank), nxt)
            dist.recv(out, prev)
            dist.recv(out, prev)
            assert torch.equal(out, data(prev)), f"send-first send/recv of {size} {dtype} wrong"
            checks += 1
        # Batched, both orders: never deadlocks.
        for recv_first in (False, True):
            out = torch.full((size,), -1, dtype=dtype, device="cuda")
            ops = [dist.P2POp(dist.isend, data(rank), nxt), dist.P2POp(dist.irecv, out, prev)]
            for work in dist.batch_isend_irecv(ops[::-1] if recv_first else ops):
                work.wait()
            assert torch.equal(out, data(prev)), f"batch_isend_irecv of {size} {dtype} wrong"
            checks += 1
        # isend/irecv, waited for in turn.
        out = torch.full((size,), -1, dtype=dtype, device="cuda")
        works = [dist.irecv(out, prev), dist.isend(data(rank), nxt)]
        for w in works:
            w.wait()
        assert torch.equal(out, data(prev)), f"isend/irecv of {size} {dtype} wrong"
        checks += 1
    # Dense tensors that are not contiguous (a transpose, every other column) go through a
    # contiguous copy, as with NCCL, blocking and batched.
    for shape in [(64, 48), (3, 1000)]:
        def grid(src):
            return (torch.arange(shape[0] * shape[1], device="cuda").reshape(shape) * (src + 5)
                    % 997).float()

        send_t = grid(rank).t()
        assert not send_t.is_contiguous()
        out = torch.full(shape[::-1], -1.0, device="cuda")
        out_t = torch.full(shape, -1.0, device="cuda").t()  # a transposed receive
        if rank % 2 == 0:
            dist.send(send_t, nxt)
            dist.recv(out_t, prev)
        else:
            dist.recv(out_t, prev)
            dist.send(send_t, nxt)
        assert torch.equal(out_t, grid(prev).t()), f"non-contiguous send/recv {shape} wrong"
        checks += 1
        wide = torch.full((shape[0], 2 * shape[1]), -1.0, device="cuda")
        strided = wide[:, ::2]  # every other column
        ops = [dist.P2POp(dist.isend, grid(rank)[:, :], nxt),
               dist.P2POp(dist.irecv, strided, prev)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        assert torch.equal(strided, grid(prev)), f"batched strided receive {shape} wrong"
        assert bool((wide[:, 1::2] == -1).all()), "a strided receive wrote between its columns"
        checks += 1
        del out
    # The cases issue 47 ran before a stream waited for ever with 3 and 4 ranks: zero elements,
    # mixed dtypes in one batch, a send to oneself, 64 receives then 64 sends outstanding waited
    # in reverse; the refused receive from any source then comes last, and the GPU must still
    # finish its work (synchronize, bounded by the caller's timeout).
    empty = torch.empty(0, device="cuda")
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, empty, nxt),
                                     dist.P2POp(dist.irecv, torch.empty(0, device="cuda"), prev)]):
        w.wait()
    a_out = torch.full((100,), -1, dtype=torch.int64, device="cuda")
    b_out = torch.full((33,), -1.0, dtype=torch.float16, device="cuda")
    mixed = [dist.P2POp(dist.isend, torch.arange(100, device="cuda") + rank, nxt),
             dist.P2POp(dist.isend, torch.full((33,), float(rank), dtype=torch.float16,
                                               device="cuda"), nxt),
             dist.P2POp(dist.irecv, a_out, prev), dist.P2POp(dist.irecv, b_out, prev)]
    for w in dist.batch_isend_irecv(mixed):
        w.wait()
    assert torch.equal(a_out, torch.arange(100, device="cuda") + prev)
    assert bool((b_out == float(prev)).all())
    checks += 1
    self_out = torch.empty(10, device="cuda")
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.ones(10, device="cuda") * rank,
                                                rank),
                                     dist.P2POp(dist.irecv, self_out, rank)]):
        w.wait()
    assert bool((self_out == rank).all())
    checks += 1
    outs = [torch.full((8,), -1.0, device="cuda") for _ in range(64)]
    recvs = [dist.irecv(o, prev) for o in outs]
    sends = [dist.isend(torch.full((8,), float(rank * 100 + i), device="cuda"), nxt)
             for i in range(64)]
    for w in reversed(recvs + sends):
        w.wait()
    assert all(bool((o == prev * 100 + i).all()) for i, o in enumerate(outs))
    checks += 1
    # A host wait bounded by its timeout: no rank sends until every rank's wait ran out.
    if SHARED_GPU == "host":
        from datetime import timedelta
        out = torch.full((16,), -1.0, device="cuda")
        pending = dist.irecv(out, prev)
        try:
            pending.wait(timeout=timedelta(milliseconds=300))
            raise AssertionError("a wait past its timeout returned")
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001 - irisd's timeout, with its reason
            assert "not done within" in str(e), e
        # Every rank's wait ran out before any rank sends (else a later waiter meets its send).
        dist.barrier()
        dist.send(torch.arange(16, device="cuda").float() + rank, nxt)
        pending.wait()
        assert torch.equal(out, torch.arange(16, device="cuda").float() + prev)
        checks += 1
    try:
        dist.recv(torch.empty(4, device="cuda"))
        raise AssertionError("a receive from any source was accepted")
    except Exception as e:  # noqa: BLE001 - whatever torch wraps it in, the reason is irisd's
        assert "any source" in str(e), e
    finished = threading.Event()
    threading.Thread(target=lambda: (torch.cuda.synchronize(), finished.set()),
                     daemon=True).start()
    assert finished.wait(60), "the GPU's work did not finish after the refused receive"
    return checks


class Stage:
    """The part of the model stage `index` of `stages` runs: embedding with the first layers,
    the middle layers, or the last layers with the head."""

    @staticmethod
    def build(model, index, stages):
        from torch import nn

        parts = ["embed"] + [f"layers.{i}" for i in range(LAYERS)] + ["head"]
        bounds = [len(parts) * i // stages for i in range(stages + 1)]
        mine = parts[bounds[index]:bounds[index + 1]]
        modules = [model.get_submodule(p) for p in mine]
        return nn.Sequential(*modules), mine


def loss_fn(output, target):
    import torch.nn.functional as F

    return F.cross_entropy(output.reshape(-1, VOCAB), target.reshape(-1))


def batches(steps):
    import torch

    g = torch.Generator().manual_seed(99)
    return torch.randint(0, VOCAB, (steps, BATCH, SEQ + 1), generator=g)


def reference(steps):
    """One process, the whole model, the same micro-batches: losses per step (summed over the
    micro-batches, as the schedules sum their gradients) and the parameters after the steps."""
    import torch

    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for tokens in batches(steps).cuda():
        opt.zero_grad()
        total = 0.0
        for chunk in tokens.chunk(MICRO):
            loss = loss_fn(model(chunk[:, :-1]), chunk[:, 1:])
            loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
    return losses, dict(model.named_parameters())


def pipeline_run(rank, nranks, schedule_name, steps, compiled=False):
    import torch
    import torch.distributed as dist
    from torch.distributed import pipelining

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ref_losses, ref_params = reference(steps)
    model = build_model()
    module, names = Stage.build(model, rank, nranks)
    if compiled:
        module.compile()  # in place: parameter names stay those of the reference
    stage = pipelining.PipelineStage(module, rank, nranks, torch.device("cuda", 0))
    cls = getattr(pipelining, schedule_name)
    kwargs = {"n_microbatches": MICRO, "loss_fn": loss_fn}
    if "scale_grads" in inspect.signature(cls.__init__).parameters:
        kwargs["scale_grads"] = False  # sum the micro-batches' gradients, as the reference does
    schedule = cls(stage, **kwargs)
    opt = torch.optim.SGD(module.parameters(), lr=0.05)
    losses = []
    for step, tokens in enumerate(batches(steps).cuda()):
        if step == 1 and rank == 0 and os.environ.get("IRIS_TEST_TRAINING_MARKER"):
            pathlib.Path(os.environ["IRIS_TEST_TRAINING_MARKER"]).touch()  # restarts may begin
        opt.zero_grad()
        if rank == 0:
            schedule.step(tokens[:, :-1].contiguous())  # the stages check strides
        elif rank == nranks - 1:
            mb_losses = []
            schedule.step(target=tokens[:, 1:].contiguous(), losses=mb_losses)
            losses.append(sum(loss.item() for loss in mb_losses))
        else:
            schedule.step()
        opt.step()
    torch.cuda.synchronize()
    if rank == nranks - 1:
        for got, want in zip(losses, ref_losses):
            assert abs(got - want) <= 1e-4 * abs(want), f"loss {got} against {want}"
    worst = 0.0
    for part, sub in zip(names, module):
        for name, p in sub.named_parameters():
            want = ref_params[f"{part}.{name}"]
            err = (p - want).abs() - 1e-4 * want.abs()
            worst = max(worst, float((p - want).abs().max()))
            assert float(err.max()) <= 2e-5, f"{part}.{name} differs by {float(err.max())}"
    dist.barrier()
    return {"losses": losses, "worst": worst, "stage": names}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--restart-irisd", type=int, default=0,
                        help="only a 3-stage 1F1B run, through this many SIGKILLs of an irisd of "
                        "this script's own (--irisd PATH)")
    parser.add_argument("--irisd")
    args = parser.parse_args()
    if args.restart_irisd:
        # Every send and receive of the schedule comes through the restarts exactly once: the
        # losses and parameters still equal the single-process run's.
        restarting = RestartingIrisd(args.irisd, args.restart_irisd)
        try:
            results = ranks.run(pipeline_run, nranks=3, args=("Schedule1F1B", args.steps),
                                timeout=300)
        finally:
            restarting.stop()
        print(f"pipelining Schedule1F1B through irisd restarts (shared GPU: {SHARED_GPU}): 3 "
              f"stages, {args.steps} steps, irisd SIGKILLed {restarting.under_training} times "
              f"during them; losses equal the single-process run's within rtol 1e-4; max "
              f"parameter difference {max(r['worst'] for r in results.values()):.2e}")
        return
    for n in (2, 3, 4):
        results = ranks.run(p2p_checks, nranks=n, timeout=120)
        print(f"torch point to point on irisd (shared GPU: {SHARED_GPU}): {n} ranks, "
              f"{sum(results.values())} checks, 0 failures")
    for schedule in ("ScheduleGPipe", "Schedule1F1B"):
        for n in (2, 3):
            results = ranks.run(pipeline_run, nranks=n, args=(schedule, args.steps), timeout=120)
            worst = max(r["worst"] for r in results.values())
            losses = [round(x, 5) for x in results[n - 1]["losses"]]
            print(f"pipelining {schedule} on irisd (shared GPU: {SHARED_GPU}): {n} stages, "
                  f"{MICRO} micro-batches, {args.steps} steps; losses {losses} equal the "
                  f"single-process run's within rtol 1e-4; max parameter difference {worst:.2e}")
    results = ranks.run(pipeline_run, nranks=2, args=("Schedule1F1B", args.steps, True),
                        timeout=300)
    print(f"pipelining Schedule1F1B on irisd (shared GPU: {SHARED_GPU}), stages torch.compile'd: "
          f"2 stages; losses "
          f"{[round(x, 5) for x in results[1]['losses']]} equal the single-process run's within "
          f"rtol 1e-4; max parameter difference {max(r['worst'] for r in results.values()):.2e}")


if __name__ == "__main__":
    main()
