"""The torch.distributed backend "irisd": collectives on CUDA tensors moved by irisd on the GPU's
copy engines, CPU tensors through gloo.

    import irisd.distributed                      # registers the backend
    torch.distributed.init_process_group(backend="cpu:gloo,cuda:irisd")

Each process group is one irisd communicator (its key made by rank 0 and shared through the
group's store) plus a gloo group for CPU tensors and object collectives. Ranks attached to
different irisd daemons (one per node) make a communicator across nodes: the group's store
carries the daemons' addresses and a secret rank 0 makes (docs/SCALE-OUT.md). Collectives run on a
stream of the group's own, ordered after the caller's current stream; a blocking call makes the
current stream wait for it, an async one (async_op=True) returns a Work whose wait() does that,
as NCCL's does. A blocking call on a created stream goes on that stream itself (the same order,
without the group's stream and its events: a few microseconds less of the host's time per
call). The host never waits for the data.

What irisd does on copy engines: all_gather_into_tensor, all_gather, all_to_all_single (equal
and uneven splits), all_to_all, broadcast, gather, scatter, barrier. Reductions are irisd's
all-to-all followed by a local reduction on the GPU (only the arithmetic runs on the GPU's
cores): reduce_scatter_tensor, reduce_scatter, reduce (a gather, then the root reduces) and
all_reduce (reduce-scatter, then all-gather). Reduction ops: SUM, AVG, PRODUCT, MIN, MAX.
Point to point on copy engines too: send, recv, isend, irecv, and batch_isend_irecv, which
torch.distributed.pipelining's schedules use (sends and receives run on streams of their own, so
a batch's sends and receives never wait for each other, whatever their order); a receive from
any source is refused (irisd matches a receive with the sends of one named rank).

Ranks that share one GPU (several processes on one device, as `torchrun --nproc-per-node 2` on a
workstation with one GPU) take turns on it: the GPU runs one process's work at a time, so a
stream of one rank waiting for irisd's copies holds the GPU from the others (hundreds of
microseconds a collective). For such ranks each collective instead waits on the host, as gloo's
do: the caller's stream is synchronized, irisd copies while the ranks' streams are idle, and the
call returns once the data is there. $IRIS_TORCH_SHARED_GPU says what they do: "host" (the
default) or "stream" (ordered on streams as on separate GPUs). Their sends and receives wait on
the host too, without a send waiting for its receive: a send hands irisd a copy of its tensor and
returns (so a rank that sends, then meets its peer elsewhere before the peer receives, goes on as
on streams), a receive's wait() waits for the data. Everything under CUDA graph capture stays on
streams.

The group's timeout is irisd's watchdog, as it is NCCL's: a collective that waits longer than it
for a rank breaks the group's communicator with irisd.IrisError (timeout, naming the ranks it waits
on), a send or receive not matched that long fails; the streams go on.

A collective that fails in irisd (a rank died: peer_lost) lets the stream go on with the output
not written; the group raises irisd.IrisError at its next call (as NCCL reports asynchronous
errors), and work.wait() raises it too once the collective has completed."""

import collections
import itertools
import secrets
import threading

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d  # the options types, in every torch version
from torch.distributed import ReduceOp

import irisd
from irisd.point_to_point import PointToPoint
from irisd._c_structs import _TRAFFIC_CLASSES
from irisd import shared_gpu
from irisd.shared_gpu import _checked_mode, _OnHost, _ranks_share_a_gpu, _shared_gpu_mode
from irisd.torch_work import Work, _checked, _current_stream, _current_stream_handle, _flat, _nbytes

BACKEND = "irisd"

_client = None
_client_lock = threading.Lock()


def client():
    """The process's irisd session, shared by every irisd group."""
    global _client
    with _client_lock:
        if _client is None:
            _client = irisd.Client(name=f"torch rank {dist.get_rank() if dist.is_initialized() else '?'}")
        return _client


def _reduce(stacked, op, out, nranks, name):
    """Reduces `stacked` (nranks x n) over ranks into `out` (n elements)."""
    if op == ReduceOp.SUM or op == ReduceOp.AVG:
        torch.sum(stacked, dim=0, out=out)
        if op == ReduceOp.AVG:
            if not out.is_floating_point() and not out.is_complex():
                raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                                     f"{name}: AVG needs a floating-point tensor")
            out.div_(nranks)
    elif op == ReduceOp.PRODUCT:
        torch.prod(stacked, dim=0, out=out)
    elif op == ReduceOp.MIN:
        torch.amin(stacked, dim=0, out=out)
    elif op == ReduceOp.MAX:
        torch.amax(stacked, dim=0, out=out)
    else:
        raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                             f"{name}: reduction {op} is not supported by the irisd backend "
                             "(SUM, AVG, PRODUCT, MIN, MAX are)")


def _copy_out(flat, outs):
    """Equal parts of `flat` into the tensors `outs`, on the current stream."""
    for out, part in zip(outs, flat.view(len(outs), -1)):
        out.view(-1).copy_(part)


def _op_of(opts):
    op = opts.reduceOp
    return getattr(op, "op", op)


class IrisProcessGroup(PointToPoint, dist.ProcessGroup):
    """One process group: an irisd communicator for CUDA tensors, gloo for CPU tensors."""

    def __init__(self, store, rank, size, timeout, options):
        super().__init__(rank, size)
        mode = _shared_gpu_mode()  # a bad setting is refused before anything is made
        self._rank, self._size = rank, size
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size, timeout)
        if rank == 0:
            store.set("iris/key", secrets.token_hex(16))
            store.set("iris/secret", secrets.token_bytes(32))
        key = store.get("iris/key").decode()
        self._client = client()
        self._engine = self._client.engine  # asked once: a call into libiris
        # The NodeSet when the group's ranks use several irisd daemons, else None.
        self.nodes = _nodes_of_group(self._client, store, rank, size)
        # The group's timeout is irisd's watchdog, as it is NCCL's: an operation waiting longer
        # for a rank fails, naming the ranks, and the streams go on.
        seconds = timeout.total_seconds() if timeout is not None else 0
        self.comm = irisd.Communicator(self._client, f"torch-{key}", size, rank, nodes=self.nodes,
                                       op_timeout=seconds if seconds > 0 else None,
                                       traffic_class=options.traffic_class)
        # Collectives wait on the host (_OnHost) when ranks share a GPU, unless told otherwise.
        self.shares_a_gpu = _ranks_share_a_gpu(store, rank, size)
        self.waits_on_host = mode == "host" and self.shares_a_gpu
        self._streams = {}
        self._scratch = {}
        self._pending = collections.deque()  # requests not yet seen complete
        self._coalescing = None  # tensors of the batch_isend_irecv being built
        self._coalesced_receives = []  # and its receives, when they wait on the host
        self._coalesced_after = []  # and their copies into non-contiguous tensors
        self._send_copies = collections.deque()  # (request, copy): what sends on the host read

    def set_shared_gpu(self, mode):
        """See set_shared_gpu (module level)."""
        self.waits_on_host = _checked_mode(mode, "set_shared_gpu") == "host" and self.shares_a_gpu

    # ProcessGroup's names. ProcessGroup keeps its name in its backends, and this group has
    # none of C++'s: it keeps them itself.
    def getBackendName(self):
        return BACKEND

    def setGroupName(self, name):
        self._group_name = name

    def getGroupName(self):
        return getattr(self, "_group_name", "")

    def setGroupDesc(self, desc):
        self._group_desc = desc

    def getGroupDesc(self):
        return getattr(self, "_group_desc", "")

    def name(self):
        return BACKEND

    def size(self):
        return self._size

    def rank(self):
        return self._rank

    def _mem(self, t):
        """`t`, or for an empty tensor (whose data pointer may be null) a small scratch tensor:
        irisd reads and writes nothing there, but every rank must still join the collective."""
        if t is None or t.numel() > 0:
            return t
        scratch = self._scratch.get(t.device)
        if scratch is None:
            scratch = self._scratch[t.device] = torch.empty(16, dtype=torch.uint8, device=t.device)
        return scratch

    # Ordering.
    _DONE_EVENTS = 64

    def _stream(self, device, purpose="collectives"):
        """The group's stream for `purpose` on `device` (collectives, sends or receives), the
        event that orders it after the caller's stream, and the events its calls' ends are
        recorded on, taken in turn."""
        found = self._streams.get((device, purpose))
        if found is None:
            # Events recorded again on each use instead of made per call (a new torch Event costs
            # about 2.7 us more of the host's time, GPU host, torch 2.11): a wait already
            # enqueued keeps the point it was recorded at. A Work still holding an end event
            # recorded again waits for more, never less; with 64 in turn, only a Work kept across
            # 64 later calls of this group sees that.
            ends = itertools.cycle([torch.cuda.Event() for _ in range(self._DONE_EVENTS)])
            found = self._streams[(device, purpose)] = (torch.cuda.Stream(device),
                                                        torch.cuda.Event(), ends)
        return found

    def _raise_failures(self, block):
        """Raises the first failure among the requests issued so far that have completed (all
        of them, waited for, when `block`). Requests complete in about the order issued, so
        looking stops at the first one still running: bounded work per call."""
        failed = None
        while self._pending:
            try:
                if block:
                    self._pending[0].wait()
                elif not self._pending[0].test():
                    break
            except irisd.IrisError as e:
                failed = failed or e
            self._pending.popleft()
        if failed is not None:
            raise irisd.IrisError(failed.code, failed.name,
                                 f"an earlier collective of this group failed: {failed.message}")

    def _run(self, device, tensors, async_op, body, result=None, torch_ops=True,
             purpose="collectives"):
        """Runs body(stream) on the group's stream after the current stream's work; blocking
        calls make the current stream wait for it (a blocking call on a created stream runs
        body(handle) on that stream itself). Returns a Work. `torch_ops`: the body runs torch
        operations (temporaries, copies, reductions), which must go to that stream; the others
        only pass it to irisd."""
        self._check_engine()
        self._raise_failures(block=False)
        result = result if result is not None else tensors
        if not async_op and purpose == "collectives" and not self.waits_on_host:
            # A blocking call on a created stream: irisd's call goes on the caller's stream
            # itself, the order the group's stream and two events would give (after the stream's
            # work, before what follows it) without the events and the allocator's
            # record_stream. The legacy default stream (0) cannot order irisd's calls.
            handle = _current_stream_handle(device)
            if handle != 0:
                self._pending.extend(r for r in body(handle) if r is not None)
                return Work(self, handle, result, device)
        current = _current_stream(device)
        if (self.waits_on_host and purpose == "collectives"
                and not torch.cuda.is_current_stream_capturing()):
            body(_OnHost(current))  # the torch ops on the current stream, irisd's calls waited for
            return Work(self, current.record_event(), result)
        stream, after_current, ends = self._stream(device, purpose)
        after_current.record(current)
        stream.wait_event(after_current)
        if torch_ops:
            with torch.cuda.stream(stream):
                requests = body(stream)
        else:
            requests = body(stream)
        for t in tensors:
            t.record_stream(stream)  # the allocator must not reuse them before the stream
        for r in requests:
            if r is not None:
                self._pending.append(r)
        event = next(ends)
        event.record(stream)
        if not async_op:
            current.wait_event(event)
        return Work(self, event, result)

    def on_stream(self, tensor, body):
        """For callers that order work themselves (irisd.fsdp): body(stream) on the current
        stream (on the group's stream, waited for, when that is the legacy default stream; waited
        for on the host, as every collective, when the group's ranks share a GPU)."""
        self._check_engine()
        handle = _current_stream_handle(tensor.device)
        if handle == 0 or self.waits_on_host:
            self._run(tensor.device, [], False, body)
            return
        self._raise_failures(block=False)
        self._pending.extend(r for r in body(handle) if r is not None)

    def _submit(self, order, call, *args):
        """irisd's `call` on `order`: a stream it is ordered on, torch's or a handle (returns its
        Request), or _OnHost (waits for the stream's work before and for irisd's after; returns
        None)."""
        if isinstance(order, _OnHost):
            order.stream.synchronize()
            call(*args).wait()
            return None
        return call(*args, stream=order)

    # The collectives, as torch.distributed calls them.
    def _allgather_base(self, output, input, opts=None):
        if input.device.type == "cpu":
            return self._gloo._allgather_base(output, input, opts or c10d.AllgatherOptions())
        name = "all_gather_into_tensor"
        src, dst = _checked(input, name, "input"), _checked(output, name, "output")
        self._check(dst.numel() == src.numel() * self._size and dst.dtype == src.dtype, name,
                    f"output must hold {self._size} x {src.numel()} {src.dtype} elements")
        return self._run(input.device, [input, output], _async(opts),
                         lambda s: [self.all_gather_flat(src, dst, s)], [output], False)

    def all_gather_flat(self, src, dst, stream):
        return self._submit(stream, self.comm.all_gather, self._mem(src), self._mem(dst),
                            _nbytes(src))

    def allgather(self, output_lists, inputs, opts=None):
        if inputs[0].device.type == "cpu":
            return self._gloo.allgather(output_lists, inputs, opts or c10d.AllgatherOptions())
        name = "all_gather"
        src, outs = _flat(inputs[0], name, "input"), output_lists[0]
        self._check(len(outs) == self._size and all(o.numel() == src.numel() for o in outs), name,
                    f"needs {self._size} output tensors of {src.numel()} elements")

        def body(stream):
            gathered = torch.empty(self._size * src.numel(), dtype=src.dtype, device=src.device)
            request = self.all_gather_flat(src, gathered, stream)
            _copy_out(gathered, outs)
            return [request]

        return self._run(src.device, [inputs[0], *outs], _async(opts), body, outs)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        if input.device.type == "cpu":
            return self._gloo.alltoall_base(output, input, output_split_sizes, input_split_sizes,
                                            opts or c10d.AllToAllOptions())
        name = "all_to_all_single"
        src, dst = _checked(input, name, "input"), _checked(output, name, "output")
        send_counts = _split_bytes(input, input_split_sizes, self._size, name, "input")
        recv_counts = _split_bytes(output, output_split_sizes, self._size, name, "output")
        if not input_split_sizes and not output_split_sizes:
            def body(stream):
                return [self._submit(stream, self.comm.all_to_all, self._mem(src),
                                     self._mem(dst), _nbytes(src) // self._size)]
        else:
            def body(stream):
                return [self._submit(stream, self.comm.all_to_all_v, self._mem(src),
                                     send_counts, _displacements(send_counts), self._mem(dst),
                                     recv_counts, _displacements(recv_counts))]
        return self._run(input.device, [input, output], _async(opts), body, [output], False)

    def alltoall(self, outputs, inputs, opts=None):
        if inputs[0].device.type == "cpu":
            return self._gloo.alltoall(outputs, inputs, opts or c10d.AllToAllOptions())
        name = "all_to_all"
        self._check(len(inputs) == self._size and len(outputs) == self._size, name,
                    f"needs {self._size} input and {self._size} output tensors")
        dtype, device = inputs[0].dtype, inputs[0].device
        self._check(all(t.dtype == dtype for t in [*inputs, *outputs]), name,
                    "all tensors must have one dtype")
        send_counts = [_nbytes(t) for t in inputs]
        recv_counts = [_nbytes(t) for t in outputs]

        def body(stream):
            send = torch.cat([t.reshape(-1) for t in inputs])
            recv = torch.empty(sum(t.numel() for t in outputs), dtype=dtype, device=device)
            request = self._submit(stream, self.comm.all_to_all_v, self._mem(send), send_counts,
                                   _displacements(send_counts), self._mem(recv), recv_counts,
                                   _displacements(recv_counts))
            at = 0
            for o in outputs:
                o.copy_(recv[at:at + o.numel()].view_as(o))
                at += o.numel()
            return [request]

        return self._run(device, [*inputs, *outputs], _async(opts), body, outputs)

    def broadcast(self, tensors, opts=None):
        opts = opts or c10d.BroadcastOptions()
        if tensors[0].device.type == "cpu":
            return self._gloo.broadcast(tensors, opts)
        t = _checked(tensors[0], "broadcast", "tensor")
        return self._run(t.device, [tensors[0]], _async(opts),
                         lambda s: [self._submit(s, self.comm.broadcast, self._mem(t),
                                                 _nbytes(t), opts.rootRank)],
                         tensors, False)

    def gather(self, output_lists, inputs, opts=None):
        opts = opts or c10d.GatherOptions()
        if inputs[0].device.type == "cpu":
            return self._gloo.gather(output_lists, inputs, opts)
        name, root = "gather", opts.rootRank
        src = _flat(inputs[0], name, "input")
        outs = output_lists[0] if self._rank == root else []
        if self._rank == root:
            self._check(len(outs) == self._size and all(o.numel() == src.numel() for o in outs),
                        name, f"the root needs {self._size} outputs of {src.numel()} elements")

        def body(stream):
            gathered = None
            if self._rank == root:
                gathered = torch.empty(self._size * src.numel(), dtype=src.dtype, device=src.device)
            request = self._submit(stream, self.comm.gather, self._mem(src),
                                   self._mem(gathered), _nbytes(src), root)
            if gathered is not None:
                _copy_out(gathered, outs)
            return [request]

        return self._run(src.device, [inputs[0], *outs], _async(opts), body, outs)

    def scatter(self, outputs, input_lists, opts=None):
        opts = opts or c10d.ScatterOptions()
        if outputs[0].device.type == "cpu":
            return self._gloo.scatter(outputs, input_lists, opts)
        name, root = "scatter", opts.rootRank
        dst = _flat(outputs[0], name, "output")
        ins = input_lists[0] if self._rank == root else []
        if self._rank == root:
            self._check(len(ins) == self._size and all(t.numel() == dst.numel() for t in ins),
                        name, f"the root needs {self._size} inputs of {dst.numel()} elements")

        def body(stream):
            send = torch.cat([t.reshape(-1) for t in ins]) if self._rank == root else None
            return [self._submit(stream, self.comm.scatter, self._mem(send), self._mem(dst),
                                 _nbytes(dst), root)]

        return self._run(dst.device, [outputs[0], *ins], _async(opts), body, outputs)

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts or c10d.ReduceScatterOptions()
        if input.device.type == "cpu":
            return self._gloo._reduce_scatter_base(output, input, opts)
        name = "reduce_scatter_tensor"
        src, dst = _flat(input, name, "input"), _flat(output, name, "output")
        self._check(src.numel() == dst.numel() * self._size and src.dtype == dst.dtype, name,
                    f"input must hold {self._size} x {dst.numel()} {dst.dtype} elements")
        op = _op_of(opts)
        return self._run(input.device, [input, output], _async(opts),
                         lambda s: [self.reduce_scatter_flat(src, dst, op, s, name)], [output])

    def reduce_scatter_flat(self, src, dst, op, stream, name="reduce_scatter"):
        """irisd's all-to-all brings every rank's block for this rank together; the sum (or
        other reduction) is the only work on the GPU's cores."""
        blocks = torch.empty_like(src)
        request = self._submit(stream, self.comm.all_to_all, self._mem(src), self._mem(blocks),
                               _nbytes(dst))
        _reduce(blocks.view(self._size, -1), op, dst, self._size, name)
        return request

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts or c10d.ReduceScatterOptions()
        if outputs[0].device.type == "cpu":
            return self._gloo.reduce_scatter(outputs, input_lists, opts)
        name = "reduce_scatter"
        dst, ins = _flat(outputs[0], name, "output"), input_lists[0]
        self._check(len(ins) == self._size and all(t.numel() == dst.numel() for t in ins), name,
                    f"needs {self._size} inputs of {dst.numel()} elements")
        op = _op_of(opts)

        def body(stream):
            src = torch.cat([t.reshape(-1) for t in ins])
            return [self.reduce_scatter_flat(src, dst, op, stream, name)]

        return self._run(dst.device, [outputs[0], *ins], _async(opts), body, outputs)

    def allreduce(self, tensors, opts=None):
        opts = opts or c10d.AllreduceOptions()
        if tensors[0].device.type == "cpu":
            return self._gloo.allreduce(tensors, opts)
        name = "all_reduce"
        t = _flat(tensors[0], name, "tensor")
        op = _op_of(opts)
        chunk = -(-t.numel() // self._size)

        def body(stream):
            padded = torch.empty(chunk * self._size, dtype=t.dtype, device=t.device)
            padded[:t.numel()].copy_(t)
            mine = torch.empty(chunk, dtype=t.dtype, device=t.device)
            first = self.reduce_scatter_flat(padded, mine, op, stream, name)
            second = self.all_gather_flat(mine, padded, stream)
            t.copy_(padded[:t.numel()])
            return [first, second]

        return self._run(t.device, [tensors[0]], _async(opts), body, tensors)

    def reduce(self, tensors, opts=None):
        opts = opts or c10d.ReduceOptions()
        if tensors[0].device.type == "cpu":
            return self._gloo.reduce(tensors, opts)
        name, root = "reduce", opts.rootRank
        t = _flat(tensors[0], name, "tensor")
        op = _op_of(opts)

        def body(stream):
            gathered = None
            if self._rank == root:
                gathered = torch.empty(self._size * t.numel(), dtype=t.dtype, device=t.device)
            request = self._submit(stream, self.comm.gather, self._mem(t), self._mem(gathered),
                                   _nbytes(t), root)
            if gathered is not None:
                _reduce(gathered.view(self._size, -1), op, t, self._size, name)
            return [request]

        return self._run(t.device, [tensors[0]], _async(opts), body, tensors)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return works[-1] if works else Work(self, None, outputs)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return works[-1] if works else Work(self, None, outputs)

    def barrier(self, opts=None):
        self._raise_failures(block=False)
        self.comm.barrier()
        return Work(self, None, [])

    def _check_engine(self):
        if self._engine != "cuda":
            raise irisd.IrisError.of(irisd.ErrorCode.UNAVAILABLE,
                                 f"irisd runs the {self._client.engine} engine; CUDA tensors need "
                                 "its cuda engine (irisd --engine cuda)")

    def _check(self, ok, name, what):
        if not ok:
            raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT, f"{name}: {what}")


def _async(opts):
    return getattr(opts, "asyncOp", True) if opts is not None else True


def _split_bytes(t, splits, nranks, name, what):
    """Bytes per rank for all_to_all_single: rows of dim 0 per split, or equal parts."""
    row = _nbytes(t) // t.shape[0] if t.dim() > 0 and t.shape[0] > 0 else 0
    if not splits:
        if t.dim() == 0 or t.shape[0] % nranks != 0:
            raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                                 f"{name}: {what}'s first dimension must divide by {nranks} "
                                 "without split sizes")
        return [_nbytes(t) // nranks] * nranks
    if len(splits) != nranks or sum(splits) != t.shape[0] or min(splits) < 0:
        raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                             f"{name}: {what} split sizes {list(splits)} must be {nranks} "
                             f"non-negative counts adding up to {t.shape[0]}")
    return [int(s) * row for s in splits]


def _displacements(counts):
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += c
    return out


def _nodes_of_group(client, store, rank, size):
    """The group's nodes when its ranks use several irisd daemons (one per node), found by
    comparing their daemons' addresses through the store; None when they share one daemon."""
    try:
        mine = client.node_address()
    except irisd.IrisError:
        return None  # this irisd cannot scale out: the group must be on one node
    store.set(f"iris/address/{rank}", mine)
    addresses = [bytes(store.get(f"iris/address/{r}")) for r in range(size)]
    nodes, node_of_rank = [], []
    for address in addresses:
        if address not in nodes:
            nodes.append(address)
        node_of_rank.append(nodes.index(address))
    if len(nodes) == 1:
        return None
    return irisd.NodeSet(nodes, node_of_rank, bytes(store.get("iris/secret")))


# How one group's ranks that share a GPU wait (irisd.distributed.set_shared_gpu).
set_shared_gpu = shared_gpu.set_shared_gpu


class Options:
    """irisd's options for a group, passed as torch.distributed's pg_options
    (init_process_group or new_group): `traffic_class` "auto" (by size), "latency" or "bulk":
    where the group's copies wait while users share the node's copy engines (irisd grants
    latency beyond its --latency-max-bytes only to the users it names)."""

    def __init__(self, traffic_class="auto"):
        if traffic_class not in _TRAFFIC_CLASSES:
            raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                                     f"irisd.distributed.Options(traffic_class={traffic_class!r}):"
                                     f" {', '.join(_TRAFFIC_CLASSES)}")
        self.traffic_class = traffic_class


def _create(backend_options, pg_options):
    if pg_options is not None and not isinstance(pg_options, Options):
        raise irisd.IrisError.of(irisd.ErrorCode.INVALID_ARGUMENT,
                                 f"an irisd group takes pg_options=irisd.distributed.Options(...), "
                                 f"not {type(pg_options).__name__}")
    o = backend_options
    return IrisProcessGroup(o.store, o.group_rank, o.group_size, o.timeout,
                            pg_options or Options())


def register():
    """Registers "irisd" with torch.distributed (done on import; safe to call again)."""
    if not hasattr(dist.Backend, BACKEND.upper()):
        try:
            dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cuda"])
        except TypeError:  # torch before 2.1 has no device list (Debian 12's 1.13)
            dist.Backend.register_backend(BACKEND, _create, extended_api=True)


register()
