"""Sparse MLA decode (DeepSeek Sparse Attention, DSA) over the C API's sparse kernels.

The kernels (mla_shape.sparse = 1) take each query row as a request of its own whose row of
kv_indices holds cache SLOTS (block * page_block_size + offset: the cache is read as
[slots, 1, 576] whatever its page size); a slot of -1, or at or past the slot count, is masked:
never read, not attended. A row whose every slot is masked gets o = 0 and lse = -inf from the
kernels, which the two entries here turn into their peers' +inf. A slot given twice in a row is
attended twice (each entry is a token of the softmax, as FlashMLA's reference). The cache is
[slots, 576] fp8 / bf16, or FlashMLA's fp8_ds_mla (656-byte entries: metadata made with kv_dtype
'fp8_ds_mla', bf16 q; the C API's MLA_DTYPE_FP8_DS_MLA). The plan is made with
kv_len = topk (the index-row width) for every row, so it depends only on (rows, topk, heads,
dtypes, device): made once per row count, it is replayed by a captured graph with no host work,
and the indices are read by the kernels on the device only.

Two entries build on this module (docs/engines.md, "Sparse decode"):
- aiter's form, mla_decode_fwd(..., metadata=get_mla_metadata_info(..., topk=)): kv_indices
  [total_q * topk] with a fixed stride of topk per query row, of which aiter reads only the first
  min(kv_indptr[b + 1] - kv_indptr[b], topk) of request b's rows. Entries past that count may
  hold anything, so they are masked in a copy made on the device (masked_indices) into a
  capacity-sized buffer the metadata owns: fixed shapes, no host read, capturable.
- FlashMLA's, flash_mla.flash_mla_with_kvcache(..., indices=[b, s_q, topk], topk_length=):
  entries at or past topk_length[b] are masked the same way.
"""
import numpy as np

from . import _capi as C
from ._tensors import Tensor, _torch
from . import decode as D


def check_topk(topk, logit_cap, merge_in_launch):
    """topk as an int >= 1 for sparse metadata; the options sparse kernels do not have refused."""
    if isinstance(topk, bool) or not isinstance(topk, (int, np.integer)) or int(topk) < 1:
        raise ValueError(f"topk: got {topk!r}; allowed an int >= 1 (the width of each query row's index row)")
    if logit_cap:
        raise ValueError("logit_cap: the sparse kernels have no soft cap; allowed False with topk")
    if merge_in_launch:
        raise ValueError("merge_in_launch: not offered for sparse metadata (topk); allowed False")
    return int(topk)


def rows_of(qo_indptr, seq_lens, qseqlen):
    """(query rows, rows per request) of a sparse step: from qo_indptr (host copy; every request
    the same number of rows, as aiter's metadata requires: it takes qo_indptr[1] - qo_indptr[0])
    or from seq_lens (len(seq_lens) requests of max_seqlen_q rows; its values are not read)."""
    if seq_lens is not None:
        if qo_indptr is not None:
            raise ValueError("seq_lens: given with qo_indptr; pass one or the other")
        return len(D.host_int32(seq_lens, "seq_lens")) * qseqlen, qseqlen
    if qo_indptr is None:
        raise ValueError("qo_indptr: missing; sparse metadata plans from the row count (qo_indptr[-1]) or seq_lens=")
    qo = D.host_int32(qo_indptr, "qo_indptr")
    if len(qo) < 1 or int(qo[0]) != 0:
        raise ValueError(f"qo_indptr: expected [batch + 1] entries from 0, got {qo[:4].tolist()}...")
    if len(qo) == 1:
        return 0, qseqlen
    per = int(qo[1])
    if per < 1 or not D._qo_reference(len(qo) - 1, per).startswith(qo.tobytes()):
        rows = np.diff(qo.astype(np.int64))
        b = int(np.nonzero(rows != per)[0][0]) if per >= 1 else 0
        raise ValueError(f"qo_indptr: every request must have the same number of query rows (aiter's sparse "
                         f"metadata takes qo_indptr[1] - qo_indptr[0] = {per}); request {b} has {rows[b]}")
    return int(qo[-1]), per


# ---- the masked copy of the indices ---------------------------------------------------------

class _Buffers:
    """A sparse plan's capacity-sized int32 index copy and the scratch that builds it, of one
    tensor kind (torch on the metadata's device, or NumPy)."""

    def __init__(self, kind, capacity, topk, device):
        if kind == "torch":
            torch = _torch()
            self.indices = torch.empty(capacity * topk, dtype=torch.int32, device=device)
            self.mask = torch.empty(capacity * topk, dtype=torch.bool, device=device)
            self.lens = torch.empty(max(capacity, 1), dtype=torch.int32, device=device)
            self.arange = torch.arange(topk, dtype=torch.int32, device=device)
        else:
            self.indices = np.empty(capacity * topk, np.int32)
            self.arange = np.arange(topk, dtype=np.int32)


def preallocate(meta):
    """A GPU metadata's buffers, made with it (get_mla_metadata_info), so that no call allocates."""
    if meta.device != "cpu":
        meta._index_buffers["torch"] = _Buffers("torch", meta.plan_rows, meta.topk, _torch().device(meta.device))


def index_buffers(meta, like):
    """The metadata's buffers for tensors of `like`'s kind: a GPU metadata's from its creation,
    a CPU one's (torch or NumPy) allocated on first use."""
    bufs = meta._index_buffers.get(like.kind)
    if bufs is None:
        device = like.obj.device if like.kind == "torch" else None
        bufs = meta._index_buffers[like.kind] = _Buffers(like.kind, meta.plan_rows, meta.topk, device)
    return bufs


def masked_indices(meta, indices, lengths, requests, request_rows, from_indptr):
    """The index rows the kernels read: indices ([requests * request_rows * topk] or [requests,
    request_rows, topk], contiguous) copied into the metadata's buffer with every entry at or past
    its request's length set to -1. lengths: kv_indptr ([requests + 1]; the length is the
    difference, aiter's) when from_indptr, else topk_length ([requests]; FlashMLA's). Device ops
    on fixed shapes (torch), or NumPy; nothing is read on the host. Returns the flat buffer view."""
    topk = meta.topk
    rows = requests * request_rows
    bufs = index_buffers(meta, indices)
    out = bufs.indices[:rows * topk]
    src = indices.obj.reshape(-1)[:rows * topk].reshape(requests, request_rows, topk)
    if indices.kind == "torch":
        torch = _torch()
        lens = bufs.lens[:requests]
        if from_indptr:
            torch.sub(lengths[1:requests + 1], lengths[:requests], out=lens)
        else:
            lens.copy_(lengths[:requests])
        mask = bufs.mask[:rows * topk].view(requests, request_rows, topk)
        torch.ge(bufs.arange.view(1, 1, topk).expand(requests, request_rows, topk), lens.view(requests, 1, 1),
                 out=mask)
        out3 = out.view(requests, request_rows, topk)
        out3.copy_(src)
        out3.masked_fill_(mask, -1)
    else:
        lens = np.diff(lengths[:requests + 1]) if from_indptr else lengths[:requests]
        out3 = out.reshape(requests, request_rows, topk)
        out3[...] = src
        out3[bufs.arange[None, None, :] >= lens[:, None, None]] = -1
    return out


def check_lengths(lengths, name, count, like):
    """kv_indptr / topk_length: int32, 1-D, at least `count` entries, of like's kind and device."""
    t = Tensor(lengths, name)
    t.require_dtype("int32")
    if len(t.shape) != 1 or t.shape[0] < count:
        raise ValueError(f"{name}: expected a 1-D int32 tensor of at least {count} entries, got shape {list(t.shape)}")
    if t.kind != like.kind or t.device != like.device:
        raise ValueError(f"{name}: a {t.kind} tensor on {t.device}, but {like.name} is a {like.kind} tensor on "
                         f"{like.device}; pass both of one kind on one device")
    return t.obj


def check_slots(flat, slots, name, shape):
    """check_indices=True: the first entry of the index rows the kernels read (flat, host copy
    taken here) that is neither -1 nor a slot 0..slots-1 is an MlaInputError naming `name`,
    its position in the caller's `shape` and its value."""
    host = flat.detach().cpu().numpy() if hasattr(flat, "detach") else np.asarray(flat)
    bad = (host != -1) & ((host < 0) | (host >= slots))
    if bad.any():
        i = int(np.argmax(bad))
        where = [int(x) for x in np.unravel_index(i, shape)] if len(shape) > 1 else [i]
        raise C.MlaInputError("MLA_ERROR_OUT_OF_RANGE",
                              f"{name}{where} = {int(host[i])} is neither -1 (masked) nor a cache slot "
                              f"0..{slots - 1} (slots = blocks x page_block_size of the cache)")


def empty_rows_to_inf(lse):
    """The kernels' lse of a row with no slot, -inf, as aiter's reduce and FlashMLA write it: +inf."""
    if isinstance(lse, np.ndarray):
        lse[np.isneginf(lse)] = np.inf
    else:  # in place, no allocation (capturable); NaN stays NaN, +inf stays +inf
        lse.nan_to_num_(nan=float("nan"), posinf=float("inf"), neginf=float("inf"))


# ---- one launch -----------------------------------------------------------------------------

def check_metadata(call, meta):
    """The call against sparse metadata: dtypes, heads, lse; rows as last planned."""
    q_kind, kv_kind, heads, _, _, lse, _ = call.shape_key
    made = (meta.q_dtype, meta.kv_dtype, meta.heads, meta.return_lse)
    if (q_kind, kv_kind, heads, lse) != made:
        raise ValueError(f"metadata: made for (q, kv, heads, lse) = {made}, called with {(q_kind, kv_kind, heads, lse)}")
    if call.tokens != meta.batch:
        raise ValueError(f"q: {call.tokens} rows, but the sparse metadata was last planned for {meta.batch} query rows "
                         f"(qo_indptr[-1]); call get_mla_metadata() for this batch")


def launch(call, meta, indices, name, shape, check_indices, return_lse, lse, sm_scale, q_scale, kv_scale):
    """Runs the checked call on the sparse plan with `indices` (the flat rows the kernels read):
    num_pages is the slot count (the kernels' bound), lse's empty rows become +inf. Under the
    runtime's lock (the caller's, with the masked copy)."""
    call.kv_indices = Tensor(indices, name)
    kv_shape = call.kv.shape
    call.num_pages = kv_shape[0] * kv_shape[1]
    if check_indices:
        check_slots(indices, call.num_pages, name, shape)
    D._check_values(call, return_lse, lse, sm_scale, q_scale, kv_scale, 0.0)
    if call.tokens == 0:  # no rows: nothing to launch (and nothing to stage)
        return
    D._launch(call, meta)
    if call.lse is not None:
        empty_rows_to_inf(call.lse)


def sparse_decode_fwd(q, kv_buffer, o, qo_indptr, kv_indptr, kv_indices, *, page_size, nhead_kv, sm_scale,
                      logit_cap, q_scale, kv_scale, return_logits, return_lse, g_kv_indptr, cp_world_size, metadata,
                      lse, prefix_groups, detect_shared_prefixes, allow_padding, fp8_format, emulator_target,
                      check_indices):
    """mla_decode_fwd with sparse metadata (aiter's fixed-stride form; mla_decode_fwd's docstring):
    returns (o, lse), lse [total_q, heads] natural log with +inf for a row with no slot."""
    if prefix_groups is not None or detect_shared_prefixes:
        raise ValueError("prefix_groups / detect_shared_prefixes: sparse attention shares no prefixes")
    if allow_padding:
        raise ValueError("allow_padding: pass it to get_mla_metadata_info(); the sparse metadata chose the kernel")
    if logit_cap:
        raise ValueError(f"logit_cap: {logit_cap}; the sparse kernels have no soft cap (allowed 0)")
    call = D._checked_call(q, kv_buffer, o, kv_indices, 1, page_size, nhead_kv, 0.0, return_logits, return_lse,
                           g_kv_indptr, cp_world_size, True, metadata, None, emulator_target, fp8_format)
    check_metadata(call, metadata)
    topk, request_rows = metadata.topk, metadata.request_rows
    rows = call.tokens
    if call.kv_indices.shape[0] != rows * topk:  # longer would be the table of another topk, read wrongly
        raise ValueError(f"kv_indices: {call.kv_indices.shape[0]} entries, but the sparse metadata was made for topk "
                         f"{topk}: {rows} query rows x topk {topk} = {rows * topk} (row t at t * topk); a table of "
                         f"another topk needs metadata made with that topk")
    requests = rows // request_rows
    indptr = check_lengths(kv_indptr, "kv_indptr", requests + 1, call.kv_indices)
    with call.runtime.lock:
        masked = masked_indices(metadata, call.kv_indices, indptr, requests, request_rows, True)
        launch(call, metadata, masked, "kv_indices", (rows * topk,), check_indices, return_lse, lse, sm_scale,
               q_scale, kv_scale)
    return o, call.lse
