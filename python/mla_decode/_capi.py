"""ctypes bindings of runtime/mla_runtime.h (libmla_runtime.so), loaded on first use.

The structs mirror the header field for field; ctypes applies the same C alignment rules, so
the layouts match the library's. Only the calls the package makes are declared.
"""
import ctypes
import os
import threading
from ctypes import POINTER, c_char, c_char_p, c_double, c_float, c_int, c_int32, c_int64, c_size_t, c_uint, c_uint64, c_void_p

# The repository root: python/mla_decode/_capi.py -> ../../
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_LIBRARY = os.path.join(REPO_ROOT, "build", "runtime", "libmla_runtime.so")
DEFAULT_CATALOG = os.path.join(REPO_ROOT, "out")

MLA_SUCCESS = 0
MLA_ERROR_INVALID_ARGUMENT = 1
MLA_ERROR_CATALOG = 2
MLA_ERROR_NO_KERNEL = 3
MLA_ERROR_CAPACITY = 9
MLA_ERROR_OUT_OF_RANGE = 10

MLA_BACKEND_HIP = 0
MLA_BACKEND_EMULATOR = 1
MLA_DTYPE_FP8 = 0
MLA_DTYPE_BF16 = 1
MLA_DTYPE_FP8_DS_MLA = 2  # kv only, sparse with bf16 q: FlashMLA's 656-byte entries (kv_stride_* in bytes)
MLA_OPTION_VALIDATE = 0
MLA_OPTION_CASCADE = 4
MLA_OPTION_MERGE = 5
MLA_SELECT_EXACT = 0
MLA_SELECT_ALLOW_PADDING = 1


class mla_device_info(ctypes.Structure):
    _fields_ = [("backend", c_int), ("target", c_char * 64), ("name", c_char * 128), ("num_cus", c_int)]


class mla_shape(ctypes.Structure):
    _fields_ = [("q_dtype", c_int), ("kv_dtype", c_int), ("heads", c_int), ("qseqlen", c_int),
                ("page_size", c_int), ("return_lse", c_int), ("logit_cap", c_int), ("sparse", c_int)]


class mla_selection(ctypes.Structure):
    _fields_ = [("shape", mla_shape), ("decode_kernel", c_char * 128), ("reduce_kernel", c_char * 128),
                ("prefix_kernel", c_char * 128), ("fallback", c_int), ("kernel_heads", c_int),
                ("kernel_qseqlen", c_int), ("note", c_char * 256)]


class mla_prefix_group(ctypes.Structure):
    _fields_ = [("first", c_int32), ("count", c_int32), ("shared_tokens", c_int32)]


class mla_plan_info(ctypes.Structure):
    _fields_ = [("batch", c_int), ("max_batch", c_int), ("max_total_tokens", c_int64), ("num_units", c_int),
                ("num_prefix_units", c_int), ("num_reduce_entries", c_int), ("num_partials", c_int),
                ("num_cus", c_int), ("balance", c_double), ("workspace_bytes", c_size_t),
                ("num_launches", c_int), ("decode_grid", c_uint * 3), ("prefix_grid", c_uint * 3),
                ("reduce_grid", c_uint * 3), ("upload_bytes", c_size_t)]


class mla_decode_args(ctypes.Structure):
    _fields_ = [("q", c_uint64), ("q_stride_row", c_int64), ("q_stride_head", c_int64),
                ("kv", c_uint64), ("kv_stride_page", c_int64), ("kv_stride_token", c_int64),
                ("num_pages", c_int64), ("kv_indices", c_uint64),
                ("o", c_uint64), ("o_stride_row", c_int64), ("o_stride_head", c_int64),
                ("lse", c_uint64), ("sm_scale", c_float), ("q_scale", c_float), ("kv_scale", c_float),
                ("logit_cap", c_float), ("q_scale_ptr", c_uint64), ("kv_scale_ptr", c_uint64)]


class mla_merge_args(ctypes.Structure):
    _fields_ = [("output", c_uint64), ("prefix_output", c_uint64), ("prefix_lse", c_uint64),
                ("suffix_output", c_uint64), ("suffix_lse", c_uint64), ("output_lse", c_uint64),
                ("num_tokens", c_int64), ("num_heads", c_int)]


class mla_indexer_logits_args(ctypes.Structure):
    _fields_ = [("logits", c_uint64), ("q", c_uint64), ("kv_cache", c_uint64), ("weights", c_uint64),
                ("context_lens", c_uint64), ("block_table", c_uint64),
                ("batch", c_int), ("next_n", c_int), ("heads", c_int), ("block_size", c_int),
                ("block_table_stride", c_int), ("max_context_len", c_int),
                ("logits_stride", c_int64), ("num_blocks", c_int64)]


class mla_indexer_topk_args(ctypes.Structure):
    _fields_ = [("logits", c_uint64), ("seq_lens", c_uint64), ("indices", c_uint64), ("block_table", c_uint64),
                ("num_rows", c_int), ("next_n", c_int), ("topk", c_int), ("block_table_stride", c_int),
                ("page_size", c_int), ("logits_stride", c_int64), ("indices_stride", c_int64),
                ("workspace", c_uint64), ("workspace_bytes", c_uint64)]


class MlaError(RuntimeError):
    """A C API call failed: `status` is the mla_status name, the message is mla_last_error()."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status


class MlaInputError(MlaError, ValueError):
    """The C library rejected the caller's input (no kernel for the shape, a bad length, capacity)."""


_INPUT_STATUSES = (MLA_ERROR_INVALID_ARGUMENT, MLA_ERROR_NO_KERNEL, MLA_ERROR_CAPACITY, MLA_ERROR_OUT_OF_RANGE)

_lib = None
_lib_lock = threading.Lock()


def _declare(lib):
    P = POINTER
    sigs = {
        "mla_status_name": (c_char_p, [c_int]),
        "mla_last_error": (c_char_p, []),
        "mla_device_open": (c_int, [c_int, c_int, c_char_p, P(c_void_p)]),
        "mla_device_close": (None, [c_void_p]),
        "mla_device_get_info": (c_int, [c_void_p, P(mla_device_info)]),
        "mla_malloc": (c_int, [c_void_p, c_size_t, P(c_uint64)]),
        "mla_free": (c_int, [c_void_p, c_uint64]),
        "mla_memcpy_h2d": (c_int, [c_void_p, c_uint64, c_void_p, c_size_t]),
        "mla_memcpy_d2h": (c_int, [c_void_p, c_void_p, c_uint64, c_size_t]),
        "mla_stream_synchronize": (c_int, [c_void_p, c_void_p]),
        "mla_context_create": (c_int, [c_void_p, c_char_p, P(c_void_p)]),
        "mla_context_destroy": (None, [c_void_p]),
        "mla_context_set_option": (c_int, [c_void_p, c_int, c_int64]),
        "mla_select": (c_int, [c_void_p, P(mla_shape), c_uint, P(mla_selection)]),
        "mla_plan_create": (c_int, [c_void_p, P(mla_selection), c_int, c_int64, P(c_void_p)]),
        "mla_plan_destroy": (None, [c_void_p]),
        "mla_plan_workspace_size": (c_int, [c_void_p, P(c_size_t)]),
        "mla_plan_update": (c_int, [c_void_p, c_void_p, P(c_int32), c_int, c_int32]),
        "mla_plan_update_shared": (c_int, [c_void_p, c_void_p, P(c_int32), c_int, c_int32, P(c_int32),
                                           P(mla_prefix_group), c_int]),
        "mla_plan_get_info": (c_int, [c_void_p, P(mla_plan_info)]),
        "mla_plan_upload": (c_int, [c_void_p, c_void_p, c_uint64, c_size_t, c_float, c_float, c_void_p]),
        "mla_plan_describe_json": (c_char_p, [c_void_p]),
        "mla_decode": (c_int, [c_void_p, c_void_p, P(mla_decode_args), c_uint64, c_size_t, c_void_p]),
        "mla_merge_attn_states": (c_int, [c_void_p, P(mla_merge_args), c_void_p]),
        "mla_indexer_logits": (c_int, [c_void_p, P(mla_indexer_logits_args), c_void_p]),
        "mla_indexer_topk": (c_int, [c_void_p, P(mla_indexer_topk_args), c_void_p]),
        "mla_indexer_topk_workspace_size": (c_int, [c_void_p, P(mla_indexer_topk_args), P(c_uint64)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def library_path():
    return os.environ.get("MLA_RUNTIME_LIB") or DEFAULT_LIBRARY


def lib():
    """The loaded C library (loaded once; OSError naming where it looked if it is missing)."""
    global _lib
    if _lib is not None:  # every call asks: no lock once loaded
        return _lib
    with _lib_lock:
        if _lib is None:
            path = library_path()
            if not os.path.exists(path):
                raise OSError(f"mla_decode: the runtime library {path} does not exist; build it "
                              f"(./generate.sh, or ninja -C build mla_runtime_shared) or set MLA_RUNTIME_LIB "
                              f"to a libmla_runtime.so")
            handle = ctypes.CDLL(path)
            _declare(handle)
            _lib = handle
        return _lib


def check(status, call):
    """Raises MlaInputError / MlaError for a failed C call, with the library's message."""
    if status == MLA_SUCCESS:
        return
    L = lib()
    name = L.mla_status_name(status).decode()
    message = L.mla_last_error().decode(errors="replace")
    cls = MlaInputError if status in _INPUT_STATUSES else MlaError
    raise cls(name, f"{call}: {message}")
