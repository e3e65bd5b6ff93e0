"""FSDP2 on irisd: the parameters' all-gather and the gradients' reduce-scatter move on the GPU's
copy engines, so the compute units stay with the forward and backward kernels.

    import irisd.distributed, irisd.fsdp
    torch.distributed.init_process_group(backend="cpu:gloo,cuda:irisd")
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    irisd.fsdp.use_iris(model)          # every FSDP module of the model

FSDP2 (torch 2.11's FSDPModule.set_custom_all_gather / set_custom_reduce_scatter) calls these on
its own all-gather and reduce-scatter streams; they enqueue irisd's collective on that stream and
return, as NCCL's do. Their buffers come from irisd.memory's pool, so each allocation is registered
with irisd once and released when PyTorch frees it. The reduce-scatter is irisd's all-to-all
followed by the sum on the GPU (its only arithmetic). The FSDP group must be an irisd process group
(init_process_group with cuda:irisd)."""

import torch

import irisd
from irisd import memory
from irisd.distributed import IrisProcessGroup

try:
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter
except ImportError as e:  # torch before 2.11 has no custom FSDP2 collectives
    raise ImportError(f"irisd.fsdp needs torch 2.11 or newer (FSDP2's custom collectives): {e}")


def _group(group, what):
    if not isinstance(group, IrisProcessGroup):
        raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                             f"irisd.fsdp's {what} got a {type(group).__name__}; FSDP's mesh must "
                             "be built on an irisd group (init_process_group(backend="
                             "\"cpu:gloo,cuda:irisd\"))")
    return group


class _PoolAlloc:
    def __init__(self, pool=None):
        self._pool = pool if pool is not None else memory.mem_pool()

    def allocate(self, size, *, dtype, device):
        with torch.cuda.use_mem_pool(self._pool, device=device):
            return torch.empty(*size, dtype=dtype, device=device)


class IrisAllGather(_PoolAlloc, AllGather):
    """FSDP2's parameter all-gather through irisd."""

    calls = 0  # all-gathers this process sent through irisd

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        pg = _group(group, "all-gather")
        IrisAllGather.calls += 1
        src, dst = input_tensor.view(-1), output_tensor.view(-1)
        pg.on_stream(src, lambda stream: [pg.all_gather_flat(src, dst, stream)])
        return None  # ordered on FSDP's stream; FSDP waits on its event


class IrisReduceScatter(_PoolAlloc, ReduceScatter):
    """FSDP2's gradient reduce-scatter: irisd's all-to-all, then the sum (or average) on the
    stream FSDP gives."""

    calls = 0  # reduce-scatters this process sent through irisd

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        pg = _group(group, "reduce-scatter")
        IrisReduceScatter.calls += 1
        src, dst = input_tensor.view(-1), output_tensor.view(-1)
        op = getattr(op, "op", op)
        pg.on_stream(src, lambda stream: [pg.reduce_scatter_flat(src, dst, op, stream)])
        return None


def use_iris(model, pool=None):
    """Sends the all-gathers and reduce-scatters of every FSDP module in `model` through irisd
    (one pool for their buffers). Returns the number of FSDP modules set."""
    pool = pool if pool is not None else memory.mem_pool()
    all_gather, reduce_scatter = IrisAllGather(pool), IrisReduceScatter(pool)
    count = 0
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_custom_all_gather(all_gather)
            module.set_custom_reduce_scatter(reduce_scatter)
            count += 1
    if count == 0:
        raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                             "use_iris: the model has no FSDP module; apply fully_shard first")
    return count
