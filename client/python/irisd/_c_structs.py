"""The C API's structures (iris.h) as ctypes sees them, apart from the classes that use them."""
import ctypes


class _ClientOptions(ctypes.Structure):
    """iris_client_options (iris.h)."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("submit_timeout_ns", ctypes.c_int64),
                ("resume_window_ms", ctypes.c_int64), ("wait_spin_us", ctypes.c_int64),
                ("gpu_registration_cache", ctypes.c_int64)]


class _CommOptions(ctypes.Structure):
    """iris_comm_options (iris.h)."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("op_timeout_ms", ctypes.c_int64),
                ("node_count", ctypes.c_size_t), ("addresses", ctypes.POINTER(ctypes.c_void_p)),
                ("address_bytes", ctypes.POINTER(ctypes.c_size_t)),
                ("node_of_rank", ctypes.POINTER(ctypes.c_uint32)), ("secret", ctypes.c_char_p),
                ("secret_bytes", ctypes.c_size_t), ("join_timeout_ms", ctypes.c_int64),
                ("traffic_class", ctypes.c_uint32)]

_TRAFFIC_CLASSES = {"auto": 0, "latency": 1, "bulk": 2}


class _IrisStream(ctypes.Structure):
    _fields_ = [("handle", ctypes.c_void_p), ("kind", ctypes.c_int)]


_STREAM_CUDA, _STREAM_HIP = 1, 2
