"""The Python binding while irisd dies: a wait(), a wait(timeout) loop, a test() loop and a
barrier, each on its own client and waiting for a rank that never comes, must each raise
IrisError daemon_gone once this script SIGKILLs irisd, within seconds (not hang). Run by
integration_tests (PythonBinding.NoticesThatIrisdDied); prints the delays."""
import argparse
import os
import signal
import threading
import time

import irisd

parser = argparse.ArgumentParser()
parser.add_argument("--socket", required=True)
parser.add_argument("--daemon-pid", type=int, required=True)
args = parser.parse_args()

HUNG_S = 5.0


def pending(client, key):
    comm = irisd.Communicator(client, key, 2, 0)  # rank 1 never comes
    send, recv = client.allocate(64), client.allocate(128)
    return comm, comm.all_gather(send, recv, 64), (send, recv)


def wait_forever(request):
    request.wait()


def wait_in_slices(request):
    while not request.wait(timeout=0.01):
        pass


def test_in_a_loop(request):
    while not request.test():
        pass


def barrier(comm):
    comm.barrier()


paths = {"wait()": wait_forever, "wait(0.01) in a loop": wait_in_slices,
         "test() in a loop": test_in_a_loop, "barrier()": barrier}
seen, keep, threads = {}, [], []
for i, (name, body) in enumerate(paths.items()):
    client = irisd.Client(args.socket, name=f"python-gone-{i}")
    comm, request, buffers = pending(client, f"python-gone-{i}")
    keep.append((client, comm, request, buffers))

    def run(name=name, body=body, target=comm if body is barrier else request):
        try:
            body(target)
            seen[name] = ("returned", time.monotonic())
        except irisd.IrisError as e:
            seen[name] = (e.name, time.monotonic())

    threads.append(threading.Thread(target=run, daemon=True))
for t in threads:
    t.start()
time.sleep(0.3)
assert not seen, f"ended before irisd did: {seen}"
killed = time.monotonic()
os.kill(args.daemon_pid, signal.SIGKILL)
for t in threads:
    t.join(HUNG_S)
failed = []
for name in paths:
    if name not in seen:
        failed.append(f"{name}: still waiting {HUNG_S} s after irisd died")
        continue
    what, at = seen[name]
    print(f"python: {name:24s} noticed after {(at - killed) * 1e3:7.2f} ms as {what}")
    if what != "daemon_gone":
        failed.append(f"{name}: {what}, expected daemon_gone")
if failed:
    raise SystemExit("\n".join(failed))
print("python daemon gone: ok")
