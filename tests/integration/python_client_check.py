"""Checks the Python binding (client/python/irisd) against a running irisd with host buffers:
two ranks in this process gather each other's bytes; errors raise IrisError with the code.
Run by integration_tests (PythonBinding); exits non-zero with the reason on any failure."""
import argparse
import random

import irisd

parser = argparse.ArgumentParser()
parser.add_argument("--socket", required=True)
socket = parser.parse_args().socket

nbytes = 65_537
clients = [irisd.Client(socket, name=f"python-check-{r}") for r in range(2)]
comms = [irisd.Communicator(c, "python-check", 2, r) for r, c in enumerate(clients)]
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

# Client.share: rank 1 gathers from and into memory rank 0's client allocated.
common = clients[0].allocate(3 * nbytes)
mirror = clients[1].share(common)
assert (mirror.data, len(mirror)) == (common.data, len(common)), "a share is the same memory"
common.view()[:nbytes] = data[1]
requests = [comms[0].all_gather(sends[0], recvs[0], nbytes),
            comms[1].all_gather(mirror.data, mirror.data + nbytes, nbytes)]
for req in requests:
    req.wait(timeout=10)
assert bytes(common.view()[nbytes:3 * nbytes]) == data[0] + data[1], "the shared area is wrong"
try:
    clients[0].share(common)
    raise AssertionError("a client shared its own buffer")
except irisd.IrisError as e:
    assert e.name == "invalid_argument", e


class _Done:
    """A request already complete (for calls that wait themselves)."""

    def wait(self, timeout=None):
        return True


def both(submit):
    """Submits on both ranks, then waits for both."""
    import threading
    results = [None, None]

    def run(r):
        results[r] = submit(r)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    for req in results:
        assert req.wait(timeout=10), "a collective did not complete in 10 s"


def poison():
    for r in range(2):
        sends[r].view()[:] = data[r]
        recvs[r].view()[:] = b"\xee" * (2 * nbytes)


# all_to_all: half blocks; block j of rank r lands as block r of rank j.
half = nbytes // 2
poison()
both(lambda r: comms[r].all_to_all(sends[r], recvs[r], half))
for r in range(2):
    got = bytes(recvs[r].view()[:2 * half])
    assert got == data[0][r * half:(r + 1) * half] + data[1][r * half:(r + 1) * half], r

# all_to_all_v with split sizes: rank 0 sends 3 bytes to rank 1, rank 1 sends 5 to rank 0.
counts = [[4, 3], [5, 6]]
poison()
both(lambda r: comms[r].all_to_all_v(sends[r], counts[r], [0, 10], recvs[r],
                                     [counts[0][r], counts[1][r]], [0, 10]))
assert bytes(recvs[1].view()[:3]) == data[0][10:13]
assert bytes(recvs[0].view()[10:15]) == data[1][:5]
assert bytes(recvs[0].view()[15:16]) == b"\xee"

# broadcast from rank 1; gather and scatter at rank 0 (None where insignificant).
poison()
both(lambda r: comms[r].broadcast(sends[r], nbytes, 1))
assert bytes(sends[0].view()) == data[1]
poison()
both(lambda r: comms[r].gather(sends[r], recvs[r] if r == 0 else None, nbytes, 0))
assert bytes(recvs[0].view()) == data[0] + data[1]
poison()
both(lambda r: comms[r].scatter(sends[r] if r == 0 else None, recvs[r], half, 0))
assert bytes(recvs[1].view()[:half]) == data[0][half:2 * half]

# What ClientOptions sets, from Python: the client works with every option given, and a
# negative value is refused with the reason.
tuned = irisd.Client(socket, name="python-options", resume_window=0, submit_timeout=0.5,
                     wait_spin=0, gpu_registration_cache=0)
solo = irisd.Communicator(tuned, "python-options", 1, 0, traffic_class="bulk")
buf = tuned.allocate(32)
solo.all_gather(buf, buf, 32).wait()
try:
    irisd.Communicator(tuned, "python-options-bad", 1, 0, traffic_class="urgent")
    raise AssertionError("an unknown traffic class was taken")
except irisd.IrisError as e:
    assert e.name == "invalid_argument" and "traffic_class" in e.message, e
try:
    irisd.Client(socket, resume_window=-1)
    raise AssertionError("a negative resume window was accepted")
except irisd.IrisError as e:
    assert e.name == "invalid_argument" and "resume_window" in e.message, e

try:
    comms[0].all_to_all_v(sends[0], [1], [0], recvs[0], [1, 1], [0, 1])
    raise AssertionError("counts of the wrong length were accepted")
except irisd.IrisError as e:
    assert e.name == "invalid_argument", e

try:
    comms[0].all_gather(12345, recvs[0], nbytes)
    raise AssertionError("a pointer outside every buffer was accepted")
except irisd.IrisError as e:
    assert e.name == "not_found" and e.code == 2, e

# Views of a Buffer are pointers too; bytes objects (Python's heap) are refused with the reason.
assert len(sends[0]) == nbytes and len(recvs[0]) == 2 * nbytes
both(lambda r: comms[r].all_gather(sends[r].view(), recvs[r].view(), 16))
try:
    comms[0].all_gather(b"x" * 16, recvs[0], 16)
    raise AssertionError("a bytes object was accepted")
except irisd.IrisError as e:
    assert e.name == "invalid_argument" and "client.allocate" in e.message, e

# A registration outlives the Python object the caller dropped: the client keeps it.
dropped = clients[0].allocate(64).data
both(lambda r: comms[r].all_gather(dropped if r == 0 else sends[1], recvs[r], 64))
both(lambda r: comms[r].barrier() or _Done())  # barrier: returns once both called it

# Ctrl-C interrupts a wait without a timeout; a failed constructor says only why it failed.
import signal
import subprocess
import sys
waiter = subprocess.Popen(
    [sys.executable, "-c",
     "import irisd, sys\n"
     f"c = irisd.Client({socket!r}); m = irisd.Communicator(c, 'ctrl-c', 2, 0)\n"
     "s = c.allocate(64); r = m.all_gather(s, c.allocate(128), 64)\n"
     "print('waiting', flush=True); r.wait()\n"],
    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
assert waiter.stdout.readline().strip() == "waiting"
waiter.send_signal(signal.SIGINT)
_, err = waiter.communicate(timeout=10)
assert waiter.returncode != 0 and "KeyboardInterrupt" in err, err
# Point to point: a ring exchange in both orders inside a group, then a send to oneself, every
# byte checked; a size mismatch names both sizes.
for order in range(2):
    poison()
    requests = []
    for r in range(2):
        with irisd.group():
            ops = [lambda r=r: comms[r].send(sends[r], nbytes, 1 - r),
                   lambda r=r: comms[r].recv(recvs[r], nbytes, 1 - r)]
            for op in (ops if (order + r) % 2 == 0 else reversed(ops)):
                requests.append(op())
    for req in requests:
        assert req.wait(timeout=10), "a send or receive did not complete in 10 s"
    for r in range(2):
        assert bytes(recvs[r].view()[:nbytes]) == data[1 - r], f"rank {r} received wrong bytes"
poison()
to_self = [comms[0].send(sends[0], 1000, 0), comms[0].recv(recvs[0], 1000, 0)]
for req in to_self:
    assert req.wait(timeout=10)
assert bytes(recvs[0].view()[:1000]) == data[0][:1000], "a send to oneself landed wrong"
mismatched = [comms[0].send(sends[0], 100, 1), comms[1].recv(recvs[1], 64, 0)]
for req in mismatched:
    try:
        req.wait(timeout=10)
        raise AssertionError("a send of 100 bytes met a receive of 64")
    except irisd.IrisError as e:
        assert e.name == "size_mismatch" and "100" in e.message and "64" in e.message, e
assert irisd.ErrorCode(irisd.ErrorCode.SIZE_MISMATCH).name == "SIZE_MISMATCH"

failed = subprocess.run([sys.executable, "-c", "import irisd; irisd.Client('/nonexistent.sock')"],
                        capture_output=True, text=True, timeout=30)
assert "IrisError" in failed.stderr and "AttributeError" not in failed.stderr, failed.stderr

pending = comms[0].all_gather(sends[0], recvs[0], nbytes)
assert pending.wait(timeout=0.02) is False, "a collective missing a rank completed"
comms[1].destroy()
try:
    pending.wait(timeout=10)
    raise AssertionError("the collective survived its peer leaving")
except irisd.IrisError as e:
    assert e.name == "peer_lost", e
    assert str(e).count("peer_lost") == 1, f"the name printed twice: {e}"
    assert "rank 1" in e.message, f"the daemon's reason is missing: {e}"

# The watchdog: a collective a rank never calls fails at the communicator's op_timeout, naming it.
watched = [irisd.Communicator(c, "python-watchdog", 2, r, op_timeout=0.3)
           for r, c in enumerate(clients)]
alone = watched[0].all_gather(sends[0], recvs[0], nbytes)
try:
    alone.wait(timeout=30)
    raise AssertionError("a collective missing a rank completed past the communicator's timeout")
except irisd.IrisError as e:
    assert e.name == "timeout" and "for rank 1" in e.message, e
try:
    irisd.Communicator(clients[0], "python-watchdog-bad", 2, 0, op_timeout=-1)
    raise AssertionError("a negative op_timeout was taken")
except irisd.IrisError as e:
    assert e.name == "invalid_argument", e
print("python binding: ok")
