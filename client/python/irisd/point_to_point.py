"""Point to point of the irisd torch backend: send, recv (isend, irecv) and the coalescing
batch_isend_irecv uses, as a part of IrisProcessGroup (distributed.py). Sends and receives run on
streams of their own, so a batch's sends and receives never wait for each other, whatever their
order; ranks sharing a GPU wait on the host instead, without a send waiting for its receive."""

import torch

import irisd
from irisd.torch_work import Work, _HostRequests, _current_stream, _finished, _flat, _nbytes


class PointToPoint:
    """The point-to-point calls of IrisProcessGroup; it provides comm, _run, _stream, _mem,
    _pending, _raise_failures, _check_engine, waits_on_host and the coalescing lists."""

    # Point to point. Sends and receives each have a stream of their own: on one stream a send
    # (which the stream waits for until the peer receives) would hold back the receive after it,
    # and two ranks exchanging with isend then irecv would wait for each other for ever. torch's
    # batch_isend_irecv issues such lists op by op for a group that is not its own C++ class.
    # Ranks sharing a GPU wait on the host instead (_send_on_host, _recv_on_host).
    # A dense tensor that is not contiguous (a transpose, a slice of rows) travels through a
    # contiguous copy, as with NCCL: the send's copy made on the caller's stream, the receive's
    # copied into the tensor once it landed.
    def send(self, tensors, dst, tag=0):
        t = tensors[0]
        if t.device.type == "cpu":
            return self._gloo.send(tensors, dst, tag)
        src = _flat(t if t.is_contiguous() else t.contiguous(), "send", "tensor")
        if self._p2p_waits_on_host():
            return self._p2p_issued(t, self._send_on_host(src, dst))
        return self._p2p(t, "sends",
                         lambda s: self.comm.send(self._mem(src), _nbytes(src), dst, stream=s),
                         keep=[t, src])

    def recv(self, tensors, src, tag=0):
        t = tensors[0]
        if t.device.type == "cpu":
            return self._gloo.recv(tensors, src, tag)
        landing = t if t.is_contiguous() else torch.empty_like(t, memory_format=torch.contiguous_format)
        dst = _flat(landing, "recv", "tensor")
        after = [] if landing is t else [lambda: t.copy_(landing)]
        if self._p2p_waits_on_host():
            return self._p2p_issued(t, self._recv_on_host(t, dst, src, after))

        def body(s):
            request = self.comm.recv(self._mem(dst), _nbytes(dst), src, stream=s)
            if after:
                with torch.cuda.stream(s):
                    after[0]()
            return request
        return self._p2p(t, "receives", body, keep=[t, landing])

    # Copies not yet sent may hold this much before a send waits for the oldest to be received.
    _SEND_COPIES_BYTES = 256 << 20

    def _p2p_waits_on_host(self):
        return self.waits_on_host and not torch.cuda.is_current_stream_capturing()

    def _send_on_host(self, src, dst):
        """irisd sends a copy of `src`, made after the caller's stream's work: the Work is done at
        once, so no send waits for its receive (a wait on the host there would hang a rank that
        sends and then meets its peer elsewhere before the peer receives)."""
        self._check_engine()
        self._raise_failures(block=False)
        # A failed send's error reaches the caller through _pending; here it only ends the wait.
        while self._send_copies and _finished(self._send_copies[0][0]):
            self._send_copies.popleft()
        while self._send_copies and sum(_nbytes(c) for _, c in
                                        self._send_copies) >= self._SEND_COPIES_BYTES:
            _finished(self._send_copies.popleft()[0], block=True)
        copy = src.clone()
        _current_stream(src.device).synchronize()
        request = self.comm.send(self._mem(copy), _nbytes(copy), dst)
        self._pending.append(request)
        self._send_copies.append((request, copy))
        return Work(self, None, [src])

    def _recv_on_host(self, t, dst, src, after=()):
        """irisd receives into `dst` once the caller's stream's work is done; wait() waits for the
        data on the host, then runs `after`."""
        self._check_engine()
        self._raise_failures(block=False)
        _current_stream(dst.device).synchronize()
        request = self.comm.recv(self._mem(dst), _nbytes(dst), src)
        if self._coalescing is not None:
            self._coalesced_receives.append(request)
            self._coalesced_after.extend(after)
        return Work(self, _HostRequests([request], after), [t])

    def _p2p_issued(self, t, work):
        if self._coalescing is not None:
            self._coalescing.append(t)
        return work

    def recv_anysource(self, tensors, tag=0):
        raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                                 "recv from any source: irisd matches a receive with the sends "
                                 "of one named rank; pass src")

    def _p2p(self, t, purpose, body, keep):
        """`keep`: the tensors the stream's work uses (kept for it by the allocator)."""
        return self._p2p_issued(t, self._run(t.device, keep, True, lambda s: [body(s)], [t],
                                             False, purpose))

    # torch's coalescing, where it calls it (batch_isend_irecv on its own process groups): the
    # batch's Work waits for both point-to-point streams.
    def _start_coalescing(self, device):
        self._coalescing = []

    def _end_coalescing(self, device):
        tensors, self._coalescing = self._coalescing, None
        receives, self._coalesced_receives = self._coalesced_receives, []
        after, self._coalesced_after = self._coalesced_after, []
        if self._p2p_waits_on_host():
            return Work(self, _HostRequests(receives, after), tensors)
        receives = self._stream(device, "receives")[0]
        receives.wait_stream(self._stream(device, "sends")[0])
        return Work(self, receives.record_event(), tensors)
