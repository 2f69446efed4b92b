"""FlashMLA's sparse decode contract (deepseek-ai/FlashMLA flash_mla_interface.py), by name:

    from mla_decode.flash_mla import get_mla_metadata, flash_mla_with_kvcache
    sched, _ = get_mla_metadata()                      # FlashMLA's new form (no arguments)
    out, lse = flash_mla_with_kvcache(q, k_cache, None, None, 512, sched, indices=indices,
                                      topk_length=topk_length, softmax_scale=scale, is_fp8_kvcache=True)

q [b, s_q, h_q, 576] bf16 (any h_q the catalog has: FlashMLA takes 64 and 128 only); k_cache
[blocks, page_block_size, 1, 656] FlashMLA's fp8_ds_mla entries (is_fp8_kvcache=True, FlashMLA's
only sparse cache: uint8, int8 or float8_e4m3fn bytes, 512 e4m3fn latent, four f32 scales one per
128 latent values, 64 bf16 rope; each latent value is dequantised as e4m3fn x its tile's scale
rounded to bf16, as FlashMLA's kernels do) or, beyond FlashMLA, [blocks, page_block_size, 1, 576]
bf16 (is_fp8_kvcache=False); indices [b, s_q, topk] int32 cache slots (block * page_block_size +
offset), -1 anywhere and slots past the cache invalid, entries at or past topk_length[b] invalid
when it is given; a slot given twice in a row is attended twice (each entry is a token of the
softmax, as in FlashMLA's reference). Returns out [b, s_q, h_q, 512] bf16 and lse [b, h_q, s_q]
f32 (natural log; FlashMLA's transposed view of a [b, s_q, h_q] tensor); a query row with no valid
index gets out 0 and lse +inf. block_table and cache_seqlens are not read.

The older get_mla_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k, num_heads_q,
is_fp8_kvcache, topk) that SGLang's flashmla_kv path calls is accepted too: it returns a pair the
caller passes back as tile_scheduler_metadata and num_splits (both support the copy_() and slice
SGLang applies to them under graphs).

The plan behind a call depends only on (rows = b * s_q, h_q, topk, cache dtype, device): one per
such shape is made on first use and kept for the process (a captured graph replays it; ~16 MB of
workspace each), whatever scheduler object the call is given. Not provided: dense FlashMLA
(indices=None: use mla_decode.mla_decode_fwd), attn_sink, extra_k_cache /
extra_indices_in_kvcache / extra_topk_length, d_qk 512 (MODEL1's cache).
"""
import dataclasses
import threading
from typing import Optional

from ._tensors import Tensor, _torch
from . import decode as D
from . import sparse as S

__all__ = ["FlashMLASchedMeta", "get_mla_metadata", "flash_mla_with_kvcache"]


@dataclasses.dataclass
class FlashMLASchedMeta:
    """FlashMLA's scheduler object: filled on the first flash_mla_with_kvcache call (config and
    the plan it ran), after which the calls given it must have the same shapes (FlashMLA's
    rule; a difference is a ValueError naming the field). `declared` is set by the older
    get_mla_metadata signature: its heads and topk, checked at every call; such an object
    takes any batch (SGLang shares one across its graphs' batch sizes)."""

    @dataclasses.dataclass
    class Config:
        b: int
        s_q: int
        h_q: int
        page_block_size: int
        h_k: int
        causal: bool
        is_fp8_kvcache: bool
        topk: Optional[int]
        extra_page_block_size: Optional[int]
        extra_topk: Optional[int]

    have_initialized: bool = False
    config: Optional[Config] = None
    tile_scheduler_metadata: Optional[D.MlaDecodeMetadata] = None  # the plan of the last call
    num_splits: None = None
    declared: Optional[dict] = None

    def copy_(self, other):
        """SGLang's graph replay copies fresh metadata into the captured one: the plan depends on
        shapes only, which a replay keeps, so the captured object stays as it is."""
        if not isinstance(other, FlashMLASchedMeta):
            raise TypeError(f"copy_: expected a FlashMLASchedMeta, got {type(other).__name__}")
        return self


class NumSplits:
    """The second element the older get_mla_metadata returns: no values (the split plan is the
    runtime's), only what SGLang does with it (copy_, slicing); flash_mla_with_kvcache accepts it
    as num_splits."""

    def copy_(self, other):
        return self

    def __getitem__(self, index):
        return self

    def __repr__(self):
        return "mla_decode.flash_mla.NumSplits()"


def get_mla_metadata(*args, **kwargs):
    """FlashMLA's get_mla_metadata. No arguments (the current form): (FlashMLASchedMeta(), None).
    The older form, get_mla_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k,
    num_heads_q=None, is_fp8_kvcache=False, topk=None): (FlashMLASchedMeta with `declared`
    num_heads_q and topk, NumSplits()), for callers that pass both back; cache_seqlens is not
    read. topk None (dense FlashMLA) is a ValueError: only the sparse form is provided."""
    if not args and not kwargs:
        return FlashMLASchedMeta(), None
    return _older_form(*args, **kwargs)


def _older_form(cache_seqlens, num_q_tokens_per_head_k, num_heads_k, num_heads_q=None, is_fp8_kvcache=False,
                topk=None):
    if topk is None:
        raise ValueError("topk: None asks for dense FlashMLA metadata; mla_decode.flash_mla provides only the sparse "
                         "form (indices=); for dense decode use mla_decode.mla_decode_fwd")
    if num_heads_q is None:
        raise ValueError("num_heads_q: required with topk (as in FlashMLA)")
    if num_heads_k != 1:
        raise ValueError(f"num_heads_k: got {num_heads_k}; MLA has one KV head (allowed 1)")
    declared = {"h_q": int(num_heads_q), "topk": int(topk), "is_fp8_kvcache": bool(is_fp8_kvcache)}
    return FlashMLASchedMeta(declared=declared), NumSplits()


def _check_sparse_form(sched, num_splits, causal, indices, attn_sink, extra_k_cache, extra_indices_in_kvcache,
                       extra_topk_length, head_dim_v):
    """FlashMLA's sparse-mode rules and what this implementation does not provide, each named."""
    if not isinstance(sched, FlashMLASchedMeta):
        raise TypeError(f"tile_scheduler_metadata: expected the FlashMLASchedMeta of "
                        f"mla_decode.flash_mla.get_mla_metadata(), got {type(sched).__name__}")
    if indices is None:
        raise ValueError("indices: None asks for dense FlashMLA, which mla_decode.flash_mla does not provide (only "
                         "the sparse form); for dense decode use mla_decode.mla_decode_fwd")
    if num_splits is not None and not isinstance(num_splits, NumSplits):
        raise ValueError("num_splits: must be None (FlashMLA's rule), or the second element of the older "
                         "get_mla_metadata(...)")
    if causal:
        raise ValueError("causal: must be False with indices (sparse attention), as in FlashMLA")
    for name, value in (("attn_sink", attn_sink), ("extra_k_cache", extra_k_cache),
                        ("extra_indices_in_kvcache", extra_indices_in_kvcache),
                        ("extra_topk_length", extra_topk_length)):
        if value is not None:
            raise ValueError(f"{name}: not supported (must be None)")
    if head_dim_v != D.LATENT_DIM:
        raise ValueError(f"head_dim_v: got {head_dim_v}; must be {D.LATENT_DIM}")


def _check_k_cache(kt, is_fp8_kvcache):
    """k_cache: [blocks, page_block_size, 1, 656] bytes with is_fp8_kvcache (FlashMLA's fp8_ds_mla:
    uint8, int8 or float8_e4m3fn, as FlashMLA takes), else [blocks, page_block_size, 1, 576] bf16."""
    width = D.DS_MLA_BYTES if is_fp8_kvcache else D.QK_DIM
    if len(kt.shape) != 4 or kt.shape[2] != 1 or kt.shape[3] != width:
        what = ("fp8_ds_mla bytes with is_fp8_kvcache=True" if is_fp8_kvcache else
                "bf16 values with is_fp8_kvcache=False")
        hint = ""
        if len(kt.shape) == 4 and kt.shape[3] in (D.DS_MLA_BYTES, D.QK_DIM) and kt.shape[3] != width:
            hint = f"; a last dimension of {kt.shape[3]} is the {'bf16' if is_fp8_kvcache else 'fp8_ds_mla'} cache: " \
                   f"pass is_fp8_kvcache={not is_fp8_kvcache}"
        raise ValueError(f"k_cache: expected [num_blocks, page_block_size, 1, {width}] ({what}), got shape "
                         f"{list(kt.shape)}{hint}")
    if is_fp8_kvcache:
        kt.require_dtype(*D._DS_MLA_BYTES_DTYPES)
    else:
        kt.require_dtype("bfloat16")


def _check_tensors(q, k_cache, indices, topk_length, is_fp8_kvcache):
    """Shapes and dtypes: (b, s_q, h_q, topk), or ValueError / TypeError naming the argument."""
    qt, kt, it = Tensor(q, "q"), Tensor(k_cache, "k_cache"), Tensor(indices, "indices")
    for t in (qt, kt, it):
        if t.kind != "torch":
            raise TypeError(f"{t.name}: expected a torch.Tensor (FlashMLA's contract), got a NumPy array")
    if len(qt.shape) != 4 or qt.shape[3] != D.QK_DIM:
        if len(qt.shape) == 4 and qt.shape[3] == D.LATENT_DIM:
            raise NotImplementedError("q: head_dim 512 (FlashMLA's MODEL1) is not provided; d_qk must be 576")
        raise ValueError(f"q: expected [batch, seq_len_q, num_heads_q, {D.QK_DIM}], got shape {list(qt.shape)}")
    qt.require_dtype("bfloat16")
    b, s_q, h_q, _ = qt.shape
    _check_k_cache(kt, is_fp8_kvcache)
    it.require_dtype("int32")
    if len(it.shape) != 3 or tuple(it.shape[:2]) != (b, s_q) or it.shape[2] < 1:
        raise ValueError(f"indices: expected [batch, seq_len_q, topk] = [{b}, {s_q}, topk], got shape "
                         f"{list(it.shape)}")
    if topk_length is not None:
        S.check_lengths(topk_length, "topk_length", b, it)
        if topk_length.shape[0] != b:
            raise ValueError(f"topk_length: expected [batch] = [{b}] int32, got shape {list(topk_length.shape)}")
    return b, s_q, h_q, it.shape[2]


def _configure(sched, config):
    """FlashMLA's first-call fill and later consistency check; the older form's declared values."""
    if sched.declared is not None:
        for field in ("h_q", "topk"):
            if getattr(config, field) != sched.declared[field]:
                raise ValueError(f"tile_scheduler_metadata: get_mla_metadata() was given {field} = "
                                 f"{sched.declared[field]}, but this call has {getattr(config, field)}")
        sched.have_initialized, sched.config = True, config
        return
    if not sched.have_initialized:
        sched.have_initialized, sched.config = True, config
        return
    for field in dataclasses.fields(config):
        had, has = getattr(sched.config, field.name), getattr(config, field.name)
        if had != has:
            raise ValueError(f"tile_scheduler_metadata: first used with {field.name} = {had}, now {has}; a "
                             f"FlashMLASchedMeta is reused only with unchanged shapes (call get_mla_metadata() again)")


_plans = {}
_plans_lock = threading.Lock()


def _plan_for(device, emulator_target, heads, topk, rows, kv_dtype):
    """The sparse plan of (runtime, heads, topk, rows, kv dtype: bf16 or fp8_ds_mla): made on first
    use, planned once, kept."""
    key = (D._runtime_key(device, None, emulator_target), heads, topk, rows, kv_dtype)
    with _plans_lock:
        meta = _plans.get(key)
        if meta is None:
            meta = D.MlaDecodeMetadata(rows, 1, heads, "bf16", kv_dtype, return_lse=True, device=device,
                                       emulator_target=emulator_target, topk=topk)
            meta._update_sparse(rows, 1)
            _plans[key] = meta
        return meta


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                           num_splits=None, softmax_scale=None, causal=False, is_fp8_kvcache=False, indices=None,
                           attn_sink=None, extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None, *, check_indices=False, emulator_target=None):
    """FlashMLA's sparse decode (module docstring): returns (out [b, s_q, h_q, 512] bf16,
    lse [b, h_q, s_q] f32). softmax_scale defaults to q.shape[-1] ** -0.5 (576 ** -0.5).
    is_fp8_kvcache=True: k_cache holds FlashMLA's 656-byte fp8_ds_mla entries (FlashMLA's sparse
    rule); False: a bf16 576-wide cache (not FlashMLA's: it requires True in sparse mode).
    check_indices=True (keyword, not FlashMLA's) reads the indices the kernels use and raises
    MlaInputError naming `indices`, the position and the value of one that is neither -1 nor a
    slot of the cache (default off: nothing is read on the host, as under a graph).
    emulator_target (keyword, CPU tensors): 'gfx942' or 'gfx950' (default $MLA_EMULATOR_TARGET,
    else gfx950). A non-contiguous q or indices is copied first; k_cache must be contiguous."""
    _check_sparse_form(tile_scheduler_metadata, num_splits, causal, indices, attn_sink, extra_k_cache,
                       extra_indices_in_kvcache, extra_topk_length, head_dim_v)
    b, s_q, h_q, topk = _check_tensors(q, k_cache, indices, topk_length, bool(is_fp8_kvcache))
    config = FlashMLASchedMeta.Config(b, s_q, h_q, k_cache.shape[1], k_cache.shape[2], bool(causal),
                                      bool(is_fp8_kvcache), topk, None, None)
    _configure(tile_scheduler_metadata, config)
    torch, rows = _torch(), b * s_q
    out = torch.empty((b, s_q, h_q, D.LATENT_DIM), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((b, s_q, h_q), dtype=torch.float32, device=q.device)
    if rows == 0:
        return out, lse.transpose(1, 2)
    meta = _plan_for(D._device_name(q.device), emulator_target, h_q, topk, rows,
                     D.DS_MLA if is_fp8_kvcache else "bf16")
    tile_scheduler_metadata.tile_scheduler_metadata = meta
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else float(softmax_scale)
    q, indices = q.contiguous(), indices.contiguous()  # no copy when they are
    call = D._checked_call(q.view(rows, h_q, D.QK_DIM), k_cache, out.view(rows, h_q, D.LATENT_DIM),
                           indices.view(-1), 1, k_cache.shape[1], 1, 0.0, False, True, None, 1, True, meta, None,
                           emulator_target, None)
    S.check_metadata(call, meta)
    with call.runtime.lock:
        flat = indices.view(-1)
        if topk_length is not None:
            flat = S.masked_indices(meta, call.kv_indices, topk_length, b, s_q, False)
        S.launch(call, meta, flat, "indices", (b, s_q, topk), check_indices, True, lse.view(rows, h_q), scale,
                 None, None)
    return out, lse.transpose(1, 2)
