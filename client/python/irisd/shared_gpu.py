"""Ranks of the irisd torch backend that share one GPU: whether they do (their devices' UUIDs,
through the group's store), and how they wait ("host", the default, or "stream"), set for every
group by $IRIS_TORCH_SHARED_GPU or for one group by set_shared_gpu. Used by distributed.py."""

import os

import torch

import irisd


class _OnHost:
    """Where the collectives of ranks sharing a GPU are ordered: `stream` (the caller's) is
    synchronized before irisd is called, and irisd's call waited for on the host."""

    def __init__(self, stream):
        self.stream = stream


def _checked_mode(mode, source):
    if mode not in ("host", "stream"):
        raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                                 f"{source}={mode!r}: say \"host\" (collectives of ranks sharing a "
                                 "GPU wait on the host) or \"stream\"")
    return mode


def _shared_gpu_mode():
    return _checked_mode(os.environ.get("IRIS_TORCH_SHARED_GPU", "host"), "IRIS_TORCH_SHARED_GPU")


def set_shared_gpu(mode, group=None):
    """How `group`'s ranks that share a GPU wait from now on (None: the default group): "host"
    or "stream", as $IRIS_TORCH_SHARED_GPU says for every group when it is made. Ranks on GPUs
    of their own stay on streams either way. Call it on every rank of the group, between its
    operations."""
    import torch.distributed.distributed_c10d as c10d_python
    pg = group if group is not None else c10d_python._get_default_group()
    backend = pg
    if not hasattr(pg, "shares_a_gpu") and hasattr(pg, "_get_backend"):
        backend = pg._get_backend(torch.device("cuda"))
    if not hasattr(backend, "shares_a_gpu"):
        raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                                 "set_shared_gpu: the group's CUDA backend is not irisd")
    backend.set_shared_gpu(mode)


def _ranks_share_a_gpu(store, rank, size):
    """Whether two ranks of the group use one GPU (their current devices' UUIDs, through the
    store); False without CUDA, or with a torch that reports no UUID (a device index would not
    do: ranks with their own CUDA_VISIBLE_DEVICES all see device 0)."""
    uuid = ""
    if torch.cuda.is_available():
        uuid = str(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid",
                           ""))
    store.set(f"iris/gpu/{rank}", uuid)
    uuids = [store.get(f"iris/gpu/{r}").decode() for r in range(size)]
    return all(uuids) and len(set(uuids)) < size
