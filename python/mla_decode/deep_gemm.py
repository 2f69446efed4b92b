"""DeepGEMM's DSA indexer entry points (deepseek-ai/DeepGEMM csrc/apis/attention.hpp), by name:

    from mla_decode.deep_gemm import get_paged_mqa_logits_metadata, fp8_paged_mqa_logits
    schedule_meta = get_paged_mqa_logits_metadata(context_lens, block_size, num_sms)
    logits = fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                                  max_context_len, clean_logits=False)

The lightning indexer's logits (DeepSeek-V3.2's Indexer; runtime/mla_runtime.h): for row
r = b * next_n + i and token t of request b,
    logits[r, t] = k_scale[t] * sum_h max(0, q[b, i, h] . k[t]) * weights[r, h]
with q and k fp8 in the target's flavour (e4m3fnuz on gfx942, e4m3fn on gfx950), the rest f32, run
by the catalog's dsa_indexer_logits_fp8_h<heads>_nn<next_n>_pg<block_size> kernel through the C
API's mla_indexer_logits on the current torch stream (CPU tensors: the emulator).

What differs from DeepGEMM (docs/engines.md, "The DSA indexer (DeepGEMM's names)"):
- The schedule metadata carries nothing: the kernel's grid depends only on the batch and
  max_context_len and it reads the lengths and block ids on the device, so a captured graph stays
  valid whatever the lengths. get_paged_mqa_logits_metadata returns zeros of DeepGEMM's shape and
  fp8_paged_mqa_logits accepts any int32 [n, 2] tensor there without reading it.
- q is fp8 in the target's flavour (DeepGEMM: float8_e4m3fn only), as the torch float8 dtype of
  that flavour or raw uint8 bits (a torch without float8 dtypes, such as Debian's 1.13).
- context_lens [B] (DeepGEMM until 2026-01) or [B, next_n] (each row's own length: DeepGEMM since
  2025-11, its only form since 2026-04). clean_logits=True is taken with both (DeepGEMM refuses
  it with [B, next_n]).
- The varlen form (indices=, DeepGEMM's SM100) is not provided.

Beyond DeepGEMM, the index rows sparse MLA reads in one call (the logits, then vLLM's
top_k_per_row_decode, mla_decode.vllm_ops, writing cache slots instead of positions):

    indices = indexer_topk_indices(q, kv_cache, weights, context_lens, block_table, max_context_len,
                                   topk=2048, page_block_size=None, mla_block_table=None)
    out, lse = mla_decode.flash_mla.flash_mla_with_kvcache(q_mla, k_cache, None, None, 512, sched,
                                                           indices=indices, ...)

indices [batch, next_n, topk] int32: row i of request b holds the slots
mla_block_table[b][t // page_block_size] * page_block_size + t % page_block_size of its topk
highest-scoring tokens t before the row's causal end (context_lens[b] - next_n + i + 1, or
context_lens[b, i]), -1 padded when the row is shorter than topk: FlashMLA's indices= for the
MLA cache, which may have its own block table and block size (default: the indexer cache's,
block_table and its block size). One top-k kernel does the slot conversion (no kernel between).
Shapes depend on batch, next_n, topk and max_context_len only, and nothing is read on the host:
capturable.
"""
import ctypes
import operator

from ._tensors import FP8_FLAVOUR, Tensor, _torch, check_devices, torch_tensor
from . import _capi as C
from . import decode as D
from . import vllm_ops as V

__all__ = ["get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits", "indexer_topk_indices"]

INDEX_DIM = 128                    # the indexer's head dim
TOKEN_BYTES = INDEX_DIM + 4        # a cached token: 128 fp8 values and one f32 scale
MAX_BLOCK_SIZE = 64                # block sizes 1, 2, 4, ..., 64 (the kernels')
MAX_PAGE_BLOCK_SIZE = 1 << 20      # the MLA cache's block size for indexer_topk_indices' slots (a power of two)
LOGITS_ROW_ALIGN = 256             # DeepGEMM's logits row stride: max_context_len rounded up to 256
_FP8_DTYPES = ("uint8",) + tuple(sorted(set(FP8_FLAVOUR.values())))


def _torch_tensor(obj, name):
    return torch_tensor(obj, name, "DeepGEMM's")


def _as_int(value):
    """value as a Python int (a NumPy integer too), or None (a bool, a float, anything else)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _int_at_least(value, name, low):
    number = _as_int(value)
    if number is None or number < low:
        raise ValueError(f"{name}: got {value!r}; allowed an int >= {low}")
    return number


def _check_block_size(value, name):
    number = _as_int(value)
    if number is None or number < 1 or number > MAX_BLOCK_SIZE or number & (number - 1):
        raise ValueError(f"{name}: got {value!r}; allowed 1, 2, 4, 8, 16, 32 or 64 (a power of two up to "
                         f"{MAX_BLOCK_SIZE}: the kernels' block sizes)")


def _check_context_lens(t):
    t.require_dtype("int32")
    if len(t.shape) not in (1, 2):
        raise ValueError(f"context_lens: expected [batch] or [batch, next_n] int32, got shape {list(t.shape)}")
    t.require_contiguous()


def _no_indices(indices):
    if indices is not None:
        raise ValueError("indices: the varlen form (DeepGEMM's SM100 indices=) is not provided; pass None, with "
                         "one row of q, context_lens and block_table per query token")


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    """DeepGEMM's get_paged_mqa_logits_metadata: an int32 tensor [num_sms + 1, 2] on context_lens'
    device, all zeros. Accepted for signature compatibility: the kernels schedule themselves
    (their grid depends only on the batch and max_context_len, the lengths are read on the device),
    so fp8_paged_mqa_logits never reads it, and nothing here reads context_lens (graph capture).
    Checks, as DeepGEMM: context_lens int32 [batch] or [batch, next_n], contiguous; block_kv one of
    1, 2, 4, ..., 64 (the cache's block size); num_sms an int >= 1. indices must be None."""
    _check_context_lens(_torch_tensor(context_lens, "context_lens"))
    _check_block_size(block_kv, "block_kv")
    num_sms = _int_at_least(num_sms, "num_sms", 1)
    _no_indices(indices)
    torch = _torch()
    return torch.zeros((num_sms + 1, 2), dtype=torch.int32, device=context_lens.device)


class _Shapes:
    """The checked sizes of one call."""
    __slots__ = ("batch", "next_n", "heads", "block_size", "num_blocks", "rows_2d")


def _check_q_kv(qt, kt):
    s = _Shapes()
    qt.require_dtype(*_FP8_DTYPES)
    if len(qt.shape) != 4 or qt.shape[3] != INDEX_DIM:
        raise ValueError(f"q: expected [batch, next_n, heads, {INDEX_DIM}] fp8, got shape {list(qt.shape)}")
    qt.require_contiguous()
    s.batch, s.next_n, s.heads, _ = qt.shape
    kt.require_dtype("uint8")
    if len(kt.shape) not in (3, 4) or (len(kt.shape) == 4 and kt.shape[2] != 1):
        raise ValueError(f"kv_cache: expected [num_blocks, block_size, 1, {TOKEN_BYTES}] (or without the 1) uint8, "
                         f"got shape {list(kt.shape)}")
    if kt.shape[-1] != TOKEN_BYTES:
        raise ValueError(f"kv_cache: last dim {kt.shape[-1]}, expected {TOKEN_BYTES} ({INDEX_DIM} fp8 values and one "
                         f"f32 scale per token)")
    s.num_blocks, s.block_size = kt.shape[0], kt.shape[1]
    _check_block_size(s.block_size, "kv_cache: block size (dim 1)")
    if s.num_blocks < 1:
        raise ValueError("kv_cache: no blocks (dim 0 is 0)")
    # The kernels read block b at byte b * block_size * 132: its block_size x 128 fp8 values, then
    # block_size f32 scales (DeepGEMM's layout), so the blocks must be packed.
    kt.require_contiguous()
    return s


def _check_rest(s, wt, lt, bt, st, max_context_len):
    wt.require_dtype("float32")
    if tuple(wt.shape) != (s.batch * s.next_n, s.heads):
        raise ValueError(f"weights: expected [batch * next_n, heads] = [{s.batch * s.next_n}, {s.heads}] float32, "
                         f"got shape {list(wt.shape)}")
    wt.require_contiguous()
    _check_context_lens(lt)
    want = [s.batch] if len(lt.shape) == 1 else [s.batch, s.next_n]
    if list(lt.shape) != want:
        raise ValueError(f"context_lens: expected [batch] = [{s.batch}] or [batch, next_n] = [{s.batch}, "
                         f"{s.next_n}] int32, got shape {list(lt.shape)}")
    s.rows_2d = len(lt.shape) == 2
    bt.require_dtype("int32")
    needed = -(-max_context_len // s.block_size)
    if len(bt.shape) != 2 or bt.shape[0] != s.batch or bt.shape[1] < needed:
        raise ValueError(f"block_table: expected [batch, max_blocks] = [{s.batch}, >= ceil(max_context_len / "
                         f"block_size) = {needed}] int32, got shape {list(bt.shape)}")
    if bt.strides[1] != 1:
        raise ValueError(f"block_table: rows must be dense (stride 1 along dim 1), got strides {list(bt.strides)}")
    if st is None:  # indexer_topk_indices: no schedule
        return
    st.require_dtype("int32")
    if len(st.shape) != 2 or st.shape[1] != 2:
        raise ValueError(f"schedule_meta: expected get_paged_mqa_logits_metadata()'s [num_sms + 1, 2] int32, got "
                         f"shape {list(st.shape)}")


def _row_ends(context_lens, s):
    """Each logits row's causal end, on the device: [B] lengths give row b * next_n + i the first
    context_lens[b] - next_n + i + 1 tokens (DeepGEMM's clean_logits), [B, next_n] its own."""
    if s.rows_2d:
        return context_lens.reshape(-1)
    torch = _torch()
    offsets = torch.arange(1 - s.next_n, 1, dtype=torch.int32, device=context_lens.device)
    return (context_lens.view(s.batch, 1) + offsets.view(1, s.next_n)).reshape(-1)


def _launch(runtime, args, tensors, logits_full):
    """mla_indexer_logits with the tensors' device addresses on the current stream; on the
    emulator, copies staged in its memory (logits_full too, so what the kernel leaves unwritten
    is the allocation's content, as on a GPU) and logits_full copied back."""
    L = C.lib()
    fields = ("q", "kv_cache", "weights", "context_lens", "block_table", "logits")
    if runtime.is_emulator:
        for field, t in zip(fields, tensors + (logits_full,)):
            addr = runtime.staging("indexer_" + field, t.nbytes)
            C.check(L.mla_memcpy_h2d(runtime.dev, addr, t.address, t.nbytes), f"mla_memcpy_h2d({field})")
            setattr(args, field, addr)
    else:
        for field, t in zip(fields, tensors + (logits_full,)):
            setattr(args, field, t.address)
    stream = D._stream_of(runtime, tensors[0].device)
    status = L.mla_indexer_logits(runtime.ctx, ctypes.byref(args), stream)
    if status:
        C.check(status, "mla_indexer_logits")
    if runtime.is_emulator:
        C.check(L.mla_memcpy_d2h(runtime.dev, logits_full.address, args.logits, logits_full.nbytes),
                "mla_memcpy_d2h(logits)")


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits=False, indices=None, *, fp8_format=None, emulator_target=None):
    """DeepGEMM's fp8_paged_mqa_logits: returns logits [batch * next_n, max_context_len] float32,
    a view whose rows are 256-element aligned (DeepGEMM's: stride(0) is max_context_len rounded up
    to 256). Row b * next_n + i holds, at t < min(len, max_context_len) with len = context_lens[b]
    (or context_lens[b, i]), the logit of token t of request b (module docstring); positions at or
    past that are left unwritten. clean_logits=True then sets to -inf every position t >= the
    row's causal end, context_lens[b] - next_n + i + 1 (or context_lens[b, i]), with device ops on
    fixed shapes (no host read: capturable).

    q [batch, next_n, heads, 128] fp8 of the target's flavour (torch float8_e4m3fnuz on gfx942,
    float8_e4m3fn on gfx950, or uint8 raw bits in that flavour), contiguous; kv_cache
    [num_blocks, block_size, 1, 132] (or [num_blocks, block_size, 132]) uint8, contiguous, each
    block its block_size x 128 fp8 values then block_size f32 scales (DeepGEMM's layout);
    weights [batch * next_n, heads] float32; context_lens int32 [batch] or [batch, next_n];
    block_table int32 [batch, >= ceil(max_context_len / block_size)] (rows dense; its row stride is
    passed); schedule_meta: get_paged_mqa_logits_metadata()'s (not read). Every tensor on q's
    device. A block id outside the cache is never read (its tokens get -inf). next_n and heads
    are those of the catalog's kernels (configs/dsa_indexer.json: heads 64 / 32, next_n 1-4);
    indices must be None.

    Keyword-only, not DeepGEMM's: fp8_format (the flavour of raw uint8 q bits: 'e4m3fnuz' or
    'e4m3fn'; must be the target's), emulator_target (CPU tensors: 'gfx942' or 'gfx950'; default
    $MLA_EMULATOR_TARGET, else gfx950)."""
    _no_indices(indices)
    s, tensors, runtime, max_context_len = _checked(q, kv_cache, weights, context_lens, block_table, schedule_meta,
                                                    max_context_len, fp8_format, emulator_target)
    stride = -(-max_context_len // LOGITS_ROW_ALIGN) * LOGITS_ROW_ALIGN
    logits = _logits(s, tensors, runtime, max_context_len, stride)[:, :max_context_len]
    if clean_logits and s.batch:
        positions = _torch().arange(max_context_len, dtype=_torch().int32, device=q.device)
        logits.masked_fill_(positions.view(1, -1) >= _row_ends(context_lens, s).view(-1, 1), float("-inf"))
    return logits


def _checked(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, fp8_format,
             emulator_target):
    """The checks of an indexer call (schedule_meta None: indexer_topk_indices, which takes none):
    (_Shapes, the Tensors of q, kv_cache, weights, context_lens, block_table, runtime, max_context_len)."""
    names = ("q", "kv_cache", "weights", "context_lens", "block_table")
    tensors = tuple(_torch_tensor(x, n) for x, n in zip((q, kv_cache, weights, context_lens, block_table), names))
    st = None if schedule_meta is None else _torch_tensor(schedule_meta, "schedule_meta")
    max_context_len = _int_at_least(max_context_len, "max_context_len", 1)
    s = _check_q_kv(tensors[0], tensors[1])
    _check_rest(s, tensors[2], tensors[3], tensors[4], st, max_context_len)
    device = check_devices(tensors + ((st,) if st is not None else ()))
    runtime = D._runtime_for(device, None, emulator_target)
    D._check_fp8_flavour((tensors[0],), runtime.target, fp8_format)
    return s, tensors, runtime, max_context_len


def _logits(s, tensors, runtime, max_context_len, stride):
    """logits [batch * next_n, stride] float32 (torch.empty, then the kernel's writes: row r's
    first min(len, max_context_len) positions) on q's device, by mla_indexer_logits."""
    torch, rows = _torch(), s.batch * s.next_n
    q, context_lens, block_table = tensors[0].obj, tensors[3].obj, tensors[4].obj
    logits = torch.empty((rows, stride), dtype=torch.float32, device=q.device)
    if rows == 0:
        return logits
    lens = context_lens.amax(dim=1) if s.rows_2d else context_lens  # the kernel's per-request length
    bt = tensors[4]
    if runtime.is_emulator and not bt.contiguous:  # a view of a wider table: staged as its rows
        bt = Tensor(block_table.contiguous(), "block_table")
    args = C.mla_indexer_logits_args(batch=s.batch, next_n=s.next_n, heads=s.heads, block_size=s.block_size,
                                     block_table_stride=bt.strides[0], max_context_len=max_context_len,
                                     logits_stride=stride, num_blocks=s.num_blocks)
    with runtime.lock:
        _launch(runtime, args, tensors[:3] + (Tensor(lens, "context_lens"), bt), Tensor(logits, "logits"))
    return logits


def _slot_table(s, device, block_table, page_block_size, mla_block_table, max_context_len):
    """The table and block size that number indexer_topk_indices' slots: the MLA cache's own
    (mla_block_table, page_block_size) or, by default, the indexer's (block_table, block_size)."""
    if mla_block_table is None:
        if page_block_size is not None and _as_int(page_block_size) != s.block_size:
            raise ValueError(f"page_block_size: got {page_block_size!r}, but without mla_block_table the slots are "
                             f"numbered through block_table, whose blocks hold the indexer cache's block_size = "
                             f"{s.block_size} tokens; pass the MLA cache's block table as mla_block_table too")
        return block_table, s.block_size
    if page_block_size is None:
        raise ValueError("page_block_size: required with mla_block_table (the MLA cache's block size, its "
                         "k_cache.shape[1])")
    page = _as_int(page_block_size)
    if page is None or page < 1 or page > MAX_PAGE_BLOCK_SIZE or page & (page - 1):
        raise ValueError(f"page_block_size: got {page_block_size!r}; allowed a power of two up to "
                         f"{MAX_PAGE_BLOCK_SIZE} (the top-k kernel numbers slots with a shift)")
    mt = _torch_tensor(mla_block_table, "mla_block_table")
    mt.require_dtype("int32")
    needed = -(-max_context_len // page)
    if len(mt.shape) != 2 or mt.shape[0] != s.batch or mt.shape[1] < needed:
        raise ValueError(f"mla_block_table: expected [batch, max_blocks] = [{s.batch}, >= ceil(max_context_len / "
                         f"page_block_size) = {needed}] int32, got shape {list(mt.shape)}")
    if mt.shape[1] > 1 and mt.strides[1] != 1:
        raise ValueError(f"mla_block_table: rows must be dense (stride 1 along dim 1), got strides "
                         f"{list(mt.strides)}")
    if mt.device != device:
        raise ValueError(f"mla_block_table: on {mt.device}, but q is on {device}; all tensors must be on one device")
    return mla_block_table, page


def indexer_topk_indices(q, kv_cache, weights, context_lens, block_table, max_context_len, topk=2048,
                         page_block_size=None, mla_block_table=None, *, fp8_format=None, emulator_target=None):
    """The index rows sparse MLA reads, in one call (not DeepGEMM's; module docstring): the
    indexer's logits (fp8_paged_mqa_logits' kernel, same arguments but no schedule_meta), then
    vLLM's top_k_per_row_decode over each row's causal end, writing cache slots. Returns
    indices [batch, next_n, topk] int32: row i of request b holds the slots
    mla_block_table[b][t // page_block_size] * page_block_size + t % page_block_size of the
    tokens t with the topk largest logits among t < its end (in no particular order; ties at
    the topk-th value to the lowest t), or of every t < end then -1 when end <= topk; the end is
    context_lens[b] - next_n + i + 1 ([B] lengths) or context_lens[b, i] ([B, next_n]). That is
    mla_decode.flash_mla.flash_mla_with_kvcache's indices= for the MLA cache of
    page_block_size-token blocks. Default numbering: the indexer cache's (block_table and its
    block size); page_block_size (a power of two) is required with mla_block_table ([batch,
    >= ceil(max_context_len / page_block_size)] int32, rows dense). Lengths past max_context_len
    are cut to it (its tokens were not scored). Fixed shapes, nothing read on the host: capturable;
    the logits ([batch * next_n, max_context_len] f32) live only during the call."""
    s, tensors, runtime, max_context_len = _checked(q, kv_cache, weights, context_lens, block_table, None,
                                                    max_context_len, fp8_format, emulator_target)
    topk = V._int_in(topk, "topk", 1, V.MAX_TOPK)
    table, page = _slot_table(s, tensors[0].device, block_table, page_block_size, mla_block_table, max_context_len)
    torch, rows = _torch(), s.batch * s.next_n
    indices = torch.empty((s.batch, s.next_n, topk), dtype=torch.int32, device=q.device)
    if rows == 0:
        return indices
    # Row pitch max_context_len (no 256 alignment): the top-k requires the slot table's pitch to
    # cover ceil(pitch / page), which ceil(max_context_len / page) columns then do.
    logits = _logits(s, tensors, runtime, max_context_len, max_context_len)
    lens, next_n = context_lens.clamp(max=max_context_len), s.next_n
    if s.rows_2d:  # each row its own length: one row per "request", the table's rows repeated next_n times
        width = -(-max_context_len // page)
        lens, next_n = lens.reshape(-1), 1
        if s.next_n > 1:
            table = table[:, :width].unsqueeze(1).expand(s.batch, s.next_n, width).reshape(rows, width)
    V.launch_topk(runtime, tensors[0].device, logits, lens, indices.view(rows, topk), rows, next_n, topk, table, page)
    return indices
