"""irisd's Python client: ctypes over libiris's C interface (client/include/iris/iris.h).

    import irisd
    client = irisd.Client(name="trainer")          # $IRIS_SOCKET, else /run/irisd/irisd.sock
    comm = irisd.Communicator(client, "job-42", nranks=8, rank=rank)
    comm.all_gather(x, y, x.numel() * x.element_size(),   # torch CUDA tensors, as they are
                    stream=torch.cuda.current_stream()).wait()

A stream orders the call on it (PyTorch's default stream too: the call goes on a side stream
that follows it and that it follows back; tests/python/gpu/package_example.py runs this example
on the GPU host).

With irisd's cuda engine any CUDA tensor works as it is: libiris registers its allocation with
irisd on first use and keeps it while the allocation lives (client.gpu_registrations() counts
them). PyTorch integration: irisd.distributed (the torch.distributed backend "irisd"), irisd.fsdp
(FSDP2's custom all-gather and reduce-scatter), irisd.memory (a MemPool whose memory irisd
releases when PyTorch frees it).

libiris is found without settings: next to this package (a bundled copy), in the prefix the
package is installed in (`cmake --install` puts it in <prefix>/share/iris/python, pip in
<prefix>/lib/pythonX.Y/site-packages; libiris in <prefix>/lib), then on the loader's search
path (libiris.so.0, as the Debian package installs it). $IRIS_LIBRARY (a path) overrides all.
Pointers may be ints, Buffers, writable buffers inside a Buffer (memoryview, bytearray views),
or objects with data_ptr() (torch tensors); streams may be ints (cudaStream_t, or hipStream_t on
AMD) or objects with cuda_stream (torch.cuda.Stream, which is a HIP stream in ROCm builds of
PyTorch). With irisd's hsa engine (AMD GPUs) GPU memory and streams go through HIP, otherwise
through CUDA.

Registrations live as long as the Client: a Buffer the caller drops stays registered until
`buffer.release()` or `client.close()`. `Request.wait(timeout)` returns False when the time ran
out (as in C++), True once done, and raises IrisError when the collective failed; waits without a
timeout can be interrupted with Ctrl-C."""

import contextlib
import ctypes
import enum
import os
import pathlib
import sysconfig
import time

from irisd._c_structs import (_STREAM_CUDA, _STREAM_HIP, _TRAFFIC_CLASSES, _ClientOptions,
                               _CommOptions, _IrisStream)

__all__ = ["Buffer", "Client", "Communicator", "ErrorCode", "IrisError", "NodeSet", "Request",
           "group", "group_end", "group_start", "wait_all"]

# How long one wait in C lasts before Python looks for signals (Ctrl-C) again.
_WAIT_SLICE_NS = 100_000_000


class ErrorCode(enum.IntEnum):
    """iris::ErrorCode (shared/include/iris/error_code.hpp), value for value; the lower-case
    name is the one iris_error_name() gives (python.check_package checks both against libiris)."""
    OK = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    OUT_OF_RANGE = 3
    PERMISSION_DENIED = 4
    ALREADY_EXISTS = 5
    SIZE_MISMATCH = 6
    SEQUENCE_ERROR = 7
    NRANKS_MISMATCH = 8
    PEER_LOST = 9
    LIMIT_EXCEEDED = 10
    BUSY = 11
    TIMEOUT = 12
    DAEMON_GONE = 13
    PROTOCOL_MISMATCH = 14
    UNAVAILABLE = 15
    INTERNAL = 16
    ENGINE_ERROR = 17
    CANCELLED = 18


class IrisError(RuntimeError):
    """A failed libiris call: `code` is the iris::ErrorCode value, `name` its name, `message`
    what happened and what to do."""

    def __init__(self, code, name, message):
        super().__init__(f"{name}: {message}")
        self.code, self.name, self.message = code, name, message

    @classmethod
    def of(cls, code, message):
        """An IrisError raised by Python itself, for an ErrorCode."""
        return cls(int(code), code.name.lower(), message)


_LIBRARY = "libiris.so.0"


def _library_candidates():
    """Where libiris may be, in the order tried (see the module's docstring)."""
    override = os.environ.get("IRIS_LIBRARY")
    if override:
        return [override]
    here = pathlib.Path(__file__).resolve().parent
    candidates = [here / _LIBRARY]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    libdirs = ["lib", "lib64"] + ([f"lib/{multiarch}"] if multiarch else [])
    # <prefix>/share/iris/python/irisd, <prefix>/lib/pythonX.Y/site-packages/irisd and the like.
    for prefix in here.parents[1:5]:
        candidates += [prefix / d / _LIBRARY for d in libdirs]
    candidates.append(_LIBRARY)  # the loader's search path
    return candidates


def _open_library():
    tried = []
    for candidate in _library_candidates():
        if isinstance(candidate, pathlib.Path) and not candidate.exists():
            continue
        try:
            return ctypes.CDLL(str(candidate))
        except OSError as e:
            tried.append(f"{candidate}: {e}")
    raise ImportError("irisd: cannot load libiris (" + "; ".join(tried) + "). Install irisd's "
                      "package, or `cmake --install` into this package's prefix, or set "
                      "IRIS_LIBRARY to the library's path")


def _load():
    lib = _open_library()
    p, size, u32, i64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_int64
    out = ctypes.POINTER(ctypes.c_void_p)
    stream = ctypes.POINTER(_IrisStream)
    u64s = ctypes.POINTER(ctypes.c_uint64)
    signatures = {
        "iris_last_error": ([], ctypes.c_char_p),
        "iris_error_name": ([ctypes.c_int], ctypes.c_char_p),
        "iris_connect": ([ctypes.c_char_p, ctypes.c_char_p, out], ctypes.c_int),
        "iris_connect_with": ([ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_ClientOptions),
                               out], ctypes.c_int),
        "iris_client_release": ([p], None),
        "iris_client_engine": ([p], ctypes.c_char_p),
        "iris_allocate": ([p, size, out], ctypes.c_int),
        "iris_register_cuda": ([p, p, size, out], ctypes.c_int),
        "iris_register_host": ([p, p, size, out], ctypes.c_int),
        "iris_share": ([p, p, out], ctypes.c_int),
        "iris_register_hip": ([p, p, size, out], ctypes.c_int),
        "iris_buffer_data": ([p], p),
        "iris_buffer_size": ([p], size),
        "iris_buffer_release": ([p], None),
        "iris_node_address": ([p, p, ctypes.POINTER(size)], ctypes.c_int),
        "iris_comm_init_with": ([p, ctypes.c_char_p, u32, u32, ctypes.POINTER(_CommOptions), out],
                                ctypes.c_int),
        "iris_comm_destroy": ([p], ctypes.c_int),
        "iris_all_gather": ([p, p, p, size, stream, out], ctypes.c_int),
        "iris_all_to_all": ([p, p, p, size, stream, out], ctypes.c_int),
        "iris_all_to_all_v": ([p, p, u64s, u64s, p, u64s, u64s, stream, out], ctypes.c_int),
        "iris_broadcast": ([p, p, size, u32, stream, out], ctypes.c_int),
        "iris_gather": ([p, p, p, size, u32, stream, out], ctypes.c_int),
        "iris_scatter": ([p, p, p, size, u32, stream, out], ctypes.c_int),
        "iris_request_wait": ([p, i64], ctypes.c_int),
        "iris_barrier": ([p], ctypes.c_int),
        "iris_send": ([p, p, size, u32, stream, out], ctypes.c_int),
        "iris_recv": ([p, p, size, u32, stream, out], ctypes.c_int),
        "iris_group_start": ([], ctypes.c_int),
        "iris_group_end": ([], ctypes.c_int),
        "iris_request_test": ([p, ctypes.POINTER(ctypes.c_int)], ctypes.c_int),
        "iris_request_release": ([p], None),
        "iris_check_graphs": ([p], ctypes.c_int),
        "iris_client_gpu_registrations": ([p, ctypes.POINTER(size), ctypes.POINTER(size)],
                                          ctypes.c_int),
    }
    for name, (args, result) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, result
    return lib


def library_path():
    """The file libiris was loaded from."""
    return _lib._name


def torch_allocator_path():
    """libiris_torch, the allocator PyTorch's pluggable allocator loads by path: beside libiris
    ($IRIS_TORCH_ALLOCATOR names another)."""
    override = os.environ.get("IRIS_TORCH_ALLOCATOR")
    if override:
        return override
    path = os.path.join(os.path.dirname(os.path.realpath(library_path())), "libiris_torch.so.0")
    if not os.path.exists(path):
        raise IrisError(1, "invalid_argument",
                        f"{path} not found: libiris_torch.so.0 is installed beside libiris "
                        "(or set IRIS_TORCH_ALLOCATOR to its path)")
    return path


_lib = _load()


def _check(code):
    if code != 0:
        raise IrisError(code, _lib.iris_error_name(code).decode(),
                        _lib.iris_last_error().decode())


def _created(call, *args):
    handle = ctypes.c_void_p()
    _check(call(*args, ctypes.byref(handle)))
    return handle


def _address(x):
    if x is None:
        return None
    if isinstance(x, Buffer):
        return x.data
    if hasattr(x, "data_ptr"):
        return x.data_ptr()
    if isinstance(x, int):
        return x
    if isinstance(x, bytes):
        raise IrisError.of(ErrorCode.INVALID_ARGUMENT,
                        "a bytes object lives in Python's own memory, which irisd cannot reach: "
                        "copy it into a Buffer from client.allocate() (buffer.view()[:] = data)")
    try:
        view = memoryview(x)
    except TypeError:
        raise IrisError.of(ErrorCode.INVALID_ARGUMENT,
                        f"cannot use a {type(x).__name__} as a pointer: pass a Buffer, a view "
                        "of one, an int address or a torch tensor") from None
    if view.readonly:
        raise IrisError.of(ErrorCode.INVALID_ARGUMENT,
                           "a read-only buffer cannot take part in a collective")
    return ctypes.addressof(ctypes.c_char.from_buffer(view.cast("B")))


def _stream(s, hip):
    if s is None:
        return None
    handle = int(getattr(s, "cuda_stream", s))
    if handle == 0:
        raise IrisError.of(ErrorCode.INVALID_ARGUMENT,
                        "the legacy default stream (0) cannot order a collective: pass a "
                        "created stream (torch.cuda.Stream()), or no stream to wait from the host")
    return ctypes.byref(_IrisStream(handle, _STREAM_HIP if hip else _STREAM_CUDA))


def _u64_array(values, nranks, what):
    values = [int(v) for v in values]
    if len(values) != nranks:
        raise IrisError.of(ErrorCode.INVALID_ARGUMENT,
                        f"all_to_all_v: {what} needs {nranks} entries (one per rank), "
                        f"got {len(values)}")
    return (ctypes.c_uint64 * nranks)(*values)


class Client:
    """An attached session of irisd. Buffers it registers stay registered while it lives, also
    when the caller drops them (release() or close() ends them)."""

    def __init__(self, socket_path=None, name=None, *, resume_window=None, submit_timeout=None,
                 wait_spin=None, gpu_registration_cache=None):
        """As iris::ClientOptions: `resume_window` (seconds calls wait for a restarted irisd; 0
        fails at once), `submit_timeout` (seconds a submission waits for ring room, then busy),
        `wait_spin` (seconds wait() polls before it sleeps), `gpu_registration_cache` (first-use
        GPU registrations kept; 0 turns them off). None keeps the default."""
        self._handle = None
        self._buffers = {}  # id -> Buffer: registrations live as long as the client
        self._tensors = {}  # (address, bytes) -> Buffer, so a tensor registers once

        def chosen(value, scale, what):
            if value is None:
                return -1
            if value < 0:
                raise IrisError.of(ErrorCode.INVALID_ARGUMENT, f"Client: {what} must be >= 0")
            return int(value * scale)
        options = _ClientOptions(ctypes.sizeof(_ClientOptions),
                                 chosen(submit_timeout, 1e9, "submit_timeout"),
                                 chosen(resume_window, 1e3, "resume_window"),
                                 chosen(wait_spin, 1e6, "wait_spin"),
                                 chosen(gpu_registration_cache, 1, "gpu_registration_cache"))
        self._handle = _created(_lib.iris_connect_with,
                                socket_path.encode() if socket_path else None,
                                name.encode() if name else None, ctypes.byref(options))

    @property
    def engine(self):
        return _lib.iris_client_engine(self._handle).decode()

    def _keep(self, handle):
        buffer = Buffer(handle, self)
        self._buffers[id(buffer)] = buffer
        return buffer

    def allocate(self, nbytes):
        """Host memory shared with irisd."""
        return self._keep(_created(_lib.iris_allocate, self._handle, nbytes))

    def register_host(self, address, nbytes):
        """Existing host memory shared with irisd in place: page-aligned, private anonymous
        memory (an mmap.mmap(-1, n) or a page-aligned numpy array); its pages are moved onto
        memory irisd can reach, contents copied once."""
        return self._keep(_created(_lib.iris_register_host, self._handle, _address(address),
                                   nbytes))

    def share(self, buffer):
        """A host Buffer of another Client of this process, registered with this client's
        session too: the same memory, no copy (one process holding several ranks)."""
        if not isinstance(buffer, Buffer) or not buffer._handle:
            raise IrisError.of(ErrorCode.INVALID_ARGUMENT,
                               "share: pass a live Buffer of another Client")
        return self._keep(_created(_lib.iris_share, self._handle, buffer._handle))

    def register_cuda(self, device_ptr, nbytes):
        """GPU memory of this process; it must outlive its registration."""
        return self._keep(_created(_lib.iris_register_cuda, self._handle, device_ptr, nbytes))

    def register_hip(self, device_ptr, nbytes):
        """GPU memory from hipMalloc (hsa engine); it must outlive its registration."""
        return self._keep(_created(_lib.iris_register_hip, self._handle, device_ptr, nbytes))

    def node_address(self):
        """This node's irisd address (bytes) for communicators across nodes: gather every
        node's with the job's own means (see NodeSet)."""
        n = ctypes.c_size_t(0)
        _check(_lib.iris_node_address(self._handle, None, ctypes.byref(n)))
        buf = ctypes.create_string_buffer(n.value)
        _check(_lib.iris_node_address(self._handle, buf, ctypes.byref(n)))
        return buf.raw[:n.value]

    def gpu_registrations(self):
        """(held, retiring): GPU allocations registered on first use, and those whose
        registration ends once the requests naming them finish."""
        held, retiring = ctypes.c_size_t(), ctypes.c_size_t()
        _check(_lib.iris_client_gpu_registrations(self._handle, ctypes.byref(held),
                                                  ctypes.byref(retiring)))
        return held.value, retiring.value

    def register_tensor(self, tensor):
        """A contiguous torch GPU tensor's storage range, registered once per range and kept
        until release() or close(). Needed under the hsa engine (HIP memory); with the cuda
        engine tensors are registered on first use without this."""
        if not tensor.is_contiguous():
            raise IrisError.of(ErrorCode.INVALID_ARGUMENT,
                               "register_tensor needs a contiguous tensor")
        key = (tensor.data_ptr(), tensor.numel() * tensor.element_size())
        if key not in self._tensors or self._tensors[key]._handle is None:
            register = self.register_hip if self.engine == "hsa" else self.register_cuda
            self._tensors[key] = register(*key)
        return self._tensors[key]

    def check_graphs(self):
        """Collectives called on a stream under CUDA graph capture (torch.cuda.graph) become part
        of the graph: each replay runs them in irisd with no Python call, and the graph waits for
        them. After synchronizing, this raises the failure of the last failed replay (a rank died
        or destroyed its graph: peer_lost; a rank never replayed: timeout)."""
        _check(_lib.iris_check_graphs(self._handle))

    def close(self):
        if self._handle:
            for buffer in list(self._buffers.values()):
                buffer.release()
            _lib.iris_client_release(self._handle)
            self._handle = None

    def __del__(self):
        self.close()


class Buffer:
    """A registered buffer; `view()` gives host buffers' bytes as a memoryview; len() is its
    size in bytes."""

    def __init__(self, handle, client=None):
        self._handle = handle
        self._client = client
        self.data = _lib.iris_buffer_data(handle)
        self.size = _lib.iris_buffer_size(handle)

    def __len__(self):
        return self.size

    def view(self):
        return memoryview((ctypes.c_ubyte * self.size).from_address(self.data)).cast("B")

    def release(self):
        """Ends the registration (irisd stops using the memory)."""
        if self._handle:
            _lib.iris_buffer_release(self._handle)
            self._handle = None
        if self._client is not None:
            self._client._buffers.pop(id(self), None)
            self._client = None

    def __del__(self):
        if getattr(self, "_handle", None):
            self.release()


class Request:
    """A submitted collective."""

    def __init__(self, handle):
        self._handle = handle

    def wait(self, timeout=None):
        """Waits `timeout` seconds (None: without limit). Returns True once complete, False if
        the time ran out; raises IrisError if the collective failed. Ctrl-C interrupts it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _WAIT_SLICE_NS if deadline is None else \
                max(0, min(_WAIT_SLICE_NS, int((deadline - time.monotonic()) * 1e9)))
            code = _lib.iris_request_wait(self._handle, left)
            if code != 12:  # not a timeout of this slice
                _check(code)
                return True
            # The slice ran out, or the request failed with a timeout of its own (the
            # communicator's op_timeout): test() raises the latter.
            if self.test():
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def test(self):
        done = ctypes.c_int(0)
        _check(_lib.iris_request_test(self._handle, ctypes.byref(done)))
        return bool(done.value)

    def __del__(self):
        if getattr(self, "_handle", None):
            _lib.iris_request_release(self._handle)
            self._handle = None


def group_start():
    """NCCL's ncclGroupStart on this thread: stream-ordered calls until the matching group_end()
    enqueue their waits for completion only then, so the group's sends and receives never wait
    for each other on a stream, whatever their order."""
    _check(_lib.iris_group_start())


def group_end():
    _check(_lib.iris_group_end())


@contextlib.contextmanager
def group():
    """group_start() ... group_end() around a block."""
    group_start()
    try:
        yield
    finally:
        group_end()


def wait_all(requests):
    """Waits for every request, then raises the first failure (by position), if any."""
    first = None
    for request in requests:
        try:
            request.wait()
        except IrisError as e:
            first = first or e
    if first is not None:
        raise first


class NodeSet:
    """The nodes of a communicator across several irisd daemons (docs/SCALE-OUT.md):
    `addresses`, every node's client.node_address() (bytes), gathered by the job; `node_of_rank`,
    each rank's node index; `secret`, 16 to 1024 random bytes the job made, the same on every
    rank; `join_timeout`, seconds init waits for every node's irisd."""

    def __init__(self, addresses, node_of_rank, secret, join_timeout=60.0):
        self.addresses = [bytes(a) for a in addresses]
        self.node_of_rank = [int(n) for n in node_of_rank]
        self.secret = bytes(secret)
        self.join_timeout = join_timeout


class Communicator:
    """Rank `rank` of `nranks` in the communicator `key`; across nodes with `nodes` (a NodeSet),
    returning once every node's irisd has a rank of it. `op_timeout` (seconds; None: none) is
    NCCL's watchdog: a collective waiting that long for a rank breaks the communicator on every
    rank (IrisError TIMEOUT naming the ranks it waits on; re-create it), a send or receive not
    matched that long fails; streams waiting on them go on. The rank that creates the
    communicator chooses it, and `traffic_class`: "auto" (by size), "latency" (beyond irisd's
    --latency-max-bytes only for users it grants it) or "bulk": where its copies wait while users
    share the node's copy engines."""

    def __init__(self, client, key, nranks, rank, nodes=None, op_timeout=None,
                 traffic_class="auto"):
        self._handle = None
        self._client = client  # the connection outlives the communicator
        self.rank, self.nranks = rank, nranks
        self._hip = client.engine == "hsa"
        self._side_streams = {}  # by device: where calls on PyTorch's default stream go
        options = _CommOptions(struct_size=ctypes.sizeof(_CommOptions))
        if op_timeout is not None:
            if op_timeout <= 0:
                raise IrisError.of(ErrorCode.INVALID_ARGUMENT,
                                   f"op_timeout={op_timeout}: pass None for none, or seconds > 0")
            options.op_timeout_ms = max(1, int(op_timeout * 1000))
        if traffic_class not in _TRAFFIC_CLASSES:
            raise IrisError.of(ErrorCode.INVALID_ARGUMENT,
                               f"traffic_class={traffic_class!r}: auto, latency or bulk")
        options.traffic_class = _TRAFFIC_CLASSES[traffic_class]
        self.traffic_class = traffic_class  # what it asked irisd for (irisd may lower latency)
        if nodes is None:
            self._handle = _created(_lib.iris_comm_init_with, client._handle, key.encode(), nranks,
                                    rank, ctypes.byref(options))
            return
        if len(nodes.node_of_rank) != nranks:
            raise IrisError.of(ErrorCode.INVALID_ARGUMENT,
                            f"NodeSet.node_of_rank has {len(nodes.node_of_rank)} entries for "
                            f"{nranks} ranks")
        count = len(nodes.addresses)
        keep = [ctypes.create_string_buffer(a, len(a)) for a in nodes.addresses]
        options.node_count = count
        options.addresses = (ctypes.c_void_p * count)(*[ctypes.addressof(k) for k in keep])
        options.address_bytes = (ctypes.c_size_t * count)(*[len(a) for a in nodes.addresses])
        options.node_of_rank = (ctypes.c_uint32 * nranks)(*nodes.node_of_rank)
        options.secret, options.secret_bytes = nodes.secret, len(nodes.secret)
        options.join_timeout_ms = int(nodes.join_timeout * 1000)
        self._handle = _created(_lib.iris_comm_init_with, client._handle, key.encode(), nranks,
                                rank, ctypes.byref(options))

    def _submit(self, call, *args, stream=None):
        if getattr(stream, "cuda_stream", None) != 0 or not hasattr(stream, "wait_stream"):
            return Request(_created(call, self._handle, *args, _stream(stream, self._hip)))
        # PyTorch's default stream is the legacy stream (handle 0), which cannot order irisd's
        # stream waits: the call goes on a side stream that follows it, and it follows back, so
        # the order on the caller's stream is the same.
        side = self._side_streams.get(stream.device)
        if side is None:
            import torch  # the stream is PyTorch's: it is loaded
            side = self._side_streams[stream.device] = torch.cuda.Stream(device=stream.device)
        side.wait_stream(stream)
        request = Request(_created(call, self._handle, *args, _stream(side, self._hip)))
        stream.wait_stream(side)
        return request

    def all_gather(self, send, recv, nbytes, stream=None):
        """ncclAllGather: `nbytes` from each rank's send land at recv + rank * nbytes. With
        `stream` (every collective takes one), ordered on that CUDA (or, under the hsa engine,
        HIP) stream."""
        return self._submit(_lib.iris_all_gather, _address(send), _address(recv), nbytes,
                            stream=stream)

    def all_to_all(self, send, recv, nbytes_per_peer, stream=None):
        """Block j of send goes to rank j, landing at its recv + rank * nbytes_per_peer."""
        return self._submit(_lib.iris_all_to_all, _address(send), _address(recv),
                            nbytes_per_peer, stream=stream)

    def all_to_all_v(self, send, send_counts, send_displs, recv, recv_counts, recv_displs,
                     stream=None):
        """MPI_Alltoallv in bytes: send_counts[j] bytes at send + send_displs[j] go to rank j,
        landing at its recv + recv_displs[rank]; lists of nranks integers."""
        n = self.nranks
        return self._submit(_lib.iris_all_to_all_v, _address(send),
                            _u64_array(send_counts, n, "send_counts"),
                            _u64_array(send_displs, n, "send_displs"), _address(recv),
                            _u64_array(recv_counts, n, "recv_counts"),
                            _u64_array(recv_displs, n, "recv_displs"), stream=stream)

    def broadcast(self, buf, nbytes, root, stream=None):
        """Root's `nbytes` at buf land in every rank's buf."""
        return self._submit(_lib.iris_broadcast, _address(buf), nbytes, root, stream=stream)

    def gather(self, send, recv, nbytes, root, stream=None):
        """Each rank's send lands at root's recv + rank * nbytes (recv: root only, else None)."""
        return self._submit(_lib.iris_gather, _address(send), _address(recv), nbytes, root,
                            stream=stream)

    def scatter(self, send, recv, nbytes, root, stream=None):
        """Root's send + rank * nbytes lands in each rank's recv (send: root only, else None)."""
        return self._submit(_lib.iris_scatter, _address(send), _address(recv), nbytes, root,
                            stream=stream)

    def barrier(self):
        """Returns once every rank has called barrier()."""
        _check(_lib.iris_barrier(self._handle))

    def send(self, buf, nbytes, peer, stream=None):
        """`nbytes` at buf go to rank `peer`'s matching recv (matched in order per source and
        destination; both sides pass the same size). Stream-ordered sends and receives that
        depend on each other go in one `with irisd.group():`."""
        return self._submit(_lib.iris_send, _address(buf), nbytes, peer, stream=stream)

    def recv(self, buf, nbytes, peer, stream=None):
        """Takes the matching send of rank `peer` into `nbytes` at buf."""
        return self._submit(_lib.iris_recv, _address(buf), nbytes, peer, stream=stream)

    def destroy(self):
        if self._handle:
            handle, self._handle = self._handle, None
            _check(_lib.iris_comm_destroy(handle))

    def __del__(self):
        if getattr(self, "_handle", None):
            _lib.iris_comm_destroy(self._handle)
            self._handle = None
