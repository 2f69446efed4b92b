"""vLLM's DSA decode top-k, by name (vllm-project/vllm csrc/sampler.cu, registered as
torch.ops._C.top_k_per_row_decode in csrc/torch_bindings.cpp, wrapped by
vllm._custom_ops.top_k_per_row_decode; sparse_attn_indexer calls it on the indexer's logits):

    from mla_decode.vllm_ops import top_k_per_row_decode
    top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, logits.stride(0), logits.stride(1), topk)

Row r = b * next_n + i of logits has length len = seq_lens[b] - next_n + i + 1 (seq_lens [B]:
the causal end of query row i of request b) or len = seq_lens[b, i] (seq_lens [B, next_n]: each
row its own, as vLLM's csrc/libtorch_stable/sampler.cu since seq_lens became 2-D), below 0 taken
as 0. indices[r, :topk] is written in place: the positions of the row's topk largest logits
among its first len (in no particular order, as vLLM's; ties at the topk-th value go to the
lowest positions, where vLLM's pick among equals depends on its atomics), or 0 .. len - 1 then
-1 when len <= topk. Logits past a row's length are never read; len must not exceed the row's
columns (vLLM's contract; a device value, not checked). Runs the catalog's dsa_topk_per_row_decode
kernel (every configs/dsa_indexer.json entry implies it) through the C API's mla_indexer_topk on
the current torch stream, one workgroup per row; CPU tensors run on the emulator.

Graph capture: nothing here reads a tensor's values on the host; the checks read shapes, dtypes
and strides, the launch passes data_ptr()s, and the grid is num_rows.

What differs from vLLM: stride1 must be 1 (the kernel reads each row contiguously; vLLM also
takes strided columns) and stride0 must be logits.stride(0); indices rows are written at
indices.stride(0) (vLLM writes row r at r * topK, the same for the [:n, :topk] slice of the
[N, topk] buffer vLLM passes); with seq_lens [B], num_rows is a multiple of next_n; next_n 1-8,
topk 1-65536. Each bad argument is a ValueError / TypeError naming it, before any launch.

Importing this module registers torch.ops.mla_decode.top_k_per_row_decode with vLLM's schema
(in ops.py's library, the package's "mla_decode" namespace; indices mutated, a fake / meta
implementation that writes nothing):

    mla_decode::top_k_per_row_decode(Tensor logits, int next_n, Tensor seq_lens, Tensor(a!) indices,
        int numRows, int stride0, int stride1, int topK) -> ()
"""
import ctypes
import operator

import torch

from ._tensors import check_devices, torch_tensor
from . import _capi as C
from . import decode as D
from . import ops as _ops

__all__ = ["top_k_per_row_decode"]

MAX_NEXT_N = 8          # the C API's mla_indexer_topk
MAX_TOPK = 65536

SCHEMA = ("top_k_per_row_decode(Tensor logits, int next_n, Tensor seq_lens, Tensor(a!) indices, int numRows, "
          "int stride0, int stride1, int topK) -> ()")


def _int_in(value, name, low, high, why=""):
    """value as an int in [low, high] (a NumPy integer too; not a bool), or ValueError naming it."""
    number = None
    if not isinstance(value, bool):
        try:
            number = operator.index(value)
        except TypeError:
            pass
    if number is None or number < low or number > high:
        raise ValueError(f"{name}: got {value!r}; allowed an int in {low}..{high}{why}")
    return number


def _torch_tensor(obj, name):
    return torch_tensor(obj, name, "vLLM's")


def _dense_rows(t, what):
    """A 2-D tensor whose rows are dense (unit column stride): its row pitch is passed."""
    if t.shape[1] > 1 and t.strides[1] != 1:
        raise ValueError(f"{t.name}: {what} must be dense (stride 1 along dim 1), got strides {list(t.strides)}")


def _span(t, rows):
    """Bytes from t's first element to the end of its row rows - 1 (a 2-D tensor with dense rows)."""
    return ((rows - 1) * t.stride(0) + t.shape[1]) * t.element_size()


def launch_topk(runtime, device, logits, seq_lens, indices, num_rows, next_n, topk, block_table=None, page_size=0):
    """mla_indexer_topk on the current stream of `device`, for checked torch tensors: logits and
    indices [>= num_rows, ...] with dense rows (their row pitch passed), seq_lens contiguous
    int32, block_table (or None: positions) [rows, ...] int32 with dense rows, page_size its
    block size. On the emulator the bytes the kernel may touch are staged in its memory (indices
    too, so what the kernel leaves unwritten keeps the tensor's content) and indices copied back."""
    L = C.lib()
    args = C.mla_indexer_topk_args(num_rows=num_rows, next_n=next_n, topk=topk, logits_stride=logits.stride(0),
                                   indices_stride=indices.stride(0))
    parts = [("logits", logits, _span(logits, num_rows)), ("seq_lens", seq_lens, seq_lens.numel() * 4),
             ("indices", indices, _span(indices, num_rows))]
    if block_table is not None:
        args.block_table_stride, args.page_size = block_table.stride(0), page_size
        parts.append(("block_table", block_table, _span(block_table, block_table.shape[0])))
    with runtime.lock:
        for field, t, nbytes in parts:
            address = t.data_ptr()
            if runtime.is_emulator:
                staged = runtime.staging("topk_" + field, nbytes)
                C.check(L.mla_memcpy_h2d(runtime.dev, staged, address, nbytes), f"mla_memcpy_h2d({field})")
                address = staged
            setattr(args, field, address)
        # Long rows with CUs to spare run in two launches over a workspace (its size depends on
        # num_rows, topk and the logits row pitch only): torch's allocator on a GPU (graph-safe),
        # the emulator's memory otherwise.
        need = ctypes.c_uint64(0)
        C.check(L.mla_indexer_topk_workspace_size(runtime.ctx, ctypes.byref(args), ctypes.byref(need)),
                "mla_indexer_topk_workspace_size")
        workspace = None
        if need.value:
            if runtime.is_emulator:
                args.workspace = runtime.staging("topk_workspace", need.value)
            else:
                workspace = torch.empty(need.value, dtype=torch.uint8, device=device)
                args.workspace = workspace.data_ptr()
            args.workspace_bytes = need.value
        status = L.mla_indexer_topk(runtime.ctx, ctypes.byref(args), D._stream_of(runtime, device))
        if status:
            C.check(status, "mla_indexer_topk")
        if runtime.is_emulator:
            C.check(L.mla_memcpy_d2h(runtime.dev, indices.data_ptr(), args.indices, parts[2][2]),
                    "mla_memcpy_d2h(indices)")


class _Checked:
    """One call's checked values: what the C API is given."""
    __slots__ = ("num_rows", "next_n", "topk", "seq_lens", "device")


def _check(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, topk):
    """vLLM's arguments, each checked (shapes, dtypes, strides; no values read): a _Checked."""
    c = _Checked()
    lt, st, it = (_torch_tensor(x, n) for x, n in ((logits, "logits"), (seq_lens, "seq_lens"), (indices, "indices")))
    lt.require_dtype("float32")
    lt.require_ndim(2, "[num_rows, columns] float32")
    c.next_n = _int_in(next_n, "next_n", 1, MAX_NEXT_N, " (query rows per request: the kernel's range)")
    c.topk = _int_in(topk, "topk", 1, MAX_TOPK)
    it.require_dtype("int32")
    if len(it.shape) != 2 or it.shape[1] != c.topk:
        raise ValueError(f"indices: expected [>= num_rows, topk] = [>= num_rows, {c.topk}] int32, got shape "
                         f"{list(it.shape)}")
    _dense_rows(it, "rows")
    rows = min(lt.shape[0], it.shape[0])
    c.num_rows = _int_in(num_rows, "num_rows", 0, rows, f" (the rows of logits, {lt.shape[0]}, and of indices, "
                                                        f"{it.shape[0]})")
    if stride1 != 1:
        raise ValueError(f"stride1: got {stride1!r}; allowed 1 (the kernel reads each row's logits contiguously: pass "
                         f"a logits view with unit column stride, e.g. logits.contiguous())")
    _dense_rows(lt, "rows")
    if stride0 != lt.strides[0]:
        raise ValueError(f"stride0: got {stride0!r}, but logits.stride(0) is {lt.strides[0]}; pass logits.stride(0) "
                         f"(row r is read at r * stride0 of logits itself)")
    st.require_dtype("int32")
    if len(st.shape) == 2 and st.shape[1] == c.next_n and st.shape[0] * c.next_n >= c.num_rows:
        st.require_contiguous()
        c.next_n, c.seq_lens = 1, seq_lens.view(-1)  # each row its own length: row r reads element r
    elif len(st.shape) == 1 and st.shape[0] * c.next_n >= c.num_rows:
        st.require_contiguous()
        if c.num_rows % c.next_n:
            raise ValueError(f"num_rows: {c.num_rows} is not a multiple of next_n = {c.next_n} (row r belongs to "
                             f"request r // next_n of seq_lens [batch])")
        c.seq_lens = seq_lens
    else:
        batch = -(-c.num_rows // c.next_n)
        raise ValueError(f"seq_lens: expected [batch] or [batch, next_n] int32 with batch >= num_rows / next_n = "
                         f"{batch}, next_n = {c.next_n}, got shape {list(st.shape)}")
    c.device = check_devices((lt, st, it))
    return c


def top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, topk, *,
                         emulator_target=None):
    """vLLM's top_k_per_row_decode (module docstring): writes indices[:num_rows, :topk] in place,
    returns None. logits [>= num_rows, columns] float32 with stride0 = logits.stride(0) and
    stride1 = 1; seq_lens int32 [batch] (row b * next_n + i ends at seq_lens[b] - next_n + i + 1)
    or [batch, next_n] (row b * next_n + i ends at seq_lens[b, i]), contiguous; indices int32
    [>= num_rows, topk], rows dense; all on one device (CPU: the emulator). emulator_target
    (keyword, not vLLM's; CPU tensors): 'gfx942' or 'gfx950' (default $MLA_EMULATOR_TARGET, else
    gfx950)."""
    c = _check(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, topk)
    if c.num_rows == 0:
        return None
    runtime = D._runtime_for(c.device, None, emulator_target)
    launch_topk(runtime, c.device, logits, c.seq_lens, indices, c.num_rows, c.next_n, c.topk)
    return None


def _impl(logits, next_n, seq_lens, indices, numRows, stride0, stride1, topK):  # noqa: N803 (vLLM's schema names)
    top_k_per_row_decode(logits, next_n, seq_lens, indices, numRows, stride0, stride1, topK)


def _fake(logits, next_n, seq_lens, indices, numRows, stride0, stride1, topK):  # noqa: N803
    # Shapes only (no data on meta / fake tensors); indices is written in place, nothing returned.
    if logits.dim() != 2 or indices.dim() != 2 or indices.shape[1] != topK:
        raise ValueError(f"top_k_per_row_decode: expected logits [num_rows, columns] and indices [num_rows, topK = "
                         f"{topK}], got {list(logits.shape)} and {list(indices.shape)}")


def _register():
    lib = _ops._LIB  # torch 1.13 has one DEF library per namespace (no FRAGMENT): ops.py's
    lib.define(SCHEMA)
    lib.impl("top_k_per_row_decode", _impl, "CPU")
    lib.impl("top_k_per_row_decode", _impl, "CUDA")
    if _ops.FAKE_KIND == "fake":
        register_fake = getattr(torch.library, "register_fake", None) or getattr(torch.library, "impl_abstract")
        register_fake(f"{_ops.NAMESPACE}::top_k_per_row_decode", _fake, lib=lib)
    else:
        lib.impl("top_k_per_row_decode", _fake, "Meta")
        lib.impl("top_k_per_row_decode", _fake, "AutogradMeta")


_register()
top_k_per_row_decode_op = torch.ops.mla_decode.top_k_per_row_decode
