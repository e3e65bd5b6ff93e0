"""What the irisd torch backend's calls return and wait on: torch's Work for an irisd operation
ordered on a stream or waited for on the host, the current stream looked up cheaply, and the
checks every CUDA tensor passes before irisd sees its address. Shared by the collectives
(distributed.py) and point to point (point_to_point.py)."""

import time

import torch
import torch.distributed as dist

import irisd

def _nbytes(t):
    return t.numel() * t.element_size()


def _checked(t, op, what):
    """`t` itself, once it is a contiguous CUDA tensor: irisd needs only its address and size."""
    if t.device.type != "cuda":
        raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                             f"{op}: {what} is on {t.device}; the irisd backend takes CUDA tensors "
                             "(CPU tensors go to gloo: init with backend=\"cpu:gloo,cuda:irisd\")")
    if not t.is_contiguous():
        raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                             f"{op}: {what} is not contiguous; pass tensor.contiguous()")
    return t


def _flat(t, op, what):
    """`t` checked as _checked does, as one dimension (for the calls that reshape it)."""
    t = _checked(t, op, what)
    return t.view(-1) if t.dim() != 1 else t


class _HostRequests:
    """What a Work of ranks sharing a GPU waits for: irisd requests made without a stream, waited
    for on the host (synchronize() and query() as a torch event's), then `after` (copies of
    received data into non-contiguous tensors), once."""

    def __init__(self, requests, after=()):
        self.requests, self.after = requests, list(after)

    def _finish(self):
        after, self.after = self.after, []
        for f in after:
            f()

    def synchronize(self, timeout=None):
        """False when `timeout` (a timedelta) ran out first."""
        if timeout is None:
            irisd.wait_all(self.requests)
        else:
            deadline = time.monotonic() + timeout.total_seconds()
            for r in self.requests:
                if not r.wait(max(0.0, deadline - time.monotonic())):
                    return False
        self._finish()
        return True

    def query(self):
        done = all(_finished(r) for r in self.requests)  # a failure: wait() raises it
        if done:
            self._finish()
        return done


def _finished(request, block=False):
    """Whether `request` completed, failed or not (waiting for it when `block`)."""
    try:
        return request.wait() if block else request.test()
    except irisd.IrisError:
        return True


_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _device_index(device):
    """`device`'s CUDA index; the current device's when it names none."""
    index = getattr(device, "index", None)
    return index if index is not None else torch.cuda.current_device()


def _current_stream_handle(device):
    """The handle (cudaStream_t as an int) of the current stream on `device`: all irisd needs,
    without building torch's Stream object, which costs about 5 us of the host's time per call
    (measured on the GPU host, torch 2.11)."""
    index = _device_index(device)
    if _current_raw_stream is not None:
        return _current_raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


_streams_by_handle = {}


def _current_stream(device):
    """torch's Stream for the current stream on `device`, made once per stream handle:
    torch.cuda.current_stream builds a new object on every call (about 5 us of the host's time,
    measured on the GPU host, torch 2.11), a cost asynchronous calls and Work.wait() paid each
    time. The Stream only names the handle, so one kept for a destroyed stream is harmless; the
    table is cleared when it grows past a few hundred streams."""
    index = _device_index(device)
    if _current_raw_stream is None:
        return torch.cuda.current_stream(index)
    key = (index, _current_raw_stream(index))
    stream = _streams_by_handle.get(key)
    if stream is None:
        if len(_streams_by_handle) >= 256:
            _streams_by_handle.clear()
        stream = (torch.cuda.default_stream(index) if key[1] == 0 else
                  torch.cuda.ExternalStream(key[1], device=index))
        _streams_by_handle[key] = stream
    return stream


class Work(dist.Work):
    """An irisd collective ordered on a stream: wait() orders the caller's current stream after
    it (the host does not wait), synchronize() waits on the host. `done` is the event recorded
    after it, or the handle of the stream it was issued on (a blocking call issued on the
    caller's own stream, on `device`), or _HostRequests (ranks sharing a GPU: wait() waits on
    the host), or None (finished when the call returned)."""

    def __init__(self, group, done, result, device=None):
        super().__init__()
        self._group, self._done, self._result, self._device = group, done, result, device

    def _waitable(self):
        """What synchronize() and query() wait on: the event, or the stream issued on."""
        if isinstance(self._done, int):
            return torch.cuda.ExternalStream(self._done, device=self._device)
        return self._done

    def wait(self, timeout=None):
        """Waits on the host for what waits there (ranks sharing a GPU); `timeout` (a timedelta;
        none or 0: no bound) bounds that wait, past it IrisError(TIMEOUT). Stream-ordered work
        is only made the current stream's to wait for."""
        done = self._done
        if isinstance(done, _HostRequests):
            bound = timeout if timeout else None  # torch's kNoTimeout is a timedelta of 0
            if not done.synchronize(bound):
                raise irisd.IrisError.of(irisd.ErrorCode.TIMEOUT,
                                         f"irisd: the operation was not done within {bound} "
                                         "(its peers have not all called it; iris-ctl comms "
                                         "shows which ranks it waits on)")
        elif isinstance(done, torch.cuda.Event):
            _current_stream(done.device).wait_event(done)
        elif done is not None and _current_stream_handle(self._device) != done:
            _current_stream(self._device).wait_stream(self._waitable())
        self._group._raise_failures(block=False)
        return True

    def synchronize(self):
        if self._done is not None:
            self._waitable().synchronize()
        self._group._raise_failures(block=True)

    def is_completed(self):
        return self._done is None or self._waitable().query()

    def is_success(self):
        return self.is_completed()

    def result(self):
        return self._result

    def get_future(self):
        self.synchronize()
        future = torch.futures.Future()
        future.set_result(self._result)
        return future
