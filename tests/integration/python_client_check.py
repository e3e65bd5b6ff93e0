"""Checks the Python binding (client/python/iris) against a running irisd with host buffers:
two ranks in this process gather each other's bytes; errors raise IrisError with the code.
Run by integration_tests (PythonBinding); exits non-zero with the reason on any failure."""
import argparse
import random

import iris

parser = argparse.ArgumentParser()
parser.add_argument("--socket", required=True)
socket = parser.parse_args().socket

nbytes = 65_537
clients = [iris.Client(socket, name=f"python-check-{r}") for r in range(2)]
comms = [iris.Communicator(c, "python-check", 2, r) for r, c in enumerate(clients)]
sends = [c.allocate(nbytes) for c in clients]
recvs = [c.allocate(2 * nbytes) for c in clients]
data = [bytes(random.getrandbits(8) for _ in range(nbytes)) for _ in range(2)]
for r in range(2):
    sends[r].view()[:] = data[r]
    recvs[r].view()[:] = b"\xee" * (2 * nbytes)
requests = [comms[r].all_gather(sends[r], recvs[r], nbytes) for r in range(2)]
for req in requests:
    req.wait(timeout=10)
    assert req.test()
for r in range(2):
    got = bytes(recvs[r].view())
    assert got == data[0] + data[1], f"rank {r} received the wrong bytes"

try:
    comms[0].all_gather(12345, recvs[0], nbytes)
    raise AssertionError("a pointer outside every buffer was accepted")
except iris.IrisError as e:
    assert e.name == "not_found" and e.code == 2, e

pending = comms[0].all_gather(sends[0], recvs[0], nbytes)
try:
    pending.wait(timeout=0.02)
    raise AssertionError("a collective missing a rank completed")
except iris.IrisError as e:
    assert e.name == "timeout", e
comms[1].destroy()
try:
    pending.wait(timeout=10)
    raise AssertionError("the collective survived its peer leaving")
except iris.IrisError as e:
    assert e.name == "peer_lost", e
print("python binding: ok")
