"""The Python binding's (ctypes) host cost of one stream-ordered all-gather call, measured as
iris-gpu-bench --mode submit measures the C++ one: 2000 calls of 4 KiB enqueued on one stream and
kept (not waited) while timing, then synchronized; one rank. Needs IRIS_SOCKET, PYTHONPATH /
IRIS_LIBRARY and torch with CUDA.
    python3 scripts/one_gpu/call_overhead.py"""
import time

import iris
import torch

CALLS, BYTES = 2000, 4096
client = iris.Client(name="call_overhead")
comm = iris.Communicator(client, "call_overhead", nranks=1, rank=0)
x = torch.ones(BYTES // 4, device="cuda")
y = torch.empty_like(x)
client.register_tensor(x)
client.register_tensor(y)
stream = torch.cuda.Stream()
for sample in range(3):  # the first warms up
    t0 = time.perf_counter()
    requests = [comm.all_gather(x, y, BYTES, stream=stream) for _ in range(CALLS)]
    elapsed = time.perf_counter() - t0
    stream.synchronize()
    for r in requests:
        r.wait()
    if sample > 0:
        print(f"Python (ctypes): {CALLS} stream-ordered {BYTES}-byte all-gathers, "
              f"host time per call {1e6 * elapsed / CALLS:.2f} us")
