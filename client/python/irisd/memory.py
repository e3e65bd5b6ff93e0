"""GPU memory for irisd from PyTorch's allocator.

Any CUDA tensor works with irisd's cuda engine: libiris registers an allocation on first use and
notices when PyTorch frees it (at the next lookup or first use of other memory). A pool from
mem_pool() goes further: its memory comes from libiris_torch's allocator (iris_torch_alloc), whose
free ends irisd's registrations before the memory is returned, so freed memory is never held by irisd:

    pool = irisd.memory.mem_pool()
    with torch.cuda.use_mem_pool(pool):
        buffer = torch.empty(n, device="cuda")   # registered once, on first use

irisd.fsdp's all-gather and reduce-scatter allocate their buffers from such a pool."""

import threading

import irisd

_allocator = None
_lock = threading.Lock()


def allocator():
    """libiris_torch's allocator as a torch.cuda.memory.CUDAPluggableAllocator (one per process)."""
    global _allocator
    import torch

    with _lock:
        if _allocator is None:
            _allocator = torch.cuda.memory.CUDAPluggableAllocator(
                irisd.torch_allocator_path(), "iris_torch_alloc", "iris_torch_free")
        return _allocator


def mem_pool():
    """A torch.cuda.MemPool over libiris_torch's allocator."""
    import torch

    return torch.cuda.MemPool(allocator().allocator())
